// The one-token MXFP4 rate in cache (bench/decode-profile.ts's compute-aware floor): GB/s of
// weight bytes (packed nibbles + E8M0 scales: rows·cols/2 + rows·cols/32 per call) when the
// matrix is already in cache, so the rate is what the vector units sustain on decode's expert
// kernel, not what memory delivers. Measured on the threads the pool has (all of decode's).
//
// Shape: `cols` = 3584 (an expert's up/gate input width) and 192 rows per thread by default. Not
// fewer: the matmuls hand out rows in guided blocks of multiples of 48 (k3_rowq, kernels/
// k3_internal.h), so 128 rows on 2 threads split 80 / 48 and measured 17.1 GB/s where 384 rows
// (96 + 96 + 48 × 4: even) measured 21.6, one thread 10.8–11.1 at every size (throwaway loop,
// 2026-12-01, Zen 4). 384 × 3584 is 731 KB: inside one Zen 4 core's 1 MB L2, so the rows a thread
// takes are in its cache whichever blocks it got in earlier calls.

import { fillBytes } from "./weights.ts";

type MxFn = (P: Uint8Array, S: Uint8Array, X: Float32Array, ldx: number, Y: Float32Array, ldy: number, rows: number, cols: number, T: number) => number;

export interface Mxfp4InCache {
  rows: number;
  cols: number;
  bytesPerCall: number;
  gbs: number; // best pass
  passes: number[]; // GB/s of each pass
  usPerCall: number; // of the best pass
}

/** Deterministic operands (the benches' LCG bytes, bench/weights.ts): random nibbles, scales in
 *  120..130 (2^-7..2^3), x standard normal (Box–Muller on pairs of 32-bit words). */
export function mxfp4Operands(rows: number, cols: number, seed = 1): { P: Uint8Array; S: Uint8Array; X: Float32Array } {
  const P = fillBytes((rows * cols) / 2, seed);
  const S = fillBytes((rows * cols) / 32, seed + 1).map((b) => 120 + (b % 11));
  const u = new Uint32Array(fillBytes(cols * 8, seed + 2).buffer);
  const X = new Float32Array(cols).map((_, i) => Math.sqrt(-2 * Math.log((u[2 * i]! + 1) / 2 ** 32)) * Math.cos((2 * Math.PI * u[2 * i + 1]!) / 2 ** 32));
  return { P, S, X };
}

/** A measurer on one matrix (operands made once): each call is the best of `passes` passes of ≥ `ms`
 * ms each of back-to-back one-token calls, after 64 untimed calls (into cache, pool awake). */
export function mxfp4InCache(matmul: MxFn, rows: number, cols: number): (ms: number, passes: number) => Mxfp4InCache {
  if (!Number.isInteger(rows) || rows < 1 || cols % 32) throw new Error(`mxfp4InCache: ${rows}×${cols} wants rows ≥ 1 and columns a multiple of 32`);
  const { P, S, X } = mxfp4Operands(rows, cols);
  const Y = new Float32Array(rows);
  const call = () => {
    const st = matmul(P, S, X, cols, Y, rows, rows, cols, 1);
    if (st !== 0) throw new Error(`k3_matmul_mxfp4 ${rows}×${cols} refused its arguments (status ${st})`);
  };
  const bytesPerCall = (rows * cols) / 2 + (rows * cols) / 32;
  return (ms, passes) => {
    for (let i = 0; i < 64; i++) call();
    const out: number[] = [];
    let bestNs = Infinity;
    for (let p = 0; p < passes; p++) {
      let n = 0;
      const t0 = Bun.nanoseconds();
      let t = t0;
      while (t - t0 < ms * 1e6) {
        for (let i = 0; i < 16; i++) call();
        n += 16;
        t = Bun.nanoseconds();
      }
      out.push((bytesPerCall * n) / (t - t0));
      bestNs = Math.min(bestNs, (t - t0) / n);
    }
    return { rows, cols, bytesPerCall, gbs: Math.max(...out), passes: out, usPerCall: bestNs / 1e3 };
  };
}
