// The exact trunk's matmul against the bf16 one it replaces (issue 25): k3_matmul_bx4 (weights
// decoded in registers, kernels/k3_bx4*.c) and k3_matmul_bf16 on the same matrices, in one
// process, rounds interleaved, per ISA path and thread count, for T = 1 (decode: memory-bound
// for bf16), a verify pass (4) and prefill tiles (32, through the batched loop nest). Opt-in; run
// it alone on the machine for figures.
//
//   bun bench/exact-kernels.ts [--runs 3] [--T 1,4,32] [--threads 1,2] [--isa avx2,avx512] [--set-mib 512] [--json FILE]
//
// Weights: normal bf16 (σ 0.02, the 65,536-quantile table tools/gen uses), [2048][7168] (a row
// slice of a K3 trunk matrix), enough distinct matrices that one T = 1 pass reads --set-mib of
// bf16 from DRAM. Rates: bytes of each format's own weights per second (bf16 2 B/weight, BX4
// ~1.5), G weights/s, and exact ÷ bf16 time. Outputs are checked equal (bits) before timing.
import { readFileSync, writeFileSync } from "node:fs";
import { ISA, K3_STATUS, loadKernels } from "../src/kernels.ts";
import { normalBf16Table } from "../tools/gen/bf16.ts";
import { fillBytes } from "./weights.ts";
import { arg, median } from "./common.ts";

const k = loadKernels();
const RUNS = Number(arg("--runs", "3"));
const Ts = arg("--T", "1,4,32").split(",").map(Number);
const threadCounts = arg("--threads", "1,2").split(",").map(Number);
const isaNames: Record<string, number> = { scalar: ISA.scalar, avx2: ISA.avx2, avx512: ISA.avx512, neon: ISA.neon };
const isas = arg("--isa", "avx2,avx512,neon").split(",").filter((n) => k.k3_isa_supported(isaNames[n]!) === 1);
const SET = Number(arg("--set-mib", "512")) * 2 ** 20;
const say = (s: string) => process.stderr.write(`[bench:exact-kernels] ${s}\n`);
const ROWS = 2048, COLS = 7168;
const rowBytes = 16 + 8 * Math.ceil(COLS / 16) + COLS;

say("generating and coding the weight set…");
const table = normalBf16Table(0, 0.02);
const count = Math.max(2, Math.ceil(SET / (ROWS * COLS * 2)));
const mats = Array.from({ length: count }, (_, m) => {
  const r = new Uint16Array(fillBytes(ROWS * COLS * 2, m + 1).buffer);
  const w = new Uint16Array(ROWS * COLS);
  for (let i = 0; i < w.length; i++) w[i] = table[r[i]!]!;
  const B = new Uint8Array(ROWS * rowBytes);
  const eidx = new Uint32Array(ROWS + 1);
  let ent = new Uint32Array(1 << 16);
  let n = Number(k.k3_bx4_encode(w, ROWS, COLS, B, eidx, ent, ent.length, 0));
  if (n > ent.length) (ent = new Uint32Array(n)), (n = Number(k.k3_bx4_encode(w, ROWS, COLS, B, eidx, ent, n, 0)));
  return { w, B, eidx, ent, n };
});
const escapes = mats.reduce((a, m) => a + m.n, 0);
const ok = (st: number) => {
  if (st !== K3_STATUS.ok) throw new Error(`matmul status ${st}`);
};
const bf16 = (i: number, X: Float32Array, Y: Float32Array, T: number) => ok(k.k3_matmul_bf16(mats[i % count]!.w, X, COLS, Y, ROWS, ROWS, COLS, T));
const bx4 = (i: number, X: Float32Array, Y: Float32Array, T: number) => {
  const m = mats[i % count]!;
  ok(k.k3_matmul_bx4(m.B, m.eidx, m.ent, m.n, X, COLS, Y, ROWS, ROWS, COLS, T));
};

/** Seconds per call over one pass of the set (T = 1) or ≥ 2 GFLOP of calls. */
function measure(fn: typeof bf16, T: number): number {
  const X = new Float32Array(T * COLS).fill(0.01), Y = new Float32Array(T * ROWS);
  const calls = T === 1 ? count : Math.max(2, Math.ceil(2e9 / (2 * ROWS * COLS * T)));
  fn(calls, X, Y, T);
  const t0 = Bun.nanoseconds();
  for (let i = 0; i < calls; i++) fn(i, X, Y, T);
  return (Bun.nanoseconds() - t0) / 1e9 / calls;
}

// Same bits first (one matrix, every path and T): the timed kernels compute the same thing.
for (const isa of isas)
  for (const T of Ts) {
    k.k3_isa_set(isaNames[isa]!);
    const X = Float32Array.from({ length: T * COLS }, (_, i) => Math.sin(i));
    const a = new Float32Array(T * ROWS), b = new Float32Array(T * ROWS);
    bf16(0, X, a, T);
    bx4(0, X, b, T);
    if (!Buffer.from(a.buffer).equals(Buffer.from(b.buffer))) throw new Error(`${isa} T ${T}: BX4 and bf16 products differ`);
  }

const R: Record<string, number[]> = {};
const loads: string[] = [];
const loadAvg = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
for (let run = 1; run <= RUNS; run++) {
  loads.push(loadAvg());
  say(`round ${run}/${RUNS} (load ${loads.at(-1)})`);
  for (const isa of isas)
    for (const n of threadCounts) {
      k.k3_isa_set(isaNames[isa]!);
      k.k3_pool_init(n);
      for (const T of Ts)
        for (const [name, fn] of (run % 2 ? [["bf16", bf16], ["exact", bx4]] : [["exact", bx4], ["bf16", bf16]]) as [string, typeof bf16][])
          (R[`${isa}/${n}/${T}/${name}`] ??= []).push(measure(fn, T));
    }
}

const lines = [
  `${count} matrices [${ROWS}][${COLS}] (${((count * ROWS * COLS * 2) / 2 ** 20).toFixed(0)} MiB bf16, ${((count * ROWS * rowBytes) / 2 ** 20).toFixed(0)} MiB BX4, ${escapes} escapes); ${RUNS} rounds, load ${loads.join(" / ")}`,
  "",
  "| ISA | threads | T | bf16: GB/s (G weights/s) | exact: GB/s (G weights/s) | exact ÷ bf16 time (each round) |",
  "|---|---:|---:|---|---|---|",
];
const out: Record<string, unknown>[] = [];
for (const isa of isas)
  for (const n of threadCounts)
    for (const T of Ts) {
      const b = R[`${isa}/${n}/${T}/bf16`]!, x = R[`${isa}/${n}/${T}/exact`]!;
      const w = ROWS * COLS;
      const mb = median(b), mx = median(x);
      const ratios = b.map((s, i) => x[i]! / s);
      lines.push(`| ${isa} | ${n} | ${T} | ${((2 * w) / mb / 1e9).toFixed(1)} (${(w / mb / 1e9).toFixed(2)}) | ${((ROWS * rowBytes) / mx / 1e9).toFixed(1)} (${(w / mx / 1e9).toFixed(2)}) | ${(mx / mb).toFixed(2)} (${ratios.map((r) => r.toFixed(2)).join(", ")}) |`);
      out.push({ isa, threads: n, T, bf16SecondsPerCall: b, exactSecondsPerCall: x });
    }
process.stdout.write(`${lines.join("\n")}\n`);
const json = arg("--json", "");
if (json) writeFileSync(json, JSON.stringify({ rows: ROWS, cols: COLS, count, escapes, loads, out }, null, 2));
