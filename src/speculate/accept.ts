// Which drafted tokens a verify pass keeps (docs/SPECULATION.md §accept).
//
// A verify pass over [x, d_1 … d_k] gives logits rows 0..k: row i is the target model's
// prediction after x, d_1 … d_i. Walking the rows in order:
//   - greedy: keep d_{i+1} while it equals argmax(row i) — the engine's own argmax, so the kept
//     tokens are exactly what plain greedy decoding would produce; the first mismatch yields the
//     argmax instead (the correction); if all k are kept, argmax(row k) is a bonus token.
//   - sampling (Leviathan et al. 2023, Chen et al. 2023): with p = the sampler's filtered
//     distribution for row i and q the drafter's, keep d with probability min(1, p(d)/q(d));
//     otherwise draw from max(0, p − q) renormalised and stop. For a deterministic drafter q is
//     one-hot: keep d with probability p(d), else draw from p with d removed, renormalised.
//     Every emitted token is then distributed exactly as plain sampling from p would give it
//     (test/speculate-accept.test.ts checks joint distributions of several tokens). The ids
//     differ from plain sampling with the same seed: the PRNG is consumed differently.
// A pass therefore always yields at least one token (accepted drafts + one from the target).
import type { SamplerDistribution } from "../text/sampling.ts";
import { drawFrom } from "../text/sampling.ts";
import type { Draft } from "./drafter.ts";

export type TargetRule = { kind: "greedy"; argmax: (logits: Float32Array) => number } | { kind: "sample"; distribution: SamplerDistribution };

export interface Verdict {
  /** Decided tokens in order: the accepted drafts, then one token from the target (correction or bonus). */
  tokens: number[];
  /** Drafts accepted (= tokens.length − 1). */
  accepted: number;
}

/**
 * Decide the tokens of one verify pass. `row(i)` returns the logits after the first i drafts
 * (i = 0..k); it is called in increasing i, at most once each, and only as far as needed.
 */
export function verifyDrafts(row: (i: number) => Float32Array, draft: Draft, rule: TargetRule): Verdict {
  const d = draft.tokens;
  const k = d.length;
  const out: number[] = [];
  for (let i = 0; i < k; i++) {
    const logits = row(i);
    if (rule.kind === "greedy") {
      const t = rule.argmax(logits);
      out.push(t);
      if (t !== d[i]) return { tokens: out, accepted: i };
      continue;
    }
    const w = rule.distribution.weights(logits);
    const q = draft.q?.[i];
    const kept = q ? acceptGeneral(w, q, d[i]!, rule.distribution) : acceptOneHot(w, d[i]!, rule.distribution);
    if (kept < 0) {
      out.push(d[i]!);
      continue;
    }
    out.push(kept);
    return { tokens: out, accepted: i };
  }
  const last = row(k);
  out.push(rule.kind === "greedy" ? rule.argmax(last) : drawFrom(rule.distribution.weights(last), rule.distribution.uniform()));
  return { tokens: out, accepted: k };
}

/**
 * Deterministic draft x (q one-hot): keep x with probability p(x) = w[x] / Σw → returns −1;
 * else returns a draw from w with x removed (p without x, renormalised). Modifies w.
 */
export function acceptOneHot(w: Float64Array, x: number, dist: SamplerDistribution): number {
  const wx = w[x] ?? 0;
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  // wx === total: x is the only possible token (u·total may round up to total when u ≈ 1).
  if (dist.uniform() * total < wx || wx === total) return -1;
  w[x] = 0;
  return drawFrom(w, dist.uniform());
}

/**
 * Sampled draft x with drafter distribution q (normalised): keep x with probability
 * min(1, p(x)/q(x)) → −1; else a draw from max(0, p − q) renormalised. Modifies w.
 */
export function acceptGeneral(w: Float64Array, q: Float64Array, x: number, dist: SamplerDistribution): number {
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  const px = (w[x] ?? 0) / total;
  const qx = q[x] ?? 0;
  if (qx <= 0 || dist.uniform() * qx < px) return -1; // q(x) = 0 cannot be drafted by a sampler; keep it exact anyway: p/q = ∞
  let rest = 0;
  for (let i = 0; i < w.length; i++) {
    const r = w[i]! / total - (q[i] ?? 0);
    w[i] = r > 0 ? r : 0;
    rest += w[i]!;
  }
  // p ≤ q everywhere only when p = q up to rounding: then p(x)/q(x) ≈ 1 and a rejection is a
  // rounding artefact of probability ~1e-16; draw from q (= p up to rounding).
  if (rest === 0) {
    for (let i = 0; i < w.length; i++) w[i] = (q[i] ?? 0);
  }
  return drawFrom(w, dist.uniform());
}
