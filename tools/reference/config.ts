// config.json of a K3 release (nested shape, MODEL.md §2) → the numbers the reference needs.
// Refuses to guess: every missing or mistyped field is reported at once; nothing has a default.
import { readFileSync } from "node:fs";
import { join } from "node:path";

export interface RefConfig {
  hidden: number; // E
  layers: number; // L
  vocab: number; // V
  eps: number; // rms_norm_eps
  firstDense: number; // layers < firstDense use the dense FFN (`mlp.`)
  denseInter: number; // intermediate_size
  experts: number; // num_experts
  topK: number; // num_experts_per_token
  sharedExperts: number; // num_shared_experts
  moeInter: number; // moe_intermediate_size (per expert)
  latent: number; // routed_expert_hidden_size
  scaling: number; // routed_scaling_factor
  mlaHeads: number; // Hm
  qRank: number; // q_lora_rank
  kvRank: number; // R = kv_lora_rank
  dn: number; // qk_nope_head_dim
  dr: number; // qk_rope_head_dim
  dv: number; // v_head_dim
  situB1: number; // activation_situ_beta
  situB2: number; // activation_situ_linear_beta
  blockSize: number; // attn_res_block_size
  kdaHeads: number; // H
  kdaDim: number; // D
  convWidth: number; // short_conv_kernel_size
  gateLower: number; // gate_lower_bound
  kdaLayers: number[]; // ONE-based, as stored
  mlaLayers: number[]; // ONE-based (full_attn_layers), as stored
}

type Want = "number" | "int" | "int[]" | true | false | string;

function check(obj: any, path: string, key: string, want: Want, problems: string[]): any {
  const v = obj?.[key];
  const at = `${path}.${key}`;
  if (v === undefined) problems.push(`${at} is missing`);
  else if (want === "number" && typeof v !== "number") problems.push(`${at} must be a number`);
  else if (want === "int" && !Number.isInteger(v)) problems.push(`${at} must be an integer`);
  else if (want === "int[]" && !(Array.isArray(v) && v.every(Number.isInteger))) problems.push(`${at} must be a list of integers`);
  else if ((want === true || want === false) && v !== want) problems.push(`${at} must be ${want} (the only supported value)`);
  else if (typeof want === "string" && !["number", "int", "int[]"].includes(want) && v !== want)
    problems.push(`${at} must be "${want}" (the only supported value)`);
  return v;
}

export function readConfig(dir: string): RefConfig {
  const path = join(dir, "config.json");
  const root = JSON.parse(readFileSync(path, "utf8"));
  const p: string[] = [];
  const t = root?.text_config;
  if (!t) throw new Error(`${path}: text_config is missing`);
  const la = t.linear_attn_config;
  if (!la) p.push("text_config.linear_attn_config is missing");
  const T = (k: string, w: Want) => check(t, "text_config", k, w, p);
  const A = (k: string, w: Want) => check(la, "text_config.linear_attn_config", k, w, p);
  const cfg: RefConfig = {
    hidden: T("hidden_size", "int"),
    layers: T("num_hidden_layers", "int"),
    vocab: T("vocab_size", "int"),
    eps: T("rms_norm_eps", "number"),
    firstDense: T("first_k_dense_replace", "int"),
    denseInter: T("intermediate_size", "int"),
    experts: T("num_experts", "int"),
    topK: T("num_experts_per_token", "int"),
    sharedExperts: T("num_shared_experts", "int"),
    moeInter: T("moe_intermediate_size", "int"),
    latent: T("routed_expert_hidden_size", "int"),
    scaling: T("routed_scaling_factor", "number"),
    mlaHeads: T("num_attention_heads", "int"),
    qRank: T("q_lora_rank", "int"),
    kvRank: T("kv_lora_rank", "int"),
    dn: T("qk_nope_head_dim", "int"),
    dr: T("qk_rope_head_dim", "int"),
    dv: T("v_head_dim", "int"),
    situB1: T("activation_situ_beta", "number"),
    situB2: T("activation_situ_linear_beta", "number"),
    blockSize: T("attn_res_block_size", "int"),
    kdaHeads: A("num_heads", "int"),
    kdaDim: A("head_dim", "int"),
    convWidth: A("short_conv_kernel_size", "int"),
    gateLower: A("gate_lower_bound", "number"),
    kdaLayers: A("kda_layers", "int[]"),
    mlaLayers: A("full_attn_layers", "int[]"),
  };
  // Fields whose other values would be a different architecture: accept only the released value.
  T("latent_moe_use_norm", true);
  T("moe_router_activation_func", "sigmoid");
  T("moe_renormalize", true);
  T("mla_use_nope", true);
  T("mla_use_output_gate", true);
  T("hidden_act", "situ");
  T("tie_word_embeddings", false);
  A("use_full_rank_gate", true);
  // Grouped top-k is inactive with one group; refuse a config where it would matter.
  if (t.use_grouped_topk === true && (t.num_expert_group !== 1 || t.topk_group !== 1))
    p.push("text_config: grouped top-k with num_expert_group/topk_group ≠ 1 is not supported");
  if (p.length === 0) {
    for (let i = 0; i < cfg.layers; i++) {
      const n = (cfg.kdaLayers.includes(i + 1) ? 1 : 0) + (cfg.mlaLayers.includes(i + 1) ? 1 : 0);
      if (n !== 1) p.push(`layer ${i} (one-based ${i + 1}) is in ${n} of kda_layers/full_attn_layers, want exactly 1`);
    }
  }
  if (p.length) throw new Error(`${path}: invalid config\n  - ${p.join("\n  - ")}`);
  return cfg;
}
