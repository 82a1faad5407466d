// The draft model as a Drafter (src/speculate/drafter.ts) for one session: a chain of k drafts
// after the session's pending token, from the draft's cache of that session (src/model/draft.ts).
// Under sampling each draft is the generation's own sampler applied to the draft's logits with the
// random number of its position (the sampling contract's uniformAt(seed, position)): where the
// draft's distribution is the target's, that is exactly the token the target draws, so exact-match
// verification keeps it — far more often than an argmax draft at temperature > 0 (docs/DRAFT.md).
// The speculator prices it before asking (each drafted token is one draft step: SpeculationCost's
// computeCost of the draft's weights), since drafting itself is the cost.
import type { DraftModel } from "../model/draft.ts";
import type { SessionState } from "../model/state.ts";
import type { Draft, DraftRequest, Drafter } from "../speculate/drafter.ts";

/** The lane and counters name of the model drafter (stats: `drafters.model`). */
export const MODEL_DRAFTER = "model";

export class ModelDrafter implements Drafter {
  readonly name = MODEL_DRAFTER;
  constructor(
    private readonly draft_: DraftModel,
    private readonly state: SessionState,
    /** How the generation picks a token from logits at a position (greedy, or its seeded sampler):
     *  the drafter picks its drafts the same way from the draft's logits (undefined: argmax). */
    private readonly pick?: (logits: Float32Array, position: number) => number,
  ) {}

  /** `tokens` = the session's history, then its one pending token (what the next pass feeds). */
  draft({ tokens, max }: DraftRequest): Draft {
    if (tokens.length !== this.state.pos + 1) return { tokens: [] }; // not exactly one pending token: nothing to chain from
    return { tokens: this.draft_.propose(this.state, tokens[tokens.length - 1]!, max, { pick: this.pick }).tokens };
  }
}
