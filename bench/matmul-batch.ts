// Matmul bench over batch sizes: T = 1 (decode) and T > 1 (prefill, expert batches), per ISA
// path and thread count, on shapes with long and short rows. Complements bench/kernels.ts
// (T = 1 only). Run: `bun bench/matmul-batch.ts [--runs 3] [--T 1,4,8,16]`; compare two builds
// of the library by running it twice with K3_KERNELS=/path/to/libkernels.so (see
// docs/BENCH-KERNELS.md). Output: a markdown table on stdout.
//
// Weights are cycled through distinct matrices totalling ≥ 256 MiB, so every call reads from
// DRAM. Two rates per run: weight GB/s (weight bytes / time; every weight is read once per call
// whatever T is) and G w·t/s (weight × token products per second: the compute view).
import { loadKernels, ISA } from "../src/kernels.ts";
import { bf16Set, mxfp4Set } from "./weights.ts";

const k = loadKernels();
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const RUNS = Number(arg("--runs", "3"));
const Ts = arg("--T", "1,4,8,16").split(",").map(Number);
const SET_BYTES = 256 * 2 ** 20;
const threadCounts = [...new Set([1, 2])].filter((n) => n <= navigator.hardwareConcurrency);
const isas = [
  { name: "avx2", id: ISA.avx2 },
  { name: "avx512", id: ISA.avx512 },
  { name: "neon", id: ISA.neon },
].filter((i) => k.k3_isa_supported(i.id) === 1);

type Arm = { kernel: string; rows: number; cols: number; bytes: number; count: number; call: (i: number, X: Float32Array, Y: Float32Array, T: number) => void };


function bf16Arm(rows: number, cols: number): Arm {
  const { bytes, count, Ws } = bf16Set(rows, cols, SET_BYTES);
  return { kernel: "bf16", rows, cols, bytes, count, call: (i, X, Y, T) => k.k3_matmul_bf16(Ws[i % count]!, X, Y, rows, cols, T) };
}

function mxfp4Arm(rows: number, cols: number): Arm {
  const { bytes, count, Ps, Ss } = mxfp4Set(rows, cols, SET_BYTES);
  return { kernel: "mxfp4", rows, cols, bytes, count, call: (i, X, Y, T) => k.k3_matmul_mxfp4(Ps[i % count]!, Ss[i % count]!, X, Y, rows, cols, T) };
}

/** Seconds for one pass over the whole set (each matrix once). */
function pass(arm: Arm, X: Float32Array, Y: Float32Array, T: number): number {
  const t0 = Bun.nanoseconds();
  for (let i = 0; i < arm.count; i++) arm.call(i, X, Y, T);
  return (Bun.nanoseconds() - t0) / 1e9;
}

const fmt = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(" / ");
const cpu = (await Bun.file("/proc/cpuinfo").text()).match(/model name\s*:\s*(.*)/)?.[1] ?? "?";
console.log(`CPU: ${cpu}, ${navigator.hardwareConcurrency} threads visible; library: ${process.env.K3_KERNELS ?? "built-in"}; ${RUNS} runs per arm\n`);
console.log("| kernel | shape | ISA | threads | T | weight GB/s (each run) | best | best G w·t/s |");
console.log("|---|---|---|---|---|---|---|---|");
const arms = [bf16Arm(7168, 7168), bf16Arm(7168, 1536), mxfp4Arm(3072, 3584), mxfp4Arm(3584, 3072)];
for (const isa of isas)
  for (const n of threadCounts) {
    k.k3_isa_set(isa.id);
    k.k3_pool_init(n);
    for (const arm of arms)
      for (const T of Ts) {
        const X = new Float32Array(T * arm.cols).fill(0.01), Y = new Float32Array(T * arm.rows);
        pass(arm, X, Y, T); // warm-up
        const gbs = Array.from({ length: RUNS }, () => (arm.bytes * arm.count) / pass(arm, X, Y, T) / 1e9);
        const best = Math.max(...gbs);
        const wts = (best * 1e9 / arm.bytes) * arm.rows * arm.cols * T / 1e9;
        console.log(`| ${arm.kernel} | ${arm.rows}×${arm.cols} | ${isa.name} | ${n} | ${T} | ${fmt(gbs)} | ${best.toFixed(1)} | ${wts.toFixed(1)} |`);
      }
  }
k.k3_isa_set(ISA.auto);
k.k3_pool_init(1);
