// Deterministic EAGLE-3 draft generator: writes a draft checkpoint in the released format
// (DRAFTERS.md §1, format A: `config.json` + one `model.safetensors`, every tensor BF16) for a
// target made by tools/gen (a preset + seed) or for any K3-format target folder (`--target-dir`,
// e.g. the trained demo). Same target + options + seed → byte-identical files. The weights are
// random (drafts made with them are practically never accepted); they exist for the loader's
// checks, the float64 reference (tools/reference/draft.ts) and benchmarks. docs/DRAFT.md.
//
//   bun tools/gen/draft.ts --target tiny-a --out DIR [--target-seed N] [--seed N]
//        [--variant eagle3|eagle3.1] [--rope yarn|plain|default-dict] [--layer-ids 2,4,5]
//        [--embedding same|differ] [--break KIND] [--target-vocab V] [--target-layers L]
//   bun tools/gen/draft.ts --target-dir MODEL_DIR --out DIR [...]
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  DRAFT_BREAKS,
  type DraftBreak,
  type DraftRope,
  type DraftSpec,
  type DraftVariant,
  defaultLayerIds,
  draftConfigJson,
  draftDims,
  draftTensors,
  TARGET_EMBED,
} from "./draft-plan.ts";
import { TableCache, tensorChunks } from "./fill.ts";
import { resolvePreset } from "./generate.ts";
import { SafetensorsStreamWriter, tensorBytes } from "./safetensors-writer.ts";
import { finalTensors, type TensorPlan } from "./tensor-plan.ts";

/**
 * The header metadata of the released drafts: with it, the header of a draft planned at K3's sizes
 * is exactly the pinned 2,128 bytes of kimi-k3-eagle3.1-mla (DRAFTERS.md §1.1; with tools/gen's
 * {"format": "pt"} it would be 2,112), so names and shapes match the release character for
 * character. TorchSpec writes this key (the DSpark release carries it, DRAFTERS.md §5.2).
 */
export const DRAFT_METADATA = { torchspec_version: "0.1.0" };

export interface DraftTarget {
  /** A tools/gen preset (with its generator overrides) and the seed its checkpoint was made with. */
  preset?: string;
  seed?: number; // default 1
  vocab?: number;
  layers?: number;
  /** Or an existing K3-format checkpoint folder (config.json + index + shards). */
  dir?: string;
}

export interface DraftOptions {
  target: DraftTarget;
  seed?: number; // the draft's own weights; default 1
  variant?: DraftVariant; // default eagle3.1 (the published kimi-k3-eagle3.1-mla)
  rope?: DraftRope; // default yarn
  layerIds?: number[]; // one-based completed layers; default defaultLayerIds(target layers)
  embedding?: "same" | "differ"; // default same: byte-identical to the target's embed_tokens
  break?: DraftBreak;
}

export interface DraftResult {
  dir: string;
  spec: DraftSpec;
  config: Record<string, unknown>;
  tensors: Array<{ name: string; dtype: string; shape: number[] }>; // file order
  fileBytes: number;
}

interface TargetInfo {
  hidden: number;
  vocab: number;
  layers: number;
  /** Streams the target's embedding bytes ([V, E] BF16) in row chunks. */
  embedding: () => Iterable<Uint8Array>;
}

function targetInfo(t: DraftTarget): TargetInfo {
  if (t.dir !== undefined) return targetFromDir(t.dir);
  if (!t.preset) throw new Error("draft target: give a preset or a checkpoint folder");
  const p = resolvePreset({ preset: t.preset, vocab: t.vocab, layers: t.layers });
  const seed = (t.seed ?? 1) >>> 0;
  const plan = finalTensors(p).find((x) => x.name === TARGET_EMBED)!;
  // Same (seed, name) stream as generateModel: the bytes the target's shard holds.
  return { hidden: p.hidden, vocab: p.vocab, layers: p.layers, embedding: () => tensorChunks(plan, seed, new TableCache()) };
}

/** A K3 checkpoint folder: dimensions from text_config, the embedding read from its shard. */
function targetFromDir(dir: string): TargetInfo {
  const cfgPath = join(dir, "config.json");
  const tc = (JSON.parse(readFileSync(cfgPath, "utf8")) as { text_config?: Record<string, unknown> }).text_config;
  const int = (k: string): number => {
    const v = tc?.[k];
    if (!Number.isInteger(v)) throw new Error(`${cfgPath}: text_config.${k} must be an integer`);
    return v as number;
  };
  const hidden = int("hidden_size"), vocab = int("vocab_size"), layers = int("num_hidden_layers");
  const index = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
  const shard = index.weight_map[TARGET_EMBED];
  if (!shard) throw new Error(`${dir}: ${TARGET_EMBED} is not in the index`);
  const file = join(dir, shard);
  const fd = openSync(file, "r");
  let offset: number, bytes: number;
  try {
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    const json = Buffer.alloc(n);
    readSync(fd, json, 0, n, 8);
    const e = (JSON.parse(json.toString("utf8")) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>)[TARGET_EMBED];
    if (!e || e.dtype !== "BF16" || e.shape.join() !== `${vocab},${hidden}`) throw new Error(`${file}: ${TARGET_EMBED} must be BF16 [${vocab}, ${hidden}]`);
    offset = 8 + n + e.data_offsets[0];
    bytes = e.data_offsets[1] - e.data_offsets[0];
  } finally {
    closeSync(fd);
  }
  return {
    hidden,
    vocab,
    layers,
    embedding: function* () {
      const fd2 = openSync(file, "r");
      try {
        const chunk = 16 << 20;
        for (let at = 0; at < bytes; at += chunk) {
          const buf = new Uint8Array(Math.min(chunk, bytes - at));
          if (readSync(fd2, buf, 0, buf.length, offset + at) !== buf.length) throw new Error(`${file}: short read of ${TARGET_EMBED}`);
          yield buf;
        }
      } finally {
        closeSync(fd2);
      }
    },
  };
}

/** The spec and tensor plan after the options and the break are applied. */
export function planDraft(opts: DraftOptions, t: Pick<TargetInfo, "hidden" | "vocab" | "layers">): { spec: DraftSpec; config: Record<string, unknown>; tensors: TensorPlan[] } {
  const brk = opts.break;
  if (brk !== undefined && !DRAFT_BREAKS.includes(brk)) throw new Error(`unknown --break ${brk} (known: ${DRAFT_BREAKS.join(", ")})`);
  const dims = draftDims({
    hidden: brk === "hidden-mismatch" ? t.hidden / 2 : t.hidden,
    vocab: brk === "vocab-mismatch" ? t.vocab / 2 : t.vocab,
  });
  const layerIds = opts.layerIds ?? defaultLayerIds(t.layers);
  const spec: DraftSpec = { dims, variant: opts.variant ?? "eagle3.1", rope: opts.rope ?? "yarn", layerIds };
  const config = draftConfigJson(spec);
  let tensors = draftTensors(spec);
  const eagle = config.eagle_config as { eagle_aux_hidden_state_layer_ids: number[] };
  const ids = [...layerIds];
  if (brk === "missing-tensor") tensors = tensors.filter((x) => x.name !== "layers.0.self_attn.kv_b_proj.weight");
  if (brk === "wrong-shape") tensors = tensors.map((x) => (x.name === "fc.weight" ? { ...x, shape: [dims.hidden, 2 * dims.hidden] } : x));
  if (brk === "wrong-dtype") tensors = tensors.map((x) => (x.name === "norm.weight" ? { ...x, dtype: "F32" } : x));
  if (brk === "ids-out-of-range") eagle.eagle_aux_hidden_state_layer_ids = [...ids.slice(0, -1), t.layers + 1];
  if (brk === "ids-zero") eagle.eagle_aux_hidden_state_layer_ids = [0, ...ids.slice(1)];
  if (brk === "ids-not-increasing") eagle.eagle_aux_hidden_state_layer_ids = [ids[1]!, ids[0]!, ...ids.slice(2)];
  if (brk === "fc-norm-mismatch") {
    config.fc_norm = true;
    tensors = tensors.filter((x) => !x.name.startsWith("fc_norm."));
  }
  if (brk === "missing-field") delete config.qk_rope_head_dim;
  if (brk === "format-b") {
    config.architectures = ["LlamaEagle3DraftModel"];
    const gate: TensorPlan = { name: "layers.0.self_attn.g_proj.weight", dtype: "BF16", shape: [dims.heads * dims.vHead, 2 * dims.hidden], init: { kind: "normal", mean: 0, std: 0.1 }, role: "final" };
    tensors = [...tensors, gate].map((x) => (x.name === "lm_head.weight" ? x : { ...x, name: `model.${x.name}` })).sort((a, b) => (a.name < b.name ? -1 : 1));
  }
  return { spec, config, tensors };
}

export async function generateDraft(dir: string, opts: DraftOptions): Promise<DraftResult> {
  const target = targetInfo(opts.target);
  const seed = (opts.seed ?? 1) >>> 0;
  const { spec, config, tensors } = planDraft(opts, target);
  mkdirSync(dir, { recursive: true });
  const path = join(dir, "model.safetensors");
  const big = tensors.reduce((a, x) => a + tensorBytes(x), 0) > 256 << 20;
  const w = new SafetensorsStreamWriter(path, tensors, DRAFT_METADATA);
  const tables = new TableCache();
  try {
    for (const t of tensors) {
      const sameEmbedding = t.name.endsWith("embed_tokens.weight") && (opts.embedding ?? "same") === "same" && t.shape[0] === target.vocab && t.shape[1] === target.hidden;
      for (const chunk of sameEmbedding ? target.embedding() : tensorChunks(t, seed, tables)) {
        if (big) await w.appendPipelined(chunk);
        else w.append(chunk);
      }
    }
    await w.flush();
    w.close();
  } catch (e) {
    await w.flush().catch(() => {});
    w.abort();
    rmSync(path, { force: true }); // never leave a truncated file that looks like a draft
    throw e;
  }
  if (opts.break === "truncated") truncateSync(path, w.headerBytes + w.dataBytes - 4);
  writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 2) + "\n");
  return {
    dir,
    spec,
    config,
    tensors: tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })),
    fileBytes: w.headerBytes + w.dataBytes - (opts.break === "truncated" ? 4 : 0),
  };
}

// ---- command line (only when run directly) ----

const USAGE =
  "usage: bun tools/gen/draft.ts (--target PRESET [--target-seed N] [--target-vocab V] [--target-layers L] | --target-dir DIR) --out DIR " +
  "[--seed N] [--variant eagle3|eagle3.1] [--rope yarn|plain|default-dict] [--layer-ids A,B,C] [--embedding same|differ] [--break KIND]";

export function parseDraftArgs(argv: string[]): { out: string; opts: DraftOptions } {
  let out: string | undefined;
  const opts: DraftOptions = { target: {} };
  const num = (flag: string, v: string | undefined): number => {
    const n = Number(v);
    if (v === undefined || !Number.isInteger(n) || n < 0) throw new Error(`${flag} needs a non-negative integer, got ${v}`);
    return n;
  };
  const oneOf = <T extends string>(flag: string, v: string | undefined, allowed: readonly T[]): T => {
    if (!allowed.includes(v as T)) throw new Error(`${flag} must be one of ${allowed.join(", ")}, got ${v}`);
    return v as T;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const v = () => argv[++i];
    if (a === "--target") opts.target.preset = v();
    else if (a === "--target-dir") opts.target.dir = v();
    else if (a === "--target-seed") opts.target.seed = num(a, v());
    else if (a === "--target-vocab") opts.target.vocab = num(a, v());
    else if (a === "--target-layers") opts.target.layers = num(a, v());
    else if (a === "--out") out = v();
    else if (a === "--seed") opts.seed = num(a, v());
    else if (a === "--variant") opts.variant = oneOf(a, v(), ["eagle3", "eagle3.1"] as const);
    else if (a === "--rope") opts.rope = oneOf(a, v(), ["yarn", "plain", "default-dict"] as const);
    else if (a === "--embedding") opts.embedding = oneOf(a, v(), ["same", "differ"] as const);
    else if (a === "--break") opts.break = oneOf(a, v(), DRAFT_BREAKS);
    else if (a === "--layer-ids") opts.layerIds = (v() ?? "").split(",").map((x) => num(a, x));
    else throw new Error(`unknown argument ${a}\n${USAGE}`);
  }
  if (!out || (!opts.target.preset && !opts.target.dir)) throw new Error(USAGE);
  return { out, opts };
}

if (import.meta.main) {
  try {
    const { out, opts } = parseDraftArgs(process.argv.slice(2));
    if (existsSync(join(out, "model.safetensors"))) process.stderr.write(`overwriting the draft in ${out}\n`);
    const t0 = performance.now();
    const r = await generateDraft(out, opts);
    const s = (performance.now() - t0) / 1000;
    process.stderr.write(`${r.spec.variant} draft (${r.spec.rope} RoPE, capture ${r.spec.layerIds.join(",")}${opts.break ? `, broken: ${opts.break}` : ""}): ${r.tensors.length} tensors, ${(r.fileBytes / 1e6).toFixed(1)} MB in ${s.toFixed(2)} s → ${out}\n`);
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    process.exit(2);
  }
}
