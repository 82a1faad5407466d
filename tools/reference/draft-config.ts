// config.json of a released EAGLE-3 draft (DRAFTERS.md §1.2, format A) → the numbers the float64
// draft reference needs. Like config.ts it refuses to guess: every missing or mistyped field is
// reported at once. Two defaults are deliberate and documented (docs/DRAFT.md "Decisions"):
// `fc_norm` and `norm_output` absent mean false (vLLM's and TorchSpec's getattr(..., False); the
// plain eagle3 release may not carry them), and a missing `rope_scaling`, or one whose type is
// "default", means plain RoPE with θ = rope_theta (DRAFTERS.md §1.6.4).
import { readFileSync } from "node:fs";
import { join } from "node:path";

export interface YarnParams {
  factor: number; // s
  originalMax: number; // L₀ = original_max_position_embeddings
  betaFast: number;
  betaSlow: number;
  mscale: number;
  mscaleAllDim: number;
}

export interface DraftConfig {
  hidden: number; // H (= the target's hidden size)
  vocab: number; // V (= draft_vocab_size: format A has no d2t/t2d)
  heads: number; // n_h
  qRank: number; // q_lora_rank
  kvRank: number; // r_kv = kv_lora_rank
  dn: number; // qk_nope_head_dim
  dr: number; // qk_rope_head_dim (even)
  dv: number; // v_head_dim
  inter: number; // intermediate_size (SiLU MLP)
  eps: number; // rms_norm_eps, for every draft norm (q_a/kv_a LoRA norms included)
  ropeTheta: number;
  yarn: YarnParams | undefined; // undefined = plain RoPE
  layerIds: number[]; // eagle_config.eagle_aux_hidden_state_layer_ids: ONE-based completed layers
  fcNorm: boolean; // eagle3.1: RMSNorm each tap chunk before fc
  normOutput: boolean; // eagle3.1: feed the post-final-norm state back in the chain
}

const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

export function readDraftConfig(dir: string): DraftConfig {
  const path = join(dir, "config.json");
  const c = JSON.parse(readFileSync(path, "utf8")) as Record<string, any>;
  const p: string[] = [];
  const int = (k: string): number => {
    if (!Number.isInteger(c[k]) || c[k] <= 0) p.push(`${k} must be a positive integer${c[k] === undefined ? " (missing)" : `, got ${JSON.stringify(c[k])}`}`);
    return c[k];
  };
  const num = (k: string): number => {
    if (!isNum(c[k])) p.push(`${k} must be a number${c[k] === undefined ? " (missing)" : `, got ${JSON.stringify(c[k])}`}`);
    return c[k];
  };
  const flag = (k: string): boolean => {
    if (c[k] === undefined) return false;
    if (typeof c[k] !== "boolean") p.push(`${k} must be true or false, got ${JSON.stringify(c[k])}`);
    return c[k] === true;
  };
  if (c.architectures?.[0] !== "Eagle3DeepseekV2ForCausalLM") p.push(`architectures[0] must be "Eagle3DeepseekV2ForCausalLM" (format A), got ${JSON.stringify(c.architectures?.[0])}`);
  if (c.num_hidden_layers !== 1) p.push(`num_hidden_layers must be 1, got ${JSON.stringify(c.num_hidden_layers)}`);
  if (c.hidden_act !== "silu") p.push(`hidden_act must be "silu", got ${JSON.stringify(c.hidden_act)}`);
  if (c.norm_before_residual === true) p.push("norm_before_residual true is not supported (vLLM's optional flag; the released drafts do not set it)");
  if (c.tie_word_embeddings === true) p.push("tie_word_embeddings must be false (format A ships its own lm_head)");
  if (c.draft_vocab_size !== undefined && c.draft_vocab_size !== c.vocab_size) p.push(`draft_vocab_size ${c.draft_vocab_size} ≠ vocab_size ${c.vocab_size} (a compressed draft vocabulary is not supported)`);
  const cfg: DraftConfig = {
    hidden: int("hidden_size"),
    vocab: int("vocab_size"),
    heads: int("num_attention_heads"),
    qRank: int("q_lora_rank"),
    kvRank: int("kv_lora_rank"),
    dn: int("qk_nope_head_dim"),
    dr: int("qk_rope_head_dim"),
    dv: int("v_head_dim"),
    inter: int("intermediate_size"),
    eps: num("rms_norm_eps"),
    ropeTheta: isNum(c.rope_theta) ? c.rope_theta : c.rope_scaling?.rope_theta,
    yarn: readYarn(c.rope_scaling, p),
    layerIds: c.eagle_config?.eagle_aux_hidden_state_layer_ids,
    fcNorm: flag("fc_norm"),
    normOutput: flag("norm_output"),
  };
  if (!isNum(cfg.ropeTheta)) p.push("rope_theta must be a number (missing)");
  if (Number.isInteger(cfg.dr) && cfg.dr % 2) p.push(`qk_rope_head_dim ${cfg.dr} must be even (rotation pairs)`);
  const ids = cfg.layerIds;
  if (!Array.isArray(ids) || ids.length === 0 || !ids.every((x) => Number.isInteger(x)))
    p.push(`eagle_config.eagle_aux_hidden_state_layer_ids must be a non-empty list of integers, got ${JSON.stringify(ids)}`);
  else if (!ids.every((x, i) => x >= 1 && (i === 0 || x > ids[i - 1]!)))
    p.push(`eagle_config.eagle_aux_hidden_state_layer_ids ${JSON.stringify(ids)} must be strictly increasing one-based layer ids (≥ 1)`);
  if (p.length) throw new Error(`${path}: invalid draft config\n  - ${p.join("\n  - ")}`);
  return cfg;
}

function readYarn(rs: any, p: string[]): YarnParams | undefined {
  if (rs === undefined || rs === null) return undefined;
  const type = rs.rope_type ?? rs.type;
  if (type === "default") return undefined; // transformers 5's normalised plain config: never YaRN
  if (type !== "yarn" && type !== "deepseek_yarn") {
    p.push(`rope_scaling type must be "yarn", "deepseek_yarn" or "default", got ${JSON.stringify(type)}`);
    return undefined;
  }
  const f = (k: string): number => {
    if (!isNum(rs[k])) p.push(`rope_scaling.${k} must be a number${rs[k] === undefined ? " (missing)" : ""}`);
    return rs[k];
  };
  return {
    factor: f("factor"),
    originalMax: f("original_max_position_embeddings"),
    betaFast: f("beta_fast"),
    betaSlow: f("beta_slow"),
    mscale: f("mscale"),
    mscaleAllDim: f("mscale_all_dim"),
  };
}
