// The opt-in rejection rule of speculative sampling (Leviathan et al. 2023, Chen et al. 2023;
// docs/SPECULATION.md §4b, `--accept-rule rejection`): with p the sampler's filtered distribution
// of a verify row and q the drafter's for the draft d at that position, keep d with probability
// min(1, p(d)/q(d)); otherwise draw from max(0, p − q) renormalised and stop. For a deterministic
// drafter (the n-gram's: q one-hot) keep d with probability p(d), else draw from p without d. If
// every draft is kept, the bonus token is the sampler's own pick of the last row.
//
// Every emitted token then has exactly plain sampling's distribution (proven statistically on
// small distributions: test/speculate-reject.test.ts), and the draft is kept far more often than
// by exact match when the draft's q is close to p but their inverse CDFs do not line up (measured
// on the demo: docs/DRAFT.md). What it gives up: seeded output is no longer the non-speculative
// output (its random numbers are drawn from other streams of the seed, and how many depends on
// the drafts), so it is never the default; a run is still reproducible for the same seed, drafter
// and draft lengths.
import type { Verdict } from "./accept.ts";

/** What the rule needs of the sampler (src/text/sampling.ts createSampler provides both). */
export interface RejectionSampler {
  sample(logits: Float32Array, position: number): number;
  weights(logits: Float32Array): Float64Array;
  uniform(position: number, stream: number): number;
}

/** Streams of the sampler's seed the rule draws from (the drafter's draw of d is stream DRAFT). */
export const STREAM = { draft: 1, accept: 2, residual: 3 } as const;

/**
 * The tokens of one verify pass under the rejection rule. `row(i)` gives the logits after the first
 * i drafts (called in increasing i, only as far as needed); `positions[i]` is the position row i
 * predicts; `q[i]` the drafter's normalised distribution of draft i (absent: a deterministic draft).
 */
export function rejectDrafts(row: (i: number) => Float32Array, draft: { tokens: number[]; q?: Float64Array[] }, s: RejectionSampler, position: (i: number) => number): Verdict {
  const d = draft.tokens;
  const out: number[] = [];
  for (let i = 0; i < d.length; i++) {
    const pos = position(i);
    const w = s.weights(row(i));
    const q = draft.q?.[i];
    const kept = q ? acceptGeneral(w, q, d[i]!, s.uniform(pos, STREAM.accept), s.uniform(pos, STREAM.residual)) : acceptOneHot(w, d[i]!, s.uniform(pos, STREAM.accept), s.uniform(pos, STREAM.residual));
    if (kept < 0) {
      out.push(d[i]!);
      continue;
    }
    out.push(kept);
    return { tokens: out, accepted: i };
  }
  out.push(s.sample(row(d.length), position(d.length)));
  return { tokens: out, accepted: d.length };
}

/** Draw from unnormalised weights with u ∈ [0, 1): ascending ids, the first whose running sum exceeds u × total. */
function draw(w: Float64Array, u01: number): number {
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  const u = u01 * total;
  let acc = 0;
  let last = -1;
  for (let i = 0; i < w.length; i++) {
    if (w[i] === 0) continue;
    acc += w[i]!;
    last = i;
    if (acc > u) return i;
  }
  return last;
}

/** q one-hot on x: keep x with probability p(x) (→ −1); else a draw from p without x. Modifies w. */
export function acceptOneHot(w: Float64Array, x: number, uAccept: number, uResidual: number): number {
  const wx = w[x] ?? 0;
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  // wx === total: x is the only possible token (u·total may round up to total when u ≈ 1).
  if (uAccept * total < wx || wx === total) return -1;
  w[x] = 0;
  return draw(w, uResidual);
}

/** x drawn from q (normalised): keep it with probability min(1, p(x)/q(x)) (→ −1); else a draw from max(0, p − q) renormalised. Modifies w. */
export function acceptGeneral(w: Float64Array, q: Float64Array, x: number, uAccept: number, uResidual: number): number {
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  const px = (w[x] ?? 0) / total;
  const qx = q[x] ?? 0;
  if (qx <= 0 || uAccept * qx < px) return -1; // q(x) = 0 cannot be drawn from q; keep it exact anyway: p/q = ∞
  let rest = 0;
  for (let i = 0; i < w.length; i++) {
    const r = w[i]! / total - (q[i] ?? 0);
    w[i] = r > 0 ? r : 0;
    rest += w[i]!;
  }
  // p ≤ q everywhere only when p = q up to rounding: a rejection is then a rounding artefact of
  // probability ~1e-16; draw from q (= p up to rounding).
  if (rest === 0) for (let i = 0; i < w.length; i++) w[i] = q[i] ?? 0;
  return draw(w, uResidual);
}

/** The drafter's side: draft d from q = the sampler's filtered distribution of the draft's logits,
 *  with the draft stream's random number of its position; returns d and q normalised. */
export function drawDraft(s: RejectionSampler, draftLogits: Float32Array, position: number): { token: number; q: Float64Array } {
  const q = s.weights(draftLogits);
  let total = 0;
  for (let i = 0; i < q.length; i++) total += q[i]!;
  for (let i = 0; i < q.length; i++) q[i] = q[i]! / total;
  return { token: draw(q, s.uniform(position, STREAM.draft)), q };
}
