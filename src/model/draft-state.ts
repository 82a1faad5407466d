// A session's draft state (DRAFTERS.md §3.7; its sizes are declared with the target's in
// buffers.ts, which the planner sums):
//   cache   the draft's latent cache, [context][R + dr] f32: row j = (RMSNorm(c_kv), rotated k_r)
//           of the draft row at position j, built from the TARGET's taps at j and the token at
//           j + 1. Rows [validFrom, rows) are committed and the draft attends over exactly those:
//           rows a session lacks (after a restored snapshot or a loaded session file, which hold
//           only the target's state) are skipped, never read as zeros. Chain rows past `rows` are
//           one proposal's scratch, overwritten by the next commit.
//   store   a ring of the target's taps of the last `window` positions [storeFrom, storeEnd) not
//           all committed yet: rows are built lazily, in batches, when the draft is about to
//           propose or when a position would leave the ring — so a draft the cost model leaves
//           idle costs the copy of its taps per token and a batched refill per `window` tokens,
//           not a refill matmul per token. A verify pass stores all its rows; the ones the session
//           does not keep are cut off by the next pass (positions are absolute).
// reset() (the session's reset, also inside every restore) empties all of it.
import type { DraftConfig } from "../checkpoint/draft-config.ts";
import type { Kernels } from "../kernels.ts";
import { draftRowFloats } from "./buffers.ts";
import { at, CBuffers, type Addr, type CBuf } from "./cmem.ts";

export class DraftState {
  readonly cache: CBuf;
  readonly store: CBuf;
  rows = 0;
  validFrom = 0;
  storeFrom = 0;
  storeEnd = 0;
  private mem: CBuffers;

  constructor(
    k: Kernels,
    readonly cfg: DraftConfig,
    readonly context: number,
    /** Positions the taps ring holds (≥ 1 + the most drafts a verify pass checks). */
    readonly window: number,
  ) {
    this.mem = new CBuffers(k);
    try {
      this.cache = this.mem.floats(context * draftRowFloats(cfg), "draft cache");
      this.store = this.mem.floats(cfg.captureLayers.length * window * cfg.hidden, "draft taps ring");
    } catch (err) {
      this.mem.free();
      throw err;
    }
  }

  /** Nothing committed, nothing stored (the session starts over, or is about to be restored). */
  reset(): void {
    this.rows = 0;
    this.validFrom = 0;
    this.storeFrom = 0;
    this.storeEnd = 0;
  }

  /** Whether the taps of `pos` are in the ring. */
  stored(pos: number): boolean {
    return pos >= this.storeFrom && pos < this.storeEnd;
  }

  /** Tap j of stored position pos (ring slot pos mod window). */
  tapAt(j: number, pos: number): Addr {
    const E = this.cfg.hidden;
    return at(this.store.ptr, (j * this.window + (pos % this.window)) * E * 4);
  }

  get bytes(): number {
    return this.mem.totalBytes;
  }

  free(): void {
    this.mem.free();
  }
}
