// One speculative step as one owned object (docs/SPECULATION.md §2–4): the drafts, checked where
// they enter (ids of this vocabulary, at most the room the engine has: never one outside it in
// the session), the verify pass over [pending, d_1 … d_k], the verdict (exact match against the
// token the target picks at each position: accept.ts), and the accepted prefix, which the session
// takes one token at a time (Model.keep) just before the token after it is emitted — so wherever
// the caller stops iterating, the session holds exactly the tokens emitted, as plain decoding
// would leave it. The rollback itself (what keep re-applies) is src/model/rollback.ts.
//
// A step belongs to one session: everything it holds is that session's (its pass's rows, its
// verdict, how far it has been kept), so several sessions' steps share one batched pass (issue 27:
// the scheduler verifies a prefix of each session's drafts — the step's verdict is over those —
// and each session's records sit in a rollback slot of its own until it releases it).
import { verifyDrafts } from "../speculate/accept.ts";
import { rejectDrafts, type RejectionSampler } from "../speculate/reject.ts";
import { checkDraft, type Proposal } from "../speculate/speculator.ts";
import type { Ticket } from "../batch/scheduler.ts";
import type { TokenEvent } from "../engine.ts";
import type { WeightStats } from "../model/weights.ts";
import type { Passes } from "./passes.ts";
import type { Session } from "./session.ts";

export class VerifyStep {
  /** Tokens the pass decided, in order: the accepted drafts, then the target's correction or bonus. */
  readonly decided: number[];
  readonly accepted: number;
  private given = 0;

  private constructor(
    private readonly p: Passes,
    private readonly session: Session,
    readonly draft: Proposal,
    /** Position of the pass's first row (the pending token's). */
    readonly pos0: number,
    verdict: { tokens: number[]; accepted: number },
  ) {
    this.decided = verdict.tokens;
    this.accepted = verdict.accepted;
  }

  /**
   * Run the verify pass for `draft` after the session's pending token (direct, or batched as a
   * verify ticket, whose step may verify only a prefix of the drafts: `draft` is then that prefix)
   * and decide its tokens. Exact match (the default): `pick(row, i, position)` is the target's own
   * choice from the logits row that predicts `position` (greedy or the seeded sampler: the same
   * call plain decoding makes there). With `rejection`, the opt-in rule of
   * src/speculate/reject.ts decides instead (`pick` still checks each row it uses).
   */
  static *run(
    p: Passes,
    session: Session,
    draft: Proposal,
    pick: (logits: Float32Array, i: number, position: number) => number,
    batched: boolean,
    acc: { io: WeightStats },
    rejection?: RejectionSampler,
  ): Generator<TokenEvent, VerifyStep> {
    const offered = checkDraft(draft, p.model.drafts, p.model.cfg.vocab, draft.by ?? "drafter");
    const pos0 = session.position;
    const { rows, verified, ticket } = yield* p.verifyPass(session, { tokens: offered.tokens, acceptance: draft.acceptance }, batched, acc);
    const checked: Proposal = { tokens: offered.tokens.slice(0, verified), by: draft.by, ...(draft.q ? { q: draft.q.slice(0, verified) } : {}) };
    // Row i follows the pending token (at pos0) and i drafts: it predicts position pos0 + 1 + i.
    const verdict = rejection
      ? rejectDrafts((i) => (pick(rows[i]!, i, pos0 + 1 + i), rows[i]!), checked, rejection, (i) => pos0 + 1 + i)
      : verifyDrafts((i) => pick(rows[i]!, i, pos0 + 1 + i), checked);
    if (ticket) p.batch.verdict(ticket, verdict.accepted);
    return new VerifyStep(p, session, checked, pos0, verdict);
  }

  /** Decided tokens handed out so far. */
  get taken(): number {
    return this.given;
  }

  /** Whether every decided token was taken. */
  get done(): boolean {
    return this.given >= this.decided.length;
  }

  /**
   * The next decided token. From the second on, the token before it is an accepted draft the
   * session has not taken yet: it is kept now (no weights read), so the session holds everything
   * emitted before the token returned.
   */
  take(): number {
    if (this.given > 0) {
      this.p.model.keep(this.session.state);
      this.session.pending = [];
    }
    return this.decided[this.given++]!;
  }
}
