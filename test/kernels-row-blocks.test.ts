// The pool hands a matmul's rows out in guided blocks from a shared counter (k3_rowq in
// kernels/k3_internal.h): 1/(2·threads) of the rows still left, a multiple of 48, at least 48,
// so which thread computes which rows changes from run to run. Every output must still be
// written exactly once with the bits of one thread: for row counts on both sides of the block
// sizes (97 = 48 + 48 + 1, 144 = three whole blocks, 193, 577), every format, every ISA path,
// threads 1–3, T = 1 (the one-token paths), 9 (batched) and 33 (past one token chunk). Y starts as
// a NaN with a payload no kernel produces, so a row no block covered is seen.
import { describe, expect, test } from "bun:test";
import { K3_STATUS } from "../src/kernels.ts";
import { allIsas, bitsHash, k, randF32, randFormats, rng, withIsaThreads } from "./kernels.helpers.ts";

const DENSE = 710; // a column tail (710 % 16 = 6); 97 rows × 710 ≥ the 64K weights that use the pool
const GROUPED = 704; // whole groups of 32
const ROWS = [97, 144, 193, 577];
const TS = [1, 9, 33];
const SENTINEL = 0x7fc0dead; // a quiet NaN no kernel writes

type Call = (X: Float32Array, Y: Float32Array, rows: number, T: number) => number;

function formats(maxRows: number): { name: string; cols: number; call: Call }[] {
  const r = rng(0x48);
  const { Wb, Wf, mx, q8, q4, qs } = randFormats(r, maxRows, DENSE, GROUPED);
  const d = DENSE, g = GROUPED;
  return [
    { name: "bf16", cols: d, call: (X, Y, n, T) => k.k3_matmul_bf16(Wb, X, d, Y, n, n, d, T) },
    { name: "f32", cols: d, call: (X, Y, n, T) => k.k3_matmul_f32(Wf, X, d, Y, n, n, d, T) },
    { name: "mxfp4", cols: g, call: (X, Y, n, T) => k.k3_matmul_mxfp4(mx.packed, mx.scales, X, g, Y, n, n, g, T) },
    { name: "q8", cols: g, call: (X, Y, n, T) => k.k3_matmul_q8(q8, qs, X, g, Y, n, n, g, T) },
    { name: "q4", cols: g, call: (X, Y, n, T) => k.k3_matmul_q4(q4, qs, X, g, Y, n, n, g, T) },
  ];
}

function run(call: Call, X: Float32Array, rows: number, T: number) {
  const Y = new Float32Array(T * rows);
  new Uint32Array(Y.buffer).fill(SENTINEL);
  const st = call(X, Y, rows, T);
  const unwritten = new Uint32Array(Y.buffer).filter((u) => u === SENTINEL).length;
  return { st, unwritten, bits: bitsHash(Y) };
}

describe("guided row blocks: every row once, the bits of one thread", () => {
  const r = rng(0x4848);
  for (const f of formats(Math.max(...ROWS)))
    test(`${f.name}: rows ${ROWS.join(", ")} × T ${TS.join(", ")}, every ISA, threads 1–3`, () => {
      for (const rows of ROWS)
        for (const T of TS) {
          const X = randF32(r, T * f.cols, -1, 1);
          for (const isa of allIsas) {
            const one = withIsaThreads(isa, 1, () => run(f.call, X, rows, T));
            expect({ rows, T, isa, st: one.st, unwritten: one.unwritten }).toEqual({ rows, T, isa, st: K3_STATUS.ok, unwritten: 0 });
            for (const threads of [2, 3]) {
              const got = withIsaThreads(isa, threads, () => run(f.call, X, rows, T));
              expect({ rows, T, isa, threads, ...got }).toEqual({ rows, T, isa, threads, ...one });
            }
          }
        }
    });
});
