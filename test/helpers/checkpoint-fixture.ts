// Tiny checkpoints for the checkpoint-reader tests, written to a temp dir. The writer is
// deliberately separate from tools/gen (the generator under test elsewhere) and can write
// broken files: raw headers, wrong spans, overlaps, truncation.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expectedTensors } from "../../src/checkpoint/shapes.ts";
import { parseConfig } from "../../src/checkpoint/config.ts";
import type { ModelConfig } from "../../src/checkpoint/types.ts";

export const DT_BYTES: Record<string, number> = { BF16: 2, F32: 4, U8: 1, F16: 2, I64: 8 };

export function tempDir(tag: string): string {
  return mkdtempSync(join(tmpdir(), `k3-${tag}-`));
}

/** A small config in the release's nested shape: 5 layers, one-based MLA layers 4 and 5. */
export function tinyConfigJson(): any {
  return {
    model_type: "kimi_k3",
    bos_token_id: 1,
    eos_token_id: 2,
    pad_token_id: 3,
    tie_word_embeddings: false,
    text_config: {
      model_type: "kimi_linear",
      hidden_size: 16,
      num_hidden_layers: 5,
      vocab_size: 12,
      max_position_embeddings: 4096,
      rms_norm_eps: 1e-5,
      tie_word_embeddings: false,
      attn_res_block_size: 2,
      first_k_dense_replace: 1,
      moe_layer_freq: 1,
      hidden_act: "situ",
      intermediate_size: 24,
      num_experts: 4,
      num_experts_per_token: 2,
      num_shared_experts: 2,
      moe_intermediate_size: 32,
      routed_expert_hidden_size: 64,
      latent_moe_use_norm: true,
      moe_router_activation_func: "sigmoid",
      moe_renormalize: true,
      routed_scaling_factor: 2.5,
      activation_situ_beta: 4.0,
      activation_situ_linear_beta: 25.0,
      use_grouped_topk: true,
      num_expert_group: 1,
      topk_group: 1,
      num_attention_heads: 2,
      q_lora_rank: 8,
      kv_lora_rank: 6,
      qk_nope_head_dim: 4,
      qk_rope_head_dim: 2,
      v_head_dim: 3,
      mla_use_nope: true,
      mla_use_output_gate: true,
      quantization_config: {
        format: "mxfp4-pack-quantized",
        config_groups: { group_0: { weights: { num_bits: 4, group_size: 32 } } },
      },
      linear_attn_config: {
        num_heads: 3,
        head_dim: 4,
        short_conv_kernel_size: 4,
        use_full_rank_gate: true,
        gate_lower_bound: -5.0,
        kda_layers: [1, 2, 3],
        full_attn_layers: [4, 5],
      },
    },
  };
}

export function tinyConfig(): ModelConfig {
  return parseConfig(tinyConfigJson(), "tiny");
}

export interface FixtureTensor {
  name: string;
  dtype: string;
  shape: number[];
  /** Zero-based layer whose shard holds it (writeCheckpoint); default: from the name. */
  layer?: number;
  /** Fill byte for the data (default: a hash of the name, so each tensor's bytes differ). */
  fill?: number;
}

/**
 * Write a valid safetensors file with tensors laid out in the given order, no gaps. Data byte i
 * of a tensor is (fill + i) & 255 so tests can check which bytes a reader points at.
 */
export function writeShard(path: string, tensors: FixtureTensor[], metadata?: Record<string, string>): Record<string, [number, number]> {
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  const offsets: Record<string, [number, number]> = {};
  let at = 0;
  for (const t of tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1) * DT_BYTES[t.dtype]!;
    offsets[t.name] = [at, at + n];
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + n] };
    at += n;
  }
  const data = new Uint8Array(at);
  for (const t of tensors) {
    const [b, e] = offsets[t.name]!;
    const f = t.fill ?? fillOf(t.name);
    for (let i = b; i < e; i++) data[i] = (f + i - b) & 255;
  }
  writeRawShard(path, header, data);
  return offsets;
}

/** Any header object + data bytes, exactly as given (for broken files). */
export function writeRawShard(path: string, header: unknown, data: Uint8Array, headerLength?: bigint): void {
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(headerLength ?? BigInt(json.length));
  writeFileSync(path, Buffer.concat([len, json, data]));
}

export function fillOf(name: string): number {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) & 255;
  return h;
}

export interface FixtureOptions {
  config?: any; // the config.json object (default tinyConfigJson())
  /** Edit the tensor list before writing (drop, reshape, add, reorder). */
  edit?: (tensors: FixtureTensor[]) => FixtureTensor[];
  /** Write model.safetensors.index.json (default true). */
  index?: boolean;
  /** Extra non-LM tensors written to the last shard, or ("own-shard") to a shard of their own, as
   *  in the release (its last two shards hold only the vision tower and mm_projector). */
  vision?: boolean | "own-shard";
}

/**
 * A checkpoint directory: globals in shard 1, layer L in shard L+2 (like the release: one layer
 * per shard), each layer's trunk tensors then its experts, in order → all contiguous.
 */
export function writeCheckpoint(dir: string, opts: FixtureOptions = {}): { dir: string; shards: Map<string, FixtureTensor[]> } {
  const cfgJson = opts.config ?? tinyConfigJson();
  writeFileSync(join(dir, "config.json"), JSON.stringify(cfgJson, null, 2));
  const cfg = parseConfig(cfgJson, "fixture");
  let tensors: FixtureTensor[] = expectedTensors(cfg).map((s) => ({ name: s.name, dtype: s.dtype, shape: s.shape, layer: s.layer }));
  if (opts.vision) tensors.push({ name: "vision_tower.encoder.blocks.0.wo.weight", dtype: "BF16", shape: [4, 4] }, { name: "mm_projector.proj.0.weight", dtype: "F32", shape: [2] });
  if (opts.edit) tensors = opts.edit(tensors);
  const own = opts.vision === "own-shard";
  const nShards = cfg.numLayers + 1 + (own ? 1 : 0);
  const shardName = (i: number) => `model-${String(i + 1).padStart(5, "0")}-of-${String(nShards).padStart(6, "0")}.safetensors`;
  const shards = new Map<string, FixtureTensor[]>();
  for (let i = 0; i < nShards; i++) shards.set(shardName(i), []);
  for (const t of tensors) {
    const layer = t.layer ?? layerOf(t.name);
    const nonLm = own ? nShards - 1 : cfg.numLayers;
    shards.get(shardName(layer === undefined ? (t.name.startsWith("language_model.") ? 0 : nonLm) : layer + 1))!.push(t);
  }
  const weightMap: Record<string, string> = {};
  for (const [name, ts] of shards) {
    writeShard(join(dir, name), ts, { format: "pt" });
    for (const t of ts) weightMap[t.name] = name;
  }
  if (opts.index ?? true) writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
  return { dir, shards };
}

function layerOf(name: string): number | undefined {
  const m = /\.layers\.(\d+)\./.exec(name);
  return m ? Number(m[1]) : undefined;
}

/** Run `fn`, expecting a K3Error; returns it (fails the test via throw otherwise). */
export function catchK3(fn: () => unknown): { code: string; message: string; problems: string[] } {
  try {
    fn();
  } catch (e) {
    const err = e as { name?: string; code?: string; message: string; problems?: string[] };
    if (err.name !== "K3Error") throw e;
    return { code: err.code!, message: err.message, problems: err.problems ?? [] };
  }
  throw new Error("expected a K3Error, but nothing was thrown");
}
