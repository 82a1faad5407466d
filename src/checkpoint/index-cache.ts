// The computed catalogue, cached next to the model (or in ~/.cache/k3/index/ when the model folder
// is read-only), so opening the release does not re-parse 96 shard headers and a 497k-entry
// index every time. Invalidated when config.json, the index or any shard changes (size, mtime):
// a stale cache would point reads at wrong offsets, so any doubt means a full re-read.
import { existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { cachePath } from "../cache-dir.ts";
import { readRegularFile, writableDir, writeFileAtomic } from "../files.ts";
import { INDEX_FILE, openCheckpoint, type Checkpoint } from "./catalogue.ts";
import { readConfig } from "./config.ts";
import { computeLayout } from "./layout.ts";
import { resolveModelFolder, type ModelFolder } from "./model-folder.ts";
import type { DType, TensorEntry } from "./types.ts";

export const INDEX_CACHE_FILE = "k3-index.json";
/** -2: shards carry their header hash, and the reader refuses shards the -1 reader accepted
 *  (data not tiled to the end of the file), so a -1 cache must not vouch for them. */
export const INDEX_CACHE_FORMAT = "k3-index-2";

type Stamp = [file: string, bytes: number, mtimeMs: number];

function stamp(file: string): Stamp {
  const st = statSync(file);
  return [file, st.size, st.mtimeMs];
}

/** Next to the model, else k3's cache folder; only the cache folder for a download (never write
 *  inside a Hugging Face cache). */
function cacheLocations(root: string, download: boolean): string[] {
  const cached = join(cachePath("index"), `${Bun.hash(root).toString(16)}.json`);
  return download ? [cached] : [join(root, INDEX_CACHE_FILE), cached];
}

/** The stamps that must all match for a cached catalogue to be used. */
function currentStamps(root: string, shardFiles: string[]): Stamp[] | null {
  const files = [join(root, "config.json"), ...(existsSync(join(root, INDEX_FILE)) ? [join(root, INDEX_FILE)] : []), ...shardFiles];
  try {
    return files.map(stamp);
  } catch {
    return null; // a file vanished: not usable
  }
}

/** The cached catalogue if it is intact and current; null (a full re-read) on any doubt. */
function tryLoad(folder: ModelFolder, path: string): Checkpoint | null {
  try {
    return load(folder, path);
  } catch {
    // A damaged cache file (valid JSON, wrong fields) costs a re-read, never the run: the full
    // read that follows reports any real problem of the model itself (config, shards).
    return null;
  }
}

function load(folder: ModelFolder, path: string): Checkpoint | null {
  const root = folder.dir;
  let body: any;
  try {
    body = JSON.parse(readRegularFile(path, "catalogue cache", "CHECKPOINT").toString("utf8"));
  } catch {
    return null;
  }
  if (body?.format !== INDEX_CACHE_FORMAT || body.root !== root) return null;
  const shardFiles: string[] = body.shards.map((s: { file: string }) => s.file);
  // Without an index the shard set is the directory listing: a new or removed shard invalidates.
  if (!body.index) {
    const listed = readdirSync(root).filter((f) => f.endsWith(".safetensors")).map((f) => join(root, f)).sort();
    if (JSON.stringify(listed) !== JSON.stringify([...shardFiles].sort())) return null;
  }
  const now = currentStamps(root, shardFiles);
  if (!now || JSON.stringify(now) !== JSON.stringify(body.stamps)) return null;
  const config = readConfig(join(root, "config.json"));
  const tensors = new Map<string, TensorEntry>();
  for (const [name, fi, offset, bytes, dtype, shape] of body.tensors as [string, number, number, number, DType, number[]][])
    tensors.set(name, { name, file: shardFiles[fi]!, offset, bytes, dtype, shape });
  return { dir: root, name: folder.name, download: folder.download, config, tensors, layout: computeLayout(config, tensors), ignored: body.ignored, shards: body.shards, index: body.index };
}

function save(ckpt: Checkpoint): string | null {
  const fileIdx = new Map(ckpt.shards.map((s, i) => [s.file, i]));
  const body = {
    format: INDEX_CACHE_FORMAT,
    root: ckpt.dir,
    stamps: currentStamps(ckpt.dir, ckpt.shards.map((s) => s.file)),
    shards: ckpt.shards,
    index: ckpt.index,
    ignored: ckpt.ignored,
    tensors: [...ckpt.tensors.values()].map((t) => [t.name, fileIdx.get(t.file), t.offset, t.bytes, t.dtype, t.shape]),
  };
  for (const path of cacheLocations(ckpt.dir, ckpt.download)) {
    const dir = join(path, "..");
    try {
      if (!existsSync(dir)) mkdirSync(dir, { recursive: true });
      if (!writableDir(dir)) continue;
      writeFileAtomic(path, "the index cache", "IO", JSON.stringify(body));
      return path;
    } catch {
      /* try the next location; a cache that cannot be written only costs time */
    }
  }
  return null;
}

/** openCheckpoint with the cache: `fromCache` says which path was taken. */
export function openCheckpointCached(dir: string, onProgress?: (done: number, total: number) => void): Checkpoint & { fromCache: boolean; cachePath: string | null } {
  const folder = resolveModelFolder(dir);
  for (const path of cacheLocations(folder.dir, folder.download)) {
    if (!existsSync(path)) continue;
    const hit = tryLoad(folder, path);
    if (hit) return { ...hit, fromCache: true, cachePath: path };
  }
  const ckpt = openCheckpoint(folder.dir, onProgress);
  return { ...ckpt, fromCache: false, cachePath: save(ckpt) };
}
