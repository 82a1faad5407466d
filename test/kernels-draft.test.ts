// The draft model's own kernels (kernels/k3_draft.c, docs/DRAFT.md): interleaved RoPE with the
// library's sine and cosine, and the SiLU-GLU activation. Each is checked against float64
// formulas here (bounds from counting roundings, docs/NUMERICS.md §2), pinned to golden bits (so
// a change of one bit on any machine fails: test/arm64.test.ts runs this file on aarch64), and
// refuses what it cannot do with K3_ERR_ARG, writing nothing.
import { describe, expect, test } from "bun:test";
import { kernelLimits, K3_STATUS } from "../src/kernels.ts";
import { bitsHash, expectWithin, k, rng, randF32, SUB, U } from "./kernels.helpers.ts";

const lim = kernelLimits(k);
const sincos = (x: number) => {
  const out = new Float64Array(2);
  const status = k.k3_sincos(x, out);
  return { status, s: out[0]!, c: out[1]! };
};

/** YaRN-like frequencies (θ^(−2i/d), the upper pairs divided by 32), as the draft config gives them. */
function freqs(pairs: number, theta = 50000): Float64Array {
  return Float64Array.from({ length: pairs }, (_, i) => theta ** (-(2 * i) / (2 * pairs)) / (i >= (pairs * 3) / 4 ? 32 : 1));
}

/**
 * The interleaved rotation in float64, c and s rounded to f32 as the kernel rounds them, and the
 * bound on the kernel's error per element: the two products and the sum are rounded (3u of
 * |a·c| + |b·s|), and c, s may round to the neighbouring float where the host's cos/sin and the
 * library's differ by an ulp of double next to a tie (one more u). Untouched dims: bound 0.
 */
function ropeRef(x: Float32Array, ldx: number, heads: number, hstride: number, dr: number, freq: Float64Array, pos0: number, T: number, mscale: number): { y: Float64Array; bound: Float64Array } {
  const y = Float64Array.from(x);
  const bound = new Float64Array(x.length);
  for (let t = 0; t < T; t++)
    for (let i = 0; i < dr / 2; i++) {
      const phi = (pos0 + t) * freq[i]!;
      const c = Math.fround(Math.cos(phi) * mscale), s = Math.fround(Math.sin(phi) * mscale);
      for (let h = 0; h < heads; h++) {
        const o = t * ldx + h * hstride + 2 * i;
        const a = x[o]!, b = x[o + 1]!;
        y[o] = a * c - b * s;
        y[o + 1] = b * c + a * s;
        bound[o] = bound[o + 1] = 4 * U * (Math.abs(a) + Math.abs(b)) * Math.abs(mscale) * 1.0000001 + SUB;
      }
    }
  return { y, bound };
}

describe("k3_sincos: the library's own sine and cosine", () => {
  test("within 1e-15 of the host's Math.sin / Math.cos over the whole allowed range", () => {
    const r = rng(0x5c05);
    const xs = [0, -0, 1e-300, 0.5, Math.PI / 4, Math.PI / 2, Math.PI, 3, 1e3, 65535.5, lim.ropeAngle - 1, -(lim.ropeAngle - 1)];
    for (let i = 0; i < 20000; i++) xs.push(r.uniform(-1, 1) * lim.ropeAngle * (i % 3 === 0 ? 1 : i % 3 === 1 ? 1e-3 : 1e-6));
    for (const x of xs) {
      const got = sincos(x);
      expect(got.status).toBe(K3_STATUS.ok);
      if (!(Math.abs(got.s - Math.sin(x)) <= 1e-15 && Math.abs(got.c - Math.cos(x)) <= 1e-15)) throw new Error(`sincos(${x}) = ${got.s}, ${got.c}; Math: ${Math.sin(x)}, ${Math.cos(x)}`);
    }
  });

  test("refused at and past the limit, and for non-finite input", () => {
    for (const x of [lim.ropeAngle, -lim.ropeAngle, 1e300, Infinity, NaN]) expect(sincos(x).status).toBe(K3_STATUS.arg);
  });

  test("golden bits (any machine, any libm)", () => {
    const r = rng(0x5c06);
    const out = new Float64Array(2 * 4096);
    for (let i = 0; i < 4096; i++) k.k3_sincos(r.uniform(-1, 1) * 2 ** r.int(21), out.subarray(2 * i));
    expect(bitsHash(out)).toBe(GOLDEN.sincos);
  });
});

describe("k3_rope_interleaved", () => {
  const r = rng(0xa0be);
  const heads = 5, dn = 6, dr = 16, hstride = dn + dr, T = 7, ldx = heads * hstride + 3; // ragged row stride
  const freq = freqs(dr / 2);

  function rope(x: Float32Array, pos0: number, mscale = 1, f = freq, d = dr, n = heads) {
    // The rope dims of each head start dn floats into the head: pass x offset by dn.
    return k.k3_rope_interleaved(x.subarray(dn), ldx, n, hstride, d, f, pos0, T, mscale);
  }

  test("equals the float64 rotation of adjacent pairs within 4 roundings; other dims untouched", () => {
    for (const [pos0, mscale] of [[0, 1], [37, 1], [1_000_000, 1.0], [9, 0.7]] as const) {
      const x = randF32(r, T * ldx, -3, 3);
      const x0 = x.slice();
      expect(rope(x, pos0, mscale)).toBe(K3_STATUS.ok);
      const { y: want, bound } = ropeRef(x0.subarray(dn), ldx, heads, hstride, dr, freq, pos0, T, mscale);
      expectWithin(x.subarray(dn), want, bound, `rope pos0 ${pos0}`);
      // the nope dims of every head (and the row's padding) keep their bits
      for (let t = 0; t < T; t++)
        for (let h = 0; h <= heads; h++)
          for (let d = 0; d < (h < heads ? dn : 3); d++) {
            const o = t * ldx + h * hstride + d;
            if (x[o] !== x0[o]) throw new Error(`row ${t} head ${h} dim ${d} changed`);
          }
    }
  });

  test("a rotation: scores depend only on the distance between positions (within rounding)", () => {
    // q at position p and k at position p' give the same dot product as at p + δ and p' + δ.
    const q = randF32(r, dr, -1, 1), kk = randF32(r, dr, -1, 1);
    const at = (v: Float32Array, p: number) => {
      const y = v.slice();
      expect(k.k3_rope_interleaved(y, dr, 1, dr, dr, freq, p, 1, 1)).toBe(K3_STATUS.ok);
      return y;
    };
    const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, v, i) => s + v * b[i]!, 0);
    const base = dot(at(q, 12), at(kk, 5));
    for (const delta of [1, 100, 4096]) expect(Math.abs(dot(at(q, 12 + delta), at(kk, 5 + delta)) - base)).toBeLessThan(1e-5);
    // and it is not the identity: a distance of 7 scores differently from a distance of 0
    expect(Math.abs(dot(at(q, 12), at(kk, 12)) - base)).toBeGreaterThan(1e-3);
  });

  test("pairs are adjacent dims (2i, 2i+1), not the halves (NeoX): a pair keeps its norm", () => {
    const x = randF32(r, T * ldx, -3, 3);
    const x0 = x.slice();
    expect(rope(x, 123)).toBe(K3_STATUS.ok);
    for (let i = 0; i < dr; i += 2) {
      const o = dn + i;
      const n0 = Math.hypot(x0[o]!, x0[o + 1]!), n1 = Math.hypot(x[o]!, x[o + 1]!);
      expect(Math.abs(n1 - n0)).toBeLessThan(4 * U * n0 + 1e-30);
    }
  });

  test("refusals write nothing: odd dims, too many pairs, bad frequency, angle past the limit, bad sizes", () => {
    const x = randF32(r, T * ldx, -3, 3);
    const x0 = x.slice();
    const bad = Float64Array.from(freq);
    bad[3] = -1;
    const nan = Float64Array.from(freq);
    nan[0] = NaN;
    const big = new Float64Array(lim.ropePairs + 1).fill(0.5);
    const cases: [string, () => number][] = [
      ["odd dr", () => rope(x, 0, 1, freq, dr - 1)],
      ["dr 0", () => rope(x, 0, 1, freq, 0)],
      ["pairs past the limit", () => k.k3_rope_interleaved(new Float32Array(2 * (lim.ropePairs + 1)), 0, 1, 0, 2 * (lim.ropePairs + 1), big, 0, 1, 1)],
      ["negative frequency", () => rope(x, 0, 1, bad)],
      ["NaN frequency", () => rope(x, 0, 1, nan)],
      ["angle past the limit", () => rope(x, lim.ropeAngle)],
      ["no heads", () => rope(x, 0, 1, freq, dr, 0)],
      ["negative position", () => rope(x, -1)],
    ];
    for (const [what, call] of cases) expect({ what, status: call() }).toEqual({ what, status: K3_STATUS.arg });
    expect(bitsHash(x)).toBe(bitsHash(x0));
  });

  test("golden bits", () => {
    const g = rng(0xa0bf);
    const x = randF32(g, T * ldx, -3, 3);
    expect(rope(x, 4000, 1)).toBe(K3_STATUS.ok);
    const y = randF32(g, 64 * 4, -3, 3); // one rope key per row, positions 0..63
    expect(k.k3_rope_interleaved(y, 4, 1, 4, 4, freqs(2), 0, 64, 1)).toBe(K3_STATUS.ok);
    expect({ heads: bitsHash(x), key: bitsHash(y) }).toEqual(GOLDEN.rope);
  });
});

describe("k3_silu_glu", () => {
  const r = rng(0x511);
  const n = 4096;
  const g = randF32(r, n, -30, 30);
  g.set([0, -0, 1e-30, -1e-30, 88, -88, 104, -104, 200, -200], 0);
  const u = randF32(r, n, -5, 5);

  test("equals g·sigmoid(g)·u within 6 roundings (out may alias g)", () => {
    const out = g.slice();
    expect(k.k3_silu_glu(out, u, out, n)).toBe(K3_STATUS.ok);
    const want = Float64Array.from(g, (x, i) => (x / (1 + Math.exp(-x))) * u[i]!);
    // sigmoid 4u, the two multiplies u each; where exp(−g) overflows (g ≲ −88) the output is ±0
    // against a true value below |g|·e^g·|u|: add that.
    const bound = Float64Array.from(want, (w, i) => 6 * U * Math.abs(w) + Math.abs(g[i]! * u[i]!) * Math.exp(Math.min(0, g[i]!)) * (g[i]! < -80 ? 1 : 0) + SUB);
    expectWithin(out, want, bound, "silu_glu");
  });

  test("golden bits; n < 0 refused", () => {
    const out = new Float32Array(n);
    expect(k.k3_silu_glu(g, u, out, n)).toBe(K3_STATUS.ok);
    expect(bitsHash(out)).toBe(GOLDEN.silu);
    expect(k.k3_silu_glu(g, u, out, -1)).toBe(K3_STATUS.arg);
  });
});

// Hashes of the bits the library gave when these kernels were written (x86-64, this file's inputs).
const GOLDEN = {
  sincos: "9c8fe1c662ca31ce",
  rope: { heads: "d5a97c6025dc933f", key: "92a1dbd73ed0f7e5" },
  silu: "c573e413539da8fa",
};
