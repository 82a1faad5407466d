// Which drafted tokens a verify pass keeps (docs/SPECULATION.md §4): exact match.
//
// A verify pass over [x, d_1 … d_k] gives logits rows 0..k: row i is the target model's
// prediction after x, d_1 … d_i, bit for bit the logits plain decoding computes there. Walking the
// rows in order, `pick(i)` is the token the target picks from row i — greedy's argmax, or the
// sampler's draw with that position's random number (src/text/sampling.ts: a pure function of the
// logits and the position) — and d_{i+1} is kept while it equals that token; the first mismatch
// emits the target's token instead (the correction); if all k are kept, pick(k) is a bonus token.
// Every emitted token is therefore the token plain decoding emits at its position: greedy and
// seeded output are identical with speculation on or off, whatever the drafter, the draft length
// or the cost model chose. For a deterministic draft this keeps d with probability p(d), as the
// accept/resample rule of Leviathan et al. (2023) does for a one-hot q: nothing is lost in
// acceptance (docs/SPECULATION.md measures it on the demo model).
// A pass therefore always yields at least one token (accepted drafts + one from the target).
import type { Draft } from "./drafter.ts";

export interface Verdict {
  /** Decided tokens in order: the accepted drafts, then one token from the target (correction or bonus). */
  tokens: number[];
  /** Drafts accepted (= tokens.length − 1). */
  accepted: number;
}

/**
 * Decide the tokens of one verify pass. `pick(i)` returns the target's token from the logits after
 * the first i drafts (i = 0..k); it is called in increasing i, at most once each, and only as far
 * as needed — so exactly once per emitted token, as plain decoding would call its sampler.
 */
export function verifyDrafts(pick: (i: number) => number, draft: Draft): Verdict {
  const d = draft.tokens;
  const out: number[] = [];
  for (let i = 0; i <= d.length; i++) {
    const t = pick(i);
    out.push(t);
    if (i === d.length || t !== d[i]) return { tokens: out, accepted: i };
  }
  throw new Error("unreachable: the loop returns at i = k");
}
