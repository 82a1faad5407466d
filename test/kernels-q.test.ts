// The compact trunk's kernels (issue 16, kernels/k3_matmul_q.c) against the float64 reference
// (tools/reference/quant.ts): the quantiser byte for byte, the int8/int4 products within the bound
// of docs/NUMERICS.md §2 on every ISA path this CPU has, and one set of bits for every path,
// thread count and batch size.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import * as ref from "../tools/reference/ops.ts";
import { decodeQ, quantize, type QBits } from "../tools/reference/quant.ts";
import { ISA, K3_STATUS } from "../src/kernels.ts";
import { allIsas, bf16ToF32, bitsHash, expectWithin, f64, gamma, k, randBF16, randF32, rng, SUB, supported, withIsaThreads } from "./kernels.helpers.ts";

// test/arm64.test.ts runs this file under qemu (every instruction emulated): far slower than here.
setDefaultTimeout(120_000);

const paths = [
  { name: "scalar", isa: ISA.scalar, ok: supported.scalar },
  { name: "AVX2", isa: ISA.avx2, ok: supported.avx2 },
  { name: "AVX-512", isa: ISA.avx512, ok: supported.avx512 },
  { name: "NEON", isa: ISA.neon, ok: supported.neon }, // aarch64 (test/arm64.test.ts runs this file there under qemu)
];
const SIZES: [number, number][] = [[1, 32], [5, 64], [9, 96], [33, 512], [4, 1024]];
const TOKENS = [1, 2, 3, 4, 5, 9];

function packed(bits: QBits, rows: number, cols: number, seed: number) {
  const r = rng(seed);
  const W = randBF16(r, rows * cols);
  if (rows * cols >= 64) for (let i = 0; i < 32; i++) W[32 + i] = 0; // an all-zero group (scale 0)
  const Q = new Uint8Array(bits === 8 ? rows * cols : (rows * cols) / 2);
  const S = new Float32Array((rows * cols) / 32);
  expect(k.k3_quantize_bf16(W, rows, cols, bits, Q, S)).toBe(K3_STATUS.ok);
  return { W, Q, S };
}

function product(bits: QBits, Q: Uint8Array, S: Float32Array, X: Float32Array, rows: number, cols: number, T: number): Float32Array {
  const Y = new Float32Array(T * rows);
  if (bits === 8) k.k3_matmul_q8(Q, S, X, cols, Y, rows, rows, cols, T);
  else k.k3_matmul_q4(Q, S, X, cols, Y, rows, rows, cols, T);
  return Y;
}

/** docs/NUMERICS.md §2, the MXFP4 form: per group 2 products, the pair add and the scale product
 *  (not exact here: s is any f32) → γ_{n+4}·Σ|w·x| + (n+4)·2^-150, w = q·s decoded exactly. */
function bounds(W: Float64Array, rows: number, cols: number, X: Float32Array, T: number): { want: Float64Array; bound: Float64Array } {
  const want = new Float64Array(T * rows);
  const bound = new Float64Array(T * rows);
  for (let t = 0; t < T; t++) {
    const x = f64(X.subarray(t * cols, (t + 1) * cols));
    want.set(ref.matvec(W, rows, cols, x), t * rows);
    for (let r = 0; r < rows; r++) {
      let s = 0;
      for (let c = 0; c < cols; c++) s += Math.abs(W[r * cols + c]! * x[c]!);
      bound[t * rows + r] = gamma(cols + 4) * s + (cols + 4) * SUB;
    }
  }
  return { want, bound };
}

describe("compact trunk kernels", () => {
  for (const bits of [8, 4] as const)
    test(`int${bits} quantiser: the reference's bytes and scales exactly; |w − q·s| ≤ s/2 (+ the rounding of w/s)`, () => {
      for (const [rows, cols] of SIZES) {
        const { W, Q, S } = packed(bits, rows, cols, 100 + rows);
        const w = f64(bf16ToF32(W));
        const want = quantize(bits, w, rows, cols);
        expect(bitsHash(Q)).toBe(bitsHash(want.q));
        expect(bitsHash(S)).toBe(bitsHash(want.scales));
        const dq = decodeQ(bits, Q, S, rows, cols);
        for (let i = 0; i < w.length; i++) {
          const s = S[Math.floor(i / 32)]!;
          // Half a step, plus the f32 rounding of w/s (|w/s| ≤ 127, u = 2^-24) that picked q.
          if (!(Math.abs(w[i]! - dq[i]!) <= s * (0.5 + 128 * 2 ** -24))) throw new Error(`int${bits} weight ${i}: ${w[i]} decodes to ${dq[i]}, scale ${s}`);
        }
      }
    });

  for (const p of paths)
    for (const bits of [8, 4] as const)
      test.skipIf(!p.ok)(`int${bits} product vs float64, T = ${TOKENS.join(", ")} (${p.name})`, () => {
        const r = rng(7 + bits);
        for (const [rows, cols] of SIZES)
          for (const T of TOKENS) {
            const { Q, S } = packed(bits, rows, cols, rows * 31 + cols);
            const X = randF32(r, T * cols, -2, 2);
            const Y = withIsaThreads(p.isa, 1, () => product(bits, Q, S, X, rows, cols, T));
            const { want, bound } = bounds(decodeQ(bits, Q, S, rows, cols), rows, cols, X, T);
            expectWithin(Y, want, bound, `int${bits} ${rows}x${cols} T${T} (${p.name})`);
          }
      });

  test(`one set of bits on every path (${allIsas.join(", ")}), 1–3 threads, and a row of a batch equals the row alone`, () => {
    for (const bits of [8, 4] as const) {
      const rows = 37, cols = 7168, T = 5;
      const { Q, S } = packed(bits, rows, cols, 5);
      const X = randF32(rng(6), T * cols, -2, 2);
      const hashes = new Set<string>();
      for (const isa of allIsas)
        for (const threads of [1, 2, 3]) {
          const Y = withIsaThreads(isa, threads, () => product(bits, Q, S, X, rows, cols, T));
          hashes.add(bitsHash(Y));
          for (let t = 0; t < T; t++) {
            const one = withIsaThreads(isa, threads, () => product(bits, Q, S, X.subarray(t * cols, (t + 1) * cols), rows, cols, 1));
            expect(bitsHash(one)).toBe(bitsHash(Y.subarray(t * rows, (t + 1) * rows)));
          }
        }
      expect([...hashes].length).toBe(1);
    }
  });

  test("the int4 layout is visible: byte i holds column i (low nibble) and column 16+i (high), each as q+8", () => {
    const Q = new Uint8Array(16);
    Q[0] = 0x9a; // column 0: 0xa − 8 = 2; column 16: 0x9 − 8 = 1
    for (let i = 1; i < 16; i++) Q[i] = 0x88; // zeros
    const S = new Float32Array([0.5]);
    const e = (c: number) => Float32Array.from({ length: 32 }, (_, i) => (i === c ? 1 : 0));
    for (const isa of allIsas) {
      expect(withIsaThreads(isa, 1, () => product(4, Q, S, e(0), 1, 32, 1))[0]).toBe(1);
      expect(withIsaThreads(isa, 1, () => product(4, Q, S, e(16), 1, 32, 1))[0]).toBe(0.5);
      expect(withIsaThreads(isa, 1, () => product(4, Q, S, e(1), 1, 32, 1))[0]).toBe(0);
    }
  });

  test("k3_quant_error (the pack's report): Σ(w − q·s)², Σw² and the worst row's ratio, as the reference decodes them", () => {
    for (const bits of [8, 4] as const) {
      const rows = 9, cols = 96;
      const { W, Q, S } = packed(bits, rows, cols, 77);
      const out = new Float64Array(3);
      k.k3_quant_error(W, rows, cols, bits, Q, S, out);
      const w = f64(bf16ToF32(W));
      const dq = decodeQ(bits, Q, S, rows, cols);
      let e2 = 0, w2 = 0, worst = 0;
      for (let r = 0; r < rows; r++) {
        let re = 0, rw = 0;
        for (let c = 0; c < cols; c++) (re += (w[r * cols + c]! - dq[r * cols + c]!) ** 2), (rw += w[r * cols + c]! ** 2);
        (e2 += re), (w2 += rw), (worst = Math.max(worst, re / rw));
      }
      expect(Math.abs(out[0]! - e2)).toBeLessThanOrEqual(1e-12 * w2);
      expect(out[1]).toBeCloseTo(w2, 10);
      expect(Math.abs(out[2]! - worst)).toBeLessThanOrEqual(1e-12);
    }
  });

  test("the quantiser refuses NaN / inf weights and sizes that are not whole groups", () => {
    const W = new Uint16Array(64).fill(0x3f80); // 1.0
    const Q = new Uint8Array(64);
    const S = new Float32Array(2);
    expect(k.k3_quantize_bf16(W, 1, 48, 8, Q, S)).toBe(K3_STATUS.arg);
    expect(k.k3_quantize_bf16(W, 1, 64, 3, Q, S)).toBe(K3_STATUS.arg);
    W[10] = 0x7fc0; // NaN
    expect(k.k3_quantize_bf16(W, 1, 64, 8, Q, S)).toBe(K3_STATUS.nonfinite);
    W[10] = 0x7f80; // +inf
    expect(k.k3_quantize_bf16(W, 1, 64, 4, Q, S)).toBe(K3_STATUS.nonfinite);
  });
});
