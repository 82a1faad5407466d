// A draft model's config.json → DraftConfig: the released K3 EAGLE-3 drafts
// (`lightseekorg/kimi-k3-eagle3-mla`, `…-eagle3.1-mla`: "format A", DeepSeek-style MLA with
// interleaved YaRN RoPE, SiLU MLP, one decoder layer fed by target hidden states; docs/DRAFT.md).
// As for the target (config.ts), nothing the math depends on is guessed: a missing or mistyped
// field is named, all problems at once, as one K3Error CONFIG (exit 2). Where the published
// configs are silent the readers' meaning is used (docs/DRAFT.md "Decisions"): `fc_norm` and
// `norm_output` absent mean false (vLLM's getattr default), and `fc_norm` must agree with the
// fc_norm.* tensors; a YaRN block states every one of its fields.
//
// The NeMo Automodel draft ("format B": NoPE MLA with an output gate, SiTU MLP, a compressed
// vocabulary with d2t/t2d; no public checkpoint exists) is recognised and refused by name.
import { K3Error } from "../errors.ts";
import { readRegularFile } from "../files.ts";
import { CONFIG_BOUNDS, describe, FieldReader } from "./config.ts";
import type { ModelConfig } from "./types.ts";

type Json = Record<string, unknown>;

export const DRAFT_ARCHITECTURE = "Eagle3DeepseekV2ForCausalLM";
/** Format B's architecture string (Automodel's recipe writes it into a copy of the target config). */
export const FORMAT_B_ARCHITECTURE = "LlamaEagle3DraftModel";

/** Rotary embedding: plain (θ^(−2i/d)) or DeepSeek-YaRN (DRAFTERS.md §3.3). */
export type DraftRope =
  | { kind: "default"; theta: number }
  | { kind: "yarn"; theta: number; factor: number; originalMax: number; betaFast: number; betaSlow: number; mscale: number; mscaleAllDim: number };

export interface DraftConfig {
  architecture: string;
  /** "eagle3.1" when the checkpoint has fc_norm (a norm per tap before fc), else "eagle3". */
  variant: "eagle3" | "eagle3.1";
  hidden: number; // E: must equal the target's
  vocab: number; // must equal the target's (no d2t: draft ids are target ids)
  intermediate: number; // I (SiLU MLP)
  heads: number; // MLA heads (num_key_value_heads must equal it)
  qLoraRank: number;
  kvLoraRank: number; // R
  qkNope: number; // dn
  qkRope: number; // dr
  vHead: number; // dv
  rmsEps: number; // every draft norm, q_a/kv_a included (unlike the target's 1e-6 there)
  maxPositions: number;
  rope: DraftRope;
  /** One-based completed-layer ids of the target whose prefix-sum stream is tapped, ascending. */
  captureLayers: number[];
  fcNorm: boolean; // config fc_norm (absent: false); the fc_norm.{j}.weight tensors must agree
  /** Chain steps feed back the post-final-norm state (eagle3.1) instead of the pre-norm residual. */
  normOutput: boolean;
}

const positive = (x: number) => x > 0;

/** Where eagle_config lives: top level, or under text_config ("K3 draft exports may place it there", DRAFTERS.md §1.2). */
function eagleConfig(r: FieldReader, top: Json): Json | undefined {
  const tc = top.text_config;
  const nested = tc !== null && typeof tc === "object" && !Array.isArray(tc) ? (tc as Json).eagle_config : undefined;
  if (top.eagle_config === undefined && nested !== undefined) return r.object(tc as Json, "eagle_config", "text_config.eagle_config");
  return r.object(top, "eagle_config", "eagle_config");
}

/** The architecture: format A, or format B refused by name. */
function readArchitecture(r: FieldReader, top: Json): string {
  const a = top.architectures;
  if (!Array.isArray(a) || a.length === 0 || typeof a[0] !== "string") {
    r.problem("architectures", `expected a list with the draft's architecture (${JSON.stringify(DRAFT_ARCHITECTURE)}), got ${describe(a)}`);
    return "";
  }
  if (a[0] === FORMAT_B_ARCHITECTURE)
    r.problem("architectures", `${JSON.stringify(a[0])} is NeMo Automodel's K3 EAGLE-3 draft ("format B": NoPE MLA with an output gate, SiTU MLP, a compressed vocabulary), which k3 does not run; it runs the released format (${JSON.stringify(DRAFT_ARCHITECTURE)}, e.g. lightseekorg/kimi-k3-eagle3.1-mla)`);
  else if (a[0] !== DRAFT_ARCHITECTURE) r.problem("architectures", `${JSON.stringify(a[0])} is not a draft k3 runs (expected ${JSON.stringify(DRAFT_ARCHITECTURE)})`);
  return a[0];
}

/** rope_scaling absent or "default" → plain RoPE; "yarn"/"deepseek_yarn" → DeepSeek-YaRN (DRAFTERS.md §1.6.4). */
function readRope(r: FieldReader, top: Json): DraftRope {
  const theta = r.num(top, "rope_theta", "rope_theta", "a number > 0", positive);
  const rs = top.rope_scaling;
  if (rs === undefined || rs === null) return { kind: "default", theta };
  if (typeof rs !== "object" || Array.isArray(rs)) {
    r.problem("rope_scaling", `expected an object or null, got ${describe(rs)}`);
    return { kind: "default", theta };
  }
  const s = rs as Json;
  const type = s.rope_type ?? s.type;
  // transformers 5.x writes a plain config as {"rope_type": "default", "rope_theta": …}: that must
  // not reach the YaRN path (TokenSpeed's fix, DRAFTERS.md §1.6.4).
  if (type === "default") return { kind: "default", theta };
  if (type !== "yarn" && type !== "deepseek_yarn") {
    r.problem("rope_scaling.type", `${describe(type)} is not supported (expected "yarn", "deepseek_yarn" or "default")`);
    return { kind: "default", theta };
  }
  const factor = r.num(s, "factor", "rope_scaling.factor", "a number ≥ 1", (x) => x >= 1);
  const originalMax = r.int(s, "original_max_position_embeddings", "rope_scaling.original_max_position_embeddings", 1, CONFIG_BOUNDS.positions);
  // The release states all of them (DRAFTERS.md §1.2); DeepSeek's code has defaults, but a draft
  // trained with other values would silently run a different RoPE: every field is required.
  const betaFast = r.num(s, "beta_fast", "rope_scaling.beta_fast", "a number > 0", positive);
  const betaSlow = r.num(s, "beta_slow", "rope_scaling.beta_slow", "a number > 0", positive);
  if (betaSlow >= betaFast) r.problem("rope_scaling.beta_slow", `${betaSlow} must be below beta_fast ${betaFast}`);
  const mscale = r.num(s, "mscale", "rope_scaling.mscale", "a number ≥ 0", (x) => x >= 0);
  const mscaleAllDim = r.num(s, "mscale_all_dim", "rope_scaling.mscale_all_dim", "a number ≥ 0", (x) => x >= 0);
  return { kind: "yarn", theta, factor, originalMax, betaFast, betaSlow, mscale, mscaleAllDim };
}

/** The capture ids: one-based completed layers, ascending, distinct (range is checked against the target). */
function readCapture(r: FieldReader, eagle: Json | undefined): number[] {
  const ids = r.intList(eagle, "eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids");
  if (ids === undefined) return [];
  if (ids.length === 0) r.problem("eagle_config.eagle_aux_hidden_state_layer_ids", "expected at least one layer id");
  for (let i = 1; i < ids.length; i++)
    if (!(ids[i]! > ids[i - 1]!)) r.problem("eagle_config.eagle_aux_hidden_state_layer_ids", `ids must be ascending and distinct (the taps are concatenated in id order), got ${JSON.stringify(ids)}`);
  return ids;
}

/** Validate a draft's config.json. `fcNormTensors`: whether the checkpoint holds fc_norm.*.weight. */
export function parseDraftConfig(json: unknown, source: string, fcNormTensors: boolean): DraftConfig {
  const r = new FieldReader(source);
  const B = CONFIG_BOUNDS;
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    r.problem("(top level)", `expected a JSON object, got ${describe(json)}`);
    r.fail();
  }
  const top = json as Json;
  const architecture = readArchitecture(r, top);
  if (r.problems.length) r.fail(); // another architecture: its fields mean other things
  r.exactly(top, "num_hidden_layers", "num_hidden_layers", 1, "an EAGLE-3 draft has one decoder layer");
  r.exactly(top, "hidden_act", "hidden_act", "silu", "the released drafts' MLP is SiLU-gated");
  const hidden = r.int(top, "hidden_size", "hidden_size", 1, B.hidden);
  const vocab = r.int(top, "vocab_size", "vocab_size", 1, B.vocab);
  if (top.draft_vocab_size !== undefined && top.draft_vocab_size !== vocab)
    r.problem("draft_vocab_size", `${describe(top.draft_vocab_size)}: a compressed draft vocabulary (d2t/t2d) is not supported; the released drafts use the full vocabulary (draft_vocab_size = vocab_size)`);
  const intermediate = r.int(top, "intermediate_size", "intermediate_size", 1, B.denseInter);
  const heads = r.int(top, "num_attention_heads", "num_attention_heads", 1, B.heads);
  if (top.num_key_value_heads !== undefined && top.num_key_value_heads !== heads)
    r.problem("num_key_value_heads", `${describe(top.num_key_value_heads)} must equal num_attention_heads ${heads} (MLA: one latent per position)`);
  const qLoraRank = r.int(top, "q_lora_rank", "q_lora_rank", 1, B.rank);
  const kvLoraRank = r.int(top, "kv_lora_rank", "kv_lora_rank", 1, B.rank);
  const qkNope = r.int(top, "qk_nope_head_dim", "qk_nope_head_dim", 1, B.headDim);
  const qkRope = r.int(top, "qk_rope_head_dim", "qk_rope_head_dim", 1, B.headDim);
  if (Number.isFinite(qkRope) && qkRope % 2) r.problem("qk_rope_head_dim", `${qkRope} must be even (RoPE turns pairs of dims)`);
  const vHead = r.int(top, "v_head_dim", "v_head_dim", 1, B.headDim);
  const rmsEps = r.num(top, "rms_norm_eps", "rms_norm_eps", "a number > 0", positive);
  const maxPositions = r.int(top, "max_position_embeddings", "max_position_embeddings", 1, B.positions);
  if (top.tie_word_embeddings !== undefined && top.tie_word_embeddings !== false)
    r.problem("tie_word_embeddings", `expected false (the draft has its own lm_head), got ${describe(top.tie_word_embeddings)}`);
  const rope = readRope(r, top);
  const captureLayers = readCapture(r, eagleConfig(r, top));
  // fc_norm and norm_output: absent means false (what vLLM reads); fc_norm must agree with the tensors.
  const flag = (key: string) => {
    const v = top[key];
    if (v !== undefined && typeof v !== "boolean") r.problem(key, `expected true or false, got ${describe(v)}`);
    return v === true;
  };
  const fcNorm = flag("fc_norm");
  const normOutput = flag("norm_output");
  if (fcNorm !== fcNormTensors)
    r.problem("fc_norm", `${top.fc_norm === undefined ? "absent (false)" : String(top.fc_norm)}, but the checkpoint ${fcNormTensors ? "has" : "has no"} fc_norm.*.weight tensors`);
  if (r.problems.length) r.fail();
  const variant = fcNorm ? "eagle3.1" : "eagle3";
  return { architecture, variant, hidden, vocab, intermediate, heads, qLoraRank, kvLoraRank, qkNope, qkRope, vHead, rmsEps, maxPositions, rope, captureLayers, fcNorm, normOutput };
}

/**
 * The draft must fit the target it drafts for (before any weight is read): the hidden size and
 * vocabulary equal, every capture id a completed layer of the target (one-based: id k taps the
 * stream after zero-based layer k − 1, so 1..numLayers). Throws CONFIG naming each field.
 */
export function checkDraftFitsTarget(d: DraftConfig, target: ModelConfig, source: string): void {
  const problems: string[] = [];
  if (d.hidden !== target.hidden) problems.push(`hidden_size: ${d.hidden}, the target's is ${target.hidden}`);
  if (d.vocab !== target.vocab) problems.push(`vocab_size: ${d.vocab}, the target's is ${target.vocab} (draft ids are target ids)`);
  const out = d.captureLayers.filter((id) => id < 1 || id > target.numLayers);
  if (out.length)
    problems.push(`eagle_config.eagle_aux_hidden_state_layer_ids: ${out.join(", ")} outside the target's completed layers 1..${target.numLayers} (one-based: id k is the stream after zero-based layer k − 1)`);
  if (problems.length) throw new K3Error("CONFIG", `${source}: this draft does not fit the target model`, problems);
}

/** Read `path` (a draft's config.json); unreadable or non-JSON files are CONFIG errors. */
export function readDraftConfig(path: string, fcNormTensors: boolean): DraftConfig {
  const text = readRegularFile(path, "draft config", "CONFIG").toString("utf8");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new K3Error("CONFIG", `${path}: draft config is not valid JSON`, [(e as Error).message]);
  }
  return parseDraftConfig(json, path, fcNormTensors);
}
