// A draft model folder (`--draft DIR`): config.json + model.safetensors as published
// (DRAFTERS.md §1, format A). Everything is checked against the target before any weight is
// read: the config (draft-config.ts), then every tensor's name, dtype and shape against what the
// config implies — a missing, unexpected or misshapen tensor is named (K3Error CHECKPOINT, exit 4),
// a checkpoint in the other format (NeMo Automodel's, "format B") is refused by name.
//
// The embedding: the released 3.1 draft ships `embed_tokens.weight` byte-identical to K3's input
// embedding (DRAFTERS.md §1.4), so the engine shares the target's table (rows gathered as the
// target gathers them) when the two are equal, and otherwise keeps the draft's own. Equality is
// checked cheaply, without reading the tables: same shape and dtype, then EMBED_SAMPLE_ROWS rows
// (the first, the last and rows spread between them) compared byte for byte. What that proves:
// those rows are equal; another row could still differ. What that risks: the draft would see a
// slightly different input for that token, which changes only which drafts are proposed — every
// output token is the target's (docs/DRAFT.md "Embedding").
import { closeSync, existsSync } from "node:fs";
import { join } from "node:path";
import { K3Error } from "../errors.ts";
import { openRegularFile, readAt } from "../files.ts";
import { type DraftConfig, checkDraftFitsTarget, readDraftConfig } from "./draft-config.ts";
import { resolveModelFolder } from "./model-folder.ts";
import { readSafetensorsHeader } from "./safetensors.ts";
import type { ModelConfig, TensorEntry } from "./types.ts";

export type { DraftConfig, DraftRope } from "./draft-config.ts";

export const DRAFT_WEIGHTS_FILE = "model.safetensors";
/** Rows of the two embedding tables compared to decide whether the draft shares the target's. */
export const EMBED_SAMPLE_ROWS = 64;

export interface DraftCheckpoint {
  /** The folder read (a Hugging Face download resolves to its snapshot). */
  dir: string;
  /** What to call it (the repo id of a download, else the folder's name). */
  name: string;
  file: string;
  fileBytes: number;
  /** Hash of the safetensors header (length + JSON): the draft's identity for packs. */
  headerHash: string;
  config: DraftConfig;
  /** Every tensor by its released name (no prefix), validated against the config. */
  tensors: Map<string, TensorEntry>;
  /** The draft's own embedding table, when it ships one. */
  embed?: TensorEntry;
}

/** Tensor name → shape the config implies (all BF16), in the released order (DRAFTERS.md §1.3). */
export function draftTensorShapes(d: DraftConfig): Map<string, number[]> {
  const E = d.hidden;
  const n = d.captureLayers.length;
  const L = "layers.0.";
  const A = `${L}self_attn.`;
  const shapes: [string, number[]][] = [
    ["fc.weight", [E, n * E]],
    ...(d.fcNorm ? Array.from({ length: n }, (_, j): [string, number[]] => [`fc_norm.${j}.weight`, [E]]) : []),
    [`${L}hidden_norm.weight`, [E]],
    [`${L}input_layernorm.weight`, [E]],
    [`${A}q_a_proj.weight`, [d.qLoraRank, 2 * E]],
    [`${A}q_a_layernorm.weight`, [d.qLoraRank]],
    [`${A}q_b_proj.weight`, [d.heads * (d.qkNope + d.qkRope), d.qLoraRank]],
    [`${A}kv_a_proj_with_mqa.weight`, [d.kvLoraRank + d.qkRope, 2 * E]],
    [`${A}kv_a_layernorm.weight`, [d.kvLoraRank]],
    [`${A}kv_b_proj.weight`, [d.heads * (d.qkNope + d.vHead), d.kvLoraRank]],
    [`${A}o_proj.weight`, [E, d.heads * d.vHead]],
    [`${L}post_attention_layernorm.weight`, [E]],
    [`${L}mlp.gate_proj.weight`, [d.intermediate, E]],
    [`${L}mlp.up_proj.weight`, [d.intermediate, E]],
    [`${L}mlp.down_proj.weight`, [E, d.intermediate]],
    ["norm.weight", [E]],
    ["lm_head.weight", [d.vocab, E]],
  ];
  return new Map(shapes);
}

const EMBED = "embed_tokens.weight";

/** Tensor names that only the other format has (DRAFTERS.md §1.5–1.6). */
function formatBSigns(names: string[]): string[] {
  return names.filter((n) => n.startsWith("model.") || n === "d2t" || n === "t2d" || n.endsWith("self_attn.g_proj.weight"));
}

/** Open and check a draft folder for `target` (its config; without one, the draft alone, as
 *  `k3 pack --draft` needs it): no weight is read. */
export function openDraftCheckpoint(path: string, target?: ModelConfig): DraftCheckpoint {
  const folder = resolveModelFolder(path);
  const dir = folder.dir;
  const configPath = join(dir, "config.json");
  const file = join(dir, DRAFT_WEIGHTS_FILE);
  if (!existsSync(configPath)) throw new K3Error("CONFIG", `${dir}: not a draft model folder (no config.json)`, [`a draft folder holds config.json and ${DRAFT_WEIGHTS_FILE}, as published (e.g. lightseekorg/kimi-k3-eagle3.1-mla)`]);
  if (!existsSync(file)) throw new K3Error("CHECKPOINT", `${dir}: no ${DRAFT_WEIGHTS_FILE}`, ["the released drafts ship their weights as one model.safetensors"]);
  const header = readSafetensorsHeader(file);
  const names = header.tensors.map((t) => t.name);
  const signs = formatBSigns(names);
  if (signs.length)
    throw new K3Error("CHECKPOINT", `${file}: this is NeMo Automodel's K3 EAGLE-3 draft ("format B"), which k3 does not run`, [
      `its tensors ${signs.slice(0, 4).join(", ")}${signs.length > 4 ? ", …" : ""} belong to that format (a model. prefix, d2t/t2d, an attention output gate)`,
      "k3 runs the released format: config.json (Eagle3DeepseekV2ForCausalLM) + model.safetensors with fc.weight, layers.0.*, norm.weight, lm_head.weight",
    ]);
  const fcNorm = names.some((n) => /^fc_norm\.\d+\.weight$/.test(n));
  const config = readDraftConfig(configPath, fcNorm);
  if (target) checkDraftFitsTarget(config, target, configPath);
  const tensors = new Map<string, TensorEntry>();
  for (const t of header.tensors)
    tensors.set(t.name, { name: t.name, file, offset: header.dataStart + t.begin, bytes: t.end - t.begin, dtype: t.dtype as TensorEntry["dtype"], shape: t.shape });
  checkRoster(file, config, tensors, target ?? { vocab: config.vocab, hidden: config.hidden });
  const embed = tensors.get(EMBED);
  tensors.delete(EMBED);
  return { dir, name: folder.name, file, fileBytes: header.fileBytes, headerHash: header.headerHash, config, tensors, embed };
}

/** Every tensor the config implies, with its shape, in BF16; nothing else (an optional embedding). */
function checkRoster(file: string, d: DraftConfig, tensors: Map<string, TensorEntry>, target: Pick<ModelConfig, "vocab" | "hidden">): void {
  const want = draftTensorShapes(d);
  const problems: string[] = [];
  for (const [name, shape] of want) {
    const t = tensors.get(name);
    if (!t) problems.push(`${name}: missing (expected BF16 ${JSON.stringify(shape)})`);
    else if (t.dtype !== "BF16" || t.shape.join() !== shape.join()) problems.push(`${name}: ${t.dtype} ${JSON.stringify(t.shape)}, expected BF16 ${JSON.stringify(shape)}`);
  }
  const embed = tensors.get(EMBED);
  if (embed && (embed.dtype !== "BF16" || embed.shape.join() !== [target.vocab, target.hidden].join()))
    problems.push(`${EMBED}: ${embed.dtype} ${JSON.stringify(embed.shape)}, expected BF16 ${JSON.stringify([target.vocab, target.hidden])} (the target's embedding)`);
  for (const name of tensors.keys())
    if (!want.has(name) && name !== EMBED) problems.push(`${name}: not a tensor of this draft (${d.variant}, ${d.captureLayers.length} taps)`);
  if (problems.length) throw new K3Error("CHECKPOINT", `${file}: the tensors do not match the draft's config`, problems);
}

/** The rows compared by sameEmbedding: the first, the last, and evenly spread ones between. */
export function embedSampleRows(vocab: number, n = EMBED_SAMPLE_ROWS): number[] {
  const rows = new Set<number>([0, vocab - 1]);
  for (let i = 1; rows.size < Math.min(n, vocab) && i < n * 2; i++) rows.add(Math.floor((i * (vocab - 1)) / (n - 1)) % vocab);
  return [...rows].sort((a, b) => a - b);
}

/**
 * Whether the draft's embedding table equals the target's on the sampled rows (byte for byte);
 * false also when the shapes or dtypes differ. Reads 2 × EMBED_SAMPLE_ROWS rows.
 */
export function sameEmbedding(draft: TensorEntry, target: TensorEntry): boolean {
  if (draft.dtype !== target.dtype || draft.shape.join() !== target.shape.join()) return false;
  const rowBytes = draft.bytes / draft.shape[0]!;
  const a = openRegularFile(draft.file, "draft weights", "CHECKPOINT");
  const b = openRegularFile(target.file, "shard", "CHECKPOINT");
  try {
    for (const row of embedSampleRows(draft.shape[0]!)) {
      const x = readAt(a.fd, rowBytes, draft.offset + row * rowBytes);
      const y = readAt(b.fd, rowBytes, target.offset + row * rowBytes);
      if (x.length !== rowBytes || y.length !== rowBytes) throw new K3Error("IO", `short read of embedding row ${row} (${draft.file} / ${target.file})`);
      if (!x.equals(y)) return false;
    }
    return true;
  } finally {
    closeSync(a.fd);
    closeSync(b.fd);
  }
}
