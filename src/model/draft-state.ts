// What the draft model allocates, declared once (as buffers.ts does for the target): its scratch
// and one session's draft state. The draft allocates from these tables and the planner sums them.
//
// A session's draft state (DRAFTERS.md §3.7):
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
import { loadKernels, type Kernels } from "../kernels.ts";
import { allocationBytes, CBuffers, type CBuf } from "./cmem.ts";

/** The draft's scratch sizes: refill rows per batch (committed rows are built this many at a time),
 *  one query row (the chain is sequential), the context its attention may span. */
export interface DraftShape {
  refillRows: number;
  context: number;
}

/** Committed rows are built in batches of this many (the matmuls' efficient range; bounds the scratch). */
export const DRAFT_REFILL_ROWS = 32;

type Size = (d: DraftConfig, s: DraftShape) => number;
const perRefill = (n: (d: DraftConfig) => number): Size => (d, s) => s.refillRows * n(d);
const one = (n: (d: DraftConfig) => number): Size => (d) => n(d);
const taps = (d: DraftConfig) => d.captureLayers.length;

/** The draft's scratch (src/model/draft.ts), in allocation order. */
export const DRAFT_BUFFERS = {
  fcin: perRefill((d) => taps(d) * d.hidden), // [rows][taps·E]: the (normed) taps, fc's input
  h: perRefill((d) => d.hidden), // fc's output (the row's hidden)
  emb: perRefill((d) => d.hidden), // the rows' token embeddings
  u: perRefill((d) => 2 * d.hidden), // [RMSNorm(e) | RMSNorm(h)]
  ckv: perRefill((d) => d.kvLoraRank + d.qkRope), // kv_a's output, before the norm
  hq: one((d) => d.hidden), // the query row's residual stream (h, r1, r2; the chain's feedback)
  qa: one((d) => d.qLoraRank),
  q: one((d) => d.heads * (d.qkNope + d.qkRope)),
  att: one((d) => d.heads * d.vHead),
  o: one((d) => d.hidden),
  z: one((d) => d.hidden),
  g: one((d) => d.intermediate),
  up: one((d) => d.intermediate),
  mlp: one((d) => d.hidden),
  y: one((d) => d.hidden),
  logits: one((d) => d.vocab),
  mla_scratch: (d, s) => Number(loadKernels().k3_mla_scratch_floats(d.kvLoraRank, s.context)), // the target's MLA kernel, one slot per pool thread
} satisfies Record<string, Size>;

export type DraftBufferName = keyof typeof DRAFT_BUFFERS;
export type DraftBuffers = { readonly [K in DraftBufferName]: CBuf };

export function allocDraftBuffers(mem: CBuffers, d: DraftConfig, s: DraftShape): DraftBuffers {
  const out: Partial<Record<DraftBufferName, CBuf>> = {};
  for (const [name, size] of Object.entries(DRAFT_BUFFERS) as [DraftBufferName, Size][]) out[name] = mem.floats(size(d, s), `draft ${name}`);
  return out as DraftBuffers;
}

/** Bytes allocDraftBuffers takes. */
export function draftScratchBytes(d: DraftConfig, s: DraftShape): number {
  return (Object.values(DRAFT_BUFFERS) as Size[]).reduce((a, size) => a + allocationBytes(4 * size(d, s)), 0);
}

/** Floats of one cache row: [c (R) | k_r (dr)]. */
export const draftRowFloats = (d: DraftConfig) => d.kvLoraRank + d.qkRope;

/** Bytes one session's draft state takes: the cache for `context` positions and the taps store. */
export function draftStateBytes(d: DraftConfig, context: number, storeRows: number): number {
  return allocationBytes(4 * context * draftRowFloats(d)) + allocationBytes(4 * taps(d) * storeRows * d.hidden);
}

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
      this.store = this.mem.floats(taps(cfg) * storeRows * cfg.hidden, "draft taps store");
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
