// The vector paths of sigmoid, x·sigmoid(g), SiTU-GLU, expf and tanhf (kernels/k3_math_vec.h:
// AVX-512, AVX2 + FMA) give exactly the scalar functions' bits (kernels/k3_math.c). The proof over
// all 2^32 floats is tools/libm-vector-check.ts (docs/NUMERICS.md §1.1); here, in seconds: every
// 4096th bit pattern plus every branch boundary of k3_expf / k3_tanhf / expm1f on both sides,
// subnormals, ±0, ±inf, NaN payloads, and the two inputs whose expf changes when the reduction
// r = z − kd is not fused (docs/PORTS.md §1) — on every ISA this host has, at 1 and 2 threads,
// with lengths that are and are not multiples of the vector widths (8, 16, 32) and of the pool
// split, and with SiTU-GLU's out aliasing g and u.
import { describe, expect, test } from "bun:test";
import { ISA } from "../src/kernels.ts";
import { allIsas, k, withIsaThreads } from "./kernels.helpers.ts";

/** Bit patterns k3_math.c branches on, as |x| (each with its neighbours; both signs added below). */
const EDGES = [
  0, 1, 2, 0x007fffff, 0x00800000, // subnormals, FLT_MIN
  0x24000000, // tanhf: |x| < 2^-55 → x·(1 + x)
  0x32800000, 0x33000000, // expm1f: |a| < 2^-25 → a (tanhf's a = −2|x|)
  0x3e317218, 0x3eb17218, // expm1f: |a| ≤ ln2/2 (a = ±2x)
  0x3f051592, 0x3f851592, // expm1f: |a| < 1.5·ln2 → k = ±1
  0x3e800000, 0x3f000000, // expm1f k = 1: x < −0.25
  0x3f800000, // tanhf: |x| ≥ 1 (expm1 of +2|x|)
  0x4115b844, 0x4195b844, // expm1f: |a| ≥ 27·ln2
  0x41b00000, // tanhf: |x| ≥ 22 → ±1
  0x42b00000, 0x42b17217, 0x42b17218, 0x42cff1b4, // expf: |x| ≥ 88, overflow, underflow thresholds
  0x4202422f, 0x427c65d9, // expf: the two inputs that need r = z − kd fused
  0x7f7fffff, 0x7f800000, // FLT_MAX, inf
];
const NANS = [0x7f800001, 0x7fbfffff, 0x7fc00000, 0x7fc00001, 0x7fffffff, 0xff800001, 0xffc00000, 0xffffffff];

/** Every 4096th bit pattern (NaNs included), then the edges ± 2 ulp with both signs, then NaNs. */
function inputs(): Float32Array {
  const bits: number[] = [];
  for (let i = 0; i < 2 ** 32; i += 4096) bits.push(i + 17);
  for (const e of EDGES) for (let d = -2; d <= 2; d++) if (e + d >= 0) bits.push(e + d, (e + d) | 0x80000000);
  bits.push(...NANS);
  return new Float32Array(new Uint32Array(bits.map((b) => b >>> 0)).buffer);
}

const X = inputs();
const U = X.slice().reverse();
/** Lengths around the vector widths and the pool's 4096-element split point. */
const LENGTHS = [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 4095, 4096, 4097, 5000, X.length];

type Op = (x: Float32Array, n: number) => Float32Array;
const ops: Record<string, Op> = {
  expf: (x, n) => { const y = x.slice(0, n); k.k3_expf_n(y, n); return y; },
  tanhf: (x, n) => { const y = x.slice(0, n); k.k3_tanhf_n(y, n); return y; },
  sigmoid: (x, n) => { const y = x.slice(0, n); k.k3_sigmoid(y, n); return y; },
  mul_sigmoid: (x, n) => { const y = U.slice(0, n); k.k3_mul_sigmoid(y, x, n); return y; },
  situ_glu: (x, n) => { const out = new Float32Array(n); k.k3_situ_glu(x, U, out, n, 3, 4); return out; },
  "situ_glu b=1": (x, n) => { const out = new Float32Array(n); k.k3_situ_glu(x, U, out, n, 1, 1); return out; },
  "situ_glu out=g": (x, n) => { const g = x.slice(0, n); k.k3_situ_glu(g, U, g, n, 7, 0.5); return g; },
  "situ_glu out=u": (x, n) => { const u = U.slice(0, n); k.k3_situ_glu(x, u, u, n, 10, 2); return u; },
};

/** Index and bits of the first element whose bits differ, or null. */
function firstDiff(a: Float32Array, b: Float32Array): string | null {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length), ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < ua.length; i++) {
    if (ua[i] !== ub[i]) return `[${i}] input 0x${(new Uint32Array(X.buffer)[i]! >>> 0).toString(16)}: 0x${ua[i]!.toString(16)} vs scalar 0x${ub[i]!.toString(16)}`;
  }
  return null;
}

describe("elementwise vector paths: the scalar bits for every input", () => {
  const want: Record<string, Float32Array> = {};
  for (const [name, op] of Object.entries(ops)) want[name] = withIsaThreads(ISA.scalar, 1, () => op(X, X.length));

  for (const isa of allIsas.filter((i) => i !== ISA.scalar)) {
    for (const threads of [1, 2]) {
      test(`${Object.keys(ISA).find((n) => ISA[n as keyof typeof ISA] === isa)}, ${threads} thread(s): every op, every length, the scalar bits`, () => {
        const bad: string[] = [];
        withIsaThreads(isa, threads, () => {
          for (const [name, op] of Object.entries(ops)) {
            for (const n of LENGTHS) {
              const d = firstDiff(op(X, n), want[name]!.subarray(0, n));
              if (d) bad.push(`${name} n=${n} ${d}`);
            }
          }
        });
        expect(bad).toEqual([]);
      });
    }
  }

  test("the inputs reach every branch: some outputs are NaN, ±1, 0, inf, subnormal, and x itself", () => {
    const t = want.tanhf!, e = want.expf!;
    const has = (a: Float32Array, f: (v: number, i: number) => boolean) => a.some(f);
    expect(has(t, (v) => v !== v)).toBe(true);
    expect(has(t, (v) => v === 1) && has(t, (v) => v === -1)).toBe(true);
    expect(has(t, (v, i) => v === X[i] && v !== 0 && Math.abs(v) < 2 ** -55)).toBe(true);
    expect(has(e, (v) => v === Infinity) && has(e, (v) => v === 0)).toBe(true);
    expect(has(e, (v) => v > 0 && v < 2 ** -126)).toBe(true);
  });
});
