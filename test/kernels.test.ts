// Every kernel against the float64 reference (tools/reference/ops.ts), with error bounds derived
// in docs/NUMERICS.md (never an arbitrary epsilon). Matmuls run on every ISA path this CPU has.
import { describe, expect, test } from "bun:test";
import * as ref from "../tools/reference/ops.ts";
import { ISA, K3_STATUS, kernelLimits } from "../src/kernels.ts";
import {
  k, U, SUB, gamma, rng, randF32, randBF16, bf16ToF32, randMXFP4, f64, withIsaThreads, supported,
  expectWithin,
} from "./kernels.helpers.ts";

const paths = [
  { name: "scalar", isa: ISA.scalar, ok: supported.scalar },
  { name: "AVX2", isa: ISA.avx2, ok: supported.avx2 },
  { name: "AVX-512", isa: ISA.avx512, ok: supported.avx512 },
  { name: "NEON", isa: ISA.neon, ok: supported.neon },
];

/** Bound for y = Σ_c w_c·x_c computed in f32 with n products: γ_{n+2}·Σ|w·x| + (n+2)·2^-150. */
function dotBounds(W: Float64Array, rows: number, cols: number, X: Float32Array, T: number, extra = 2) {
  const b = new Float64Array(T * rows);
  for (let t = 0; t < T; t++)
    for (let r = 0; r < rows; r++) {
      let s = 0;
      for (let c = 0; c < cols; c++) s += Math.abs(W[r * cols + c] * X[t * cols + c]);
      b[t * rows + r] = gamma(cols + extra) * s + (cols + extra) * SUB;
    }
  return b;
}
function refMatmul(W: Float64Array, rows: number, cols: number, X: Float32Array, T: number) {
  const y = new Float64Array(T * rows);
  for (let t = 0; t < T; t++) y.set(ref.matvec(W, rows, cols, f64(X.subarray(t * cols, (t + 1) * cols))), t * rows);
  return y;
}

describe("matmuls vs float64 reference", () => {
  for (const p of paths) {
    test.skipIf(!p.ok)(`bf16 and f32, odd sizes, T = 1, 3, 7 (${p.name})`, () => {
      const r = rng(11);
      for (const [rows, cols] of [[1, 1], [5, 7], [37, 16], [33, 100], [64, 1029]])
        for (const T of [1, 3, 7]) {
          const Wb = randBF16(r, rows * cols);
          const Wf = randF32(r, rows * cols, -2, 2);
          const X = randF32(r, T * cols);
          const Yb = new Float32Array(T * rows), Yf = new Float32Array(T * rows);
          withIsaThreads(p.isa, 1, () => {
            k.k3_matmul_bf16(Wb, X, cols, Yb, rows, rows, cols, T);
            k.k3_matmul_f32(Wf, X, cols, Yf, rows, rows, cols, T);
          });
          const Wb64 = f64(bf16ToF32(Wb)), Wf64 = f64(Wf);
          expectWithin(Yb, refMatmul(Wb64, rows, cols, X, T), dotBounds(Wb64, rows, cols, X, T), `bf16 ${rows}x${cols} T${T}`);
          expectWithin(Yf, refMatmul(Wf64, rows, cols, X, T), dotBounds(Wf64, rows, cols, X, T), `f32 ${rows}x${cols} T${T}`);
        }
    });

    test.skipIf(!p.ok)(`MXFP4 with scales 0, 1, 254, 255 (${p.name})`, () => {
      const r = rng(12);
      for (const [rows, cols] of [[1, 32], [7, 96], [41, 512]])
        for (const T of [1, 3, 7]) {
          const { packed, scales } = randMXFP4(r, rows, cols);
          // |x| ≤ 2^-8 keeps 16 groups at 2^127·6 finite in f32 (MAX ≈ 3.4e38).
          const X = randF32(r, T * cols, -(2 ** -8), 2 ** -8);
          const Y = new Float32Array(T * rows);
          withIsaThreads(p.isa, 1, () => k.k3_matmul_mxfp4(packed, scales, X, cols, Y, rows, rows, cols, T));
          const W = ref.decodeMXFP4(packed, scales, rows, cols);
          // Per group: 2 products + 1 add + 1 scale multiply (exact unless subnormal) → cols + 4.
          expectWithin(Y, refMatmul(W, rows, cols, X, T), dotBounds(W, rows, cols, X, T, 4), `mxfp4 ${rows}x${cols} T${T}`);
          expect(Y.every(Number.isFinite)).toBe(true);
        }
    });
  }

  test("MXFP4: nibble order and NaN-scale skip are visible (the check can fail)", () => {
    // One row, one group: column 0 = low nibble of byte 0 (value 1 = 0.5), column 1 = high nibble
    // (value 7 = 6). x = e_1 picks out column 1 → 6·2^(s−127).
    const packed = new Uint8Array(16);
    packed[0] = 0x71;
    const X = new Float32Array(32);
    X[1] = 1;
    const Y = new Float32Array(1);
    k.k3_matmul_mxfp4(packed, new Uint8Array([128]), X, 32, Y, 1, 1, 32, 1);
    expect(Y[0]).toBe(12);
    k.k3_matmul_mxfp4(packed, new Uint8Array([255]), X, 32, Y, 1, 1, 32, 1);
    expect(Y[0]).toBe(0);
    k.k3_matmul_mxfp4(packed, new Uint8Array([0]), X, 32, Y, 1, 1, 32, 1);
    expect(Y[0]).toBe(6 * 2 ** -127); // subnormal scale built exactly
  });
});

describe("elementwise ops vs float64 reference", () => {
  const r = rng(21);
  const n = 1001;
  test("bf16_to_f32 is exact; add and axpy round once per op", () => {
    const b = randBF16(r, n);
    const out = new Float32Array(n);
    k.k3_bf16_to_f32(b, out, n);
    expect(Array.from(out)).toEqual(Array.from(b, ref.bf16ToNumber));
    const y = randF32(r, n), x = randF32(r, n);
    const y0 = f64(y);
    k.k3_add(y, x, n);
    expectWithin(y, y0.map((v, i) => v + x[i]), y0.map((v, i) => U * Math.abs(v + x[i])), "add");
    const y1 = f64(y);
    k.k3_axpy(y, 0.37, x, n);
    const a = Math.fround(0.37);
    expectWithin(y, y1.map((v, i) => v + a * x[i]), y1.map((v, i) => U * Math.abs(a * x[i]) + U * Math.abs(v + a * x[i]) * (1 + U)), "axpy");
  });

  test("sigmoid, mul_sigmoid: saturated and central inputs", () => {
    const x = randF32(r, n, -30, 30);
    x.set([0, -0, 1e-30, 88, -88, 104, -104, 200, -200]);
    const x0 = f64(x);
    k.k3_sigmoid(x, n);
    // expf ≤ 1 ulp, 1+e and the division one rounding each; s' = s(1−s) damps e's error: ≤ 4u·s.
    expectWithin(x, x0.map(ref.sigmoid), x0.map((v) => 4 * U * ref.sigmoid(v) + SUB), "sigmoid");
    const g = f64(x0);
    const yy = randF32(r, n, -5, 5), yy0 = f64(yy);
    k.k3_mul_sigmoid(yy, Float32Array.from(g), n);
    // 4u (sigmoid) + u (multiply) relative; when sigmoid underflows (g ≲ −88, expf overflows to
    // inf) its absolute error is ≤ 2^-149, times |y|.
    const bound = yy0.map((v, i) => 5 * U * Math.abs(v * ref.sigmoid(g[i])) + Math.abs(v) * 2 ** -149 + SUB);
    expectWithin(yy, yy0.map((v, i) => v * ref.sigmoid(g[i])), bound, "mul_sigmoid");
  });

  test("SiTU-GLU at and below its caps, in place", () => {
    const g = randF32(r, n, -12, 12), u = randF32(r, n, -80, 80);
    g.set([1e4, -1e4, 40, -40, 0, 4, -4]);
    u.set([1e5, -1e5, 25, -25, 0, 1e5, -1e5]);
    const want = ref.situGlu(f64(g), f64(u), 4, 25);
    const out = Float32Array.from(g);
    k.k3_situ_glu(out, u, out, n, 4, 25); // out aliases g
    // 2 divisions, 2 tanhf (≤ 2 ulp each), sigmoid (4u), 4 multiplies: ≤ 14u relative, plus
    // the error of tanh/sigmoid amplified by their slope (≤ 1 for these forms) → 16u·|ref|.
    expectWithin(out, want, want.map((v) => 16 * U * Math.abs(v) + SUB), "situ");
    expect(out.every((v) => Math.abs(v) <= 100)).toBe(true);
  });

  test("argmax: ties go to the lowest index; any NaN or ±inf is refused, never ranked around", () => {
    expect(k.k3_argmax(new Float32Array([1, 3, 2, 3]), 4)).toBe(1);
    expect(k.k3_argmax(new Float32Array([-7, -5, -5]), 3)).toBe(1);
    expect(k.k3_argmax(new Float32Array([NaN, -5, -5]), 3)).toBe(K3_STATUS.nonfinite);
    expect(k.k3_argmax(new Float32Array([NaN, NaN]), 2)).toBe(K3_STATUS.nonfinite);
    expect(k.k3_argmax(new Float32Array([1, Infinity]), 2)).toBe(K3_STATUS.nonfinite);
    expect(k.k3_argmax(new Float32Array([-Infinity, -Infinity]), 2)).toBe(K3_STATUS.nonfinite);
    expect(k.k3_argmax(new Float32Array([1]), 0)).toBe(K3_STATUS.arg);
    const x = randF32(r, n);
    let best = 0;
    for (let i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    expect(k.k3_argmax(x, n)).toBe(best);
  });

  test("RMSNorm (bf16 and f32 weights, strided rows, in place): one f32 rounding", () => {
    const nn = 300, T = 3, ld = 320;
    const X = randF32(r, T * ld, -3, 3), wb = randBF16(r, nn), wf = randF32(r, nn, -2, 2);
    const Yb = new Float32Array(T * ld), Yf = Float32Array.from(X);
    k.k3_rmsnorm_bf16w(X, ld, wb, Yb, ld, nn, T, 1e-5);
    k.k3_rmsnorm_f32w(Yf, ld, wf, Yf, ld, nn, T, 1e-6); // y aliases x
    for (let t = 0; t < T; t++) {
      const x = f64(X.subarray(t * ld, t * ld + nn));
      const wantB = ref.rmsnorm(x, f64(bf16ToF32(wb)), 1e-5), wantF = ref.rmsnorm(x, f64(wf), 1e-6);
      // double statistics (error ~n·2^-53, negligible) then one rounding to f32: (u + 2^-45)·|ref|.
      const bound = (w: Float64Array) => w.map((v) => (U + 2 ** -45) * Math.abs(v) + SUB);
      expectWithin(Yb.subarray(t * ld, t * ld + nn), wantB, bound(wantB), `rmsnorm bf16w row ${t}`);
      expectWithin(Yf.subarray(t * ld, t * ld + nn), wantF, bound(wantF), `rmsnorm f32w row ${t}`);
    }
  });
});

describe("KDA kernels vs float64 reference", () => {
  const r = rng(31);
  test("short conv + SiLU keeps history across calls (T = 1, 3, 7 vs one call of 11)", () => {
    const C = 37, T = 11;
    const X = randF32(r, T * C, -2, 2), w = randF32(r, C * 4, -1, 1);
    const want = ref.shortConvSilu(
      Array.from({ length: T }, (_, t) => f64(X.subarray(t * C, (t + 1) * C))),
      f64(w), [0, 1, 2].map(() => new Float64Array(C)));
    const got = Float32Array.from(X);
    const hist = new Float32Array(3 * C);
    let t0 = 0;
    for (const Tc of [1, 3, 7]) {
      k.k3_kda_conv_silu(got.subarray(t0 * C), w, hist, C, Tc);
      t0 += Tc;
    }
    const one = Float32Array.from(X);
    k.k3_kda_conv_silu(one, w, new Float32Array(3 * C), C, T);
    expect(Array.from(one.subarray(0, 11 * C))).toEqual(Array.from(got.subarray(0, 11 * C)));
    // hist now holds the last three raw inputs
    expect(Array.from(hist.subarray(2 * C, 3 * C))).toEqual(Array.from(X.subarray(10 * C, 11 * C)));
    for (let t = 0; t < T; t++) {
      const wt = want[t];
      // conv: γ_5·Σ|w·x| on y; SiLU adds ≤ 6u relative and has slope ≤ 1.1
      const bound = wt.map((v, c) => {
        let s = 0;
        for (let j = 0; j < 4; j++) { const tt = t - 3 + j; if (tt >= 0) s += Math.abs(w[c * 4 + j] * X[tt * C + c]); }
        return 1.1 * gamma(5) * s + 6 * U * Math.abs(v) + SUB;
      });
      expectWithin(one.subarray(t * C, (t + 1) * C), wt, bound, `conv t${t}`);
    }
  });

  test("L2 norm per head (sum, not mean) and gate with A_log per head (H ≠ D, padded A_log)", () => {
    const H = 3, D = 5, T = 2;
    const X = randF32(r, T * H * D, -3, 3);
    const got = Float32Array.from(X);
    k.k3_l2norm_heads(got, H, D, T, 1e-6, D ** -0.5);
    for (let i = 0; i < T * H; i++) {
      const want = ref.l2normalize(f64(X.subarray(i * D, (i + 1) * D)), 1e-6).map((v) => v * D ** -0.5);
      expectWithin(got.subarray(i * D, (i + 1) * D), want, want.map((v) => 2 * U * Math.abs(v) + SUB), `l2 row ${i}`);
    }
    const f = randF32(r, T * H * D, -20, 20), dt = randF32(r, H * D, -1, 1);
    const aLog = Float32Array.from([0.5, -1, 2, 9, 9]); // entries ≥ H are padding and must be ignored
    const g = new Float32Array(T * H * D);
    k.k3_kda_gate(f, dt, aLog, g, H, D, T, -5);
    for (let t = 0; t < T; t++) {
      const want = ref.kdaGate(f64(f.subarray(t * H * D, (t + 1) * H * D)), f64(dt), f64(aLog), H, D, -5);
      // f+dt (u), expf(A) (1 ulp) times it (u): z within 3u·|z|; sigmoid slope·|z| ≤ 0.25·|z|…
      // bounded by 3u·|z|·s(1−s) ≤ 3u·s·|z|(1−s); plus sigmoid 4u and × lower (u): 8u·|g| + 3u·5·|z|s(1−s).
      const bound = want.map((v, i) => {
        const h = Math.floor(i / D) % H;
        const z = Math.exp(aLog[h]) * (f[t * H * D + i] + dt[i % (H * D)]);
        const s = ref.sigmoid(z);
        return 8 * U * Math.abs(v) + 3 * U * 5 * Math.abs(z) * s * (1 - s) + SUB;
      });
      expectWithin(g.subarray(t * H * D, (t + 1) * H * D), want, bound, `gate t${t}`);
    }
  });

  test("delta-rule recurrence: T = 7 tokens vs kdaStep, saturated gates", () => {
    const H = 3, D = 20, T = 7;
    const q = new Float32Array(T * H * D), kk = new Float32Array(T * H * D);
    for (let i = 0; i < T * H; i++) {
      q.set(ref.l2normalize(f64(randF32(r, D)), 1e-6).map((v) => v * D ** -0.5), i * D);
      kk.set(ref.l2normalize(f64(randF32(r, D)), 1e-6), i * D);
    }
    const v = randF32(r, T * H * D, -2, 2), g = randF32(r, T * H * D, -5, 0);
    g.set([-5, -5, -1e-7, 0], 0); // saturated decay, no decay
    const beta = randF32(r, T * H, 0, 1);
    beta[0] = 1;
    const S = new Float32Array(H * D * D), o = new Float32Array(T * H * D);
    expect(k.k3_kda_recurrent(q, kk, v, g, beta, S, o, H, D, T)).toBe(0);
    const S64 = new Float64Array(H * D * D);
    // ‖k‖ = 1, β ∈ [0,1], α ≤ 1 make each step non-expansive, so rounding errors add up rather
    // than grow: ≤ T·(3D + 6)·u·max|v| on every o and S entry (docs/NUMERICS.md §KDA).
    const bound = T * (3 * D + 6) * U * 2;
    for (let t = 0; t < T; t++) {
      const sl = (a: Float32Array, w: number) => f64(a.subarray(t * w, (t + 1) * w));
      const want = ref.kdaStep(S64, sl(q, H * D), sl(kk, H * D), sl(v, H * D), sl(g, H * D), sl(beta, H), H, D);
      expectWithin(o.subarray(t * H * D, (t + 1) * H * D), want, bound, `kda o t${t}`);
    }
    expectWithin(S, S64, bound, "kda S");
  });
});

describe("MLA, AttnRes, router vs float64 reference", () => {
  const r = rng(41);
  test("MLA absorbed attention over T = 1, 3, 7 tokens vs the non-absorbed reference", () => {
    const Hm = 3, dn = 8, dr = 4, dv = 6, R = 20, scale = (dn + dr) ** -0.5;
    for (const T of [1, 3, 7]) {
      const kvb = randBF16(r, Hm * (dn + dv) * R);
      const q = randF32(r, T * Hm * (dn + dr), -2, 2);
      const cache = randF32(r, T * (R + dr), -2, 2);
      const out = new Float32Array(T * Hm * dv);
      const scratch = new Float32Array(Number(k.k3_mla_scratch_floats(R, T)));
      expect(k.k3_mla_attend(q, kvb, cache, out, scratch, Hm, dn, dr, dv, R, 0, T, scale, T, scratch.length)).toBe(0);
      const kv64 = f64(bf16ToF32(kvb));
      const rows = (a: Float32Array, w: number, off: number, len: number) =>
        Array.from({ length: T }, (_, t) => f64(a.subarray(t * w + off, t * w + off + len)));
      const want = ref.mlaAttention(rows(q, Hm * (dn + dr), 0, Hm * (dn + dr)), rows(cache, R + dr, 0, R),
        rows(cache, R + dr, R, dr), kv64, Hm, dn, dr, dv, R, scale);
      // Bound (docs/NUMERICS.md §MLA): score error δs ≤ scale·γ_{dn+R+dr+2}·Σ|q_nope||kv||c| …,
      // softmax turns δs into ≤ 2δs relative weight error; out adds γ_{npos+R+2}·Σ|v||c|.
      const maxC = Math.max(...Array.from(cache, Math.abs)), maxQ = Math.max(...Array.from(q, Math.abs));
      for (let t = 0; t < T; t++)
        for (let h = 0; h < Hm; h++) {
          let qkAbs = 0;
          for (let j = 0; j < R; j++) for (let d = 0; d < dn; d++) qkAbs += Math.abs(kv64[(h * (dn + dv) + d) * R + j]) * maxQ * maxC;
          qkAbs += dr * maxQ * maxC;
          const ds = scale * gamma(dn + R + dr + 4) * qkAbs;
          for (let d = 0; d < dv; d++) {
            let vAbs = 0;
            for (let j = 0; j < R; j++) vAbs += Math.abs(kv64[(h * (dn + dv) + dn + d) * R + j]) * maxC;
            const b = (gamma(t + 1 + R + 4) + 4 * ds) * vAbs + SUB;
            const i = (t * Hm + h) * dv + d;
            expectWithin([out[i]], [want[t][h * dv + d]], b, `mla T${T} t${t} h${h} d${d}`);
          }
        }
    }
  });

  test("AttnRes mix of RAW sources, 0..8 bank entries, T = 3", () => {
    const E = 70, T = 3, eps = 1e-5;
    for (const n of [0, 1, 8]) {
      const bank = randF32(r, n * T * E, -3, 3), P = randF32(r, T * E, -3, 3);
      const proj = randBF16(r, E), norm = randBF16(r, E);
      const out = new Float32Array(T * E);
      k.k3_attnres_mix(bank, n, P, proj, norm, out, E, T, eps);
      for (let t = 0; t < T; t++) {
        const srcs = Array.from({ length: n }, (_, i) => f64(bank.subarray((i * T + t) * E, (i * T + t + 1) * E)));
        const want = ref.attnResMix(f64(P.subarray(t * E, (t + 1) * E)), srcs, f64(bf16ToF32(proj)), f64(bf16ToF32(norm)), eps);
        // all in double: one f32 rounding plus double error ~ (E·n)·2^-53 of the magnitudes.
        expectWithin(out.subarray(t * E, (t + 1) * E), want, want.map((v) => U * Math.abs(v) + 1e-12), `attnres n${n} t${t}`);
      }
    }
  });

  test("router top-k: unbiased weights, ties → lowest id, T = 3", () => {
    const N = 64, K = 8, T = 3;
    const logits = randF32(r, T * N, -4, 4), bias = randF32(r, N, -0.3, 0.3);
    // exact ties: experts 5, 9 and 40 identical in token 0 and above all others
    for (const e of [5, 9, 40]) { logits[e] = 6; bias[e] = 0.5; }
    const idx = new Int32Array(T * K), w = new Float32Array(T * K);
    k.k3_router_topk(logits, bias, N, K, T, 2.5, idx, w);
    for (let t = 0; t < T; t++) {
      const want = ref.routerTopK(f64(logits.subarray(t * N, (t + 1) * N)), f64(bias), K, 2.5);
      expect(Array.from(idx.subarray(t * K, (t + 1) * K))).toEqual(want.idx);
      // sigmoid ≤ 4u relative per s; the sum and ratio in double: ≤ 9u·|w|.
      expectWithin(w.subarray(t * K, (t + 1) * K), want.w, want.w.map((v) => 9 * U * Math.abs(v)), `router w t${t}`);
    }
    expect(Array.from(idx.subarray(0, 3))).toEqual([5, 9, 40]);
  });

  test("router refuses what it cannot rank: NaN logits, non-finite bias, N past K3_MAX_ROUTER_EXPERTS", () => {
    const N = 16, K = 4, T = 2;
    const run = (logits: Float32Array, bias: Float32Array, n = N) => {
      const idx = new Int32Array(T * K).fill(-9), w = new Float32Array(T * K).fill(-9);
      const status = k.k3_router_topk(logits, bias, n, K, T, 1, idx, w);
      return { status, untouched: idx.every((x) => x === -9) && w.every((x) => x === -9) };
    };
    const logits = randF32(r, T * N, -4, 4), bias = randF32(r, N, -0.3, 0.3);
    expect(run(logits, bias).status).toBe(K3_STATUS.ok);
    const nanLogit = Float32Array.from(logits);
    nanLogit[N + 3] = NaN; // second token only: refused before the first token is written
    expect(run(nanLogit, bias)).toEqual({ status: K3_STATUS.nonfinite, untouched: true });
    const infLogit = Float32Array.from(logits);
    infLogit[2] = Infinity; // sigmoid saturates to 1: a valid score
    expect(run(infLogit, bias).status).toBe(K3_STATUS.ok);
    for (const bad of [NaN, Infinity, -Infinity]) {
      const b = Float32Array.from(bias);
      b[5] = bad;
      expect(run(logits, b)).toEqual({ status: K3_STATUS.nonfinite, untouched: true });
    }
    const limits = kernelLimits(k);
    const big = limits.routerExperts + 1;
    expect(run(new Float32Array(T * big), new Float32Array(big), big)).toEqual({ status: K3_STATUS.arg, untouched: true });
  });

  test("AttnRes mix refuses more sources than K3_MAX_ATTNRES_SOURCES, writing nothing", () => {
    const E = 8, T = 1;
    const n = kernelLimits(k).attnResSources; // n snapshots + P = one too many
    const bank = new Float32Array(n * T * E).fill(1), P = new Float32Array(T * E).fill(1);
    const proj = new Uint16Array(E).fill(0x3f80), norm = new Uint16Array(E).fill(0x3f80);
    const out = new Float32Array(T * E).fill(-9);
    expect(k.k3_attnres_mix(bank, n, P, proj, norm, out, E, T, 1e-5)).toBe(K3_STATUS.arg);
    expect(out.every((x) => x === -9)).toBe(true);
    expect(k.k3_attnres_mix(bank, n - 1, P, proj, norm, out, E, T, 1e-5)).toBe(K3_STATUS.ok);
    expect(out.every((x) => x === 1)).toBe(true);
  });

  test("the limits come from k3.h through k3_limit; an unknown id is refused", () => {
    expect(kernelLimits(k)).toEqual({ routerExperts: 4096, attnResSources: 64, poolThreads: 64, ioThreads: 256, mxfp4Group: 32, kdaConvWidth: 4, kdaHeadDim: 1024, ropePairs: 128, ropeAngle: 1600000 });
    expect(k.k3_limit(99)).toBe(K3_STATUS.arg);
  });
});
