// The catalogue: which tensor lives where, checked against what the config implies.
// openCheckpoint() reads config.json, the index (when present) and every shard header, and
// refuses a checkpoint whose files disagree with the config in any way (missing, extra, wrong
// shape, wrong dtype, duplicate, index ≠ headers). Vision tensors are listed and ignored.
// catalogueFromMetadata() does the name check on release metadata alone (no shards).
import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { K3Error } from "../errors.ts";
import { type ByteCensus, computeCensus } from "./census.ts";
import { readConfig } from "./config.ts";
import { readRegularFile } from "../files.ts";
import { computeLayout, type LayoutFacts } from "./layout.ts";
import { resolveModelFolder } from "./model-folder.ts";
import { readSafetensorsHeader, type HeaderTensor } from "./safetensors.ts";
import { expectedTensors, LM_PREFIX } from "./shapes.ts";
import type { DType, ModelConfig, TensorEntry, TensorSpec } from "./types.ts";

export const INDEX_FILE = "model.safetensors.index.json";

export interface Checkpoint {
  dir: string; // absolute: the folder with config.json and the shards (a download's snapshot)
  name: string; // the model's name: a Hugging Face download's repo id, else the folder's name
  download: boolean; // inside a Hugging Face cache: k3 writes nothing there (model-folder.ts)
  config: ModelConfig;
  tensors: Map<string, TensorEntry>; // every language-model tensor, validated
  layout: LayoutFacts;
  ignored: string[]; // vision / non-LM tensor names, noted and ignored
  shards: ShardFile[];
  index: string | null; // the index file used, or null when shards came from the listing
}

/** A shard as the catalogue read it: what recorded facts about it (checksums) are tied to. */
export interface ShardFile {
  file: string; // absolute path
  bytes: number; // file size
  headerHash: string; // hash of its length field + header JSON (safetensors.ts)
}

export interface MetadataCatalogue {
  config: ModelConfig;
  index: string;
  specs: TensorSpec[]; // every expected LM tensor (all present in the index)
  shardOf: Map<string, string>; // LM tensor name → shard file name (from the index)
  ignored: string[]; // non-LM names in the index
  shards: string[]; // distinct shard file names the index names
  indexNames: number; // names in the index (= specs.length + ignored.length)
  indexTotalBytes: number | null; // metadata.total_size when present (includes vision)
  census: ByteCensus;
}

/** Long problem lists are cut so one broken shard does not print half a million lines. */
const MAX_LISTED = 30;

function fail(what: string, problems: string[]): never {
  const shown = problems.length > MAX_LISTED ? [...problems.slice(0, MAX_LISTED), `… and ${problems.length - MAX_LISTED} more`] : problems;
  throw new K3Error("CHECKPOINT", what, shown);
}

/** weight_map of a safetensors index (.json, or .json.gz for the shipped release metadata). */
export function readIndex(path: string): { weightMap: Map<string, string>; totalBytes: number | null } {
  const raw = readRegularFile(path, "index", "CHECKPOINT");
  let json: unknown;
  try {
    const text = path.endsWith(".gz") ? Buffer.from(Bun.gunzipSync(raw)).toString("utf8") : raw.toString("utf8");
    json = JSON.parse(text);
  } catch (e) {
    throw new K3Error("CHECKPOINT", `${path}: cannot read index`, [(e as Error).message]);
  }
  const wm = (json as { weight_map?: unknown } | null)?.weight_map;
  if (wm === null || typeof wm !== "object" || Array.isArray(wm)) fail(`${path}: invalid index`, ["weight_map: missing or not an object"]);
  const problems: string[] = [];
  const weightMap = new Map<string, string>();
  for (const [name, file] of Object.entries(wm as Record<string, unknown>)) {
    // Shard names are plain file names in the checkpoint directory; a path could escape it.
    if (typeof file !== "string" || file === "" || file !== basename(file) || file === "." || file === "..")
      problems.push(`weight_map["${name}"]: expected a shard file name, got ${JSON.stringify(file)}`);
    else weightMap.set(name, file);
  }
  if (problems.length) fail(`${path}: invalid index`, problems);
  const total = (json as { metadata?: { total_size?: unknown } }).metadata?.total_size;
  return { weightMap, totalBytes: typeof total === "number" ? total : null };
}

function isLanguageModel(name: string): boolean {
  return name.startsWith(LM_PREFIX);
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** A model folder that is not there, or not a folder: K3Error CHECKPOINT (exit 4), however the
 *  command was given it (operand, -m, $K3_MODEL); the same words everywhere. */
export function checkModelFolder(root: string): void {
  if (!existsSync(root)) fail(`${root}: no such model folder (it does not exist)`, ["expected a folder with config.json and *.safetensors"]);
  if (!statSync(root).isDirectory()) fail(`${root}: not a model folder (it is a file)`, ["expected a folder with config.json and *.safetensors"]);
}

/** 1. Which shards: the index names them, else every *.safetensors in the directory. Shards the
 *  index lists only with tensors k3 never reads (the release's vision tower and mm_projector:
 *  docs/MODEL-DOWNLOAD.md) may be left out of a download (`absent`); any other is needed. */
function shardsToRead(root: string, indexPath: string, index: ReturnType<typeof readIndex> | null): { shardNames: string[]; absent: Set<string> } {
  if (!index) {
    const shardNames = readdirSync(root).filter((f) => f.endsWith(".safetensors")).sort();
    if (shardNames.length === 0) fail(`${root}: no shards`, [`expected ${INDEX_FILE} or at least one *.safetensors file`]);
    return { shardNames, absent: new Set() };
  }
  const all = [...new Set(index.weightMap.values())].sort();
  const missing = all.filter((f) => !existsSync(join(root, f)));
  const lmShards = new Set([...index.weightMap].filter(([name]) => isLanguageModel(name)).map(([, shard]) => shard));
  const needed = missing.filter((f) => lmShards.has(f));
  if (needed.length) fail(`${indexPath}: shards named by the index are missing`, needed.map((f) => `${join(root, f)}: not found`));
  const absent = new Set(missing);
  return { shardNames: all.filter((f) => !absent.has(f)), absent };
}

/** Open and fully validate a checkpoint directory (a plain folder, or a Hugging Face repo folder
 *  or snapshot: model-folder.ts). Reads headers only, never tensor data. */
export function openCheckpoint(dir: string, onProgress?: (done: number, total: number) => void): Checkpoint {
  const folder = resolveModelFolder(dir);
  const root = folder.dir;
  checkModelFolder(root);
  const config = readConfig(join(root, "config.json"));

  // 1. Which shards: the index names them, else every *.safetensors in the directory.
  const indexPath = join(root, INDEX_FILE);
  const index = existsSync(indexPath) ? readIndex(indexPath) : null;
  const { shardNames, absent } = shardsToRead(root, indexPath, index);

  // 2. Every header (each validated on its own), names unique across shards.
  const problems: string[] = [];
  const found = new Map<string, { file: string; dataStart: number; t: HeaderTensor }>();
  const shards: ShardFile[] = [];
  for (const [i, name] of shardNames.entries()) {
    onProgress?.(i, shardNames.length);
    const file = join(root, name);
    const h = readSafetensorsHeader(file);
    shards.push({ file, bytes: h.fileBytes, headerHash: h.headerHash });
    for (const t of h.tensors) {
      const prev = found.get(t.name);
      if (prev) problems.push(`${t.name}: duplicate tensor, in ${prev.file} and ${file}`);
      else found.set(t.name, { file, dataStart: h.dataStart, t });
    }
  }

  // 3. The index and the headers must agree both ways.
  if (index) {
    for (const [name, shard] of index.weightMap) {
      if (absent.has(shard)) continue; // a non-LM shard left out of the download
      const at = found.get(name);
      if (!at) problems.push(`${name}: listed in ${INDEX_FILE} under ${shard}, but in no shard header`);
      else if (basename(at.file) !== shard) problems.push(`${name}: ${INDEX_FILE} says ${shard}, but it is in ${at.file}`);
    }
    for (const [name, at] of found)
      if (!index.weightMap.has(name)) problems.push(`${name}: in ${at.file} but not listed in ${INDEX_FILE}`);
  }

  // 4. Every expected tensor with exact shape and dtype; no extra language-model tensors.
  const tensors = new Map<string, TensorEntry>();
  const specs = expectedTensors(config);
  const expected = new Set(specs.map((s) => s.name));
  for (const spec of specs) {
    const at = found.get(spec.name);
    if (!at) {
      problems.push(`${spec.name}: missing (expected ${spec.dtype} ${JSON.stringify(spec.shape)})`);
      continue;
    }
    const { t, file, dataStart } = at;
    if (t.dtype !== spec.dtype || !sameShape(t.shape, spec.shape)) {
      problems.push(`${spec.name} in ${file}: is ${t.dtype} ${JSON.stringify(t.shape)}, expected ${spec.dtype} ${JSON.stringify(spec.shape)}`);
      continue;
    }
    tensors.set(spec.name, { name: spec.name, file, offset: dataStart + t.begin, bytes: t.end - t.begin, dtype: t.dtype as DType, shape: t.shape });
  }
  const ignored: string[] = [];
  for (const [name, at] of found) {
    if (!isLanguageModel(name)) ignored.push(name);
    else if (!expected.has(name))
      problems.push(`${name} in ${at.file}: unexpected language-model tensor (the config implies no such tensor)`);
  }
  onProgress?.(shardNames.length, shardNames.length);
  if (problems.length) fail(`${root}: checkpoint does not match its config`, problems);

  return { dir: root, name: folder.name, download: folder.download, config, tensors, layout: computeLayout(config, tensors), ignored, shards, index: index ? indexPath : null };
}

/**
 * Catalogue from release metadata alone (config + index, no shards): names are checked against
 * the config both ways; sizes come from the config's shapes (the index carries no offsets).
 */
export function catalogueFromMetadata(configPath: string, indexPath: string): MetadataCatalogue {
  const config = readConfig(configPath);
  const { weightMap, totalBytes } = readIndex(indexPath);
  const specs = expectedTensors(config);
  const problems: string[] = [];
  const shardOf = new Map<string, string>();
  for (const s of specs) {
    const shard = weightMap.get(s.name);
    if (shard === undefined) problems.push(`${s.name}: missing from the index (expected ${s.dtype} ${JSON.stringify(s.shape)})`);
    else shardOf.set(s.name, shard);
  }
  const ignored: string[] = [];
  for (const name of weightMap.keys()) {
    if (!isLanguageModel(name)) ignored.push(name);
    else if (!shardOf.has(name)) problems.push(`${name}: unexpected language-model tensor in the index (the config implies no such tensor)`);
  }
  if (problems.length) fail(`${indexPath}: index does not match ${configPath}`, problems);
  return {
    config, index: indexPath, specs, shardOf, ignored,
    shards: [...new Set(weightMap.values())].sort(),
    indexNames: weightMap.size, indexTotalBytes: totalBytes, census: computeCensus(config),
  };
}
