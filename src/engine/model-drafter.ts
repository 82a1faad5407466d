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
import { drawDraft, type RejectionSampler } from "../speculate/reject.ts";

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
    /** The opt-in rejection rule's sampler: drafts are then drawn from q (the sampler's filtered
     *  distribution of the draft's logits) and q goes with them (src/speculate/reject.ts). */
    private readonly rejection?: RejectionSampler,
  ) {}

  /** `tokens` = the session's history, then its one pending token (what the next pass feeds). */
  draft({ tokens, max }: DraftRequest): Draft & { q?: Float64Array[] } {
    if (tokens.length !== this.state.pos + 1) return { tokens: [] }; // not exactly one pending token: nothing to chain from
    const token = tokens[tokens.length - 1]!;
    const r = this.rejection;
    if (!r) return { tokens: this.draft_.propose(this.state, token, max, { pick: this.pick }).tokens };
    const q: Float64Array[] = [];
    const pick = (logits: Float32Array, position: number) => {
      const d = drawDraft(r, logits, position);
      q.push(d.q);
      return d.token;
    };
    const p = this.draft_.propose(this.state, token, max, { pick });
    return { tokens: p.tokens, q: q.slice(0, p.tokens.length) };
  }
}
