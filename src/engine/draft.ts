// A draft model for the engine (`--draft DIR`, EngineOptions.draft; docs/DRAFT.md): checked against
// the target before the plan and before any weight is read (checkDraft: config, tensors, the
// context it must reach; src/memory/draft-plan.ts), then loaded resident after the target's
// weights (openDraft), its capture wired into the target's passes and its state into every session.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import type { Kernels } from "../kernels.ts";
import { prepareDraft, type DraftSetup } from "../memory/draft-plan.ts";
import { DraftModel } from "../model/draft.ts";
import { DraftWeights } from "../model/draft-weights.ts";
import type { Addr } from "../model/cmem.ts";
import type { WeightProvider } from "../model/weights.ts";
import type { ModelConfig } from "../checkpoint/types.ts";

/** Whether `opts.draft` names a draft ("none" and undefined do not). */
export const wantsDraft = (draft: string | undefined): draft is string => draft !== undefined && draft !== "none";

/** The draft of `dir` checked against the target checkpoint (src/memory/draft-plan.ts). */
export function checkDraft(k: Kernels, target: Checkpoint, dir: string, context: number, drafts: number): DraftSetup {
  const embed = target.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`);
  return prepareDraft(target.config, embed, dir, context, drafts, k);
}

/** The draft loaded (its tensors read resident) on the target's weights; the caller owns it. */
export function openDraft(k: Kernels, setup: DraftSetup, target: ModelConfig, targetWeights: WeightProvider, context: number, drafts: number): DraftModel {
  const own = setup.sharedEmbedding ? undefined : setup.checkpoint.embed;
  const w = new DraftWeights(k, setup.sources, own, setup.crcs);
  try {
    const embed = own ? (id: number, dst: Addr) => w.embedRow(id, dst) : (id: number, dst: Addr) => targetWeights.embedRow(id, dst);
    return new DraftModel(k, target, setup.checkpoint, w, embed, context, drafts);
  } catch (err) {
    w.free();
    throw err;
  }
}
