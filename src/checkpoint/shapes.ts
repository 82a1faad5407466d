// Every language-model tensor a validated config implies: name, shape, dtype (MODEL.md §3), and
// for the trunk's matrices their place in the forward pass's walk and whether they may be sliced
// or packed (the trunk table, trunkTensors below). Shapes are derived here once; the catalogue
// checks the files against this list and every other module takes shapes from the catalogue,
// never from its own arithmetic.
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

/**
 * What a trunk tensor is to the forward pass when it is a "matrix": a 2-D weight used whole by one
 * kernel call (a matmul, or MLA's kv_b). `sliceable`: may be cut into row slices (every matmul
 * computes its rows independently); `packable`: may be stored in a compact trunk (int8/int4,
 * `k3 pack`). MLA's kv_b is neither: k3_mla_attend reads it whole, as bf16. Every other trunk tensor
 * (norms, the router gate and bias, convs, gates, the AttnRes projections) is small: the unit's
 * "core", held for the whole layer (src/memory/pieces.ts).
 */
export interface MatrixRole {
  sliceable: boolean;
  packable: boolean;
}
const MATRIX: MatrixRole = { sliceable: true, packable: true };
const WHOLE_BF16: MatrixRole = { sliceable: false, packable: false };

/** One row of the trunk table: name below `layers.L.`, shape, dtype, and the matrix role if any. */
type TrunkRow = [string, number[], DType, MatrixRole?];

/**
 * The trunk table of one layer: every non-expert tensor with its shape and dtype, and its matrices
 * IN THE ORDER THE FORWARD PASS MULTIPLIES BY THEM (src/model/forward.ts): attention, then the FFN
 * (dense, or latent down → shared experts → latent up). The catalogue checks the files against it,
 * the planner and the trunk ring read the trunk in this order (src/memory/pieces.ts, the walk
 * promise of src/model/walk.ts), the packer packs its packable matrices, and the forward pass's
 * mm() refuses a tensor whose shape is not the one it multiplies by.
 */
function trunkTensors(cfg: ModelConfig, layer: number): TrunkRow[] {
  const E = cfg.hidden;
  const t: TrunkRow[] = [
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
    t.push(
      [`${a}q_proj.weight`, [P, E], "BF16", MATRIX],
      [`${a}k_proj.weight`, [P, E], "BF16", MATRIX],
      [`${a}v_proj.weight`, [P, E], "BF16", MATRIX],
      [`${a}f_a_proj.weight`, [D, E], "BF16", MATRIX],
      [`${a}f_b_proj.weight`, [P, D], "BF16", MATRIX],
      [`${a}b_proj.weight`, [H, E], "BF16", MATRIX],
      [`${a}g_proj.weight`, [P, E], "BF16", MATRIX],
      [`${a}o_proj.weight`, [E, P], "BF16", MATRIX],
    );
    for (const n of ["q", "k", "v"]) t.push([`${a}${n}_conv1d.weight`, [P, 1, cfg.convKernel], "F32"]);
    t.push(
      // head_dim entries for H heads: only the first H are used (MODEL.md §7.1).
      [`${a}A_log`, [D], "F32"],
      [`${a}dt_bias`, [P], "F32"],
      [`${a}o_norm.weight`, [D], "F32"],
    );
  } else {
    const Hm = cfg.mlaHeads, R = cfg.kvLoraRank, Q = cfg.qLoraRank;
    t.push(
      [`${a}q_a_proj.weight`, [Q, E], "BF16", MATRIX],
      [`${a}q_b_proj.weight`, [Hm * (cfg.qkNope + cfg.qkRope), Q], "BF16", MATRIX],
      [`${a}kv_a_proj_with_mqa.weight`, [R + cfg.qkRope, E], "BF16", MATRIX],
      [`${a}kv_b_proj.weight`, [Hm * (cfg.qkNope + cfg.vHead), R], "BF16", WHOLE_BF16],
      [`${a}g_proj.weight`, [Hm * cfg.vHead, E], "BF16", MATRIX],
      [`${a}o_proj.weight`, [E, Hm * cfg.vHead], "BF16", MATRIX],
      [`${a}q_a_layernorm.weight`, [Q], "BF16"],
      [`${a}kv_a_layernorm.weight`, [R], "BF16"],
    );
  }
  if (layer < cfg.firstKDense) {
    const I = cfg.denseInter;
    t.push(
      ["mlp.gate_proj.weight", [I, E], "BF16", MATRIX],
      ["mlp.up_proj.weight", [I, E], "BF16", MATRIX],
      ["mlp.down_proj.weight", [E, I], "BF16", MATRIX],
    );
  } else {
    const m = "block_sparse_moe.", N = cfg.numExperts, S = cfg.numSharedExperts * cfg.moeInter, Z = cfg.latent;
    t.push(
      [`${m}gate.weight`, [N, E], "BF16"],
      [`${m}gate.e_score_correction_bias`, [N], "F32"],
      [`${m}routed_expert_down_proj.weight`, [Z, E], "BF16", MATRIX],
      [`${m}shared_experts.gate_proj.weight`, [S, E], "BF16", MATRIX],
      [`${m}shared_experts.up_proj.weight`, [S, E], "BF16", MATRIX],
      [`${m}shared_experts.down_proj.weight`, [E, S], "BF16", MATRIX],
      [`${m}routed_expert_up_proj.weight`, [E, Z], "BF16", MATRIX],
      [`${m}routed_expert_norm.weight`, [Z], "BF16"],
    );
  }
  return t;
}

/** Trunk specs of one zero-based layer (norms, AttnRes, attention, dense FFN or MoE non-expert),
 *  its matrices in forward order with their role. */
export function layerTrunkSpecs(cfg: ModelConfig, layer: number): TensorSpec[] {
  const p = layerPrefix(layer);
  return trunkTensors(cfg, layer).map(([n, shape, dtype, matrix]) => ({ name: p + n, shape, dtype, cls: "trunk", layer, ...(matrix ? { matrix } : {}) }));
}

/** A unit's matrices in the order the forward pass multiplies by them (full names): layer u's, or
 *  for u = numLayers the head's (lm_head, one row of x per pass: the last token only). */
export function unitMatrices(cfg: ModelConfig, u: number): (TensorSpec & { matrix: MatrixRole })[] {
  const specs = u === cfg.numLayers ? globalSpecs(cfg) : layerTrunkSpecs(cfg, u);
  return specs.filter((s): s is TensorSpec & { matrix: MatrixRole } => s.matrix !== undefined);
}

export function isMoeLayer(cfg: ModelConfig, layer: number): boolean {
  return layer >= cfg.firstKDense;
}

/** The model-level (non-layer) specs: embedding, lm_head, final norm and final AttnRes mix. */
export function globalSpecs(cfg: ModelConfig): TensorSpec[] {
  const E = cfg.hidden, V = cfg.vocab, p = LM_MODEL_PREFIX;
  return [
    { name: `${p}embed_tokens.weight`, shape: [V, E], dtype: "BF16", cls: "embed" },
    { name: LM_HEAD_NAME, shape: [V, E], dtype: "BF16", cls: "head", matrix: MATRIX },
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
