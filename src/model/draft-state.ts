// A session's draft state (its sizes are declared with the target's in buffers.ts, which the
// planner sums) (DRAFTERS.md §3.7):
//   cache   the draft's latent cache, [context][R + dr] f32: row j = (RMSNorm(c_kv), rotated k_r)
//           of the draft row at position j, built from the TARGET's taps at j and token j + 1;
//   rows    rows [validFrom, rows) are committed (the draft attends over exactly those: rows a
//           session lacks — after a restored snapshot or a loaded session file — are skipped, not
//           zeros); chain rows past `rows` are scratch of one proposal and are overwritten;
//   store   target taps of positions whose successor the session had not taken yet when their pass
//           ended: the last row of a plain pass, or every row of a verify pass (its drafted rows
//           are kept one at a time later); [taps][storeRows][E] for positions [storeFrom, +storeCount).
// reset() (the session's reset, also inside every restore) empties all of it.
import type { DraftConfig } from "../checkpoint/draft-config.ts";
import type { Kernels } from "../kernels.ts";
import { draftRowFloats } from "./buffers.ts";
import { CBuffers, type CBuf } from "./cmem.ts";

export class DraftState {
  readonly cache: CBuf;
  readonly store: CBuf;
  rows = 0;
  validFrom = 0;
  storeFrom = 0;
  storeCount = 0;
  private mem: CBuffers;

  constructor(
    k: Kernels,
    readonly cfg: DraftConfig,
    readonly context: number,
    /** Rows the taps store holds: 1 + the most drafts a verify pass checks. */
    readonly storeRows: number,
  ) {
    this.mem = new CBuffers(k);
    try {
      this.cache = this.mem.floats(context * draftRowFloats(cfg), "draft cache");
      this.store = this.mem.floats(cfg.captureLayers.length * storeRows * cfg.hidden, "draft taps store");
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
    this.storeCount = 0;
  }

  /** Whether the taps of `pos` are in the store. */
  stored(pos: number): boolean {
    return this.storeCount > 0 && pos >= this.storeFrom && pos < this.storeFrom + this.storeCount;
  }

  get bytes(): number {
    return this.mem.totalBytes;
  }

  free(): void {
    this.mem.free();
  }
}
