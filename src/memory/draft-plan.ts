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
import { openDraftCheckpoint, sameEmbedding, type DraftCheckpoint } from "../checkpoint/draft.ts";
import { ropeFrequencies } from "../checkpoint/draft-rope.ts";
import type { ModelConfig, TensorEntry } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { kernelLimits, loadKernels, type Kernels } from "../kernels.ts";
import { allocationBytes } from "../model/cmem.ts";
import { draftScratchBytes, draftStateBytes, DRAFT_REFILL_ROWS } from "../model/buffers.ts";
import type { DraftTensorSource } from "../model/weights.ts";
import { DRAFT_FORMATS, loadDraftPack, type DraftFormat } from "./draft-pack.ts";
import type { MemoryPlan } from "./plan.ts";

/** The draft's items for the planner (src/memory/plan.ts sums them as fixed items). */
export interface DraftPlanInput {
  /** How plans and stats name it: its folder's name (or repo id), variant and format. */
  name: string;
  variant: string;
  format: DraftFormat;
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

export interface DraftSetup {
  checkpoint: DraftCheckpoint;
  /** The draft reads the target's embedding rows (its own table equals the target's, sampled). */
  sharedEmbedding: boolean;
  format: DraftFormat;
  sources: DraftTensorSource[];
  /** CRC-32C of each tensor as packed (a pack's; none for the released file). */
  crcs?: Record<string, number>;
  plan: DraftPlanInput;
  /** The settings it was planned at. */
  context: number;
  drafts: number;
}

/** The same draft in another format: a pack of it (src/memory/draft-pack.ts), refused when none was made. */
export function draftInFormat(setup: DraftSetup, format: DraftFormat): DraftSetup {
  if (format === setup.format) return setup;
  const ck = setup.checkpoint;
  const pack = format === "bf16" ? { tensors: releasedDraftSources(ck), crcs: undefined } : loadDraftPack(ck, format);
  const plan = draftPlanInput(ck, { context: setup.context, drafts: setup.drafts, sharedEmbedding: setup.sharedEmbedding, sources: pack.tensors, format });
  return { ...setup, format, sources: pack.tensors, crcs: pack.crcs, plan };
}

/**
 * Check the draft folder against the target: its config and every tensor (src/checkpoint/draft.ts),
 * the context it must reach (its max_position_embeddings, its RoPE's angle limit in the kernels),
 * and whether it shares the target's embedding (`targetEmbed`: EMBED_SAMPLE_ROWS rows of each table
 * compared, the only weight bytes read before the plan; undefined — release metadata without
 * weights — plans it shared). `drafts`: the most drafts a verify pass may check.
 */
export function prepareDraft(target: ModelConfig, targetEmbed: TensorEntry | undefined, dir: string, context: number, drafts: number, k: Kernels = loadKernels()): DraftSetup {
  const ck = openDraftCheckpoint(dir, target);
  const d = ck.config;
  if (context > d.maxPositions)
    throw new K3Error("USAGE", `--context ${context} is more than the draft's max_position_embeddings (${d.maxPositions}, ${ck.dir})`, [`use --context ${d.maxPositions} or less, or another draft`]);
  const limit = kernelLimits(k).ropeAngle;
  const top = Math.max(...ropeFrequencies(d)) * (context - 1);
  if (!(top < limit)) throw new K3Error("USAGE", `the draft's RoPE cannot reach position ${context - 1} (angle ${top.toFixed(0)} rad ≥ the kernels' ${limit})`, ["use a smaller --context"]);
  const sharedEmbedding = !ck.embed || targetEmbed === undefined || sameEmbedding(ck.embed, targetEmbed);
  const sources = releasedDraftSources(ck);
  const plan = draftPlanInput(ck, { context, drafts, sharedEmbedding, sources, format: "bf16" });
  return { checkpoint: ck, sharedEmbedding, format: "bf16", sources, plan, context, drafts };
}

/**
 * Where the draft costs the fewest bytes per generated token (docs/DRAFT.md "Placement"): held
 * resident in each format there is (the released bf16, and packs `k3 pack --draft` made), the one
 * whose plan reads the fewest disk bytes per decoded token (a smaller draft leaves more of the trunk
 * pinned and more expert slots; acceptance is taken to be the same, the packs' loss being at the
 * margin: docs/DRAFT.md measures it); within 1 % the most exact (no disk reads at all: bf16).
 * A format whose plan does not fit is skipped; none fitting is the smallest one's refusal.
 */
export function placeDraft<T>(formats: readonly DraftFormat[], plan: (f: DraftFormat) => T, planOf: (t: T) => MemoryPlan): T {
  const fits: { t: T; bytes: number }[] = [];
  let refusal: unknown;
  for (const f of DRAFT_FORMATS.filter((x) => formats.includes(x))) {
    try {
      const t = plan(f);
      fits.push({ t, bytes: planBytesPerToken(planOf(t)) });
    } catch (err) {
      if (!(err instanceof K3Error && err.code === "BUDGET")) throw err;
      refusal = err;
    }
  }
  if (fits.length === 0) throw refusal;
  const least = Math.min(...fits.map((x) => x.bytes));
  return fits.find((x) => x.bytes <= least * 1.01)!.t;
}

/** The disk bytes a plan reads per decoded token: the streamed trunk, and the experts its slots
 *  miss (uniform routing: a slot for a fraction of the experts misses the rest). */
export function planBytesPerToken(p: MemoryPlan): number {
  return p.streamedBytesPerToken + p.expertBytesPerTokenAllMiss * Math.max(0, 1 - p.expertSlots / p.expertCount);
}

/** What holding the draft costs the target at a budget (k3 plan --draft): its share of the
 *  budget (its items and the pass's capture), and the bytes per decoded token the target's plan
 *  reads more for it (the pins and expert slots that share displaces), before any draft is kept. */
export interface DraftCost {
  shareBytes: number;
  bytesPerTokenWithout: number;
  extraBytesPerToken: number;
}

export function draftCost(withDraft: MemoryPlan, without: MemoryPlan): DraftCost {
  const bytes = (p: MemoryPlan, names: string[]) => p.items.filter((i) => names.includes(i.name)).reduce((a, i) => a + i.bytes, 0);
  const capture = bytes(withDraft, ["scratch"]) - bytes(without, ["scratch"]);
  const bytesPerTokenWithout = planBytesPerToken(without);
  return { shareBytes: bytes(withDraft, ["draft", "draft state", "draft scratch"]) + capture, bytesPerTokenWithout, extraBytesPerToken: planBytesPerToken(withDraft) - bytesPerTokenWithout };
}
