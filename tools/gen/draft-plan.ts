// What a generated EAGLE-3 draft contains: its dimensions, config.json and tensor list, written from
// the released format (DRAFTERS.md §1, format A: `lightseekorg/kimi-k3-eagle3*-mla`) independently
// of src/ (the engine's loader is checked against these files). tools/gen/draft.ts writes them.
//
// Dimensions: hidden and vocabulary are the target's (the draft reads the target's hidden states
// and shares its embedding); the draft's own MLA and MLP widths are small for the tiny presets and
// the release's for `slice` (64 heads, q/kv rank 1536/512, 128/64/128, MLP 18432).
// qk_rope_head_dim is 16 on the small drafts: with the release's rope_scaling (θ 50000, factor 32,
// original 32768, β 32/1) its 8 rotation pairs hit all three YaRN regimes (pairs 0–3 keep the
// original frequency, 4–6 are blended, 7 is divided by 32; docs/DRAFT.md), as the release's 32
// pairs do (0–15, 16–25, 26–31).
import { specialIds } from "./config-json.ts";
import type { GenPreset } from "./presets.ts";
import type { TensorPlan } from "./tensor-plan.ts";

export type DraftVariant = "eagle3" | "eagle3.1";
/** `yarn`: the release's DeepSeek-YaRN block; `plain`: no rope_scaling key; `default-dict`: the
 *  transformers-5 normalised form of a plain config ({"rope_type":"default", "rope_theta"}), which
 *  must mean plain RoPE (DRAFTERS.md §1.6.4). */
export type DraftRope = "yarn" | "plain" | "default-dict";

/** Deliberately broken drafts, one per loader check (docs/DRAFT.md "Test drafts"). */
export const DRAFT_BREAKS = [
  "missing-tensor", // layers.0.self_attn.kv_b_proj.weight absent
  "wrong-shape", // fc.weight [H, 2H] while the config names 3 capture layers
  "wrong-dtype", // norm.weight stored F32
  "ids-out-of-range", // last capture id = target layers + 1
  "ids-zero", // first capture id 0 (ids are one-based completed layers)
  "ids-not-increasing", // capture ids not strictly ascending
  "hidden-mismatch", // a consistent draft of half the target's hidden size
  "vocab-mismatch", // a consistent draft of half the target's vocabulary
  "fc-norm-mismatch", // config fc_norm true, no fc_norm.* tensors
  "missing-field", // config.json without qk_rope_head_dim
  "format-b", // the NeMo Automodel layout: model.* names, g_proj, LlamaEagle3DraftModel
  "truncated", // model.safetensors cut 4 bytes short
] as const;
export type DraftBreak = (typeof DRAFT_BREAKS)[number];

export interface DraftDims {
  hidden: number; // = target hidden_size
  vocab: number; // = target vocab_size (= draft_vocab_size: no d2t/t2d)
  heads: number;
  qLoraRank: number;
  kvLoraRank: number;
  qkNope: number;
  qkRope: number;
  vHead: number;
  intermediate: number;
  rmsEps: number;
  ropeTheta: number;
}

/** The release's own widths (DRAFTERS.md §1.2), used for targets with K3's hidden size. */
export const RELEASE_DRAFT = { heads: 64, qLoraRank: 1536, kvLoraRank: 512, qkNope: 128, qkRope: 64, vHead: 128, intermediate: 18432 } as const;

/** Small MLA/MLP widths for a tiny target of hidden size `hidden`. */
function smallDraft(hidden: number) {
  const heads = hidden >= 128 ? 4 : 2;
  return { heads, qLoraRank: Math.max(16, hidden / 2), kvLoraRank: Math.max(16, hidden / 4), qkNope: 8, qkRope: 16, vHead: 12, intermediate: 2 * hidden };
}

export function draftDims(target: Pick<GenPreset, "hidden" | "vocab">): DraftDims {
  const w = target.hidden === 7168 ? RELEASE_DRAFT : smallDraft(target.hidden);
  return { hidden: target.hidden, vocab: target.vocab, ...w, rmsEps: 1e-5, ropeTheta: 50000 };
}

/** The release's YaRN block (DRAFTERS.md §1.2; TorchSpec's K3 recipe config). */
export const RELEASE_ROPE_SCALING = {
  type: "yarn",
  factor: 32.0,
  original_max_position_embeddings: 32768,
  beta_fast: 32,
  beta_slow: 1,
  mscale: 1.0,
  mscale_all_dim: 1.0,
} as const;

/**
 * Default capture ids (one-based completed layers) for a target of `layers` layers: the
 * release's rule for 93 layers gives [2, 46, 90] = [2, ⌊L/2⌋, L−3] (Automodel's zero-based
 * [1, L/2−1, L−4], +1). Targets too shallow for it take their last three layers.
 */
export function defaultLayerIds(layers: number): number[] {
  const ids = [2, Math.floor(layers / 2), layers - 3];
  if (ids[0]! < ids[1]! && ids[1]! < ids[2]!) return ids;
  if (layers < 3) throw new Error(`a target of ${layers} layers is too shallow for 3 capture layers`);
  return [layers - 2, layers - 1, layers];
}

export interface DraftSpec {
  dims: DraftDims;
  variant: DraftVariant;
  rope: DraftRope;
  layerIds: number[]; // one-based, as written to config.json
}

/** config.json of a format-A draft: every field of DRAFTERS.md §1.2 (fc_norm / norm_output explicit). */
export function draftConfigJson(s: DraftSpec): Record<string, unknown> {
  const d = s.dims;
  const ids = specialIds(d.vocab);
  const v31 = s.variant === "eagle3.1";
  const cfg: Record<string, unknown> = {
    architectures: ["Eagle3DeepseekV2ForCausalLM"],
    model_type: "kimi_k2",
    hidden_size: d.hidden,
    intermediate_size: d.intermediate,
    num_hidden_layers: 1,
    num_attention_heads: d.heads,
    num_key_value_heads: d.heads,
    q_lora_rank: d.qLoraRank,
    kv_lora_rank: d.kvLoraRank,
    qk_nope_head_dim: d.qkNope,
    qk_rope_head_dim: d.qkRope,
    v_head_dim: d.vHead,
    mla_use_nope: true, // in the recipe; ignored by every Eagle3-DeepSeek reader (they rotate)
    hidden_act: "silu",
    rms_norm_eps: d.rmsEps,
    vocab_size: d.vocab,
    draft_vocab_size: d.vocab,
    torch_dtype: "bfloat16",
    rope_theta: d.ropeTheta,
    max_position_embeddings: 1048576,
    eagle_config: {
      eagle_aux_hidden_state_layer_ids: s.layerIds,
      use_aux_hidden_state: true,
      use_input_layernorm_in_first_layer: true,
      use_last_layernorm: true,
      use_mtp_layernorm: false,
    },
    fc_norm: v31,
    norm_output: v31,
    tie_word_embeddings: false,
    bos_token_id: ids.bos,
    eos_token_id: ids.eos,
    pad_token_id: 0,
  };
  if (s.rope === "yarn") cfg.rope_scaling = { ...RELEASE_ROPE_SCALING };
  else if (s.rope === "default-dict") cfg.rope_scaling = { rope_type: "default", rope_theta: d.ropeTheta };
  return cfg;
}

const normW = (n: number): Pick<TensorPlan, "dtype" | "shape" | "init"> => ({ dtype: "BF16", shape: [n], init: { kind: "normal", mean: 1, std: 0.15 } });
const mat = (rows: number, cols: number, gain: number): Pick<TensorPlan, "dtype" | "shape" | "init"> => ({
  dtype: "BF16",
  shape: [rows, cols],
  init: { kind: "normal", mean: 0, std: gain / Math.sqrt(cols) },
});

/** The target's embedding tensor name: the draft's `embed_tokens.weight` copies its bytes. */
export const TARGET_EMBED = "language_model.model.embed_tokens.weight";

/**
 * The draft's tensors (DRAFTERS.md §1.3 roster; eagle3 has no fc_norm.*), sorted by name as the
 * `safetensors` library writes a file whose tensors share one dtype. Every matrix has std
 * gain/√fan_in (docs/DRAFT.md "Test drafts"): q_b gain 1.5 so attention is not flat, lm_head gain 3
 * so logits spread; `embed_tokens` is N(0, 1) like the target's (its bytes are copied from the
 * target, or drawn from its own stream with `differ`).
 */
export function draftTensors(s: DraftSpec): TensorPlan[] {
  const d = s.dims;
  const H = d.hidden, n = s.layerIds.length;
  const qk = d.qkNope + d.qkRope;
  const out: Array<Pick<TensorPlan, "name" | "dtype" | "shape" | "init">> = [
    { name: "embed_tokens.weight", dtype: "BF16", shape: [d.vocab, H], init: { kind: "normal", mean: 0, std: 1 } },
    { name: "fc.weight", ...mat(H, n * H, 1) },
    ...(s.variant === "eagle3.1" ? Array.from({ length: n }, (_, j) => ({ name: `fc_norm.${j}.weight`, ...normW(H) })) : []),
    { name: "layers.0.hidden_norm.weight", ...normW(H) },
    { name: "layers.0.input_layernorm.weight", ...normW(H) },
    { name: "layers.0.self_attn.q_a_proj.weight", ...mat(d.qLoraRank, 2 * H, 1) },
    { name: "layers.0.self_attn.q_a_layernorm.weight", ...normW(d.qLoraRank) },
    { name: "layers.0.self_attn.q_b_proj.weight", ...mat(d.heads * qk, d.qLoraRank, 1.5) },
    { name: "layers.0.self_attn.kv_a_proj_with_mqa.weight", ...mat(d.kvLoraRank + d.qkRope, 2 * H, 1) },
    { name: "layers.0.self_attn.kv_a_layernorm.weight", ...normW(d.kvLoraRank) },
    { name: "layers.0.self_attn.kv_b_proj.weight", ...mat(d.heads * (d.qkNope + d.vHead), d.kvLoraRank, 1) },
    { name: "layers.0.self_attn.o_proj.weight", ...mat(H, d.heads * d.vHead, 1) },
    { name: "layers.0.post_attention_layernorm.weight", ...normW(H) },
    { name: "layers.0.mlp.gate_proj.weight", ...mat(d.intermediate, H, 1.5) },
    { name: "layers.0.mlp.up_proj.weight", ...mat(d.intermediate, H, 1) },
    { name: "layers.0.mlp.down_proj.weight", ...mat(H, d.intermediate, 1) },
    { name: "norm.weight", ...normW(H) },
    { name: "lm_head.weight", ...mat(d.vocab, H, 3) },
  ];
  return out.map((t) => ({ ...t, role: "final" as const })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}
