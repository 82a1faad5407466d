// linux-arm64, checked on this x86-64 machine under user-mode emulation (docs/PORTS.md §4).
// qemu-aarch64 runs the k3-linux-arm64 executable (built here as `npm run release` builds it:
// Bun's arm64 runtime + the aarch64 kernel library, NEON path), against the aarch64 C library in
// /usr/aarch64-linux-gnu. Three checks:
//  1. the kernel bit tests (golden matmul hashes, the exp/tanh bits, the draft's RoPE and SiLU, ISA × threads determinism,
//     CRC hardware vs tables) pass on arm64 — the executable doubles as the arm64 `bun`
//     (BUN_BE_BUN=1) and loads that library through $K3_KERNELS;
//  2. the tiny models give the same greedy ids and the same hash of every logits vector on arm64
//     (NEON and scalar paths) as on x86-64;
//  3. the compiled k3-linux-arm64 itself, with its embedded library, generates the same ids as
//     the x86-64 engine.
// Without qemu-aarch64 or the aarch64 C library every test here is skipped, with the reason in
// its name (install: tools/setup/arm64-emulation.sh). Emulation is ~10× slower than native, so
// these are the slowest tests of the suite (~1 min under load; no timing is asserted).
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { ARM64_SYSROOT, buildKernels, compile } from "../tools/release/build.ts";
import { TARGETS } from "../tools/release/targets.ts";
import { fingerprint } from "./helpers/fingerprint.ts";
import { TINY_PRESETS, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(300_000);

const ROOT = resolve(import.meta.dir, "..");
const SYSROOT = ARM64_SYSROOT;
const QEMU = Bun.which("qemu-aarch64");
const MISSING = !QEMU ? "qemu-aarch64 (package qemu-user)" : !existsSync(join(SYSROOT, "lib", "ld-linux-aarch64.so.1")) ? `the aarch64 C library in ${SYSROOT} (package libc6-arm64-cross)` : "";
const SKIP = MISSING ? ` — SKIPPED: ${MISSING} is not installed; run tools/setup/arm64-emulation.sh` : "";
if (MISSING) console.warn(`\n[arm64] linux-arm64 emulation checks SKIPPED: ${MISSING} is not installed (tools/setup/arm64-emulation.sh)\n`);

const target = TARGETS.find((t) => t.name === "k3-linux-arm64")!;
let exe = "";
let lib = "";
const dirs: string[] = [];

/** Runs the arm64 executable under qemu; `asBun` makes it the arm64 `bun` with the aarch64 library. */
function arm64(args: string[], opts: { asBun?: boolean } = {}) {
  const env: Record<string, string> = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? tmpdir(), QEMU_LD_PREFIX: SYSROOT, NO_COLOR: "1" };
  if (opts.asBun) Object.assign(env, { BUN_BE_BUN: "1", K3_KERNELS: lib });
  const p = Bun.spawnSync([QEMU!, exe, ...args], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

beforeAll(async () => {
  if (MISSING) return;
  lib = buildKernels(target);
  exe = join(mkdtempSync(join(tmpdir(), "k3-arm64-")), target.name);
  await compile(target, lib, exe);
  for (const p of TINY_PRESETS) dirs.push(await tinyModel(p));
});

describe(`linux-arm64 under qemu-aarch64${SKIP}`, () => {
  test.skipIf(!!MISSING)(`kernel bit tests pass on arm64, NEON path included${SKIP}`, () => {
    const files = ["kernels-matmul-bits", "kernels-mla-bits", "kernels-kda-bits", "kernels-strided", "kernels-row-blocks", "kernels-libm-bits", "kernels-determinism", "kernels-q", "kernels-draft", "kernels-bx4", "crc"].map((f) => `test/${f}.test.ts`);
    // Emulated and on a shared machine a test can take ~10× its native time: bun's own 5 s
    // per-test limit is not a property of these tests (no timing is asserted).
    const r = arm64(["test", "--timeout", "300000", ...files], { asBun: true });
    expect({ code: r.code, tail: r.err.slice(-1500) }).toEqual({ code: 0, tail: expect.any(String) });
    // The NEON path really ran (ISA 3), and against the pinned golden hashes.
    expect(r.err).toContain("(pass) matmul bits equal the pre-optimisation implementation > ISA neon, threads 1, 2, 3: every case hashes to the saved bits");
    expect(r.err).toContain("(pass) matmul bits across ISA paths and thread counts > NEON path present on this CPU");
    expect(r.err).toContain("(pass) exp / expf / tanhf kernels");
    expect(r.err).toContain("(pass) k3_matmul_bx4 = k3_matmul_bf16 on the decoded matrix, bit for bit > ISA NEON"); // the exact trunk's NEON path
    // the strided / row-sliced calls on the NEON path (allIsas there: scalar, NEON)
    expect(r.err).toContain("(pass) strided matmuls: one call per row slice gives the whole product's bits > q4");
    expect(r.err).toContain("(pass) k3_rope_interleaved > golden bits"); // the draft's own sin/cos: the same bits there
    // MLA attention and the KDA recurrence, built for NEON (ISA 3), against main's pinned bits
    expect(r.err).toContain("(pass) k3_mla_attend: the bits of the one-head-token kernel on every path > ISA 3, 2 thread(s)");
    expect(r.err).toContain("(pass) KDA recurrence and short conv: the bits of main's kernels on every path > ISA 3, 2 thread(s)");
    expect(r.err).toMatch(/ 0 fail/);
  });

  test.skipIf(!!MISSING)(`tiny models: greedy ids and logits hashes equal x86-64, NEON and scalar${SKIP}`, () => {
    const x86: Record<string, { ids: number[]; logits: string }> = {};
    for (const d of dirs) x86[basename(d)] = fingerprint(d, "auto");
    // NEON on every preset; scalar on one (the arm64 determinism test above already pins scalar = NEON per kernel).
    for (const [isa, models] of [["neon", dirs], ["scalar", dirs.slice(0, 1)]] as const) {
      const r = arm64(["test/helpers/fingerprint.ts", isa, ...models], { asBun: true });
      expect({ isa, code: r.code, err: r.err.slice(-800) }).toEqual({ isa, code: 0, err: expect.any(String) });
      const want = Object.fromEntries(models.map((d) => [basename(d), x86[basename(d)]]));
      expect({ isa, ...JSON.parse(r.out) }).toEqual({ isa, ...want });
    }
  });

  test.skipIf(!!MISSING)(`the compiled k3-linux-arm64 (embedded library) generates the x86-64 ids${SKIP}`, () => {
    const dir = dirs[1]!;
    const r = arm64(["run", dir, "--ids", "5,17,300,42,7,99,3,250", "--gen", "12", "--threads", "2", "--json"]);
    expect({ code: r.code, err: r.err.slice(-800) }).toEqual({ code: 0, err: expect.any(String) });
    const j = JSON.parse(r.out);
    expect(j.generated_ids).toEqual(fingerprint(dir, "auto").ids);
    expect(["O_DIRECT", "buffered"]).toContain(j.stats.io_mode); // Linux: O_DIRECT where the file system takes it
  });
});
