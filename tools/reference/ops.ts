// Float64 reference ops for Kimi K3 (docs/MODEL.md §3–§4), written to be read, not to be fast.
//
// This file is the independent check of the engine: it imports NOTHING from src/ or kernels/.
// Every function is pure (no module state): inputs are never mutated except where a doc comment
// says so (kdaStep mutates its state S). All arithmetic is float64; weights arrive already
// decoded (bf16 / f32 / MXFP4 → float64 is exact, every stored value fits a double).
//
// Some ops take an optional trailing `wrong` argument. It exists only so tools/reference/model.ts
// can build the WRONG models described in MODEL.md §7 (traps); leave it undefined for the real math.

// ───────────────────────────── decoding ─────────────────────────────

/** One bf16 bit pattern (u16) → its exact value. bf16 = top 16 bits of an IEEE f32. */
export function bf16ToNumber(u16: number): number {
  const sign = u16 & 0x8000 ? -1 : 1;
  const exponent = (u16 >> 7) & 0xff; // 8 bits
  const mantissa = u16 & 0x7f; // 7 bits
  if (exponent === 0xff) return mantissa ? NaN : sign * Infinity;
  if (exponent === 0) return sign * mantissa * 2 ** -133; // subnormal: m·2^-7·2^-126
  return sign * (1 + mantissa / 128) * 2 ** (exponent - 127);
}

/** Little-endian bf16 bytes (2·n) → Float64Array(n). */
export function decodeBF16(bytes: Uint8Array): Float64Array {
  if (bytes.length % 2) throw new Error(`decodeBF16: ${bytes.length} bytes is not a multiple of 2`);
  const n = bytes.length / 2;
  // Widen each u16 to the f32 bit pattern u16<<16 and let the FPU read it (exact).
  const bits = new Uint32Array(n);
  for (let i = 0; i < n; i++) bits[i] = (bytes[2 * i] | (bytes[2 * i + 1] << 8)) << 16;
  return Float64Array.from(new Float32Array(bits.buffer));
}

/** Little-endian f32 bytes (4·n) → Float64Array(n). */
export function decodeF32(bytes: Uint8Array): Float64Array {
  if (bytes.length % 4) throw new Error(`decodeF32: ${bytes.length} bytes is not a multiple of 4`);
  const copy = bytes.slice(); // aligned private copy: `bytes` may start at any offset
  return Float64Array.from(new Float32Array(copy.buffer, 0, copy.length / 4));
}

/** E2M1 magnitudes by the low 3 bits of a nibble; bit 3 is the sign (8 = −0). */
export const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6] as const;

/** Trap switches for decodeMXFP4 (MODEL.md §7.6); undefined = the real format. */
export interface MXFP4Wrong {
  nibbleSwap?: boolean; // element 2j taken from the HIGH nibble
  nanNotZeroed?: boolean; // scale byte 255 read as 2^128 instead of "group contributes 0"
}

/**
 * MXFP4 (group 32) → dense W, Float64Array(rows·cols), row-major [rows][cols].
 * packed: U8 [rows][cols/2]; element 2j = LOW nibble (b & 15), element 2j+1 = high nibble (b >> 4).
 * scales: U8 [rows][cols/32], E8M0: scale = 2^(s−127); s = 255 (NaN in OCP) → the group is 0.
 * W[r][c] = E2M1[nibble(r,c)] · 2^(scales[r][c/32] − 127).
 */
export function decodeMXFP4(
  packed: Uint8Array,
  scales: Uint8Array,
  rows: number,
  cols: number,
  wrong?: MXFP4Wrong,
): Float64Array {
  if (cols % 32) throw new Error(`decodeMXFP4: cols ${cols} is not a multiple of 32`);
  if (packed.length !== (rows * cols) / 2)
    throw new Error(`decodeMXFP4: packed has ${packed.length} bytes, want ${rows}×${cols / 2}`);
  if (scales.length !== (rows * cols) / 32)
    throw new Error(`decodeMXFP4: scales has ${scales.length} bytes, want ${rows}×${cols / 32}`);
  const W = new Float64Array(rows * cols); // [rows][cols]
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const b = packed[(r * cols + c) >> 1];
      const lowFirst = !wrong?.nibbleSwap;
      const nib = (c & 1) === (lowFirst ? 0 : 1) ? b & 15 : b >> 4;
      const s = scales[(r * cols + c) >> 5]; // row r, group c/32 (cols/32 groups per row)
      const scale = s === 255 && !wrong?.nanNotZeroed ? 0 : 2 ** (s - 127);
      W[r * cols + c] = (nib & 8 ? -1 : 1) * E2M1[nib & 7] * scale;
    }
  }
  return W;
}

// ───────────────────────────── linear algebra ─────────────────────────────

/** y = W·x. W: [rows][cols] row-major, x: [cols] → y: [rows]. */
export function matvec(W: Float64Array, rows: number, cols: number, x: Float64Array): Float64Array {
  if (W.length !== rows * cols) throw new Error(`matvec: W has ${W.length} values, want ${rows}×${cols}`);
  if (x.length !== cols) throw new Error(`matvec: x has ${x.length} values, want ${cols}`);
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let acc = 0;
    const base = r * cols;
    for (let c = 0; c < cols; c++) acc += W[base + c] * x[c];
    y[r] = acc;
  }
  return y;
}

/** RMSNorm_w(x) = w · x / sqrt(mean(x²) + eps) (eps inside the root). x, w: [n]. */
export function rmsnorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  if (w.length !== x.length) throw new Error(`rmsnorm: w has ${w.length} values, x has ${x.length}`);
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i] * x[i];
  const inv = 1 / Math.sqrt(ss / x.length + eps);
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = w[i] * x[i] * inv;
  return y;
}

/** x / sqrt(Σ x² + eps) — a SUM of squares (KDA q/k, MODEL.md §4 KDA.3). */
export function l2normalize(x: Float64Array, eps: number): Float64Array {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i] * x[i];
  const inv = 1 / Math.sqrt(ss + eps);
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = x[i] * inv;
  return y;
}

export function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
}

export function silu(x: number): number {
  return x * sigmoid(x);
}

/**
 * SiTU-GLU: a = β1·tanh(g/β1)·sigmoid(g); u' = β2·tanh(u/β2); out = a·u'.
 * sigmoid takes the UNCAPPED g; |out| ≤ β1·β2. g, u: [n] → [n].
 */
export function situGlu(g: Float64Array, u: Float64Array, b1: number, b2: number): Float64Array {
  if (g.length !== u.length) throw new Error(`situGlu: g has ${g.length} values, u has ${u.length}`);
  const out = new Float64Array(g.length);
  for (let i = 0; i < g.length; i++) {
    const a = b1 * Math.tanh(g[i] / b1) * sigmoid(g[i]);
    out[i] = a * (b2 * Math.tanh(u[i] / b2));
  }
  return out;
}

// ───────────────────────────── KDA ─────────────────────────────

/**
 * Depthwise causal short conv of width K = hist.length + 1, no bias, then SiLU (MODEL.md §4 KDA.2):
 *   y_t[c] = silu( Σ_{j=0..K-1} w[c][j] · x_{t−(K−1)+j}[c] )   (tap K−1 multiplies the current token)
 * xs: T vectors [C]; w: [C][K] row-major (the checkpoint's [C,1,K]); hist: K−1 vectors [C], oldest
 * first (zero vectors at sequence start). Returns T outputs [C]; inputs are not mutated.
 */
export function shortConvSilu(xs: Float64Array[], w: Float64Array, hist: Float64Array[]): Float64Array[] {
  const K = hist.length + 1;
  const C = w.length / K;
  if (!Number.isInteger(C)) throw new Error(`shortConvSilu: w has ${w.length} values, not C×${K}`);
  const window = [...hist, ...xs]; // window[t + j] is x_{t−(K−1)+j}
  return xs.map((_, t) => {
    const y = new Float64Array(C);
    for (let c = 0; c < C; c++) {
      let acc = 0;
      for (let j = 0; j < K; j++) acc += w[c * K + j] * window[t + j][c];
      y[c] = silu(acc);
    }
    return y;
  });
}

/**
 * KDA forget gate (MODEL.md §4 KDA.4), in log space:
 *   g[h,d] = lower · sigmoid(exp(A_log[h]) · (f[h,d] + dt_bias[h,d]))  ∈ (lower, 0); α = exp(g).
 * A_log is indexed PER HEAD (only its first H entries are used). f, dtBias: [H·D] head-major.
 * wrong.perChannel (trap §7.1) indexes A_log by the channel d instead.
 */
export function kdaGate(
  f: Float64Array,
  dtBias: Float64Array,
  aLog: Float64Array,
  H: number,
  D: number,
  lower: number,
  wrong?: { perChannel?: boolean },
): Float64Array {
  const g = new Float64Array(H * D); // [H][D]
  for (let h = 0; h < H; h++) {
    for (let d = 0; d < D; d++) {
      const a = Math.exp(aLog[wrong?.perChannel ? d : h]);
      g[h * D + d] = lower * sigmoid(a * (f[h * D + d] + dtBias[h * D + d]));
    }
  }
  return g;
}

/**
 * One KDA recurrence step for one token (MODEL.md §4 KDA.6). MUTATES S.
 * S: [H][D][D] (S[h][i][j], i = key dim, j = value dim); q, k, v, g: [H·D]; beta: [H].
 * q, k already l2-normalised and q already scaled by D^−0.5. Per head, in this order:
 *   S ← diag(exp(g)) S;  u = Sᵀ k;  S ← S + k ⊗ (β (v − u));  o = Sᵀ q  (UPDATED state).
 * Returns o: [H·D]. wrong.readBeforeUpdate (trap §7.5) reads o from the state before this step.
 */
export function kdaStep(
  S: Float64Array,
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  g: Float64Array,
  beta: Float64Array,
  H: number,
  D: number,
  wrong?: { readBeforeUpdate?: boolean },
): Float64Array {
  const o = new Float64Array(H * D);
  const u = new Float64Array(D);
  for (let h = 0; h < H; h++) {
    const s0 = h * D * D; // S[h] base
    const hd = h * D; // q/k/v/g[h] base
    const readOut = () => {
      for (let j = 0; j < D; j++) {
        let acc = 0; // o[j] = Σ_i S[i][j] q[i]
        for (let i = 0; i < D; i++) acc += S[s0 + i * D + j] * q[hd + i];
        o[hd + j] = acc;
      }
    };
    if (wrong?.readBeforeUpdate) readOut();
    // S ← diag(α) S: row i scaled by α[i] = exp(g[i])
    for (let i = 0; i < D; i++) {
      const alpha = Math.exp(g[hd + i]);
      for (let j = 0; j < D; j++) S[s0 + i * D + j] *= alpha;
    }
    // u = Sᵀ k: u[j] = Σ_i S[i][j] k[i]
    for (let j = 0; j < D; j++) {
      let acc = 0;
      for (let i = 0; i < D; i++) acc += S[s0 + i * D + j] * k[hd + i];
      u[j] = acc;
    }
    // S ← S + k ⊗ (β (v − u)): S[i][j] += k[i] · β (v[j] − u[j])
    for (let i = 0; i < D; i++) {
      const ki = k[hd + i];
      for (let j = 0; j < D; j++) S[s0 + i * D + j] += ki * beta[h] * (v[hd + j] - u[j]);
    }
    if (!wrong?.readBeforeUpdate) readOut();
  }
  return o;
}

// ───────────────────────────── MLA ─────────────────────────────

/**
 * Causal multi-head attention of MLA in its non-absorbed form (MODEL.md §4 MLA.2–4).
 * Per position s: kv_s = kvB · ckv_s → per head [dn k_nope | dv v]; key_s,h = [k_nope | kr_s]
 * (kr shared by all heads); query_p,h = q_p[h] = [q_nope | q_r].
 *   score(p,s,h) = scale · (q_nope·k_nope + q_r·kr_s), s ≤ p;  out_p,h = Σ_s softmax_s · v_s,h.
 * q: T × [Hm·(dn+dr)]; ckv: T × [R] (already normed); kr: T × [dr]; kvB: [Hm·(dn+dv)][R].
 * Returns T × [Hm·dv].
 */
export function mlaAttention(
  q: Float64Array[],
  ckv: Float64Array[],
  kr: Float64Array[],
  kvB: Float64Array,
  Hm: number,
  dn: number,
  dr: number,
  dv: number,
  R: number,
  scale: number,
): Float64Array[] {
  const T = q.length;
  const dq = dn + dr; // query/key width per head
  const kv = ckv.map((c) => matvec(kvB, Hm * (dn + dv), R, c)); // T × [Hm][dn+dv]
  const out: Float64Array[] = [];
  const scores = new Float64Array(T);
  for (let p = 0; p < T; p++) {
    const o = new Float64Array(Hm * dv);
    for (let h = 0; h < Hm; h++) {
      let max = -Infinity;
      for (let s = 0; s <= p; s++) {
        let dot = 0;
        for (let d = 0; d < dn; d++) dot += q[p][h * dq + d] * kv[s][h * (dn + dv) + d];
        for (let d = 0; d < dr; d++) dot += q[p][h * dq + dn + d] * kr[s][d];
        scores[s] = dot * scale;
        if (scores[s] > max) max = scores[s];
      }
      let sum = 0;
      for (let s = 0; s <= p; s++) sum += scores[s] = Math.exp(scores[s] - max);
      for (let s = 0; s <= p; s++) {
        const ps = scores[s] / sum;
        for (let d = 0; d < dv; d++) o[h * dv + d] += ps * kv[s][h * (dn + dv) + dn + d];
      }
    }
    out.push(o);
  }
  return out;
}

// ───────────────────────────── AttnRes ─────────────────────────────

/**
 * AttnRes mix (MODEL.md §4): sources V = [bank_0 … bank_{n−1}, P];
 *   score_i = Σ_d (V_i[d] / sqrt(mean(V_i²) + eps)) · norm[d] · proj[d];  p = softmax(score);
 *   return Σ_i p_i · V_i   (the RAW sources; no score scaling).
 * P, bank[i], norm: [E]; proj: [E] (the checkpoint's [1, E]).
 * wrong.normedSources (trap §7.7) returns Σ p_i · RMSNorm(V_i, norm) instead.
 */
export function attnResMix(
  P: Float64Array,
  bank: Float64Array[],
  proj: Float64Array,
  norm: Float64Array,
  eps: number,
  wrong?: { normedSources?: boolean },
): Float64Array {
  const V = [...bank, P];
  const normed = V.map((v) => rmsnorm(v, norm, eps)); // = v/rms · norm.w
  const score = normed.map((nv) => {
    let acc = 0;
    for (let d = 0; d < nv.length; d++) acc += nv[d] * proj[d];
    return acc;
  });
  const max = Math.max(...score);
  const e = score.map((s) => Math.exp(s - max));
  const sum = e.reduce((a, b) => a + b, 0);
  const src = wrong?.normedSources ? normed : V;
  const out = new Float64Array(P.length);
  for (let i = 0; i < V.length; i++) {
    const p = e[i] / sum;
    for (let d = 0; d < out.length; d++) out[d] += p * src[i][d];
  }
  return out;
}

// ───────────────────────────── router ─────────────────────────────

/**
 * Sigmoid router with selection bias (MODEL.md §4 Router):
 *   s = sigmoid(logits); choice = s + bias; idx = top-k of choice (descending, ties → lowest id);
 *   w = s[idx] (UNBIASED); w /= (Σw + 1e-20); w ·= scaling.
 * logits, bias: [numExperts]. wrong.biasInWeights (trap §7.2) takes w = choice[idx].
 */
export function routerTopK(
  logits: Float64Array,
  bias: Float64Array,
  k: number,
  scaling: number,
  wrong?: { biasInWeights?: boolean },
): { idx: number[]; w: number[] } {
  const n = logits.length;
  const s = Array.from(logits, sigmoid);
  const choice = s.map((v, e) => v + bias[e]);
  // Stable order: larger choice first, equal choice → lower expert id first.
  const order = Array.from({ length: n }, (_, e) => e).sort((a, b) => choice[b] - choice[a] || a - b);
  const idx = order.slice(0, k);
  const raw = idx.map((e) => (wrong?.biasInWeights ? choice[e] : s[e]));
  const total = raw.reduce((a, b) => a + b, 0) + 1e-20;
  return { idx, w: raw.map((v) => (v / total) * scaling) };
}
