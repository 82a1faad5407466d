// One generation (Engine.generate): the prompt fed in chunk steps, then decode passes (with
// speculation: verify passes over drafts), each token checked finite before it is picked, and
// the generation's figures. The session stays consistent wherever the caller stops iterating.
import type { ModelConfig } from "../checkpoint/types.ts";
import type { ByteCensus } from "../checkpoint/census.ts";
import { K3Error } from "../errors.ts";
import type { MemoryPlan } from "../memory/plan.ts";
import type { TrunkFormat } from "../memory/pack.ts";
import { diffStats, zeroStats, type WeightStats } from "../model/weights.ts";
import { SpeculationCost, type PassCostPrior } from "../speculate/cost.ts";
import { NgramDrafter } from "../speculate/ngram.ts";
import { parseSpeculate, Speculator, type DrafterSlot, type Proposal, type SpeculateSetting } from "../speculate/speculator.ts";
import type { RejectionSampler } from "../speculate/reject.ts";
import { ModelDrafter } from "./model-drafter.ts";
import { VerifyStep } from "./verify-step.ts";
import type { DraftInfo, GenerateOptions, GenerationStats, TokenEvent } from "../engine.ts";
import { WAIT_EVENT, type Passes } from "./passes.ts";
import { replyStats } from "./reply-stats.ts";
import type { Session } from "./session.ts";

/** What a generation needs to know of its engine besides the passes. */
export interface GenerationSetup {
  /** Speculation the engine was opened with (requests default to it). */
  speculate: SpeculateSetting;
  trunk: TrunkFormat;
  /** What a one-position decode pass is expected to read, before any is measured (passCostPrior). */
  costPrior: () => PassCostPrior;
  /** The engine's draft model, for the stats. */
  draft?: DraftInfo;
}

export class Generation {
  private readonly stop: Set<number>;
  private readonly batched: boolean;
  private readonly before: WeightStats;
  /** Batched: this generation's share of each pass (the passes add to it). */
  private readonly acc: { io: WeightStats };
  private readonly t0 = performance.now();
  private readonly promptTokens: number;
  private readonly spec: Speculator | undefined;
  private prefillMs = 0;
  private afterPrefill!: WeightStats;
  private generated = 0;
  private decodeSteps = 0;
  /** Accepted drafts the session took without a pass of their own. */
  private extraTokens = 0;
  private decodeMs = 0;
  private stepMs = 0;
  private logits!: Float32Array;
  /** The last verify pass, while its decided tokens are being emitted (src/engine/verify-step.ts). */
  private step?: VerifyStep;
  /** A verify pass whose trace rows wait for the number of positions kept. */
  private traced: number | undefined;

  /** Checks the request before any model work (a refused request changes nothing). */
  constructor(
    private readonly p: Passes,
    private readonly setup: GenerationSetup,
    private readonly session: Session,
    private readonly prompt: number[],
    private readonly opts: GenerateOptions,
  ) {
    this.stop = new Set(opts.stopIds ?? []);
    this.batched = opts.batched ?? false;
    this.before = p.weights.stats();
    this.acc = { io: zeroStats(this.before.ioMode) };
    this.promptTokens = session.pending.length + prompt.length;
    if (this.promptTokens === 0) throw new K3Error("USAGE", "nothing to generate from: the prompt is empty");
    if (session.position + this.promptTokens > p.context)
      throw new K3Error("CONTEXT", `prompt of ${this.promptTokens} tokens does not fit the context limit (${p.context} tokens, ${session.position} used)`);
    // A request asking for more drafts than the engine has room for is refused (batched or not:
    // a batched step carries several sessions' verify segments, docs/SERVER.md).
    if (opts.acceptRule !== undefined && opts.acceptRule !== "exact" && opts.acceptRule !== "rejection")
      throw new K3Error("USAGE", `acceptRule must be "exact" or "rejection", got ${JSON.stringify(opts.acceptRule)}`);
    this.spec = this.speculator();
  }

  *run(): Generator<TokenEvent, GenerationStats> {
    const logits = yield* this.prefill();
    // Stopped inside the prefill: the tokens fed so far stay in the session, the rest never entered
    // it (no token was produced, so no time per token either).
    if (logits === undefined) return this.stats("cancelled", true);
    this.logits = logits;
    this.stepMs = this.prefillMs;
    let stopReason: GenerationStats["stopReason"];
    try {
      stopReason = yield* this.decode();
    } finally {
      this.flushTrace();
      this.p.endVerify(this.session); // its rollback slot, if the last verify pass left it one
    }
    return this.stats(stopReason);
  }

  /** Counters so far: batched, this generation's share of each pass; else everything read since it began. */
  private ioSoFar(): WeightStats {
    return this.batched ? this.acc.io : diffStats(this.p.weights.stats(), this.before);
  }

  /** The prompt in chunk steps; the logits after it, or undefined when stopped inside it. */
  private *prefill(): Generator<TokenEvent, Float32Array | undefined> {
    const { opts } = this;
    const steps = this.p.prefillSteps(this.session, this.prompt, opts.onPrefill, this.batched, this.acc);
    let step = steps.next();
    try {
      while (!step.done) {
        if (step.value === WAIT_EVENT) {
          yield WAIT_EVENT;
          step = steps.next();
          continue;
        }
        // Between prefill chunks: let the caller breathe (event loop) and honour a stop request.
        if (opts.yieldDuringPrefill) yield { id: -1, index: -1, ms: 0, prefill: step.value as { done: number; total: number } };
        if (opts.shouldStop?.()) break;
        step = steps.next();
      }
    } finally {
      // Abandoned while a piece waited for its step: withdraw the ticket (Passes.pass's finally).
      if (!step.done) steps.return(undefined as never);
    }
    this.prefillMs = performance.now() - this.t0;
    this.afterPrefill = this.ioSoFar();
    return step.done ? step.value : undefined;
  }

  /** Emit tokens until maxTokens, a stop id, the context's end, or shouldStop. */
  private *decode(): Generator<TokenEvent, GenerationStats["stopReason"]> {
    const { session, opts } = this;
    while (this.generated < opts.maxTokens) {
      if (opts.shouldStop?.()) return "cancelled";
      const id = this.nextToken();
      if (this.stop.has(id)) {
        // The stop token is part of the sequence (a chat turn ends with it) but not emitted.
        session.pending.push(id);
        return "stop";
      }
      // Pending before the yield: a caller that stops iterating here leaves the session
      // consistent (the emitted token is fed first on the next call).
      session.pending.push(id);
      yield { id, index: this.generated, ms: this.stepMs };
      this.generated++;
      if (this.generated >= opts.maxTokens) break;
      if (session.position + session.pending.length > this.p.context) return "context";
      if (this.step && !this.step.done) continue;
      // Every decided token is out: the rollback slot goes back before the next pass, and a
      // generation asked to stop runs no pass whose token nobody would see.
      this.p.endVerify(session);
      if (opts.shouldStop?.()) return "cancelled";
      yield* this.decodePass();
    }
    return "length";
  }

  /** The next token: one the last verify pass decided, else the pick from the last logits. */
  private nextToken(): number {
    // The logits of the last pass predict the token at the session's position (nothing pending).
    const step = this.step;
    if (!step || step.done) return this.pick(this.logits, this.generated, this.session.position);
    if (step.taken === 0) return step.take(); // the pass's own token: its time is the pass's
    // Later ones follow an accepted draft, which the session takes first (no weights read).
    const s = performance.now();
    const id = step.take();
    this.stepMs = performance.now() - s;
    this.decodeMs += this.stepMs;
    this.extraTokens++;
    return id;
  }

  /** The next decode pass: the pending token alone, or with drafts (a verify pass). */
  private *decodePass(): Generator<TokenEvent, void> {
    const { p, session, spec } = this;
    this.flushTrace();
    const s = performance.now();
    const draft: Proposal = spec ? spec.propose(session.tokens, Math.min(p.context - session.position - 1, this.opts.maxTokens - this.generated - 1)) : { tokens: [] };
    const bytesBefore = p.weights.stats();
    let accepted = 0;
    let verified = 0;
    this.step = undefined;
    if (draft.tokens.length === 0) this.logits = (yield* this.decodeRow())!;
    else {
      const step = yield* VerifyStep.run(p, session, draft, (row, i, position) => this.pick(row, this.generated + i, position), this.batched, this.acc, this.rejection());
      verified = step.draft.tokens.length; // batched: the drafts its step had room and slots for
      if (verified > 0) this.traced = step.pos0;
      this.step = step;
      accepted = step.accepted;
    }
    // A batched step's bytes are the whole step's (the scheduler's cost model learns from them).
    spec?.observe(1 + verified, this.batched ? undefined : bytesSince(p.weights.stats(), bytesBefore), verified, accepted, draft.by);
    this.decodeSteps++;
    this.stepMs = performance.now() - s;
    this.decodeMs += this.stepMs;
  }

  /** The pending token alone; abandoned while it waits for its step, the session keeps it pending
   *  (the pass never ran: the session is where it was). */
  private *decodeRow(): Generator<TokenEvent, Float32Array | null> {
    const { p, session } = this;
    const pending = session.pending.splice(0);
    const pos = session.state.pos;
    try {
      return yield* p.pass(session, pending, true, "decode", this.batched, this.acc);
    } finally {
      if (session.state.pos === pos && session.pending.length === 0 && !session.dirty) session.pending = pending;
    }
  }

  private flushTrace(): void {
    if (this.traced !== undefined) this.p.trace?.flush(this.traced, this.session.state.pos - this.traced);
    this.traced = undefined;
  }

  /** This request's speculator, or undefined when it does not speculate (off: engine or request). */
  private speculator(): Speculator | undefined {
    const { opts, session } = this;
    const setting = parseSpeculate(opts.speculate ?? this.setup.speculate, "speculate");
    const room = this.p.model.drafts;
    if (typeof setting === "number" && setting > room)
      throw new K3Error("USAGE", `speculate ${setting}: this engine has room for ${room} drafts per pass (opened with --speculate ${this.setup.speculate})`);
    if (setting === "off" || room === 0) return undefined;
    const cost = (session.speculationCost ??= new SpeculationCost(this.setup.costPrior()));
    return new Speculator(setting, room, this.drafters(cost), cost, this.p.model.cfg.vocab);
  }

  /**
   * Who may draft: the caller's drafter alone (GenerateOptions.drafter), else the n-gram drafter
   * (free: asked every step) and, when the engine has a draft model, the model drafter (priced per
   * drafted token at one pass over the draft's weights, asked only when the cost model picks it).
   */
  private drafters(cost: SpeculationCost): DrafterSlot[] {
    if (this.opts.drafter) return [{ drafter: this.opts.drafter, stepCost: 0 }];
    const slots: DrafterSlot[] = [{ drafter: new NgramDrafter(), stepCost: 0 }];
    const draft = this.p.draft;
    const sampler = this.opts.sampler;
    const pick = sampler && ((logits: Float32Array, position: number) => sampler.sample(logits, position));
    if (draft) slots.push({ drafter: new ModelDrafter(draft, this.session.state, pick, this.rejection()), stepCost: cost.computeCost(draft.weightBytes), firstDrafts: 1 });
    return slots;
  }

  /** The opt-in rejection rule's sampler (GenerateOptions.acceptRule "rejection" with a sampler
   *  that exposes its weights), else undefined: exact match. */
  private rejection(): RejectionSampler | undefined {
    const s = this.opts.sampler;
    if (this.opts.acceptRule !== "rejection" || !s?.weights || !s.uniform) return undefined;
    return { sample: (l, p) => s.sample(l, p), weights: (l) => s.weights!(l), uniform: (p, st) => s.uniform!(p, st) };
  }

  /** The token at absolute `position` from the logits that predict it: checked finite first (never
   *  an answer picked around a NaN), then the sampler's choice for that position, or greedy (their
   *  argmax, lowest id on ties). Plain decoding and verify passes both pick here. */
  private pick(logits: Float32Array, generated: number, position: number): number {
    const greedy = this.p.k.k3_argmax(logits, logits.length);
    if (greedy < 0) throw nonFiniteLogits(logits, generated === 0 ? "after the prompt" : `after generated token ${generated}`, position);
    return this.opts.sampler ? this.opts.sampler.sample(logits, position) : greedy;
  }

  /** The generation's figures: counters over the whole run (batched: its share of each pass), and
   *  those of the decode steps after the prefill; the per-token ones are derived by replyStats. */
  private stats(stopReason: GenerationStats["stopReason"], stoppedInPrefill = false): GenerationStats {
    const io = this.ioSoFar();
    return replyStats(
      {
        promptTokens: this.promptTokens,
        generatedTokens: this.generated,
        prefillMs: this.prefillMs,
        decodeMs: this.decodeMs,
        stopReason,
        io,
        decodeIo: diffStats(io, this.afterPrefill),
        decodeSteps: this.decodeSteps,
        // Per token decided by a decode pass: one per pass, plus the accepted drafts that were used.
        decodedTokens: this.decodeSteps + this.extraTokens,
        speculation: this.spec ? { ...this.spec.counters } : { draftedTokens: 0, acceptedTokens: 0, verifyPasses: 0 },
        drafters: this.spec ? structuredClone(this.spec.byDrafter) : {},
        draft: this.setup.draft,
        peakRssBytes: peakRssBytes(),
        trunk: this.setup.trunk,
      },
      stoppedInPrefill,
    );
  }
}

/** What a one-position decode pass is expected to read and multiply, before any is measured. */
export function passCostPrior(cfg: ModelConfig, census: ByteCensus, plan: MemoryPlan | undefined): PassCostPrior {
  const moeLayers = cfg.numLayers - cfg.firstKDense;
  const missShare = plan ? Math.max(0, 1 - plan.expertSlots / plan.expertCount) : 0;
  return {
    trunkBytes: plan ? plan.streamedBytesPerToken : 0,
    expertBytes: plan ? plan.expertBytesPerTokenAllMiss * missShare : 0,
    activeBytes: census.trunkBytes + census.headBytes + moeLayers * cfg.topK * census.expertBytes,
    numExperts: cfg.numExperts,
    topK: cfg.topK,
  };
}

/** Trunk and expert bytes read between two snapshots. */
function bytesSince(a: WeightStats, b: WeightStats): [number, number] {
  return [a.trunkBytesRead - b.trunkBytesRead, a.expertBytesRead - b.expertBytesRead];
}

/** The model produced NaN or ±inf logits: broken weights. Never pick a token from them. */
function nonFiniteLogits(logits: Float32Array, step: string, position: number): K3Error {
  let nan = 0;
  let inf = 0;
  let first = -1;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i]!;
    if (Number.isFinite(v)) continue;
    if (first < 0) first = i;
    if (Number.isNaN(v)) nan++;
    else inf++;
  }
  return new K3Error("CHECKPOINT", `the model's logits ${step} (position ${position}) are not finite: ${nan} NaN and ${inf} infinite of ${logits.length}, the first at token id ${first}`, [
    "a weight of this model is NaN or infinite (or produces such values): check the checkpoint (k3 verify, or a fresh download)",
  ]);
}

/** Peak resident set size from the OS (getrusage maxrss, KiB on Linux). */
export function peakRssBytes(): number {
  return process.resourceUsage().maxRSS * 1024;
}
