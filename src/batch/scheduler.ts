// Continuous batching: many sessions advance in one forward pass (the trunk read once per step,
// each distinct expert once), joining and leaving at step boundaries.
//
// A generation that needs the model submits a ticket (its session, the tokens to feed, whether it
// wants logits) and waits; the scheduler runs a step on the event loop (setImmediate: between
// steps, new requests and disconnects are seen) over the waiting tickets and settles them.
//
// The step rule (docs/SERVER.md "Scheduling"):
//   - decode tickets (running streams) first, in submission order, then prefill pieces (a
//     newcomer's prompt, at most one chunk each), in submission order, while the pass has rows
//     left (`rows` = chunk + parallel − 1: every running stream plus one whole chunk always fit);
//   - a ticket that does not fit waits for the next step; the first ticket always runs.
// So a running stream waits at most one chunk's worth of extra rows per step for a newcomer, and a
// newcomer's prompt advances one chunk per step.
//
// Speculation (the engine allows it only with one session per pass, --parallel 1): a verify ticket
// runs alone, and its session then holds the scheduler (`hold`) until its accepted drafts are kept
// (`release`): no other session's pass may run in between, since a pass invalidates the verify
// pass's kept inputs (src/model/forward.ts).
//
// Invariants:
//   - a ticket runs at most once, and exactly once unless cancelled before its step;
//   - one step = one call of the pass function (synchronous): there is no partly-run ticket;
//   - a session has at most one ticket in flight (its generation waits for it);
//   - an error in a pass settles every ticket of that pass with the error (each of those
//     sessions is marked dirty by the model: their states may have advanced part-way).
import { K3Error } from "../errors.ts";
import type { SessionState } from "../model/state.ts";
import { diffStats, divideStats, type WeightStats } from "../model/weights.ts";

export interface PassPart {
  state: SessionState;
  ids: number[];
  /** Whether this part's last row needs logits. */
  logits: boolean;
  /** A speculative verify pass: logits at every row, run alone. */
  verify?: boolean;
}

/** One pass over several sessions' parts; returns each part's logits (a copy the caller keeps),
 *  every row's for a verify part, or null when the part asked for none. */
export type PassFn = (parts: PassPart[]) => (Float32Array | Float32Array[] | null)[];

export type TicketKind = "decode" | "prefill" | "verify";

export class Ticket {
  done = false;
  logits: Float32Array | null = null;
  /** A verify ticket's logits, one row per position. */
  rows: Float32Array[] | null = null;
  error: unknown;
  /** This ticket's share of the step's weight reads (the step's counters ÷ its tickets). */
  share?: WeightStats;
  /** Sessions in the step that ran it. */
  stepSessions = 0;
  constructor(
    readonly part: PassPart,
    readonly kind: TicketKind,
    readonly seq: number,
  ) {}
}

/** One step, for /k3/stats's timeline. */
export interface StepRecord {
  /** Unix ms when the step ended. */
  at: number;
  sessions: number;
  decodeRows: number;
  prefillRows: number;
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
  /** Weight bytes read by the steps (trunk + experts). */
  bytesRead: number;
  /** Their share for prefill rows (each step's bytes split by rows: an estimate of what a prompt
   *  token costs, for the prefix cache's "bytes saved"). */
  prefillBytesRead: number;
  /** The last TIMELINE steps, oldest first. */
  recent: StepRecord[];
  /** Tickets waiting for a step now. */
  waiting: number;
}

const TIMELINE = 256;

export class BatchScheduler {
  private pending: Ticket[] = [];
  private seq = 0;
  private scheduled = false;
  private waiters: (() => void)[] = [];
  /** A session whose verify pass's drafts are still being kept: only its tickets may run. */
  private holder?: SessionState;
  private readonly counters = { steps: 0, rows: 0, decodeTokens: 0, prefillTokens: 0, bytesRead: 0, prefillBytesRead: 0 };
  private readonly perStep: number[] = [];
  private readonly timeline: StepRecord[] = [];

  constructor(
    private readonly pass: PassFn,
    /** Rows one pass holds. */
    readonly rows: number,
    /** Sessions one pass holds (logit rows). */
    readonly parallel: number,
    private readonly weightStats: () => WeightStats,
  ) {
    if (!Number.isInteger(rows) || rows < 1) throw new K3Error("INTERNAL", `a pass of ${rows} rows`);
    if (!Number.isInteger(parallel) || parallel < 1) throw new K3Error("INTERNAL", `${parallel} parallel sessions`);
  }

  /** Queue a part for the next step that has room; the step is scheduled on the event loop. */
  submit(part: PassPart, kind: TicketKind): Ticket {
    if (part.ids.length === 0) throw new K3Error("INTERNAL", "a ticket with no tokens");
    if (part.ids.length > this.rows) throw new K3Error("INTERNAL", `a ticket of ${part.ids.length} tokens, a pass holds ${this.rows}`);
    if ((kind === "verify") !== (part.verify === true)) throw new K3Error("INTERNAL", "a verify ticket is a verify part");
    if (this.pending.some((t) => t.part.state === part.state)) throw new K3Error("INTERNAL", "a session submitted a second ticket before its first ran");
    const t = new Ticket(part, kind, this.seq++);
    this.pending.push(t);
    this.schedule();
    return t;
  }

  /** Withdraw a ticket that has not run (a generation abandoned while it waited). */
  cancel(t: Ticket): void {
    const i = this.pending.indexOf(t);
    if (i >= 0) this.pending.splice(i, 1);
  }

  /** Only `state`'s tickets run until release(state) (a verify pass's drafts being kept). */
  hold(state: SessionState): void {
    if (this.holder && this.holder !== state) throw new K3Error("INTERNAL", "two sessions hold the batch scheduler");
    this.holder = state;
  }

  /** Lift hold(state) (nothing when `state` does not hold it). */
  release(state: SessionState): void {
    if (this.holder !== state) return;
    this.holder = undefined;
    if (this.pending.length > 0) this.schedule();
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

  /** The tickets of the next step, by the rule in the header. */
  private pick(): Ticket[] {
    const rank = (t: Ticket) => (t.kind === "prefill" ? 1 : 0);
    const order = this.pending.filter((t) => !this.holder || t.part.state === this.holder).sort((a, b) => rank(a) - rank(b) || a.seq - b.seq);
    const out: Ticket[] = [];
    let rows = 0;
    for (const t of order) {
      if (out.length >= this.parallel) break;
      // A verify pass runs alone (its logit rows and rollback scratch are one session's).
      if (t.kind === "verify") {
        if (out.length === 0) return [t];
        continue;
      }
      const n = t.part.ids.length;
      if (out.length > 0 && rows + n > this.rows) continue;
      out.push(t);
      rows += n;
    }
    return out;
  }

  /** Run one step now (synchronously) over what is waiting; settles its tickets and wakes every
   *  waiter. Exposed for tests and for callers without an event loop. */
  step(): void {
    const run = this.pick();
    if (run.length > 0) {
      this.pending = this.pending.filter((t) => !run.includes(t));
      const before = this.weightStats();
      const t0 = performance.now();
      let out: (Float32Array | Float32Array[] | null)[] | undefined;
      let error: unknown;
      try {
        out = this.pass(run.map((t) => t.part));
      } catch (err) {
        error = err;
      }
      const ms = performance.now() - t0;
      const read = diffStats(this.weightStats(), before);
      const share = divideStats(read, run.length);
      run.forEach((t, i) => {
        t.done = true;
        t.stepSessions = run.length;
        t.share = share;
        const o = out?.[i];
        if (Array.isArray(o)) t.rows = o;
        else if (out) t.logits = o ?? null;
        else t.error = error;
      });
      this.record(run, ms, read.trunkBytesRead + read.expertBytesRead);
    }
    const wake = this.waiters;
    this.waiters = [];
    for (const w of wake) w();
    if (this.pending.length > 0 && run.length > 0) this.schedule();
  }

  private record(run: Ticket[], ms: number, bytesRead: number): void {
    const c = this.counters;
    let decodeRows = 0;
    let prefillRows = 0;
    for (const t of run) {
      if (t.kind !== "prefill") decodeRows += t.part.ids.length;
      else prefillRows += t.part.ids.length;
    }
    c.steps++;
    c.rows += decodeRows + prefillRows;
    c.decodeTokens += decodeRows;
    c.prefillTokens += prefillRows;
    c.bytesRead += bytesRead;
    c.prefillBytesRead += (bytesRead * prefillRows) / (decodeRows + prefillRows);
    this.perStep[run.length] = (this.perStep[run.length] ?? 0) + 1;
    this.timeline.push({ at: Date.now(), sessions: run.length, decodeRows, prefillRows, bytesRead, ms: Math.round(ms * 100) / 100 });
    if (this.timeline.length > TIMELINE) this.timeline.shift();
  }

  stats(): BatchStats {
    // Index n = steps that carried n sessions, for every n seen (never more than parallel: a step
    // over it would show here, not vanish).
    const perStep = Array.from({ length: Math.max(this.parallel + 1, this.perStep.length) }, (_, i) => this.perStep[i] ?? 0);
    return { ...this.counters, sessionsPerStep: perStep, recent: this.timeline.slice(), waiting: this.pending.length };
  }
}
