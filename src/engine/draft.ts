// A draft model for the engine (`--draft DIR`, EngineOptions.draft; docs/DRAFT.md): checked against
// the target before the plan and before any weight is read (prepareDraft: config, tensors, the
// context it must reach), then loaded resident after the target's weights (openDraft), its
// capture wired into the target's passes and its state into every session.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { openDraftCheckpoint, sameEmbedding, type DraftCheckpoint } from "../checkpoint/draft.ts";
import { LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import { kernelLimits, type Kernels } from "../kernels.ts";
import { draftPlanInput, releasedDraftSources, type DraftPlanInput } from "../memory/draft-plan.ts";
import { DraftModel } from "../model/draft.ts";
import { ropeFrequencies } from "../model/draft-math.ts";
import { DraftWeights } from "../model/draft-weights.ts";
import type { Addr } from "../model/cmem.ts";
import type { DraftTensorSource, WeightProvider } from "../model/weights.ts";
import type { ModelConfig } from "../checkpoint/types.ts";

export interface DraftSetup {
  checkpoint: DraftCheckpoint;
  /** The draft reads the target's embedding rows (its own table equals the target's, sampled). */
  sharedEmbedding: boolean;
  sources: DraftTensorSource[];
  plan: DraftPlanInput;
}

/** Whether `opts.draft` names a draft ("none" and undefined do not). */
export const wantsDraft = (draft: string | undefined): draft is string => draft !== undefined && draft !== "none";

/**
 * Check the draft folder against the target: its config and every tensor (src/checkpoint/draft.ts),
 * the context it must reach (its max_position_embeddings, its RoPE's angle limit in the kernels),
 * and whether it shares the target's embedding (64 sampled rows of each table compared: the only
 * weight bytes read before the plan). `drafts`: the most drafts a verify pass may check.
 */
export function prepareDraft(k: Kernels, target: Checkpoint, dir: string, context: number, drafts: number): DraftSetup {
  const ck = openDraftCheckpoint(dir, target.config);
  const d = ck.config;
  if (context > d.maxPositions)
    throw new K3Error("USAGE", `--context ${context} is more than the draft's max_position_embeddings (${d.maxPositions}, ${ck.dir})`, [`use --context ${d.maxPositions} or less, or another draft`]);
  const limit = kernelLimits(k).ropeAngle;
  const top = Math.max(...ropeFrequencies(d)) * (context - 1);
  if (!(top < limit)) throw new K3Error("USAGE", `the draft's RoPE cannot reach position ${context - 1} (angle ${top.toFixed(0)} rad ≥ the kernels' ${limit})`, [`use a smaller --context`]);
  const table = target.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`);
  const sharedEmbedding = !ck.embed || (table !== undefined && sameEmbedding(ck.embed, table));
  if (!ck.embed && !table) throw new K3Error("CHECKPOINT", `${ck.file}: neither the draft nor the target has an embedding table`);
  const sources = releasedDraftSources(ck);
  const plan = draftPlanInput(ck, { context, drafts, sharedEmbedding, sources, format: "bf16" });
  return { checkpoint: ck, sharedEmbedding, sources, plan };
}

/** The draft loaded (its tensors read resident) on the target's weights; the caller owns it. */
export function openDraft(k: Kernels, setup: DraftSetup, target: ModelConfig, targetWeights: WeightProvider, context: number, drafts: number): DraftModel {
  const own = setup.sharedEmbedding ? undefined : setup.checkpoint.embed;
  const w = new DraftWeights(k, setup.sources, own);
  try {
    const embed = own ? (id: number, dst: Addr) => w.embedRow(id, dst) : (id: number, dst: Addr) => targetWeights.embedRow(id, dst);
    return new DraftModel(k, target, setup.checkpoint, w, embed, context, drafts);
  } catch (err) {
    w.free();
    throw err;
  }
}
