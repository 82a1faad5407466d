// Admission to the engine: at most `slots` generations run at once (engine.parallel: they advance
// together in the batch scheduler's steps), the others wait in arrival order.
//
// Invariants:
//   - at most `slots` holders at a time; `release()` hands the place to the oldest live waiter;
//   - at most `capacity` waiters; one more is refused at once (the caller answers 503) instead of
//     queueing without bound while the machine is saturated;
//   - a waiter whose client went away (signal aborted) leaves the queue and never runs;
//   - once closed (the server stops), nothing more is granted: waiters and later callers get 503,
//     running generations see `closed` (their stop condition) and `close()` resolves when the last
//     one released its place, so the owner may then free what they used (the sessions).
import { ApiError, clientGone } from "./errors.ts";

const stopping = () => new ApiError(503, "the server is stopping", "overloaded_error", null, "server_stopping");

interface Waiter {
  grant: (release: () => void) => void;
  refuse: (err: unknown) => void;
}

export class GenerationQueue {
  private holders = 0;
  private readonly waiters: Waiter[] = [];
  private idle?: () => void;
  /** Set by close(): running generations stop at their next token. */
  closed = false;
  /** Mean wall time of recent generations (ms), for Retry-After. */
  private meanMs = 0;

  constructor(
    readonly capacity: number,
    /** Generations that may run at once. */
    readonly slots = 1,
  ) {}

  get waiting(): number {
    return this.waiters.length;
  }
  /** Generations running now (0 … slots). */
  get running(): number {
    return this.holders;
  }

  /** Resolves with a release function once it is this caller's turn. Rejects with a 503 ApiError
   *  when the queue is full, or with the signal's reason when the client goes away first. */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(clientGone("while it waited"));
    if (this.closed) return Promise.reject(stopping());
    if (this.holders < this.slots) {
      this.holders++;
      return Promise.resolve(this.releaser());
    }
    if (this.waiters.length >= this.capacity) {
      // Each place frees after about one generation's time, `slots` of them at once.
      const retryAfterS = Math.max(1, Math.ceil(((this.waiters.length + 1) * this.meanMs) / this.slots / 1000));
      return Promise.reject(
        new ApiError(503, `server busy: ${this.waiters.length} requests already waiting for the engine`, "overloaded_error", null, "queue_full", {
          "Retry-After": String(retryAfterS),
        }),
      );
    }
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        grant: (release) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(release);
        },
        refuse: (err) => {
          signal?.removeEventListener("abort", onAbort);
          reject(err);
        },
      };
      const onAbort = () => {
        const i = this.waiters.indexOf(w);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(clientGone("while it waited"));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(w);
    });
  }

  /** Take no more generations (waiters get 503); resolves once every running one has released
   *  its place. */
  close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters.splice(0)) w.refuse(stopping());
    if (this.holders === 0) return Promise.resolve();
    return new Promise((resolve) => (this.idle = resolve));
  }

  /** Records how long a generation held the engine (feeds the Retry-After estimate). */
  recordDuration(ms: number): void {
    this.meanMs = this.meanMs === 0 ? ms : 0.8 * this.meanMs + 0.2 * ms;
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return; // idempotent: a finally and an error path may both release
      released = true;
      const next = this.closed ? undefined : this.waiters.shift();
      if (next) return next.grant(this.releaser());
      this.holders--;
      if (this.holders === 0) this.idle?.();
    };
  }
}
