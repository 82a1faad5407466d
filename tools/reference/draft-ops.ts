// Float64 ops of the EAGLE-3 draft (DRAFTERS.md §3.2–3.3): DeepSeek-YaRN frequencies and the
// softmax scale, interleaved-pair rotary, MLA attention over the draft's latent cache in the plain
// (up-projected) and the absorbed form, and the SiLU MLP. Pure functions, all float64, written from
// the spec; nothing from src/ (tools/reference is the engine's independent check).
import type { DraftConfig, YarnParams } from "./draft-config.ts";
import { matvec } from "./ops.ts";

type Vec = Float64Array;

/** yarn_get_mscale(s, m) = 0.1·m·ln s + 1 for s > 1, else 1. */
export function yarnMscale(s: number, m: number): number {
  return s <= 1 ? 1 : 0.1 * m * Math.log(s) + 1;
}

/** corr(β) = d·ln(L₀ / (2πβ)) / (2 ln θ): the (fractional) dim index whose rotation makes β turns over L₀ positions. */
export function yarnCorrection(d: number, theta: number, originalMax: number, beta: number): number {
  return (d * Math.log(originalMax / (2 * Math.PI * beta))) / (2 * Math.log(theta));
}

/** [lo, hi] of the YaRN ramp: lo = max(⌊corr(β_fast)⌋, 0), hi = min(⌈corr(β_slow)⌉, d−1); hi += 0.001 if equal. */
export function yarnRange(d: number, theta: number, y: YarnParams): { lo: number; hi: number } {
  const lo = Math.max(Math.floor(yarnCorrection(d, theta, y.originalMax, y.betaFast)), 0);
  let hi = Math.min(Math.ceil(yarnCorrection(d, theta, y.originalMax, y.betaSlow)), d - 1);
  if (lo === hi) hi += 0.001;
  return { lo, hi };
}

/**
 * Rotation frequencies ω_i, i = 0..d/2−1 (§3.3): plain ω_i = θ^(−2i/d); YaRN blends the
 * extrapolated θ^(−2i/d) and the interpolated θ^(−2i/d)/s by ramp_i = clamp((i−lo)/(hi−lo), 0, 1):
 * ω_i = ω_inter·ramp_i + ω_extra·(1 − ramp_i).
 */
export function ropeFrequencies(d: number, theta: number, yarn: YarnParams | undefined): Float64Array {
  const w = new Float64Array(d / 2);
  const range = yarn && yarnRange(d, theta, yarn);
  for (let i = 0; i < d / 2; i++) {
    const extra = theta ** ((-2 * i) / d);
    if (!yarn || !range) {
      w[i] = extra;
      continue;
    }
    const ramp = Math.min(1, Math.max(0, (i - range.lo) / (range.hi - range.lo)));
    w[i] = (extra / yarn.factor) * ramp + extra * (1 - ramp);
  }
  return w;
}

/** The cos/sin multiplier yarn_mscale(s, mscale) / yarn_mscale(s, mscale_all_dim) (1 for plain RoPE). */
export function ropeAmplitude(yarn: YarnParams | undefined): number {
  return yarn ? yarnMscale(yarn.factor, yarn.mscale) / yarnMscale(yarn.factor, yarn.mscaleAllDim) : 1;
}

/** Softmax scale τ = (dn + dr)^(−1/2) · yarn_mscale(s, mscale_all_dim)² (YaRN), else (dn + dr)^(−1/2). */
export function softmaxScale(cfg: Pick<DraftConfig, "dn" | "dr" | "yarn">): number {
  const m = cfg.yarn ? yarnMscale(cfg.yarn.factor, cfg.yarn.mscaleAllDim) : 1;
  return (m * m) / Math.sqrt(cfg.dn + cfg.dr);
}

/**
 * Interleaved-pair rotary at position `pos` (DeepSeek's non-NeoX convention, §3.3): pair
 * (x_{2i}, x_{2i+1}) rotates by φ_i = pos·ω_i, both outputs scaled by `amplitude`.
 */
export function ropeInterleaved(x: Vec, pos: number, w: Float64Array, amplitude: number): Vec {
  if (x.length !== 2 * w.length) throw new Error(`ropeInterleaved: ${x.length} values for ${w.length} pairs`);
  const y = new Float64Array(x.length);
  for (let i = 0; i < w.length; i++) {
    const c = Math.cos(pos * w[i]) * amplitude;
    const s = Math.sin(pos * w[i]) * amplitude;
    const a = x[2 * i], b = x[2 * i + 1];
    y[2 * i] = a * c - b * s;
    y[2 * i + 1] = b * c + a * s;
  }
  return y;
}

/** One row of the draft's latent cache: the normed latent c (r_kv) and the rotated shared key k_r (dr). */
export interface LatentRow {
  c: Vec;
  kr: Vec;
}

/**
 * MLA attention of one query over latent rows (§3.2.7). q: [n_h·(dn+dr)], per head
 * [q_nope | q_rope] with q_rope already rotated; kvB: [n_h·(dn+dv)][r_kv] (per head [W_uk | W_uv]).
 * `absorbed`: s_j = τ(q_latᵀc_j + q_r·k_r,j) with q_lat = W_ukᵀq_n and out = W_uv Σ α_j c_j;
 * plain: k_nope,j = W_uk c_j, v_j = W_uv c_j, s_j = τ(q_n·k_nope,j + q_r·k_r,j), out = Σ α_j v_j.
 * The two are equal in exact arithmetic. Returns [n_h·dv].
 */
export function mlaLatentAttention(q: Vec, rows: LatentRow[], kvB: Vec, cfg: DraftConfig, tau: number, absorbed: boolean): Vec {
  const { heads: nh, dn, dr, dv, kvRank: R } = cfg;
  const dq = dn + dr, dkv = dn + dv;
  if (kvB.length !== nh * dkv * R) throw new Error(`mlaLatentAttention: kv_b has ${kvB.length} values, want ${nh * dkv}×${R}`);
  const out = new Float64Array(nh * dv);
  const s = new Float64Array(rows.length);
  for (let h = 0; h < nh; h++) {
    const wuk = (i: number, r: number) => kvB[(h * dkv + i) * R + r]; // W_uk^h [dn][R]
    const wuv = (i: number, r: number) => kvB[(h * dkv + dn + i) * R + r]; // W_uv^h [dv][R]
    const qn = q.subarray(h * dq, h * dq + dn);
    const qr = q.subarray(h * dq + dn, (h + 1) * dq);
    let qlat: Vec | undefined;
    if (absorbed) {
      qlat = new Float64Array(R);
      for (let r = 0; r < R; r++) for (let i = 0; i < dn; i++) qlat[r] += wuk(i, r) * qn[i];
    }
    let max = -Infinity;
    rows.forEach((row, j) => {
      let dot = 0;
      if (qlat) for (let r = 0; r < R; r++) dot += qlat[r] * row.c[r];
      else
        for (let i = 0; i < dn; i++) {
          let k = 0;
          for (let r = 0; r < R; r++) k += wuk(i, r) * row.c[r];
          dot += qn[i] * k;
        }
      for (let i = 0; i < dr; i++) dot += qr[i] * row.kr[i];
      s[j] = tau * dot;
      if (s[j] > max) max = s[j];
    });
    let sum = 0;
    for (let j = 0; j < rows.length; j++) sum += s[j] = Math.exp(s[j] - max);
    if (absorbed) {
      const lat = new Float64Array(R); // Σ α_j c_j
      rows.forEach((row, j) => {
        for (let r = 0; r < R; r++) lat[r] += (s[j] / sum) * row.c[r];
      });
      for (let i = 0; i < dv; i++) {
        let acc = 0;
        for (let r = 0; r < R; r++) acc += wuv(i, r) * lat[r];
        out[h * dv + i] = acc;
      }
    } else {
      rows.forEach((row, j) => {
        for (let i = 0; i < dv; i++) {
          let v = 0;
          for (let r = 0; r < R; r++) v += wuv(i, r) * row.c[r];
          out[h * dv + i] += (s[j] / sum) * v;
        }
      });
    }
  }
  return out;
}

/** SiLU MLP: W_down(SiLU(W_gate z) ⊙ W_up z). gate/up: [I][H], down: [H][I]. */
export function siluMlp(z: Vec, gate: Vec, up: Vec, down: Vec, H: number, I: number): Vec {
  const g = matvec(gate, I, H, z);
  const u = matvec(up, I, H, z);
  const a = new Float64Array(I);
  for (let i = 0; i < I; i++) a[i] = (g[i] / (1 + Math.exp(-g[i]))) * u[i];
  return matvec(down, H, I, a);
}
