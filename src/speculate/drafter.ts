// Drafters propose tokens that one verify pass checks (docs/SPECULATION.md). A draft never
// changes what is generated, only how many tokens one pass over the weights yields: the target
// model decides every token (greedy: the draft is kept while it equals the argmax; sampling: the
// accept/resample rule of accept.ts keeps the output distribution exact).
//
// The interface is deliberately small so that a model drafter (EAGLE-style: a small head fed by
// the target's hidden states) can be added later without touching the engine's loop: such a
// drafter returns its own distribution for each drafted token in `q`, and `observe` tells it
// which drafts survived. Drafters in this folder read no weights.

export interface DraftRequest {
  /** Every token of the sequence so far, oldest first: the session's history, then the token
   *  about to be fed (the last sampled one). The draft continues after the last of these. */
  readonly tokens: readonly number[];
  /** The most tokens the caller will verify (≥ 1). Fewer (or none) is always fine. */
  readonly max: number;
}

export interface Draft {
  /** Proposed continuation, at most `max` tokens; empty = nothing worth verifying. */
  tokens: number[];
  /**
   * The drafter's distribution q for each proposed token (probabilities over the vocabulary,
   * summing to 1), for drafters that sample. Absent for deterministic drafters: q is then
   * one-hot on the proposed token, and the accept rule reduces to "accept x with probability
   * p(x)" (accept.ts).
   */
  q?: Float64Array[];
}

export interface Drafter {
  /** Short name for stats and logs ("ngram"). */
  readonly name: string;
  draft(req: DraftRequest): Draft;
  /** After verification: how many of the `drafted` tokens were accepted (optional feedback). */
  observe?(drafted: number, accepted: number): void;
}

/** The drafter that never proposes anything (speculation off). */
export const NO_DRAFTER: Drafter = { name: "off", draft: () => ({ tokens: [] }) };
