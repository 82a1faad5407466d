// What a draft model costs the memory plan (docs/PLAN.md "Draft"): its weights, held resident
// as released (bf16) or packed (int8/int4, `k3 pack --draft`), its own embedding table when it
// does not share the target's, one session's draft state per parallel session (its latent cache
// for the context and its taps ring), its scratch, and the target pass's capture buffer. Every
// figure is what the code allocates (the tables of src/model/buffers.ts, the allocator's rounding).
//
// Placement: resident. A streamed draft would read its weights once per chain step (k times per
// pass) where a pinned one costs its bytes once: pinning X bytes of draft takes X bytes of trunk
// pins, i.e. X more bytes read per pass, while streaming it reads ≥ X per pass in which it drafts
// (and its refill matrices every pass). So resident is never worse whenever the draft runs at
// all; the planner's choice is the format (the smallest pack there is) and whether it fits.
import type { DraftCheckpoint } from "../checkpoint/draft.ts";
import { allocationBytes } from "../model/cmem.ts";
import { draftScratchBytes, draftStateBytes, DRAFT_REFILL_ROWS } from "../model/buffers.ts";
import type { DraftTensorSource } from "../model/weights.ts";

/** The draft's items for the planner (src/memory/plan.ts sums them as fixed items). */
export interface DraftPlanInput {
  /** How plans and stats name it: its folder's name (or repo id), variant and format. */
  name: string;
  variant: string;
  format: "bf16" | "int8" | "int4";
  /** Resident weights (and the draft's own embedding when not shared), as allocated. */
  weightBytes: number;
  /** One session's draft state. */
  stateBytes: number;
  /** The draft's scratch. */
  scratchBytes: number;
  /** Layers every target pass captures for it. */
  taps: number;
  /** Whether it reads the target's embedding rows (else its own table is in weightBytes). */
  sharedEmbedding: boolean;
}

/** The released draft's tensors as they lie in its safetensors file (bf16). */
export function releasedDraftSources(ck: DraftCheckpoint): DraftTensorSource[] {
  return [...ck.tensors.values()].map((t) => ({ name: t.name, file: t.file, offset: t.offset, bytes: t.bytes, dtype: t.dtype, shape: t.shape }));
}

/** Bytes DraftWeights allocates for these sources (and an own embedding of `embedBytes`). */
export function draftWeightBytes(sources: DraftTensorSource[], embedBytes = 0): number {
  const own = embedBytes > 0 ? allocationBytes(embedBytes) : 0;
  return sources.reduce((a, t) => a + allocationBytes(t.bytes) + (t.scales ? allocationBytes(t.scales.bytes) : 0), own);
}

export function draftPlanInput(ck: DraftCheckpoint, o: { context: number; drafts: number; sharedEmbedding: boolean; sources: DraftTensorSource[]; format: DraftPlanInput["format"] }): DraftPlanInput {
  const d = ck.config;
  return {
    name: ck.name,
    variant: d.variant,
    format: o.format,
    weightBytes: draftWeightBytes(o.sources, o.sharedEmbedding ? 0 : (ck.embed?.bytes ?? 0)),
    stateBytes: draftStateBytes(d, o.context, o.drafts),
    scratchBytes: draftScratchBytes(d, { refillRows: DRAFT_REFILL_ROWS, context: o.context }),
    taps: d.captureLayers.length,
    sharedEmbedding: o.sharedEmbedding,
  };
}
