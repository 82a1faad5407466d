// config.json → ModelConfig (MODEL.md §2). The reader refuses to guess: every field the model
// needs is read from the file and checked; nothing is defaulted (a reader that defaults silently
// runs a different model that still writes fluent text). All problems are collected and thrown
// as ONE K3Error("CONFIG") so a user fixes the file in one pass.
import { K3Error } from "../errors.ts";
import { readRegularFile } from "../files.ts";
import type { LayerKind, ModelConfig } from "./types.ts";

/** Experts are MXFP4 with one E8M0 scale per 32 weights (MODEL.md §3); shapes depend on it. */
export const MXFP4_GROUP = 32;

/**
 * Upper bound of every dimension the config sets: far above any real model (K3's value in the
 * comment) and low enough that a corrupt config is refused before anything is sized from it —
 * per-layer arrays, the list of expected tensors (num_experts 1e6 once meant 9 GB of specs), the
 * planner's arithmetic — and that every tensor's element count stays an exact integer (each
 * product of bounds below is < 2^53).
 */
export const CONFIG_BOUNDS = {
  layers: 4096, // num_hidden_layers: 93
  hidden: 65536, // hidden_size: 7168
  vocab: 1 << 24, // vocab_size: 163,840
  denseInter: 1 << 20, // intermediate_size: 33,792
  experts: 65536, // num_experts: 896
  sharedExperts: 64, // num_shared_experts: 2
  expertDim: 65536, // moe_intermediate_size 3072, routed_expert_hidden_size 3584
  heads: 4096, // num_attention_heads 96, linear_attn_config.num_heads 96
  rank: 65536, // q_lora_rank 1536, kv_lora_rank 512
  headDim: 4096, // qk_nope 128, qk_rope 64, v_head 128, linear_attn_config.head_dim 128
  convKernel: 64, // short_conv_kernel_size: 4
  positions: 1 << 30, // max_position_embeddings: 1,048,576
  /** MoE layers × num_experts (82,432): the catalogue holds six tensor specs per routed expert. */
  routedExperts: 1 << 18,
} as const;

type Json = Record<string, unknown>;

/** Reads typed fields out of a JSON object, recording a problem (with its JSON path) per bad field. */
export class FieldReader {
  readonly problems: string[] = [];

  constructor(private readonly source: string) {}

  problem(path: string, what: string): void {
    this.problems.push(`${path}: ${what}`);
  }

  /** The object at `path` inside `parent`, or undefined (with a problem) when absent/not an object. */
  object(parent: Json | undefined, key: string, path: string): Json | undefined {
    if (parent === undefined) return undefined;
    const v = parent[key];
    if (v === undefined) this.problem(path, "missing (expected an object)");
    else if (v === null || typeof v !== "object" || Array.isArray(v)) this.problem(path, `expected an object, got ${describe(v)}`);
    else return v as Json;
    return undefined;
  }

  /** An integer in [min, max]. Returns NaN when invalid so derived checks can skip it. */
  int(parent: Json | undefined, key: string, path: string, min: number, max: number): number {
    if (parent === undefined) return NaN;
    const v = parent[key];
    const want = `an integer from ${min} to ${max}`;
    if (v === undefined) this.problem(path, `missing (expected ${want})`);
    else if (typeof v !== "number" || !Number.isSafeInteger(v)) this.problem(path, `expected ${want}, got ${describe(v)}`);
    else if (v < min) this.problem(path, `expected ${want}, got ${v}`);
    else if (v > max) this.problem(path, `${v} is implausible (expected ${want}; a corrupt config must not size allocations)`);
    else return v;
    return NaN;
  }

  /** A finite number satisfying `ok` (described by `want`). */
  num(parent: Json | undefined, key: string, path: string, want = "a finite number", ok: (x: number) => boolean = () => true): number {
    if (parent === undefined) return NaN;
    const v = parent[key];
    if (v === undefined) this.problem(path, `missing (expected ${want})`);
    else if (typeof v !== "number" || !Number.isFinite(v) || !ok(v)) this.problem(path, `expected ${want}, got ${describe(v)}`);
    else return v;
    return NaN;
  }

  bool(parent: Json | undefined, key: string, path: string): boolean | undefined {
    if (parent === undefined) return undefined;
    const v = parent[key];
    if (v === undefined) this.problem(path, "missing (expected true or false)");
    else if (typeof v !== "boolean") this.problem(path, `expected true or false, got ${describe(v)}`);
    else return v;
    return undefined;
  }

  /** A field that must hold exactly `want` (the only form the engine implements). */
  exactly<T extends string | number | boolean>(parent: Json | undefined, key: string, path: string, want: T, why: string): T {
    if (parent === undefined) return want;
    const v = parent[key];
    if (v === undefined) this.problem(path, `missing (expected ${JSON.stringify(want)})`);
    else if (typeof v !== typeof want) this.problem(path, `expected ${JSON.stringify(want)}, got ${describe(v)}`);
    else if (v !== want) this.problem(path, `${JSON.stringify(v)} is not supported (expected ${JSON.stringify(want)}: ${why})`);
    return want;
  }

  /** A list of integers (the one-based layer lists). */
  intList(parent: Json | undefined, key: string, path: string): number[] | undefined {
    if (parent === undefined) return undefined;
    const v = parent[key];
    if (v === undefined) {
      this.problem(path, "missing (expected a list of one-based layer numbers)");
      return undefined;
    }
    if (!Array.isArray(v)) {
      this.problem(path, `expected a list of one-based layer numbers, got ${describe(v)}`);
      return undefined;
    }
    const bad = v.map((x, i) => [x, i] as const).filter(([x]) => typeof x !== "number" || !Number.isSafeInteger(x));
    for (const [x, i] of bad) this.problem(`${path}[${i}]`, `expected an integer layer number, got ${describe(x)}`);
    return bad.length ? undefined : (v as number[]);
  }

  fail(): never {
    throw new K3Error("CONFIG", `${this.source}: invalid config`, this.problems);
  }
}

export function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "a list";
  if (typeof v === "object") return "an object";
  if (typeof v === "string") return `the string ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v)}`;
  return `${typeof v} ${String(v)}`;
}

/** "1, 2, 3 … (+n more)" for problem messages. */
function listSome(xs: number[], max = 12): string {
  return xs.length <= max ? xs.join(", ") : `${xs.slice(0, max).join(", ")} … (+${xs.length - max} more)`;
}

/** JSON paths of the two nested sections, as problems name them. */
const T = "text_config.";
const L = "text_config.linear_attn_config.";
const positive = (x: number) => x > 0;

/**
 * Validate the release's nested config (top level + text_config + text_config.linear_attn_config)
 * and derive the zero-based layer map. `source` names the file in the error. One reader per
 * section, called in the file's order, so the problems are listed in that order too.
 */
export function parseConfig(json: unknown, source: string): ModelConfig {
  const r = new FieldReader(source);
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    r.problem("(top level)", `expected a JSON object, got ${describe(json)}`);
    r.fail();
  }
  const top = json as Json;
  const tc = r.object(top, "text_config", "text_config");
  const la = r.object(tc, "linear_attn_config", `${T}linear_attn_config`);

  const trunk = readTrunk(r, top, tc);
  const moe = readMoe(r, tc);
  const mla = readMla(r, tc);
  const { kdaList, mlaList, ...kda } = readKda(r, la);
  checkQuantization(r, tc);
  checkAcrossFields(r, trunk, moe, kda);

  const layerKinds = layerMap(r, trunk.numLayers, kdaList, mlaList);
  if (r.problems.length) r.fail();
  // Key order is part of the result: the session and pack fingerprints hash JSON.stringify(config).
  return { ...trunk, layerKinds, ...moe, ...mla, ...kda };
}

/** Identity, special ids and the trunk's sizes (the top level and text_config). */
function readTrunk(r: FieldReader, top: Json, tc: Json | undefined) {
  const B = CONFIG_BOUNDS;
  const modelType = r.exactly(top, "model_type", "model_type", "kimi_k3", "this engine runs Kimi K3 only");
  const bosTokenId = r.int(top, "bos_token_id", "bos_token_id", 0, B.vocab - 1);
  const eosTokenId = r.int(top, "eos_token_id", "eos_token_id", 0, B.vocab - 1);
  const padTokenId = r.int(top, "pad_token_id", "pad_token_id", 0, B.vocab - 1);

  const hidden = r.int(tc, "hidden_size", `${T}hidden_size`, 1, B.hidden);
  const numLayers = r.int(tc, "num_hidden_layers", `${T}num_hidden_layers`, 1, B.layers);
  const vocab = r.int(tc, "vocab_size", `${T}vocab_size`, 1, B.vocab);
  // Special ids index the vocabulary (the embedding row of bos, the stop id eos): one outside it
  // would read past the table or never stop. text_config repeats them in the release: it must agree.
  for (const key of ["bos_token_id", "eos_token_id", "pad_token_id"] as const) {
    const id = top[key];
    if (typeof id === "number" && Number.isSafeInteger(id) && id >= 0 && Number.isFinite(vocab) && id >= vocab)
      r.problem(key, `${id} is outside the vocabulary (vocab_size ${vocab}: ids 0..${vocab - 1})`);
    if (tc !== undefined && tc[key] !== undefined && tc[key] !== id)
      r.problem(`${T}${key}`, `${describe(tc[key])} disagrees with the top-level ${key} ${describe(id)}`);
  }
  const maxPositions = r.int(tc, "max_position_embeddings", `${T}max_position_embeddings`, 1, B.positions);
  const rmsEps = r.num(tc, "rms_norm_eps", `${T}rms_norm_eps`, "a number > 0", positive);
  const tieWordEmbeddings = r.exactly(tc, "tie_word_embeddings", `${T}tie_word_embeddings`, false, "K3 ships a separate lm_head");
  // The top level repeats it in the release; if present it must agree.
  if (top.tie_word_embeddings !== undefined && top.tie_word_embeddings !== false)
    r.problem("tie_word_embeddings", `expected false (K3 ships a separate lm_head), got ${describe(top.tie_word_embeddings)}`);
  const attnResBlock = r.int(tc, "attn_res_block_size", `${T}attn_res_block_size`, 1, B.layers);
  return { modelType, bosTokenId, eosTokenId, padTokenId, maxPositions, hidden, numLayers, vocab, rmsEps, tieWordEmbeddings, attnResBlock };
}

/** The dense/MoE split, the FFN and the router (text_config). */
function readMoe(r: FieldReader, tc: Json | undefined) {
  const B = CONFIG_BOUNDS;
  const firstKDense = r.int(tc, "first_k_dense_replace", `${T}first_k_dense_replace`, 1, B.layers);
  // Every layer from first_k_dense_replace on is MoE only when the frequency is 1.
  r.exactly(tc, "moe_layer_freq", `${T}moe_layer_freq`, 1, "every layer after the dense ones is MoE");
  r.exactly(tc, "hidden_act", `${T}hidden_act`, "situ", "the engine implements SiTU-GLU");

  const denseInter = r.int(tc, "intermediate_size", `${T}intermediate_size`, 1, B.denseInter);
  const numExperts = r.int(tc, "num_experts", `${T}num_experts`, 1, B.experts);
  const topK = r.int(tc, "num_experts_per_token", `${T}num_experts_per_token`, 1, B.experts);
  const numSharedExperts = r.int(tc, "num_shared_experts", `${T}num_shared_experts`, 1, B.sharedExperts);
  const moeInter = r.int(tc, "moe_intermediate_size", `${T}moe_intermediate_size`, 1, B.expertDim);
  const latent = r.int(tc, "routed_expert_hidden_size", `${T}routed_expert_hidden_size`, 1, B.expertDim);
  const latentNorm = r.exactly(tc, "latent_moe_use_norm", `${T}latent_moe_use_norm`, true, "the engine implements the normed LatentMoE");
  const routerActivation = r.exactly(tc, "moe_router_activation_func", `${T}moe_router_activation_func`, "sigmoid", "the engine implements the sigmoid router");
  // The router always renormalises the top-k weights (MODEL.md §5); false would be another model.
  const renormalize = r.exactly(tc, "moe_renormalize", `${T}moe_renormalize`, true, "the router always renormalises the top-k weights");
  const routedScaling = r.num(tc, "routed_scaling_factor", `${T}routed_scaling_factor`, "a number > 0", positive);
  const situBeta = r.num(tc, "activation_situ_beta", `${T}activation_situ_beta`, "a number > 0", positive);
  const situLinearBeta = r.num(tc, "activation_situ_linear_beta", `${T}activation_situ_linear_beta`, "a number > 0", positive);
  // Grouped top-k with one group selecting one group is plain top-k; anything else changes routing.
  const grouped = r.bool(tc, "use_grouped_topk", `${T}use_grouped_topk`);
  if (grouped === true) {
    r.exactly(tc, "num_expert_group", `${T}num_expert_group`, 1, "grouped routing is not implemented (1 group = inactive)");
    r.exactly(tc, "topk_group", `${T}topk_group`, 1, "grouped routing is not implemented (1 group = inactive)");
  }
  return { firstKDense, denseInter, numExperts, topK, numSharedExperts, moeInter, latent, latentNorm, routerActivation, renormalize, routedScaling, situBeta, situLinearBeta };
}

/** Multi-head latent attention (text_config). */
function readMla(r: FieldReader, tc: Json | undefined) {
  const B = CONFIG_BOUNDS;
  const mlaHeads = r.int(tc, "num_attention_heads", `${T}num_attention_heads`, 1, B.heads);
  const qLoraRank = r.int(tc, "q_lora_rank", `${T}q_lora_rank`, 1, B.rank);
  const kvLoraRank = r.int(tc, "kv_lora_rank", `${T}kv_lora_rank`, 1, B.rank);
  const qkNope = r.int(tc, "qk_nope_head_dim", `${T}qk_nope_head_dim`, 1, B.headDim);
  const qkRope = r.int(tc, "qk_rope_head_dim", `${T}qk_rope_head_dim`, 1, B.headDim);
  const vHead = r.int(tc, "v_head_dim", `${T}v_head_dim`, 1, B.headDim);
  const mlaUseNope = r.exactly(tc, "mla_use_nope", `${T}mla_use_nope`, true, "the engine implements NoPE MLA (no rotary)");
  const mlaOutputGate = r.exactly(tc, "mla_use_output_gate", `${T}mla_use_output_gate`, true, "the engine implements gated MLA (g_proj)");
  return { mlaHeads, qLoraRank, kvLoraRank, qkNope, qkRope, vHead, mlaUseNope, mlaOutputGate };
}

/** Kimi delta attention and the two one-based layer lists (text_config.linear_attn_config). */
function readKda(r: FieldReader, la: Json | undefined) {
  const B = CONFIG_BOUNDS;
  const kdaHeads = r.int(la, "num_heads", `${L}num_heads`, 1, B.heads);
  const kdaHeadDim = r.int(la, "head_dim", `${L}head_dim`, 1, B.headDim);
  const convKernel = r.int(la, "short_conv_kernel_size", `${L}short_conv_kernel_size`, 1, B.convKernel);
  const gateLowerBound = r.num(la, "gate_lower_bound", `${L}gate_lower_bound`, "a number < 0", (x) => x < 0);
  const kdaFullRankGate = r.exactly(la, "use_full_rank_gate", `${L}use_full_rank_gate`, true, "f_a_proj/f_b_proj shapes assume the full-rank gate");
  const kdaList = r.intList(la, "kda_layers", `${L}kda_layers`);
  const mlaList = r.intList(la, "full_attn_layers", `${L}full_attn_layers`);
  return { kdaHeads, kdaHeadDim, convKernel, gateLowerBound, kdaFullRankGate, kdaList, mlaList };
}

/** Checks between fields, only between fields that were themselves valid (NaN compares false). */
function checkAcrossFields(
  r: FieldReader,
  { numLayers }: { numLayers: number },
  { firstKDense, numExperts, topK, latent, moeInter }: { firstKDense: number; numExperts: number; topK: number; latent: number; moeInter: number },
  { kdaHeads, kdaHeadDim }: { kdaHeads: number; kdaHeadDim: number },
): void {
  const B = CONFIG_BOUNDS;
  if (topK > numExperts) r.problem(`${T}num_experts_per_token`, `top-k ${topK} exceeds num_experts ${numExperts}`);
  if (kdaHeads > kdaHeadDim)
    r.problem(`${L}num_heads`, `${kdaHeads} heads exceed head_dim ${kdaHeadDim} (A_log has head_dim entries, one per head)`);
  if (firstKDense > numLayers) r.problem(`${T}first_k_dense_replace`, `${firstKDense} exceeds num_hidden_layers ${numLayers}`);
  const routed = (numLayers - firstKDense) * numExperts;
  if (routed > B.routedExperts)
    r.problem(`${T}num_experts`, `${numExperts} experts × ${numLayers - firstKDense} MoE layers = ${routed} routed experts is implausible (at most ${B.routedExperts})`);
  for (const [v, name] of [[latent, "routed_expert_hidden_size"], [moeInter, "moe_intermediate_size"]] as const)
    if (Number.isFinite(v) && v % MXFP4_GROUP !== 0) r.problem(`${T}${name}`, `${v} is not a multiple of the MXFP4 group ${MXFP4_GROUP}`);
}

/** Expert weights are MXFP4 in groups of 32 (the expert shapes divide by it): the config must say so. */
function checkQuantization(r: FieldReader, tc: Json | undefined): void {
  const q = r.object(tc, "quantization_config", `${T}quantization_config`);
  r.exactly(q, "format", `${T}quantization_config.format`, "mxfp4-pack-quantized", "experts are read as MXFP4");
  const groups = r.object(q, "config_groups", `${T}quantization_config.config_groups`);
  if (groups === undefined) return;
  const names = Object.keys(groups);
  if (names.length === 0) r.problem(`${T}quantization_config.config_groups`, "expected at least one group");
  for (const g of names) {
    const P = `${T}quantization_config.config_groups.${g}`;
    const group = r.object(groups, g, P); // a null or non-object group is a problem, not a crash
    const w = r.object(group, "weights", `${P}.weights`);
    r.exactly(w, "num_bits", `${P}.weights.num_bits`, 4, "MXFP4");
    r.exactly(w, "group_size", `${P}.weights.group_size`, MXFP4_GROUP, "one E8M0 scale per 32 weights");
  }
}

/**
 * Zero-based layer kinds from the two one-based lists. Every layer must be in exactly one list
 * (MODEL.md §7.8: the lists are one-based; an off-by-one here silently swaps attention types).
 */
function layerMap(r: FieldReader, numLayers: number, kda: number[] | undefined, mla: number[] | undefined): LayerKind[] {
  if (kda === undefined || mla === undefined || Number.isNaN(numLayers)) return [];
  const seen = new Array<string | undefined>(numLayers).fill(undefined);
  const kinds: LayerKind[] = new Array(numLayers);
  for (const [list, key, kind] of [[kda, "kda_layers", "kda"], [mla, "full_attn_layers", "mla"]] as const) {
    const outOfRange = list.filter((x) => x < 1 || x > numLayers);
    if (outOfRange.length)
      r.problem(`${L}${key}`, `layer numbers are one-based 1..${numLayers}; out of range: ${listSome(outOfRange)}`);
    const dup: number[] = [];
    for (const x of list) {
      if (x < 1 || x > numLayers) continue;
      const prev = seen[x - 1];
      if (prev !== undefined) dup.push(x);
      else {
        seen[x - 1] = key;
        kinds[x - 1] = kind;
      }
    }
    if (dup.length) r.problem(`${L}${key}`, `layers listed more than once (in this or the other list): ${listSome(dup)}`);
  }
  const missing = seen.flatMap((s, i) => (s === undefined ? [i + 1] : []));
  if (missing.length)
    r.problem(`${L}kda_layers/full_attn_layers`, `one-based layers in neither list: ${listSome(missing)}`);
  return kinds;
}

/** Read and validate `path` (config.json). Unreadable or non-JSON files are CONFIG errors too. */
export function readConfig(path: string): ModelConfig {
  const text = readRegularFile(path, "config", "CONFIG").toString("utf8");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new K3Error("CONFIG", `${path}: config is not valid JSON`, [(e as Error).message]);
  }
  return parseConfig(json, path);
}
