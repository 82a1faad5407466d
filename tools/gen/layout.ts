// Which tensor goes to which shard, in which order (MODEL.md §1, §3; the real index in
// reference/k3/model.safetensors.index.json.gz):
//   - shard names `model-000NN-of-0000MM.safetensors` (5-digit index, 6-digit total), L + 3 shards;
//   - layer l (zero-based) → shard l+1; embedding, lm_head, norm, output_attn_res_* → shard L+1
//     (the release's 94th of 96); mm_projector → shard L+2; vision_tower → shard L+3.
//   - inside a layer's shard: the layer's non-expert ("trunk") tensors first, as one contiguous run,
//     then experts 0..N-1, each expert's six tensors adjacent (w1, w2, w3; packed then scale).
//     This is the release's stated property: a layer's trunk is one read, an expert is one read.
// breakLayout (MoE layers only; layer 0 has no experts and keeps its layout): the layer's
// post_attention_layernorm moves after the last expert (trunk no longer contiguous), and expert 0's
// w2 pair moves after expert 1 (expert 0 no longer contiguous). Tensor contents do not change.
import type { GenPreset } from "./presets.ts";
import { expertTensors, finalTensors, layerTrunk, type TensorPlan, visionTensors } from "./tensor-plan.ts";

export interface ShardPlan {
  file: string; // base name
  tensors: TensorPlan[]; // in write order
}

export function shardName(index1: number, count: number): string {
  return `model-${String(index1).padStart(5, "0")}-of-${String(count).padStart(6, "0")}.safetensors`;
}

export function planShards(p: GenPreset, breakLayout: boolean): ShardPlan[] {
  const count = p.layers + 3;
  const shards: ShardPlan[] = [];
  for (let l = 0; l < p.layers; l++) {
    const trunk = layerTrunk(p, l);
    const experts: TensorPlan[][] = [];
    if (l >= 1) for (let e = 0; e < p.experts; e++) experts.push(expertTensors(p, l, e));
    shards.push({ file: shardName(l + 1, count), tensors: breakLayout && l >= 1 ? broken(trunk, experts) : [...trunk, ...experts.flat()] });
  }
  const vision = visionTensors(p);
  shards.push({ file: shardName(p.layers + 1, count), tensors: finalTensors(p) });
  shards.push({ file: shardName(p.layers + 2, count), tensors: vision.projector });
  shards.push({ file: shardName(p.layers + 3, count), tensors: vision.tower });
  return shards;
}

function broken(trunk: TensorPlan[], experts: TensorPlan[][]): TensorPlan[] {
  if (experts.length < 2) throw new Error("breakLayout needs at least 2 experts per layer");
  const moved = trunk.find((t) => t.name.endsWith(".post_attention_layernorm.weight"))!;
  const rest = trunk.filter((t) => t !== moved);
  const e0 = experts[0]!;
  const e0w2 = e0.filter((t) => t.name.includes(".w2."));
  const e0other = e0.filter((t) => !t.name.includes(".w2."));
  return [...rest, ...e0other, ...experts[1]!, ...e0w2, ...experts.slice(2).flat(), moved];
}
