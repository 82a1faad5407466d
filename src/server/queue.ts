// Admission to the engine: at most `slots` generations run at once (engine.parallel: they advance
// together in the batch scheduler's steps), the others wait in arrival order.
//
// Invariants:
//   - at most `slots` holders at a time; `release()` hands the place to the oldest live waiter;
//   - at most `capacity` waiters; one more is refused at once (the caller answers 503) instead of
//     queueing without bound while the machine is saturated;
//   - a waiter whose client went away (signal aborted) leaves the queue and never runs.
import { ApiError, clientGone } from "./errors.ts";

interface Waiter {
  grant: (release: () => void) => void;
}

export class GenerationQueue {
  private holders = 0;
  private readonly waiters: Waiter[] = [];
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

  /** Records how long a generation held the engine (feeds the Retry-After estimate). */
  recordDuration(ms: number): void {
    this.meanMs = this.meanMs === 0 ? ms : 0.8 * this.meanMs + 0.2 * ms;
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return; // idempotent: a finally and an error path may both release
      released = true;
      const next = this.waiters.shift();
      if (next) next.grant(this.releaser());
      else this.holders--;
    };
  }
}
