// Continuous batching: many sessions advance in one forward pass (the trunk read once per step,
// each distinct expert once), joining and leaving at step boundaries.
//
// A generation that needs the model submits a ticket (its session, the tokens to feed, whether it
// wants logits; a decode ticket may offer drafts) and waits; the scheduler runs a step on the
// event loop (setImmediate: between steps, new requests and disconnects are seen) over the
// waiting tickets and settles them.
//
// The step rule (docs/SERVER.md "How a step is filled"):
//   - decode tickets (running streams: one row each, the pending token; a verify ticket is a
//     decode ticket that offers drafts) first, in submission order, then prefill pieces (a
//     newcomer's prompt, at most one chunk each), in submission order, while the pass has rows
//     left (`rows` = chunk + parallel − 1: every running stream plus one whole chunk always fit);
//     a ticket that does not fit waits for the next step; the first ticket always runs;
//   - then drafts fill the rows left: each verify ticket's segment is its pending token plus the
//     first k of its drafts, k chosen by src/speculate/step-drafts.ts (fixed settings first, the
//     rest by the step's cost model and each session's acceptance; 0 = a plain decode row).
// So drafts never push a running stream or a newcomer's piece out of a step: they use rows that
// would otherwise run empty.
//
// Verify segments and their rollback: a session whose segment verified drafts holds one of
// `verifySlots` rollback slots (the recorded inputs its accepted drafts are kept from, in the
// model) from its step until its generation has kept them (`release`). Other sessions' steps run
// meanwhile — the slot is that session's alone — but a step starts a new verify segment only
// while a slot is free (else its drafts wait: the ticket runs as a decode row).
//
// Invariants:
//   - a ticket runs at most once, and exactly once unless cancelled before its step;
//   - one step = one call of the pass function (synchronous): there is no partly-run ticket;
//   - a session has at most one ticket in flight (its generation waits for it), and a session that
//     holds a slot submits none (its generation releases it before its next pass);
//   - at most verifySlots sessions hold slots;
//   - an error in a pass settles every ticket of that pass with the error (each of those
//     sessions is marked dirty by the model: their states may have advanced part-way).
import { K3Error } from "../errors.ts";
import type { SessionState } from "../model/state.ts";
import { diffStats, divideStats, type WeightStats } from "../model/weights.ts";
import { placeDrafts } from "../speculate/step-drafts.ts";

export interface PassPart {
  state: SessionState;
  ids: number[];
  /** Whether this part's last row needs logits. */
  logits: boolean;
  /** A speculative verify segment: ids = [pending, d_1 … d_k], logits at every row. */
  verify?: boolean;
}

/** One pass over several sessions' parts; returns each part's logits (a copy the caller keeps),
 *  every row's for a verify part, or null when the part asked for none. */
export type PassFn = (parts: PassPart[]) => (Float32Array | Float32Array[] | null)[];

export type TicketKind = "decode" | "prefill" | "verify";

/** The drafts a verify ticket offers after its pending token. */
export interface Offer {
  tokens: number[];
  /** Its session's per-draft acceptance: the step's cost model decides how many to verify.
   *  Undefined: a fixed number of drafts per pass (as many as fit). */
  acceptance?: number;
}

/** What a step costs (bytes-equivalent) for its rows, learnt from the steps that ran: the
 *  speculation cost model (src/speculate/cost.ts SpeculationCost) fits. */
export interface StepCost {
  cost(rows: number): number;
  observePass(rows: number, trunkBytes: number, expertBytes: number): void;
}

export interface SchedulerOptions {
  /** Sessions that may hold verified drafts at once (rollback slots); default `parallel`. */
  verifySlots?: number;
  /** The step cost model auto offers are placed by (required for them). */
  cost?: StepCost;
  /** Gain over the step without drafts required before drafting (default 0.05). */
  margin?: number;
}

export class Ticket {
  done = false;
  logits: Float32Array | null = null;
  /** A verify ticket's logits, one row per position of its segment (1 + verified). */
  rows: Float32Array[] | null = null;
  /** Drafts its step verified (a verify ticket: a prefix of its offer). */
  verified = 0;
  error: unknown;
  /** This ticket's share of the step's weight reads (the step's counters ÷ its tickets). */
  share?: WeightStats;
  /** Sessions in the step that ran it. */
  stepSessions = 0;
  /** Its entry in the step's record, once it verified drafts (the verdict is added to it). */
  entry?: VerifyEntry;
  constructor(
    readonly part: PassPart,
    readonly kind: TicketKind,
    readonly seq: number,
    readonly offer?: Offer,
  ) {}
}

/** One verify segment of a step: which session (numbered by first submission), drafts verified,
 *  and how many its generation kept (once it decided). */
export interface VerifyEntry {
  session: number;
  drafts: number;
  accepted?: number;
}

/** One step, for /k3/stats's timeline. */
export interface StepRecord {
  /** Unix ms when the step ended. */
  at: number;
  sessions: number;
  /** One per generating session (its pending token), verify segments' first rows included. */
  decodeRows: number;
  prefillRows: number;
  /** Drafted rows verified (the rest of the verify segments' rows). */
  draftRows: number;
  verify: VerifyEntry[];
  /** Weight bytes the step read from disk (trunk + experts). */
  bytesRead: number;
  ms: number;
}

export interface BatchStats {
  steps: number;
  rows: number;
  /** steps by number of sessions in them: index n = steps with n sessions. */
  sessionsPerStep: number[];
  decodeTokens: number;
  prefillTokens: number;
  /** Drafted tokens verified in steps, verify segments, and drafts their generations kept. */
  draftTokens: number;
  verifySegments: number;
  acceptedDrafts: number;
  /** Steps that carried verify segments of two sessions or more. */
  sharedVerifySteps: number;
  /** Weight bytes read by the steps (trunk + experts). */
  bytesRead: number;
  /** Their share for prefill rows (each step's bytes split by rows: an estimate of what a prompt
   *  token costs, for the prefix cache's "bytes saved"). */
  prefillBytesRead: number;
  /** The last TIMELINE steps, oldest first. */
  recent: StepRecord[];
  /** Tickets waiting for a step now. */
  waiting: number;
  /** Sessions holding verified drafts now (rollback slots in use), of verifySlots. */
  holding: number;
  verifySlots: number;
}

const TIMELINE = 256;

export class BatchScheduler {
  private pending: Ticket[] = [];
  private seq = 0;
  private scheduled = false;
  private waiters: (() => void)[] = [];
  /** Sessions whose verified drafts are still being kept: each holds a rollback slot. */
  private readonly holders = new Set<SessionState>();
  private readonly ids = new WeakMap<SessionState, number>();
  private nextId = 0;
  private readonly counters = { steps: 0, rows: 0, decodeTokens: 0, prefillTokens: 0, draftTokens: 0, verifySegments: 0, acceptedDrafts: 0, sharedVerifySteps: 0, bytesRead: 0, prefillBytesRead: 0 };
  private readonly perStep: number[] = [];
  private readonly timeline: StepRecord[] = [];
  readonly verifySlots: number;
  private readonly cost?: StepCost;
  private readonly margin: number;

  constructor(
    private readonly pass: PassFn,
    /** Rows one pass holds. */
    readonly rows: number,
    /** Sessions one pass holds (logit rows). */
    readonly parallel: number,
    private readonly weightStats: () => WeightStats,
    opts: SchedulerOptions = {},
  ) {
    if (!Number.isInteger(rows) || rows < 1) throw new K3Error("INTERNAL", `a pass of ${rows} rows`);
    if (!Number.isInteger(parallel) || parallel < 1) throw new K3Error("INTERNAL", `${parallel} parallel sessions`);
    this.verifySlots = opts.verifySlots ?? parallel;
    if (!Number.isInteger(this.verifySlots) || this.verifySlots < 0) throw new K3Error("INTERNAL", `${this.verifySlots} verify slots`);
    this.cost = opts.cost;
    this.margin = opts.margin ?? 0.05;
  }

  /**
   * Queue a part for the next step that has room; the step is scheduled on the event loop. A
   * verify ticket's part holds only the pending token: the step adds the drafts it verifies.
   */
  submit(part: PassPart, kind: TicketKind, offer?: Offer): Ticket {
    if (part.ids.length === 0) throw new K3Error("INTERNAL", "a ticket with no tokens");
    if (part.ids.length > this.rows) throw new K3Error("INTERNAL", `a ticket of ${part.ids.length} tokens, a pass holds ${this.rows}`);
    if (part.verify) throw new K3Error("INTERNAL", "a submitted part is never a verify part: a verify ticket offers drafts");
    if ((kind === "verify") !== (offer !== undefined)) throw new K3Error("INTERNAL", "a verify ticket (and only one) offers drafts");
    if (kind === "verify" && (part.ids.length !== 1 || !part.logits)) throw new K3Error("INTERNAL", "a verify ticket feeds its pending token alone, with logits");
    if (offer && offer.acceptance !== undefined && !this.cost) throw new K3Error("INTERNAL", "drafts placed by cost on a scheduler without a step cost model");
    if (this.pending.some((t) => t.part.state === part.state)) throw new K3Error("INTERNAL", "a session submitted a second ticket before its first ran");
    if (this.holders.has(part.state)) throw new K3Error("INTERNAL", "a session submitted a pass while its verified drafts are still being kept");
    if (!this.ids.has(part.state)) this.ids.set(part.state, this.nextId++);
    const t = new Ticket(part, kind, this.seq++, offer && { tokens: offer.tokens.slice(), acceptance: offer.acceptance });
    this.pending.push(t);
    this.schedule();
    return t;
  }

  /** Withdraw a ticket that has not run (a generation abandoned while it waited). */
  cancel(t: Ticket): void {
    const i = this.pending.indexOf(t);
    if (i >= 0) this.pending.splice(i, 1);
  }

  /** `state` has kept what it will of its verified drafts (or stopped): its slot is free. */
  release(state: SessionState): void {
    if (!this.holders.delete(state)) return;
    if (this.pending.length > 0) this.schedule();
  }

  /** Whether `state` holds a rollback slot (verified drafts not all kept yet). */
  holds(state: SessionState): boolean {
    return this.holders.has(state);
  }

  /** A verify ticket's generation decided: `accepted` of its verified drafts were kept (stats). */
  verdict(t: Ticket, accepted: number): void {
    if (!t.entry || t.entry.accepted !== undefined) return;
    t.entry.accepted = accepted;
    this.counters.acceptedDrafts += accepted;
  }

  /** Resolves once the next step has run (at once when nothing is waiting). */
  turn(): Promise<void> {
    if (this.pending.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.step();
    });
  }

  /** The tickets of the next step by the rule in the header, each verify ticket with its drafts. */
  private pick(): { run: Ticket[]; drafts: number[] } {
    const rank = (t: Ticket) => (t.kind === "prefill" ? 1 : 0);
    const order = this.pending.slice().sort((a, b) => rank(a) - rank(b) || a.seq - b.seq);
    const run: Ticket[] = [];
    let rows = 0;
    for (const t of order) {
      if (run.length >= this.parallel) break;
      const n = t.part.ids.length;
      if (run.length > 0 && rows + n > this.rows) continue;
      run.push(t);
      rows += n;
    }
    const verify = run.filter((t) => t.offer);
    const offers = verify.map((t) => ({ drafts: t.offer!.tokens.length, acceptance: t.offer!.acceptance }));
    const shape = { rows, free: this.rows - rows, slots: this.verifySlots - this.holders.size, tokens: run.filter((t) => t.part.logits).length };
    const cost = this.cost;
    const k = offers.length > 0 ? placeDrafts(offers, shape, cost ? (r) => cost.cost(r) : () => 1, this.margin) : [];
    return { run, drafts: run.map((t) => (t.offer ? k[verify.indexOf(t)]! : 0)) };
  }

  /** The part a ticket runs as in its step: a verify ticket's pending token and its first k drafts. */
  private partOf(t: Ticket, k: number): PassPart {
    if (!t.offer || k === 0) return t.part;
    return { state: t.part.state, ids: [...t.part.ids, ...t.offer.tokens.slice(0, k)], logits: true, verify: true };
  }

  /** Run one step now (synchronously) over what is waiting; settles its tickets and wakes every
   *  waiter. Exposed for tests and for callers without an event loop. */
  step(): void {
    const { run, drafts } = this.pick();
    if (run.length > 0) {
      this.pending = this.pending.filter((t) => !run.includes(t));
      const parts = run.map((t, i) => this.partOf(t, drafts[i]!));
      const before = this.weightStats();
      const t0 = performance.now();
      let out: (Float32Array | Float32Array[] | null)[] | undefined;
      let error: unknown;
      try {
        out = this.pass(parts);
      } catch (err) {
        error = err;
      }
      const ms = performance.now() - t0;
      const read = diffStats(this.weightStats(), before);
      const share = divideStats(read, run.length);
      run.forEach((t, i) => this.settle(t, drafts[i]!, out?.[i], out ? undefined : error, run.length, share));
      const rows = parts.reduce((a, p) => a + p.ids.length, 0);
      this.cost?.observePass(rows, read.trunkBytesRead, read.expertBytesRead);
      this.record(run, ms, read.trunkBytesRead + read.expertBytesRead);
    }
    const wake = this.waiters;
    this.waiters = [];
    for (const w of wake) w();
    if (this.pending.length > 0 && run.length > 0) this.schedule();
  }

  /** A ticket's result: its logits (a verify ticket's rows), or the step's error. A verify
   *  segment that verified drafts holds its slot from now on. */
  private settle(t: Ticket, k: number, o: Float32Array | Float32Array[] | null | undefined, error: unknown, sessions: number, share: WeightStats): void {
    t.done = true;
    t.stepSessions = sessions;
    t.share = share;
    if (o === undefined) {
      t.error = error;
      return;
    }
    if (!t.offer) {
      t.logits = Array.isArray(o) ? null : o;
      return;
    }
    const rows = Array.isArray(o) ? o : o ? [o] : [];
    if (rows.length !== 1 + k) {
      t.error = new K3Error("INTERNAL", `a verify segment of ${1 + k} rows got ${rows.length} logit rows`);
      return;
    }
    t.verified = k;
    t.rows = rows;
    if (k > 0) {
      this.holders.add(t.part.state);
      t.entry = { session: this.ids.get(t.part.state)!, drafts: k };
    }
  }

  private record(run: Ticket[], ms: number, bytesRead: number): void {
    const c = this.counters;
    let decodeRows = 0;
    let prefillRows = 0;
    let draftRows = 0;
    const verify: VerifyEntry[] = [];
    for (const t of run) {
      if (t.kind === "prefill") prefillRows += t.part.ids.length;
      else decodeRows += t.part.ids.length;
      if (t.entry) {
        draftRows += t.entry.drafts;
        verify.push(t.entry);
      }
    }
    const rows = decodeRows + prefillRows + draftRows;
    c.steps++;
    c.rows += rows;
    c.decodeTokens += decodeRows;
    c.prefillTokens += prefillRows;
    c.draftTokens += draftRows;
    c.verifySegments += verify.length;
    if (verify.length >= 2) c.sharedVerifySteps++;
    c.bytesRead += bytesRead;
    c.prefillBytesRead += (bytesRead * prefillRows) / rows;
    this.perStep[run.length] = (this.perStep[run.length] ?? 0) + 1;
    this.timeline.push({ at: Date.now(), sessions: run.length, decodeRows, prefillRows, draftRows, verify, bytesRead, ms: Math.round(ms * 100) / 100 });
    if (this.timeline.length > TIMELINE) this.timeline.shift();
  }

  stats(): BatchStats {
    // Index n = steps that carried n sessions, for every n seen (never more than parallel: a step
    // over it would show here, not vanish).
    const perStep = Array.from({ length: Math.max(this.parallel + 1, this.perStep.length) }, (_, i) => this.perStep[i] ?? 0);
    const recent = this.timeline.map((r) => ({ ...r, verify: r.verify.map((v) => ({ ...v })) }));
    return { ...this.counters, sessionsPerStep: perStep, recent, waiting: this.pending.length, holding: this.holders.size, verifySlots: this.verifySlots };
  }
}
