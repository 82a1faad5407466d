// The tensor list of a K3 checkpoint, written from MODEL.md §3 (independently of src/checkpoint/,
// so the reader's round-trip test cross-checks two readings of the spec), with each tensor's
// initialisation. Names use the release's prefixes: `language_model.model.` for the trunk,
// `language_model.lm_head.weight` for the head; vision tensors are unprefixed stubs.
//
// Scaling (why logits stay finite and spread; docs/TEST-MODELS.md has the table):
//   - every matrix feeding a matmul whose input is RMS-normalised has std ≈ gain/sqrt(fan_in), so
//     outputs have std ≈ gain; the residual stream's size never matters downstream because every
//     consumer normalises it first (RMSNorm, AttnRes scores on normed sources).
//   - lm_head gain 3 → last-position logits have std ≈ 3 (greedy never sits on near-ties).
//   - q_a_proj and the c_kv rows of kv_a_proj_with_mqa have outputs of rms ≈ 0.004, i.e.
//     mean(x²) ≈ 1.6e-5, comparable to eps: the 1e-6 vs 1e-5 LoRA-norm trap (§7.4) moves the
//     normalised values by ~20%.
//   - gate-ish projections (SiTU gate, router, KDA b_proj, output gates) have gain 2–2.5 so
//     sigmoid / tanh caps saturate sometimes; every `capRowsEvery`-th up_proj row has gain 30 so
//     |up| passes β2 = 25 sometimes (the matching down_proj columns are 8× smaller).
//   - experts: E2M1 × 2^(s−127), s uniform in 120..130 (rms weight ≈ 8.15); the routed down
//     projection is scaled so w1·z has std ≈ 2.5. ~1.2% of scales are 255 (NaN → group is 0).
import type { GenDType } from "./safetensors-writer.ts";
import { type GenPreset, mlaLayersOneBased } from "./presets.ts";
import { VISION_DIMS } from "./config-json.ts";

export type Init =
  /** bf16 or f32 N(mean, std); rowStd overrides std per row (dim 0); colStd per column of a 2-D
   *  tensor (returns undefined to keep the row's std). */
  | { kind: "normal"; mean: number; std: number; rowStd?: (row: number) => number; colStd?: (col: number) => number | undefined }
  /** conv1d taps [P, 1, 4]: N(0, 0.5) on the history taps, N(0.8, 0.3) on tap 3 (current token). */
  | { kind: "conv" }
  /** A_log [D] f32: log U(1, 16) on the first `heads` entries; the tail zero or log U(1, 16). */
  | { kind: "alog"; heads: number; tail: "zero" | "random" }
  /** MXFP4 packed nibbles: uniform random bytes (all 16 codes, −0 included); `plant` overwrites
   *  the first byte of row 0 (the MXFP4_SENTINEL). */
  | { kind: "mxfp4-packed"; plant?: number }
  /** E8M0 scales: uniform in 120..130, a byte ≥ 253 of the random stream becomes 255 (NaN);
   *  `plant` overwrites the first byte of row 0. */
  | { kind: "e8m0"; plant?: number };

export interface TensorPlan {
  name: string;
  dtype: GenDType;
  shape: number[];
  init: Init;
  /** "trunk" = non-expert tensor of a layer; "expert" = one of the six tensors of an expert. */
  role: "trunk" | "expert" | "final" | "vision";
  layer?: number;
  expert?: number;
}

export const LM = "language_model.model.";
export const LM_HEAD = "language_model.lm_head.weight";

const normW = (n: number): Pick<TensorPlan, "dtype" | "shape" | "init"> => ({
  dtype: "BF16",
  shape: [n],
  init: { kind: "normal", mean: 1, std: 0.15 },
});
const mat = (rows: number, cols: number, gain: number): Pick<TensorPlan, "dtype" | "shape" | "init"> => ({
  dtype: "BF16",
  shape: [rows, cols],
  init: { kind: "normal", mean: 0, std: gain / Math.sqrt(cols) },
});

/** Gain applied to the whole expert path input so w1·z has std ≈ 2.5 (see header). */
const E2M1_E8M0_RMS = Math.sqrt((68.5 / 8) * (((4 ** 4 - 4 ** -7) / 3) / 11));

/** Non-expert tensors of layer `l` (zero-based), in the order they are written. */
export function layerTrunk(p: GenPreset, l: number): TensorPlan[] {
  const E = p.hidden;
  const pre = `${LM}layers.${l}.`;
  const isMla = mlaSet(p).has(l + 1);
  const out: Array<Omit<TensorPlan, "role" | "layer">> = [];
  const add = (name: string, t: Pick<TensorPlan, "dtype" | "shape" | "init">) =>
    out.push({ name: pre + name, dtype: t.dtype, shape: t.shape, init: t.init });

  add("input_layernorm.weight", normW(E));
  add("self_attention_res_norm.weight", normW(E));
  add("self_attention_res_proj.weight", mat(1, E, 2));
  if (isMla) {
    const Hm = p.mlaHeads, R = p.kvLoraRank, dr = p.qkRope;
    const tinyOut = 0.004 / Math.sqrt(E);
    add("self_attn.q_a_proj.weight", { dtype: "BF16", shape: [p.qLoraRank, E], init: { kind: "normal", mean: 0, std: tinyOut } });
    add("self_attn.q_a_layernorm.weight", normW(p.qLoraRank));
    add("self_attn.q_b_proj.weight", mat(Hm * (p.qkNope + dr), p.qLoraRank, 1.5));
    add("self_attn.kv_a_proj_with_mqa.weight", {
      dtype: "BF16",
      shape: [R + dr, E],
      // rows [0, R) are c_kv (normed with eps 1e-6: tiny on purpose); rows [R, R+dr) are k_r (not normed).
      init: { kind: "normal", mean: 0, std: tinyOut, rowStd: (r) => (r < R ? tinyOut : 1 / Math.sqrt(E)) },
    });
    add("self_attn.kv_a_layernorm.weight", normW(R));
    add("self_attn.kv_b_proj.weight", mat(Hm * (p.qkNope + p.vHead), R, 1));
    add("self_attn.o_proj.weight", mat(E, Hm * p.vHead, 1));
    add("self_attn.g_proj.weight", mat(Hm * p.vHead, E, 1.5));
  } else {
    const H = p.kdaHeads, D = p.kdaHeadDim, P = H * D;
    add("self_attn.q_proj.weight", mat(P, E, 1));
    add("self_attn.k_proj.weight", mat(P, E, 1));
    add("self_attn.v_proj.weight", mat(P, E, 1));
    add("self_attn.q_conv1d.weight", { dtype: "F32", shape: [P, 1, 4], init: { kind: "conv" } });
    add("self_attn.k_conv1d.weight", { dtype: "F32", shape: [P, 1, 4], init: { kind: "conv" } });
    add("self_attn.v_conv1d.weight", { dtype: "F32", shape: [P, 1, 4], init: { kind: "conv" } });
    add("self_attn.f_a_proj.weight", mat(D, E, 1));
    add("self_attn.f_b_proj.weight", mat(P, D, 1));
    add("self_attn.b_proj.weight", mat(H, E, 2));
    add("self_attn.A_log", { dtype: "F32", shape: [D], init: { kind: "alog", heads: H, tail: p.aLogTail } });
    add("self_attn.dt_bias", { dtype: "F32", shape: [P], init: { kind: "normal", mean: 0, std: 1 } });
    add("self_attn.g_proj.weight", mat(P, E, 1.5));
    add("self_attn.o_norm.weight", { dtype: "F32", shape: [D], init: { kind: "normal", mean: 1, std: 0.15 } });
    add("self_attn.o_proj.weight", mat(E, P, 1));
  }
  add("post_attention_layernorm.weight", normW(E));
  add("mlp_res_norm.weight", normW(E));
  add("mlp_res_proj.weight", mat(1, E, 2));
  if (l === 0) {
    for (const t of situFfn(p, "mlp.", p.denseInter)) add(t.name, t);
  } else {
    const N = p.experts, Z = p.latent;
    add("block_sparse_moe.gate.weight", mat(N, E, 2));
    add("block_sparse_moe.gate.e_score_correction_bias", { dtype: "F32", shape: [N], init: { kind: "normal", mean: 0, std: 0.2 } });
    for (const t of situFfn(p, "block_sparse_moe.shared_experts.", p.sharedExperts * p.moeInter)) add(t.name, t);
    add("block_sparse_moe.routed_expert_down_proj.weight", mat(Z, E, 2.5 / (E2M1_E8M0_RMS * Math.sqrt(Z))));
    add("block_sparse_moe.routed_expert_norm.weight", normW(Z));
    add("block_sparse_moe.routed_expert_up_proj.weight", mat(E, Z, 1));
  }
  return out.map((t) => ({ ...t, role: "trunk", layer: l }));
}

/** gate/up [I, E], down [E, I] of a SiTU-GLU FFN (dense layer 0 and the shared experts). */
function situFfn(p: GenPreset, pre: string, I: number): Array<Pick<TensorPlan, "name" | "dtype" | "shape" | "init">> {
  const E = p.hidden;
  const every = p.capRowsEvery;
  const isCap = (i: number) => every > 0 && i % every === every - 1;
  const upStd = 1 / Math.sqrt(E);
  const downStd = 1 / Math.sqrt(I);
  return [
    { name: `${pre}gate_proj.weight`, ...mat(I, E, 2.5) },
    {
      name: `${pre}up_proj.weight`,
      dtype: "BF16",
      shape: [I, E],
      init: { kind: "normal", mean: 0, std: upStd, rowStd: every > 0 ? (r) => (isCap(r) ? 30 * upStd : upStd) : undefined },
    },
    {
      name: `${pre}down_proj.weight`,
      dtype: "BF16",
      shape: [E, I],
      init: { kind: "normal", mean: 0, std: downStd, colStd: every > 0 ? (c) => (isCap(c) ? downStd / 8 : undefined) : undefined },
    },
  ];
}

/**
 * A known element for decoders to assert nibble order and scale against (MODEL.md §3, §7.6):
 * in layer 1, expert 0, w1: weight_packed[0][0] = 0xA3 and weight_scale[0][0] = 128 (2^1), so
 * W[0][0] = E2M1[low nibble 3] · 2 = +1.5 · 2 = 3 and W[0][1] = E2M1[high nibble 0xA] · 2 = −1 · 2 = −2.
 * A reader with the nibbles swapped gets −2 and 3.
 */
export const MXFP4_SENTINEL = { layer: 1, expert: 0, proj: "w1", packedByte: 0xa3, scaleByte: 128, w00: 3, w01: -2 } as const;

/** The six tensors of routed expert `e` in layer `l` (MODEL.md §3 MXFP4 shapes), in write order. */
export function expertTensors(p: GenPreset, l: number, e: number): TensorPlan[] {
  const pre = `${LM}layers.${l}.block_sparse_moe.experts.${e}.`;
  const F = p.moeInter, Z = p.latent;
  const S = MXFP4_SENTINEL;
  const pair = (w: string, rows: number, inDim: number): TensorPlan[] => {
    const sentinel = l === S.layer && e === S.expert && w === S.proj;
    return [
      { name: `${pre}${w}.weight_packed`, dtype: "U8", shape: [rows, inDim / 2], init: { kind: "mxfp4-packed", plant: sentinel ? S.packedByte : undefined }, role: "expert", layer: l, expert: e },
      { name: `${pre}${w}.weight_scale`, dtype: "U8", shape: [rows, inDim / 32], init: { kind: "e8m0", plant: sentinel ? S.scaleByte : undefined }, role: "expert", layer: l, expert: e },
    ];
  };
  return [...pair("w1", F, Z), ...pair("w2", Z, F), ...pair("w3", F, Z)];
}

/** Embedding, head and the model-level norms: the release keeps these in shard L+1 (its 94th). */
export function finalTensors(p: GenPreset): TensorPlan[] {
  const E = p.hidden, V = p.vocab;
  const t = (name: string, x: Pick<TensorPlan, "dtype" | "shape" | "init">): TensorPlan => ({ name, ...x, role: "final" });
  return [
    t(`${LM}embed_tokens.weight`, { dtype: "BF16", shape: [V, E], init: { kind: "normal", mean: 0, std: 1 } }),
    t(LM_HEAD, mat(V, E, 3)),
    t(`${LM}norm.weight`, normW(E)),
    t(`${LM}output_attn_res_norm.weight`, normW(E)),
    t(`${LM}output_attn_res_proj.weight`, mat(1, E, 2)),
  ];
}

/** Vision stubs, split like the release: mm_projector in shard L+2, vision_tower in shard L+3. */
export function visionTensors(p: GenPreset): { projector: TensorPlan[]; tower: TensorPlan[] } {
  const h = VISION_DIMS.hidden, mm = VISION_DIMS.mm, ps = VISION_DIMS.patch;
  const v = (name: string, shape: number[]): TensorPlan => ({
    name,
    dtype: "BF16",
    shape,
    init: { kind: "normal", mean: 0, std: 0.02 },
    role: "vision",
  });
  return {
    projector: [v("mm_projector.proj.0.weight", [mm, 4 * h]), v("mm_projector.proj.2.weight", [p.hidden, mm]), v("mm_projector.post_norm.weight", [p.hidden])],
    tower: [
      v("vision_tower.patch_embed.proj.weight", [h, 3, ps, ps]),
      v("vision_tower.patch_embed.pos_emb.weight", [4, 4, h]),
      v("vision_tower.encoder.blocks.0.norm0.weight", [h]),
      v("vision_tower.encoder.blocks.0.wqkv.weight", [3 * h, h]),
      v("vision_tower.encoder.blocks.0.wo.weight", [h, h]),
      v("vision_tower.encoder.blocks.0.norm1.weight", [h]),
      v("vision_tower.encoder.blocks.0.mlp.fc0.weight", [VISION_DIMS.inter, h]),
      v("vision_tower.encoder.blocks.0.mlp.fc1.weight", [h, VISION_DIMS.inter]),
      v("vision_tower.encoder.final_layernorm.weight", [h]),
    ],
  };
}

function mlaSet(p: GenPreset): Set<number> {
  return new Set(mlaLayersOneBased(p.layers)); // one-based, the same list config.json gets
}
