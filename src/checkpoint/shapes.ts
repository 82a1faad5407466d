// Every language-model tensor a validated config implies: name, shape, dtype (MODEL.md §3).
// Shapes are derived here once; the catalogue checks the files against this list and every
// other module takes shapes from the catalogue, never from its own arithmetic.
import { MXFP4_GROUP } from "./config.ts";
import type { DType, ModelConfig, TensorSpec } from "./types.ts";

export const LM_MODEL_PREFIX = "language_model.model.";
export const LM_HEAD_NAME = "language_model.lm_head.weight";
/** Any name under this prefix belongs to the language model; everything else (vision) is ignored. */
export const LM_PREFIX = "language_model.";

export const DTYPE_BYTES: Record<DType, number> = { BF16: 2, F32: 4, U8: 1 };

export function numel(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

export function tensorBytes(spec: { dtype: DType; shape: readonly number[] }): number {
  return numel(spec.shape) * DTYPE_BYTES[spec.dtype];
}

export function layerPrefix(layer: number): string {
  return `${LM_MODEL_PREFIX}layers.${layer}.`;
}

/** Suffixes of one routed expert's six tensors, in this fixed order (w1 = gate, w2 = down, w3 = up). */
export const EXPERT_SUFFIXES = [
  "w1.weight_packed", "w1.weight_scale",
  "w2.weight_packed", "w2.weight_scale",
  "w3.weight_packed", "w3.weight_scale",
] as const;

/** The six tensor names of routed expert `e` in zero-based `layer`, ordered as EXPERT_SUFFIXES. */
export function expertTensorNames(layer: number, e: number): string[] {
  const p = `${layerPrefix(layer)}block_sparse_moe.experts.${e}.`;
  return EXPERT_SUFFIXES.map((s) => p + s);
}

/**
 * Shapes of one expert's six tensors, ordered as EXPERT_SUFFIXES. MXFP4: a row of `in` weights is
 * in/2 packed bytes (two E2M1 nibbles) plus in/32 E8M0 scale bytes.
 * w1, w3: [moeInter, latent] (input = latent z); w2: [latent, moeInter].
 */
export function expertShapes(cfg: ModelConfig): number[][] {
  const { moeInter: I, latent: Z } = cfg;
  const g = MXFP4_GROUP;
  const up = [[I, Z / 2], [I, Z / g]];
  const down = [[Z, I / 2], [Z, I / g]];
  return [...up, ...down, ...up];
}

/** Bytes of one routed expert (packed + scales of w1, w2, w3); 17,547,264 for K3. */
export function expertBytes(cfg: ModelConfig): number {
  return expertShapes(cfg).reduce((a, s) => a + numel(s), 0);
}

/** The non-expert ("trunk") tensors of one layer, relative names → [shape, dtype]. */
function trunkTensors(cfg: ModelConfig, layer: number): [string, number[], DType][] {
  const E = cfg.hidden;
  const t: [string, number[], DType][] = [
    ["input_layernorm.weight", [E], "BF16"],
    ["post_attention_layernorm.weight", [E], "BF16"],
    ["self_attention_res_norm.weight", [E], "BF16"],
    ["mlp_res_norm.weight", [E], "BF16"],
    ["self_attention_res_proj.weight", [1, E], "BF16"],
    ["mlp_res_proj.weight", [1, E], "BF16"],
  ];
  const a = "self_attn.";
  if (cfg.layerKinds[layer] === "kda") {
    const H = cfg.kdaHeads, D = cfg.kdaHeadDim, P = H * D;
    for (const n of ["q", "k", "v"]) t.push([`${a}${n}_proj.weight`, [P, E], "BF16"]);
    t.push(
      [`${a}g_proj.weight`, [P, E], "BF16"],
      [`${a}o_proj.weight`, [E, P], "BF16"],
    );
    for (const n of ["q", "k", "v"]) t.push([`${a}${n}_conv1d.weight`, [P, 1, cfg.convKernel], "F32"]);
    t.push(
      [`${a}f_a_proj.weight`, [D, E], "BF16"],
      [`${a}f_b_proj.weight`, [P, D], "BF16"],
      [`${a}b_proj.weight`, [H, E], "BF16"],
      // head_dim entries for H heads: only the first H are used (MODEL.md §7.1).
      [`${a}A_log`, [D], "F32"],
      [`${a}dt_bias`, [P], "F32"],
      [`${a}o_norm.weight`, [D], "F32"],
    );
  } else {
    const Hm = cfg.mlaHeads, R = cfg.kvLoraRank, Q = cfg.qLoraRank;
    t.push(
      [`${a}q_a_proj.weight`, [Q, E], "BF16"],
      [`${a}q_a_layernorm.weight`, [Q], "BF16"],
      [`${a}q_b_proj.weight`, [Hm * (cfg.qkNope + cfg.qkRope), Q], "BF16"],
      [`${a}kv_a_proj_with_mqa.weight`, [R + cfg.qkRope, E], "BF16"],
      [`${a}kv_a_layernorm.weight`, [R], "BF16"],
      [`${a}kv_b_proj.weight`, [Hm * (cfg.qkNope + cfg.vHead), R], "BF16"],
      [`${a}o_proj.weight`, [E, Hm * cfg.vHead], "BF16"],
      [`${a}g_proj.weight`, [Hm * cfg.vHead, E], "BF16"],
    );
  }
  if (layer < cfg.firstKDense) {
    const I = cfg.denseInter;
    t.push(
      ["mlp.gate_proj.weight", [I, E], "BF16"],
      ["mlp.up_proj.weight", [I, E], "BF16"],
      ["mlp.down_proj.weight", [E, I], "BF16"],
    );
  } else {
    const m = "block_sparse_moe.", N = cfg.numExperts, S = cfg.numSharedExperts * cfg.moeInter, Z = cfg.latent;
    t.push(
      [`${m}gate.weight`, [N, E], "BF16"],
      [`${m}gate.e_score_correction_bias`, [N], "F32"],
      [`${m}shared_experts.gate_proj.weight`, [S, E], "BF16"],
      [`${m}shared_experts.up_proj.weight`, [S, E], "BF16"],
      [`${m}shared_experts.down_proj.weight`, [E, S], "BF16"],
      [`${m}routed_expert_down_proj.weight`, [Z, E], "BF16"],
      [`${m}routed_expert_up_proj.weight`, [E, Z], "BF16"],
      [`${m}routed_expert_norm.weight`, [Z], "BF16"],
    );
  }
  return t;
}

/** Trunk specs of one zero-based layer (norms, AttnRes, attention, dense FFN or MoE non-expert). */
export function layerTrunkSpecs(cfg: ModelConfig, layer: number): TensorSpec[] {
  const p = layerPrefix(layer);
  return trunkTensors(cfg, layer).map(([n, shape, dtype]) => ({ name: p + n, shape, dtype, cls: "trunk", layer }));
}

export function isMoeLayer(cfg: ModelConfig, layer: number): boolean {
  return layer >= cfg.firstKDense;
}

/** The model-level (non-layer) specs: embedding, lm_head, final norm and final AttnRes mix. */
export function globalSpecs(cfg: ModelConfig): TensorSpec[] {
  const E = cfg.hidden, V = cfg.vocab, p = LM_MODEL_PREFIX;
  return [
    { name: `${p}embed_tokens.weight`, shape: [V, E], dtype: "BF16", cls: "embed" },
    { name: LM_HEAD_NAME, shape: [V, E], dtype: "BF16", cls: "head" },
    { name: `${p}norm.weight`, shape: [E], dtype: "BF16", cls: "final" },
    { name: `${p}output_attn_res_norm.weight`, shape: [E], dtype: "BF16", cls: "final" },
    { name: `${p}output_attn_res_proj.weight`, shape: [1, E], dtype: "BF16", cls: "final" },
  ];
}

/**
 * Every language-model tensor the config implies: globals, then per layer its trunk tensors
 * followed (MoE layers) by expert 0..N-1's six tensors. 497,052 specs for the release.
 */
export function expectedTensors(cfg: ModelConfig): TensorSpec[] {
  const out = globalSpecs(cfg);
  const eShapes = expertShapes(cfg);
  for (let l = 0; l < cfg.numLayers; l++) {
    out.push(...layerTrunkSpecs(cfg, l));
    if (!isMoeLayer(cfg, l)) continue;
    for (let e = 0; e < cfg.numExperts; e++) {
      const names = expertTensorNames(l, e);
      for (let i = 0; i < 6; i++) out.push({ name: names[i]!, shape: eShapes[i]!, dtype: "U8", cls: "expert", layer: l, expert: e });
    }
  }
  return out;
}
