// Kernel bandwidth bench: GB/s of weight bytes per matmul kernel, per ISA path and thread count,
// next to this machine's memory read bandwidth measured in the same run (k3_mem_read_sum over a
// 1 GiB buffer). Run: `bun bench/kernels.ts [--runs 3]`. Output: a markdown table on stdout.
//
// Weights are cycled through a set of distinct matrices totalling ≥ 256 MiB, so every call
// reads from DRAM (as decode does: each expert is touched once per token), not from cache.
import { loadKernels, ISA } from "../src/kernels.ts";
import { bf16Set, mxfp4Set } from "./weights.ts";

const k = loadKernels();
const runsArg = process.argv.indexOf("--runs");
const RUNS = runsArg > 0 ? Number(process.argv[runsArg + 1]) : 3;
const SET_BYTES = 256 * 2 ** 20;
const threadCounts = [...new Set([1, 2, navigator.hardwareConcurrency])].filter((n) => n <= navigator.hardwareConcurrency);
const isas = [
  { name: "scalar", id: ISA.scalar },
  { name: "avx2", id: ISA.avx2 },
  { name: "avx512", id: ISA.avx512 },
  { name: "neon", id: ISA.neon }, // aarch64: the NEON path's speed was never measured (docs/PORTS.md)
].filter((i) => k.k3_isa_supported(i.id) === 1);

type Arm = { kernel: string; shape: string; bytesPerCall: number; call: (i: number) => void; count: number };


function bf16Arm(rows: number, cols: number): Arm {
  const { bytes, count, Ws } = bf16Set(rows, cols, SET_BYTES);
  const X = new Float32Array(cols).fill(0.01), Y = new Float32Array(rows);
  return { kernel: "bf16", shape: `${rows}×${cols}`, bytesPerCall: bytes, count, call: (i) => k.k3_matmul_bf16(Ws[i % count]!, X, Y, rows, cols, 1) };
}

function mxfp4Arm(rows: number, cols: number): Arm {
  const { bytes, count, Ps, Ss } = mxfp4Set(rows, cols, SET_BYTES);
  const X = new Float32Array(cols).fill(0.01), Y = new Float32Array(rows);
  return { kernel: "mxfp4", shape: `${rows}×${cols}`, bytesPerCall: bytes, count, call: (i) => k.k3_matmul_mxfp4(Ps[i % count]!, Ss[i % count]!, X, Y, rows, cols, 1) };
}

/** GB/s of one timed pass over the whole set (each matrix once, after one warm-up pass). */
function measure(arm: Arm): number {
  const t0 = Bun.nanoseconds();
  for (let i = 0; i < arm.count; i++) arm.call(i);
  const s = (Bun.nanoseconds() - t0) / 1e9;
  return (arm.bytesPerCall * arm.count) / s / 1e9;
}

function memReadBW(): number[] {
  const bytes = 2 ** 30;
  const p = k.k3_mem_alloc(bytes, 4096);
  if (!p) throw new Error("k3_mem_alloc(1 GiB) failed");
  k.k3_mem_read_sum(p, bytes); // first touch: fault the pages in (alloc zeroes, so already touched)
  const out: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    const t0 = Bun.nanoseconds();
    k.k3_mem_read_sum(p, bytes);
    out.push(bytes / ((Bun.nanoseconds() - t0) / 1e9) / 1e9);
  }
  k.k3_mem_free(p);
  return out;
}

const fmt = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(" / ");
const cpu = (await Bun.file("/proc/cpuinfo").text()).match(/model name\s*:\s*(.*)/)?.[1] ?? "?";
console.log(`CPU: ${cpu}, ${navigator.hardwareConcurrency} threads visible; ${RUNS} runs per arm; GB/s = 1e9 bytes/s of weight bytes (MXFP4: nibbles + scales)\n`);
console.log("| kernel | shape | ISA | threads | GB/s (each run) | best | mem read GB/s (same ISA/threads) | best/mem |");
console.log("|---|---|---|---|---|---|---|---|");
const arms = [bf16Arm(7168, 7168), mxfp4Arm(3072, 3584), mxfp4Arm(3584, 3072)];
for (const isa of isas)
  for (const n of threadCounts) {
    k.k3_isa_set(isa.id);
    k.k3_pool_init(n);
    const mem = memReadBW();
    const memBest = Math.max(...mem);
    for (const arm of arms) {
      for (let i = 0; i < arm.count; i++) arm.call(i); // warm-up pass
      const rs = Array.from({ length: RUNS }, () => measure(arm));
      const best = Math.max(...rs);
      console.log(`| ${arm.kernel} | ${arm.shape} | ${isa.name} | ${n} | ${fmt(rs)} | ${best.toFixed(1)} | ${fmt(mem)} | ${(best / memBest).toFixed(2)} |`);
    }
  }
k.k3_isa_set(ISA.auto);
k.k3_pool_init(1);
