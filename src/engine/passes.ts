// Every forward pass an engine runs, and what the passes share: the model and its weights, the
// batch scheduler, the prefix cache and the routing trace. A pass runs directly, or (batched) as
// a ticket for the scheduler's next step; prefill runs in chunk steps; a closed engine refuses all.
import type { Offer, PassPart, StepCost, Ticket, TicketKind } from "../batch/scheduler.ts";
import { BatchScheduler } from "../batch/scheduler.ts";
import type { PrefixCache } from "../batch/prefix-cache.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import type { TraceWriter } from "../memory/trace-writer.ts";
import type { DraftModel } from "../model/draft.ts";
import type { Model } from "../model/forward.ts";
import { addStats, zeroStats, type WeightProvider, type WeightStats } from "../model/weights.ts";
import type { TokenEvent } from "../engine.ts";
import { heldPrefix, type Session } from "./session.ts";

/** What a batched generation yields while its pass waits for the scheduler's next step. */
export const WAIT_EVENT: TokenEvent = Object.freeze({ id: -1, index: -1, ms: 0, wait: true as const });

export class Passes {
  readonly batch: BatchScheduler;
  /** Set once at open when EngineOptions.prefixCache asks for one. */
  prefix?: PrefixCache;
  /** Set once at open when EngineOptions.trace names a file. */
  trace?: TraceWriter;
  private closed = false;

  constructor(
    readonly k: Kernels,
    readonly model: Model,
    readonly weights: WeightProvider,
    readonly context: number,
    /** Sessions that advance together in one batched pass (EngineOptions.parallel). */
    readonly parallel: number,
    /** The draft model (EngineOptions.draft): the target's passes keep its cache in step. */
    readonly draft?: DraftModel,
    /** What a batched step of R rows costs, learnt from the steps (with speculation): the batch
     *  scheduler places each step's draft rows by it. */
    stepCost?: StepCost,
  ) {
    // Each session's verify records are kept in a rollback slot of its own (src/model/rollback.ts):
    // the scheduler starts a verify segment only while one is free.
    this.batch = new BatchScheduler((parts) => this.passOver(parts), model.rows, parallel, () => weights.stats(), { verifySlots: model.verifySlots, cost: stepCost });
  }

  alive(): void {
    if (this.closed) throw new K3Error("USAGE", "this engine was closed");
  }

  /**
   * One batched pass over several sessions' parts (the scheduler's pass function). Each part's
   * logits are copied out: the next pass reuses the model's buffer.
   */
  private passOver(parts: PassPart[]): (Float32Array | Float32Array[] | null)[] {
    this.alive();
    if (this.trace) {
      // The trace records one sequence's rows: one session per pass. A verify segment's rows are
      // written once its generation knows how many it kept (Generation.flushTrace).
      if (parts.length > 1) throw new K3Error("USAGE", "--trace records one sequence: it cannot be used with batched generation of several sessions");
      const pos = parts[0]!.state.pos;
      const out = this.model.forwardBatch(parts);
      if (!parts[0]!.verify) this.trace.flush(pos);
      return out;
    }
    return this.model.forwardBatch(parts);
  }

  /**
   * Prepare `session` for a prompt of `ids` and return how many of them it already holds (the
   * caller feeds only the rest): Engine.reusePrefix has the cases.
   */
  reusePrefix(session: Session, ids: number[]): number {
    this.alive();
    if (session.dirty) session.reset();
    const own = heldPrefix(session, ids);
    if (own === ids.length) return own;
    const tokens = session.tokens;
    if (this.prefix) {
      if (own === 0) this.prefix.store(session.state);
      const restored = this.prefix.restoreLongest(session.state, ids, ids.length - 1, own);
      if (restored > 0) {
        session.pending = [];
        if (own === 0) session.speculationCost = undefined; // another conversation's state now
        return restored;
      }
    }
    if (own === 0 && tokens.length > 0) session.reset();
    return own;
  }

  /**
   * A speculative verify pass over the session's pending token and `offer`'s drafts: direct (every
   * draft), or batched: a verify ticket whose step verifies as many of them as it places (maybe
   * none: the pending token alone). The session then holds its rollback slot until its decided
   * tokens are out (endVerify). Returns the logits of each row and how many drafts they verified.
   */
  *verifyPass(session: Session, offer: Offer, batched: boolean, acc: { io: WeightStats }): Generator<TokenEvent, { rows: Float32Array[]; verified: number; ticket?: Ticket }> {
    const pending = session.pending.splice(0);
    if (pending.length !== 1) throw new K3Error("INTERNAL", `a verify pass after ${pending.length} pending tokens`);
    if (!batched) return { rows: this.model.verify(session.state, [...pending, ...offer.tokens]), verified: offer.tokens.length };
    const t = this.batch.submit({ state: session.state, ids: pending, logits: true }, "verify", offer);
    try {
      while (!t.done) yield WAIT_EVENT;
    } finally {
      if (!t.done) {
        this.batch.cancel(t); // abandoned while waiting: the pass never runs it
        session.pending = pending;
      }
    }
    if (t.share) acc.io = addStats(acc.io, t.share);
    if (t.error) throw t.error;
    return { rows: t.rows!, verified: t.verified, ticket: t };
  }

  /** `session` kept what it will of its last verify segment (or stopped): its rollback slot, in
   *  the model and the scheduler, is free for another session's drafts. */
  endVerify(session: Session): void {
    this.batch.release(session.state);
    this.model.releaseVerify(session.state);
  }

  /** One forward of a generation: direct, or (batched) a ticket for the scheduler's next step,
   *  waited for with `wait` events. The ticket's share of the pass's reads goes to `acc`. */
  *pass(session: Session, ids: number[], logits: boolean, kind: TicketKind, batched: boolean, acc: { io: WeightStats }): Generator<TokenEvent, Float32Array | null> {
    if (!batched) return this.forward(session, ids, logits);
    const t = this.batch.submit({ state: session.state, ids, logits }, kind);
    try {
      while (!t.done) yield WAIT_EVENT;
    } finally {
      if (!t.done) this.batch.cancel(t); // abandoned while waiting: the pass never runs it
    }
    if (t.share) acc.io = addStats(acc.io, t.share);
    if (t.error) throw t.error;
    return t.logits;
  }

  /** Every forward goes through here, so the trace sees every chunk. */
  private forward(session: Session, ids: number[], logits = true): Float32Array | null {
    this.alive(); // a generator may be resumed after close(): never touch freed buffers
    const pos = session.state.pos;
    const out = this.model.forward(session.state, ids, { logits });
    this.trace?.flush(pos);
    return out;
  }

  /**
   * Prefill as steps: one model chunk per step, yielding between chunks so a caller can let the
   * event loop run (Ctrl-C, a client disconnect) and stop early; returns the last logits.
   * Batched: each piece is a scheduler ticket (WAIT_EVENT is yielded until it ran), pieces end at
   * multiples of the chunk counted from position 0 (so prefix snapshots sit at the same
   * boundaries whoever fed them), and with a prefix cache the state at the last boundary inside
   * the prompt is kept.
   */
  *prefillSteps(
    session: Session,
    ids: number[],
    onChunk?: (done: number, total: number) => void,
    batched = false,
    acc = { io: zeroStats("buffered") },
  ): Generator<{ done: number; total: number } | TokenEvent, Float32Array> {
    this.alive();
    const all = [...session.pending, ...ids];
    this.model.check(session.state, all); // every id, before the first chunk changes any state
    session.pending = [];
    const C = this.model.chunk;
    const p0 = session.state.pos;
    const keepAt = batched && this.prefix ? Math.floor((p0 + all.length - 1) / C) * C : -1;
    for (let s = 0; ; ) {
      const end = batched ? Math.min(all.length, (Math.floor((p0 + s) / C) + 1) * C - p0) : Math.min(all.length, s + C);
      const last = end >= all.length;
      const logits = yield* this.pass(session, all.slice(s, end), last, "prefill", batched, acc);
      s = end;
      onChunk?.(s, all.length);
      if (p0 + s === keepAt) this.prefix!.store(session.state);
      if (last) return logits!;
      yield { done: s, total: all.length };
    }
  }

  /** Free everything the passes hold (once); every later pass is refused. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.prefix?.persist();
    this.trace?.close();
    this.model.free();
    this.draft?.free();
    this.weights.close();
  }
}
