// `npm run release`: every artifact of targets.ts into dist/release/, plus SHA256SUMS.
//
//   bun tools/release/build.ts [--out DIR] [--only k3-linux-arm64,…]
//
// Per target: (1) zig builds the kernel library for that target into zig-out/release/<name>/;
// (2) Bun.build compiles the CLI for that target with the library's import redirected to that
// build — src/kernels.ts statically imports the host library (`with { type: "file" }` embeds the
// file it names), so without the redirect every artifact would carry the x86-64 .so; (3) checks:
// the artifact is an executable for its CPU and contains its library byte for byte; darwin
// artifacts carry a valid code signature (macho.ts; Bun 1.4.5 leaves darwin-x64's invalid, so it
// is re-signed ad hoc here); `--version` runs where this machine can run it (linux-x64; linux-arm64
// under qemu when installed). Runs on linux-x64 (the Zig npm package is linux-x64 only).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { adhocSign, verifySignature } from "./macho.ts";
import { binaryCpu, TARGETS, type Target } from "./targets.ts";

const ROOT = resolve(import.meta.dir, "..", "..");
const ZIG = join(ROOT, "node_modules", "@ryoppippi", "zig-linux-x64", "zig");
/** Where Debian's libc6-arm64-cross puts the aarch64 C library (qemu's -L / QEMU_LD_PREFIX). */
export const ARM64_SYSROOT = "/usr/aarch64-linux-gnu";
/** The import in src/kernels.ts that embeds the kernel library (its specifier's file name). */
const KERNELS_IMPORT = /(^|\/)libkernels\.so$/;

export interface Artifact {
  target: Target;
  path: string;
  bytes: number;
  sha256: string;
  lib: string;
  signature: string; // darwin: what the check found / did; linux: "-"
}

function fail(msg: string): never {
  throw new Error(`release: ${msg}`);
}

/** Zig build of kernels/ for one target; returns the library's path. */
export function buildKernels(t: Target): string {
  const prefix = join(ROOT, "zig-out", "release", t.name);
  const z = Bun.spawnSync([ZIG, "build", "-Doptimize=ReleaseFast", `-Dtarget=${t.zig}`, "--prefix", prefix], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  if (z.exitCode !== 0) fail(`zig build for ${t.zig} failed:\n${z.stderr.toString()}`);
  const lib = join(prefix, "lib", t.lib);
  const cpu = binaryCpu(new Uint8Array(readFileSync(lib)));
  if (cpu?.cpu !== t.cpu) fail(`${lib} is built for ${cpu?.cpu ?? "an unknown CPU"}, not ${t.cpu}`);
  return lib;
}

/** The compiled CLI for one target with `lib` embedded as its kernel library. */
export async function compile(t: Target, lib: string, outfile: string): Promise<void> {
  let redirected = 0;
  const r = await Bun.build({
    entrypoints: [join(ROOT, "src", "cli", "main.ts")],
    compile: { target: t.bun, outfile },
    minify: true,
    bytecode: true,
    format: "esm",
    plugins: [
      {
        name: "k3-kernels-for-target",
        setup(b) {
          b.onResolve({ filter: KERNELS_IMPORT }, () => {
            redirected++;
            return { path: lib };
          });
        },
      },
    ],
  });
  if (!r.success) fail(`bun build for ${t.bun} failed:\n${r.logs.map(String).join("\n")}`);
  if (redirected === 0) fail(`no import of libkernels.so was seen: ${t.name} would embed the host library (did src/kernels.ts change?)`);
}

/** Runs `--version` where this machine can: linux-x64 natively, linux-arm64 under qemu if installed. */
function smoke(t: Target, path: string): void {
  const qemu = Bun.which("qemu-aarch64");
  const cmd = t.os !== "linux" ? undefined : t.cpu === "x64" ? [path] : qemu && existsSync(`${ARM64_SYSROOT}/lib/ld-linux-aarch64.so.1`) ? [qemu, path] : undefined;
  if (!cmd) return;
  const p = Bun.spawnSync([...cmd, "--version"], { env: { ...process.env, QEMU_LD_PREFIX: ARM64_SYSROOT }, stdout: "pipe", stderr: "pipe" });
  const want = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version;
  if (p.exitCode !== 0 || p.stdout.toString().trim() !== want) fail(`${path} --version: exit ${p.exitCode}, "${p.stdout.toString().trim()}" (want ${want})\n${p.stderr.toString()}`);
}

/** Checks one artifact; darwin-x64 (and any darwin artifact Bun left with a bad signature) is re-signed. */
export function check(t: Target, path: string, lib: string): Artifact {
  let bin: Uint8Array = new Uint8Array(readFileSync(path));
  const libBytes = new Uint8Array(readFileSync(lib));
  const cpu = binaryCpu(bin);
  if (cpu?.format !== (t.os === "darwin" ? "macho" : "elf") || cpu.cpu !== t.cpu) fail(`${path} is not a ${t.os}-${t.cpu} executable`);
  if (Buffer.from(bin.buffer, bin.byteOffset, bin.byteLength).indexOf(libBytes) < 0) fail(`${path} does not contain ${lib}`);
  let signature = "-";
  if (t.os === "darwin") {
    if (t.cpu === "arm64") {
      const l = verifySignature(libBytes);
      if (!l.ok) fail(`${lib}: ${l.problems.join("; ")} (Apple Silicon refuses unsigned code)`);
    }
    const before = verifySignature(bin);
    signature = `ad-hoc, valid (${before.identifier}, ${before.pages} pages; written by bun)`;
    // Where Bun signed correctly, our signer must write the very same bytes: the check that the
    // re-signing below (which no Mac verifies here) follows the format Bun's own signer does.
    if (before.ok && !Buffer.from(adhocSign(bin)).equals(Buffer.from(bin.buffer, bin.byteOffset, bin.byteLength)))
      fail(`${path}: tools/release/macho.ts signs differently from bun; not trusting it to re-sign`);
    if (!before.ok) {
      bin = adhocSign(bin);
      writeFileSync(path, bin, { mode: 0o755 });
      const after = verifySignature(bin);
      if (!after.ok) fail(`${path}: re-signed, still invalid: ${after.problems.join("; ")}`);
      signature = `ad-hoc, valid (${after.pages} pages; re-signed here: bun left ${before.problems.join("; ")})`;
    }
  }
  smoke(t, path);
  const sha256 = createHash("sha256").update(bin).digest("hex");
  return { target: t, path, bytes: bin.byteLength, sha256, lib, signature };
}

export async function release(outDir: string, only?: string[]): Promise<Artifact[]> {
  const targets = only ? TARGETS.filter((t) => only.includes(t.name)) : TARGETS;
  if (only && targets.length !== only.length) fail(`unknown target in --only ${only.join(",")} (known: ${TARGETS.map((t) => t.name).join(", ")})`);
  mkdirSync(outDir, { recursive: true });
  const artifacts: Artifact[] = [];
  for (const t of targets) {
    const lib = buildKernels(t);
    const path = join(outDir, t.name);
    rmSync(path, { force: true });
    await compile(t, lib, path);
    artifacts.push(check(t, path, lib));
  }
  // `sha256sum -c SHA256SUMS` (Linux) and `shasum -a 256 -c SHA256SUMS` (macOS) read this format.
  const sums = artifacts.map((a) => `${a.sha256}  ${a.target.name}\n`).join("");
  writeFileSync(join(outDir, "SHA256SUMS"), sums);
  return artifacts;
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { out: { type: "string" }, only: { type: "string" } } });
  const out = resolve(values.out ?? join(ROOT, "dist", "release"));
  try {
    const t0 = performance.now();
    const artifacts = await release(out, values.only?.split(","));
    for (const a of artifacts)
      console.error(`${a.target.name.padEnd(16)} ${(a.bytes / 2 ** 20).toFixed(1).padStart(6)} MiB  sha256 ${a.sha256.slice(0, 16)}…  kernels ${a.lib.slice(ROOT.length + 1)}  signature ${a.signature}`);
    console.error(`wrote ${artifacts.length} artifacts and SHA256SUMS to ${out} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } catch (e) {
    console.error((e as Error).message);
    process.exit(1);
  }
}
