// Trunk "units": what a token reads in full every step. Units 0..N−1 are the layers' non-expert
// tensors; unit N is the head (lm_head + final norm + output AttnRes mix). The streaming
// provider walks them cyclically; verify checksums them; the planner sizes them.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { LM_HEAD_NAME, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import type { TensorEntry } from "../checkpoint/types.ts";

export function isHeadTensor(name: string): boolean {
  return name === LM_HEAD_NAME || name === `${LM_MODEL_PREFIX}norm.weight` || name.startsWith(`${LM_MODEL_PREFIX}output_attn_res_`);
}

/** Tensors of each trunk unit: [numLayers + 1] lists (the last is the head). */
export function trunkUnitEntries(ckpt: Checkpoint): TensorEntry[][] {
  const N = ckpt.config.numLayers;
  const byUnit: TensorEntry[][] = Array.from({ length: N + 1 }, () => []);
  const layers = `${LM_MODEL_PREFIX}layers.`;
  for (const [name, te] of ckpt.tensors) {
    if (isHeadTensor(name)) byUnit[N]!.push(te);
    else if (name.startsWith(layers) && !name.includes(".experts.")) byUnit[Number(name.slice(layers.length).split(".")[0])]!.push(te);
  }
  return byUnit;
}

export function unitName(u: number, numLayers: number): string {
  return u === numLayers ? "the head (lm_head, final norms)" : `layer ${u}`;
}
