// The compiled binary, run as a user runs it: spawned, reading stdout / stderr / exit code, piping
// through a shell, and copied alone into an empty folder (no node_modules, no zig-out: the kernel
// library and the demo's BPE table must be inside it).
//
// Which binary: dist/k3 when it is newer than every source file (`npm test` builds it first, in
// pretest); otherwise a fresh build into a temp folder, so a stale dist/k3 is never what passes,
// and this test never writes dist/ (other test files may be reading it).
import { beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import pkg from "../package.json";
import { Tokenizer } from "../src/engine.ts";

const ROOT = resolve(import.meta.dir, "..");
let bin: string;
let tmp: string;

function newestSource(): number {
  let newest = 0;
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|json)$/.test(e.name)) newest = Math.max(newest, statSync(p).mtimeMs);
    }
  };
  walk(join(ROOT, "src"));
  walk(join(ROOT, "tools", "gen"));
  newest = Math.max(newest, statSync(join(ROOT, "zig-out", "lib", "libkernels.so")).mtimeMs);
  return newest;
}

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "k3-binary-"));
  const dist = join(ROOT, "dist", "k3");
  if (existsSync(dist) && statSync(dist).mtimeMs >= newestSource()) {
    bin = dist;
    return;
  }
  bin = join(tmp, "build", "k3");
  const b = Bun.spawnSync(
    [process.execPath, "build", "--compile", "--minify", "--bytecode", "--format=esm", "./src/cli/main.ts", "--outfile", bin],
    { cwd: ROOT, stdout: "pipe", stderr: "pipe" },
  );
  if (b.exitCode !== 0) throw new Error(`building the binary failed:\n${b.stderr.toString()}`);
}, 120_000);

/** A user's environment: a fresh HOME and cache, no $K3_MODEL. */
function userEnv(home: string): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, XDG_CACHE_HOME: join(home, ".cache"), NO_COLOR: "1" };
}

function k3(args: string[], opts: { stdin?: string; home?: string; cwd?: string; exe?: string } = {}) {
  const home = opts.home ?? join(tmp, "home");
  const p = Bun.spawnSync([opts.exe ?? bin, ...args], {
    stdin: opts.stdin === undefined ? "ignore" : Buffer.from(opts.stdin),
    env: userEnv(home),
    cwd: opts.cwd ?? tmp,
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

describe("compiled k3", () => {
  test("--version and --help", () => {
    const v = k3(["--version"]);
    expect(v.code).toBe(0);
    expect(v.out.trim()).toBe(pkg.version);
    const h = k3(["--help"]);
    expect(h.code).toBe(0);
    for (const cmd of ["run", "chat", "tokenize", "info"]) expect(h.out).toContain(cmd);
    const rh = k3(["run", "--help"]);
    expect(rh.code).toBe(0);
    for (const flag of ["--temperature", "--top-k", "--top-p", "--min-p", "--seed", "--stop", "--prompt-file"]) expect(rh.out).toContain(flag);
  });

  test('echo "hi" | k3 run --gen 4: the demo model, text on stdout, notice and stats on stderr', () => {
    const home = join(tmp, "pipe-home");
    const sh = Bun.spawnSync(["sh", "-c", `echo "hi" | "${bin}" run --gen 4`], { env: userEnv(home), cwd: tmp });
    const out = sh.stdout.toString();
    const err = sh.stderr.toString();
    expect(sh.exitCode).toBe(0);
    expect(out.endsWith("\n")).toBe(true);
    expect(out.length).toBeGreaterThan(1);
    expect(err).toContain("RANDOM");
    expect(err).toMatch(/\d+ tokens \(prompt \d+\)/);
    expect(existsSync(join(home, ".cache", "k3", `demo-${pkg.version}`, "config.json"))).toBe(true);
    // The same text as --prompt "hi" (echo's newline is not part of the prompt).
    const again = k3(["run", "--prompt", "hi", "--gen", "4"], { home });
    expect(again.out).toBe(out);
  });

  test("run --json on the demo: ids, text, timings, stats", () => {
    const r = k3(["run", "--prompt", "The capital of France is", "--gen", "6", "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.generated_ids.length).toBeGreaterThan(0);
    expect(typeof j.generated_text).toBe("string");
    expect(j.timings.prefill_ms).toBeGreaterThan(0);
    expect(j.stats.generated_tokens).toBe(j.generated_ids.length);
  });

  test("tokenize on the demo model's tokenizer matches the library", () => {
    const home = join(tmp, "home");
    k3(["run", "--prompt", "x", "--gen", "1"], { home }); // make sure the demo exists
    const demo = join(home, ".cache", "k3", `demo-${pkg.version}`);
    const file = join(tmp, "text.txt");
    const text = "Hello, world! 12345 ünïcödé 日本語 🙂\n\tcode()";
    writeFileSync(file, text);
    const r = k3(["tokenize", demo, "--file", file, "--json"]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out).ids).toEqual(Tokenizer.load(demo).encode(text));
  });

  test("chat reads JSONL on stdin and writes the reply", () => {
    const jsonl = `${JSON.stringify({ role: "user", content: "hi" })}\n`;
    const j = k3(["chat", "--gen", "8", "--json"], { stdin: jsonl });
    expect(j.code).toBe(0);
    const reply = JSON.parse(j.out);
    expect(reply.usage.completion_tokens).toBeGreaterThan(0);
    expect(typeof reply.reasoning).toBe("string");
    const plain = k3(["chat", "--gen", "8"], { stdin: jsonl });
    expect(plain.code).toBe(0);
    expect(plain.out).toBe(`${reply.content}\n`);
  });

  test("a bad model directory: exit 1, nothing on stdout, the path in the message", () => {
    const bad = join(tmp, "no-such-model");
    const r = k3(["run", bad, "--prompt", "hi"]);
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    expect(r.err).toContain(bad);
    const usage = k3(["run", "--prompt", "hi", "--temperature", "-1"]);
    expect(usage.code).toBe(2);
  });

  test("copied alone into an empty folder, it still generates the demo and runs it (same bytes, same text)", () => {
    const alone = mkdtempSync(join(tmpdir(), "k3-alone-"));
    const exe = join(alone, "k3");
    copyFileSync(bin, exe);
    Bun.spawnSync(["chmod", "+x", exe]);
    const home = join(alone, "home");
    const r = k3(["run", "--prompt", "hi", "--gen", "4"], { exe, home, cwd: alone });
    expect(r.err).not.toContain("Cannot find");
    expect(r.code).toBe(0);
    const reference = k3(["run", "--prompt", "hi", "--gen", "4"], { home: join(tmp, "home") });
    expect(r.out).toBe(reference.out);
    // The demo written by the lone binary is byte-identical to the one written next to the repo.
    const a = join(home, ".cache", "k3", `demo-${pkg.version}`);
    const b = join(tmp, "home", ".cache", "k3", `demo-${pkg.version}`);
    // Only the generator's files: the engine adds its own cache (k3-index.json, which names paths).
    const generated = (d: string) => readdirSync(d).filter((f) => f !== "k3-index.json").sort();
    const files = generated(b);
    expect(files).toContain("config.json");
    expect(generated(a)).toEqual(files);
    for (const f of files) expect(Bun.hash(readFileSync(join(a, f)))).toBe(Bun.hash(readFileSync(join(b, f))));
  });
});
