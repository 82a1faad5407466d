// Drafters propose tokens that one verify pass checks (docs/SPECULATION.md). A draft never
// changes what is generated, only how many tokens one pass over the weights yields: the target
// model decides every token (accept.ts: a draft is kept while it equals the token the target picks
// at its position, greedy or seeded).
//
// The interface is deliberately small so that a model drafter (EAGLE-style: a small head fed by
// the target's hidden states) can be added later without touching the engine's loop: it proposes
// its best guesses, and `observe` tells it which drafts survived. A draft is checked where it
// enters the engine (Speculator.propose): token ids of this vocabulary, at most `max` of them; an
// invalid one is refused before the session is touched. Drafters in this folder read no weights.

export interface DraftRequest {
  /** Every token of the sequence so far, oldest first: the session's history, then the token
   *  about to be fed (the last sampled one). The draft continues after the last of these. */
  readonly tokens: readonly number[];
  /** The most tokens the caller will verify (≥ 1). Fewer (or none) is always fine. */
  readonly max: number;
}

export interface Draft {
  /** Proposed continuation: at most `max` token ids of the model's vocabulary (integers in
   *  0..vocab − 1); empty = nothing worth verifying. */
  tokens: number[];
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
