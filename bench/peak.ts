// The floating-point peak of this machine, measured by the kernel library's probe
// (kernels/k3_probe.c): what a batched matmul's GFLOP/s is compared with. Two ceilings per ISA:
// "mul+add" (a separate multiply and add per element: what the matmuls do under the FP contract,
// docs/NUMERICS.md §1) and "fma" (fused multiply-add: the machine's advertised peak, which the
// contract forbids). Bound here, not in src/kernels.ts: a measuring instrument, not model API.
import { dlopen, FFIType } from "bun:ffi";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");

/** The library whose probe we use: $K3_PEAK_LIB, else $K3_KERNELS if it has the probe, else the build. */
function probeLib(): string {
  const own = join(ROOT, "zig-out/lib/libkernels.so");
  for (const p of [process.env.K3_PEAK_LIB, process.env.K3_KERNELS, own]) {
    if (!p || !existsSync(p)) continue;
    try {
      dlopen(p, { k3_peak_flops: { args: [FFIType.i32, FFIType.i32, FFIType.i64], returns: FFIType.f64 } }).close();
      return p;
    } catch {
      /* an older library without the probe: try the next */
    }
  }
  throw new Error(`no kernel library with k3_peak_flops (build it: npm run build:kernels → ${own})`);
}

const lib = dlopen(probeLib(), {
  k3_peak_flops: { args: [FFIType.i32, FFIType.i32, FFIType.i64], returns: FFIType.f64 },
  k3_pool_init: { args: [FFIType.i32], returns: FFIType.i32 },
}).symbols;

export type PeakMode = "mul+add" | "fma";

/** GFLOP/s of one probe call (about `ms` milliseconds) on `threads` threads, per wall second and
 * per CPU-second × threads (the process's CPU time: what the cores do while they run); NaN if
 * the ISA or mode is unsupported. */
export function peakGflops(isa: number, mode: PeakMode, threads: number, ms = 60): { wall: number; cpu: number } {
  lib.k3_pool_init(threads);
  const m = mode === "fma" ? 1 : 0;
  const calib = 200_000;
  let t0 = Bun.nanoseconds();
  if (lib.k3_peak_flops(isa, m, calib) < 0) return { wall: NaN, cpu: NaN };
  const perIter = (Bun.nanoseconds() - t0) / calib; // ns per iteration, rough
  const iters = Math.max(calib, Math.round((ms * 1e6) / Math.max(perIter, 0.05)));
  const c0 = process.cpuUsage();
  t0 = Bun.nanoseconds();
  const flops = lib.k3_peak_flops(isa, m, iters);
  const wall = (Bun.nanoseconds() - t0) / 1e9, c = process.cpuUsage(c0);
  return { wall: flops / wall / 1e9, cpu: (flops / ((c.user + c.system) / 1e6) / 1e9) * threads };
}
