// The draft's rotary embedding and attention scale, derived once from its config (DRAFTERS.md §3.3): plain RoPE
// (ω_i = θ^(−2i/d)) or DeepSeek-YaRN (low pairs keep ω, high pairs are divided by the factor, a
// linear ramp between), the cos/sin amplitude yarn_mscale(s, mscale)/yarn_mscale(s, mscale_all_dim)
// and the softmax scale (d_n + d_r)^(−1/2) · yarn_mscale(s, mscale_all_dim)². The frequencies are
// computed here in double once per engine and handed to k3_rope_interleaved, which forms the angles
// and their sine and cosine itself (the library's own, the same bits everywhere).
import type { DraftConfig } from "./draft-config.ts";

/** DeepSeek's yarn_get_mscale: 0.1·m·ln s + 1 for s > 1, else 1. */
export function yarnMscale(scale: number, m: number): number {
  return scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1;
}

/** The pair index where the rotations of a pair reach `rotations` over the original context. */
function correctionDim(rotations: number, dim: number, theta: number, originalMax: number): number {
  return (dim * Math.log(originalMax / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
}

/** ω_i for the rope dims of the draft, i < qk_rope_head_dim / 2. */
export function ropeFrequencies(d: Pick<DraftConfig, "qkRope" | "rope">): Float64Array {
  const dim = d.qkRope;
  const r = d.rope;
  const pairs = dim / 2;
  const extra = Float64Array.from({ length: pairs }, (_, i) => Math.pow(r.theta, -(2 * i) / dim));
  if (r.kind === "default") return extra;
  const lo = Math.max(Math.floor(correctionDim(r.betaFast, dim, r.theta, r.originalMax)), 0);
  let hi = Math.min(Math.ceil(correctionDim(r.betaSlow, dim, r.theta, r.originalMax)), dim - 1);
  if (lo === hi) hi += 0.001;
  return extra.map((w, i) => {
    const ramp = Math.min(1, Math.max(0, (i - lo) / (hi - lo)));
    return (w / r.factor) * ramp + w * (1 - ramp);
  });
}

/** The amplitude the cos/sin tables carry (1 for the release: mscale = mscale_all_dim). */
export function ropeAmplitude(d: Pick<DraftConfig, "rope">): number {
  const r = d.rope;
  return r.kind === "default" ? 1 : yarnMscale(r.factor, r.mscale) / yarnMscale(r.factor, r.mscaleAllDim);
}

/** The attention softmax scale τ (0.1308608 for the release). */
export function softmaxScale(d: Pick<DraftConfig, "qkNope" | "qkRope" | "rope">): number {
  const base = 1 / Math.sqrt(d.qkNope + d.qkRope);
  if (d.rope.kind === "default") return base;
  const m = yarnMscale(d.rope.factor, d.rope.mscaleAllDim);
  return base * m * m;
}
