// Strided matmuls and their statuses (kernels/k3.h, issue 23): every k3_matmul_* takes row strides
// (ldx ≥ cols, ldy ≥ rows), so a row slice of a T-token product is one call writing its columns of
// Y in place, and returns K3_OK or K3_ERR_ARG. The bits of an output never depend on the strides:
// the whole product equals the same product cut into row slices (Y rows wider than the slice, X
// rows inside wider buffers) and equals one token at a time, on every ISA path, at 1–3 threads,
// for T on both sides of the batched kernels' threshold (8) and past one token chunk (32). The
// whole product's bits are pinned separately (test/kernels-matmul-bits.test.ts). A size a kernel
// does not handle is refused with nothing written, never a silent no-op.
import { describe, expect, test } from "bun:test";
import { K3_STATUS } from "../src/kernels.ts";
import { allIsas, bitsHash, k, randBF16, randF32, randFormats, randMXFP4, rng, withIsaThreads } from "./kernels.helpers.ts";

type Call = (X: Float32Array, ldx: number, Y: Float32Array, ldy: number, r0: number, n: number, T: number) => number;
interface Kernel {
  name: string;
  rows: number;
  cols: number;
  call: Call; // rows [r0, r0 + n) of the matrix
}

/** The five formats on one shape each: rows × cols ≥ 64K weights (the pool splits the rows). */
function kernels(): Kernel[] {
  const r = rng(0x523);
  const rows = 300;
  const dense = 230; // a column tail (230 % 16 = 6)
  const q = 320; // whole groups of 32
  const { Wb, Wf, mx, q8, q4, qs } = randFormats(r, rows, dense, q);
  const sub = <A extends { subarray(a: number): A }>(a: A, off: number) => a.subarray(off);
  return [
    { name: "bf16", rows, cols: dense, call: (X, ldx, Y, ldy, r0, n, T) => k.k3_matmul_bf16(sub(Wb, r0 * dense), X, ldx, Y, ldy, n, dense, T) },
    { name: "f32", rows, cols: dense, call: (X, ldx, Y, ldy, r0, n, T) => k.k3_matmul_f32(sub(Wf, r0 * dense), X, ldx, Y, ldy, n, dense, T) },
    { name: "mxfp4", rows, cols: q, call: (X, ldx, Y, ldy, r0, n, T) => k.k3_matmul_mxfp4(sub(mx.packed, (r0 * q) / 2), sub(mx.scales, (r0 * q) / 32), X, ldx, Y, ldy, n, q, T) },
    { name: "q8", rows, cols: q, call: (X, ldx, Y, ldy, r0, n, T) => k.k3_matmul_q8(sub(q8, r0 * q), sub(qs, (r0 * q) / 32), X, ldx, Y, ldy, n, q, T) },
    { name: "q4", rows, cols: q, call: (X, ldx, Y, ldy, r0, n, T) => k.k3_matmul_q4(sub(q4, (r0 * q) / 2), sub(qs, (r0 * q) / 32), X, ldx, Y, ldy, n, q, T) },
  ];
}

/** T on both sides of the batched threshold (8), a token chunk (32) and its tail. */
const Ts = [1, 2, 3, 5, 8, 13, 33];
/** Row slices that cut the batched kernels' 16-row panels and the 4-row register blocks. */
const SLICES = [[0, 37], [37, 38], [38, 150], [150, 300]] as const;
const PAD = 13; // extra floats per row of the wider X and Y buffers

describe("strided matmuls: one call per row slice gives the whole product's bits", () => {
  const ks = kernels();
  const r = rng(7);
  for (const kn of ks)
    test(`${kn.name}: whole = row slices into a wider Y from a wider X = one token at a time (every ISA, threads 1–3, T ${Ts.join(", ")})`, () => {
      const { rows, cols } = kn;
      for (const T of Ts) {
        const X = randF32(r, T * cols, -1, 1);
        // the same tokens inside rows of cols + PAD floats, the padding NaN (never read)
        const ldx = cols + PAD;
        const Xw = new Float32Array(T * ldx).fill(NaN);
        for (let t = 0; t < T; t++) Xw.set(X.subarray(t * cols, (t + 1) * cols), t * ldx);
        for (const isa of allIsas)
          for (const threads of [1, 2, 3])
            withIsaThreads(isa, threads, () => {
              const where = { kernel: kn.name, isa, threads, T };
              const whole = new Float32Array(T * rows);
              expect({ ...where, st: kn.call(X, cols, whole, rows, 0, rows, T) }).toEqual({ ...where, st: K3_STATUS.ok });
              // every slice writes its columns of a Y whose rows are rows + PAD wide; the rest stays NaN
              const ldy = rows + PAD;
              const Yw = new Float32Array(T * ldy).fill(NaN);
              for (const [r0, r1] of SLICES) expect(kn.call(Xw, ldx, Yw.subarray(r0), ldy, r0, r1 - r0, T)).toBe(K3_STATUS.ok);
              const sliced = new Float32Array(T * rows);
              for (let t = 0; t < T; t++) {
                sliced.set(Yw.subarray(t * ldy, t * ldy + rows), t * rows);
                expect(Yw.subarray(t * ldy + rows, (t + 1) * ldy).every(Number.isNaN)).toBe(true);
              }
              const single = new Float32Array(T * rows);
              for (let t = 0; t < T; t++) kn.call(X.subarray(t * cols), cols, single.subarray(t * rows), rows, 0, rows, 1);
              expect({ ...where, sliced: bitsHash(sliced), single: bitsHash(single) }).toEqual({ ...where, sliced: bitsHash(whole), single: bitsHash(whole) });
            });
      }
    });
});

describe("matmul statuses: sizes a kernel does not handle are refused, nothing written", () => {
  const r = rng(9);
  const X = randF32(r, 4 * 96, -1, 1);
  const W16 = randBF16(r, 8 * 96), W32 = randF32(r, 8 * 96), bytes = new Uint8Array(8 * 96), sc = new Float32Array(8 * 3).fill(0.01);
  const mx = randMXFP4(r, 8, 96);
  type Args = { X: Float32Array | null; ldx: number; Y: Float32Array; ldy: number; rows: number; cols: number; T: number };
  const call: Record<string, (a: Args) => number> = {
    bf16: (a) => k.k3_matmul_bf16(W16, a.X, a.ldx, a.Y, a.ldy, a.rows, a.cols, a.T),
    f32: (a) => k.k3_matmul_f32(W32, a.X, a.ldx, a.Y, a.ldy, a.rows, a.cols, a.T),
    mxfp4: (a) => k.k3_matmul_mxfp4(mx.packed, mx.scales, a.X, a.ldx, a.Y, a.ldy, a.rows, a.cols, a.T),
    q8: (a) => k.k3_matmul_q8(bytes, sc, a.X, a.ldx, a.Y, a.ldy, a.rows, a.cols, a.T),
    q4: (a) => k.k3_matmul_q4(bytes, sc, a.X, a.ldx, a.Y, a.ldy, a.rows, a.cols, a.T),
  };
  const ok: Args = { X, ldx: 96, Y: new Float32Array(0), ldy: 8, rows: 8, cols: 96, T: 4 };
  const bad: [string, Partial<Args>, string[]][] = [
    ["cols not a multiple of 32", { cols: 80, ldx: 96 }, ["mxfp4", "q8", "q4"]],
    ["negative rows", { rows: -1 }, Object.keys(call)],
    ["negative cols", { cols: -16 }, Object.keys(call)],
    ["negative T", { T: -2 }, Object.keys(call)],
    ["ldx shorter than a row", { ldx: 95 }, Object.keys(call)],
    ["ldy shorter than a row", { ldy: 7 }, Object.keys(call)],
    ["no X", { X: null }, Object.keys(call)],
  ];
  for (const isa of allIsas)
    test(`ISA ${isa}: each refusal is K3_ERR_ARG and leaves Y as it was; the valid call and empty products are K3_OK`, () => {
      withIsaThreads(isa, 2, () => {
        for (const [name, fn] of Object.entries(call)) {
          const Y = new Float32Array(4 * 8).fill(NaN);
          expect({ name, st: fn({ ...ok, Y }) }).toEqual({ name, st: K3_STATUS.ok });
          expect(Y.some(Number.isNaN)).toBe(false);
          for (const [why, change, who] of bad) {
            if (!who.includes(name)) continue;
            const Yb = new Float32Array(4 * 8).fill(NaN);
            expect({ name, why, st: fn({ ...ok, ...change, Y: Yb }) }).toEqual({ name, why, st: K3_STATUS.arg });
            expect({ name, why, untouched: Yb.every(Number.isNaN) }).toEqual({ name, why, untouched: true });
          }
          // rows = 0 or T = 0: nothing to do, nothing written
          const Ye = new Float32Array(4 * 8).fill(NaN);
          expect({ name, st: [fn({ ...ok, rows: 0, ldy: 0, Y: Ye }), fn({ ...ok, T: 0, Y: Ye })] }).toEqual({ name, st: [K3_STATUS.ok, K3_STATUS.ok] });
          expect(Ye.every(Number.isNaN)).toBe(true);
        }
      });
    });
});
