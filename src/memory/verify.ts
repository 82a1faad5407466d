// `k3 verify` and `--verify` (STREAMING.md §7: a truncated, spliced or flipped file must stop
// generation and name what failed, never answer from the wrong bytes).
//
// What is checked:
//  - every shard's header tiles its data section to the end of the file (the checkpoint reader
//    refuses anything else, for every command — checkShardSizes reports it);
//  - `--record` reads everything a token can read once and records a CRC-32C per trunk block
//    (a tensor, or a row block of a large matrix: src/memory/pieces.ts), per routed expert and
//    per embedding row, tied to the exact shard bytes it was computed from (each shard's stamp:
//    header hash, size and mtime, src/checkpoint/stamps.ts);
//  - `k3 verify` without `--record` reads everything again and compares with what was recorded;
//  - `run --verify` compares every read during generation: trunk units, experts and embedding
//    rows alike (read-checks.ts); a trunk piece of any size is checked block by block;
//  - every packed trunk (`k3 pack`) is read whole, with or without `--record`: each block against
//    the CRC-32C the pack recorded for it and against the CRC-32C of the exact shard rows it was
//    made from (pack.ts verifyPack): a flipped byte in the pack, or a shard edited with its mtime
//    put back since the pack was made, is named.
//
// Where the file lives: `k3-checksums.json` next to the model when that folder can take it, else
// (read-only folder, full disk, a Hugging Face download k3 must not write into) in k3's cache
// folder. A write that fails leaves no partial file behind.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { cachePath, ensureCacheDir } from "../cache-dir.ts";
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { readSafetensorsHeader } from "../checkpoint/safetensors.ts";
import { shardStamps, staleReason, type ShardStamp } from "../checkpoint/stamps.ts";
import { expertTensorNames, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import type { TensorEntry } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { readRegularFile, writeFileAtomic } from "../files.ts";
import type { Kernels } from "../kernels.ts";
import { CBuffers } from "../model/cmem.ts";
import { packedFormats, verifyPack, type PackCheck } from "./pack.ts";
import { blockCrc } from "./pieces.ts";
import { ALIGN, buildReadPlan, type ReadPlan } from "./readplan.ts";
import { expertReadPlan, expertSlotBytes, pieceReadPlans, trunkLayout } from "./slots.ts";

export const CHECKSUM_FILE = "k3-checksums.json";
/** -4: trunk blocks instead of whole units (pieces of any size are checked before use);
 *  -3: embedding rows, and each shard tied by header hash + size + mtime (-2: experts and trunk
 *  units, shards matched by size only; -1: zlib CRC-32). */
const CHECKSUM_FORMAT = "k3-checksums-4";
/** Embedding rows read per block while recording (bounded buffer: 512 rows = 7.3 MB for K3). */
const EMBED_BLOCK_ROWS = 512;
/** Mismatches listed in one error (the rest are counted). */
const MAX_LISTED = 30;

export interface ShardCheck {
  file: string;
  bytes: number;
  expected: number; // 8 + header + end of the last tensor
  ok: boolean;
}

export interface Checksums {
  /** "layer:expert" → CRC-32C of the expert's six tensors' payload, in read-plan order. */
  experts: Map<string, number>;
  /** Trunk block key (a tensor's name, or "name@row" for a row block) → CRC-32C of its bytes. */
  trunk: Map<string, number>;
  /** Token id → CRC-32C of its embedding row (hidden × bf16). */
  embedRows: Uint32Array;
}

export interface VerifyResult {
  dir: string;
  shards: ShardCheck[];
  tensors: number;
  /** Set with `record`: where the checksums went and how many were written. */
  recorded?: { path: string; experts: number; trunkBlocks: number; embedRows: number; ms: number };
  /** Set without `record` when checksums were recorded: every one was read again and matched. */
  checked?: { path: string; experts: number; trunkBlocks: number; embedRows: number; ms: number };
  /** Every packed trunk of the model (`k3 pack`), read whole and checked against its own
   *  checksums and against the shard bytes it was made from. */
  packs: PackCheck[];
}

/** Each shard's size must be exactly the end of its data section (no truncation, no splice). */
export function checkShardSizes(ckpt: Checkpoint): ShardCheck[] {
  return ckpt.shards.map((s) => {
    const h = readSafetensorsHeader(s.file);
    const end = h.tensors.reduce((m, t) => Math.max(m, t.end), 0);
    const expected = h.dataStart + end;
    return { file: s.file, bytes: h.fileBytes, expected, ok: h.fileBytes === expected };
  });
}

function localPath(ckpt: Checkpoint): string {
  return join(ckpt.dir, CHECKSUM_FILE);
}

function cachedPath(ckpt: Checkpoint): string {
  return join(cachePath("checksums"), `${Bun.hash(ckpt.dir).toString(16)}.json`);
}

/** Where the checksums of a model may be: next to it (not for a download), then the cache. */
function candidatePaths(ckpt: Checkpoint): string[] {
  return ckpt.download ? [cachedPath(ckpt)] : [localPath(ckpt), cachedPath(ckpt)];
}

/** The recorded checksums of a model, or null when none were recorded. Refuses (VERIFY) a file
 *  recorded for other shard bytes or by an older k3. */
export function findChecksums(ckpt: Checkpoint): { path: string; sums: Checksums } | null {
  const now = shardStamps(ckpt);
  let problem: K3Error | null = null;
  for (const path of candidatePaths(ckpt)) {
    if (!existsSync(path)) continue;
    try {
      return { path, sums: parseChecksumFile(path, ckpt, now) };
    } catch (e) {
      problem ??= e as K3Error; // the first location's problem; a later match still wins
    }
  }
  if (problem) throw problem;
  return null;
}

function parseChecksumFile(path: string, ckpt: Checkpoint, now: ShardStamp[]): Checksums {
  const again = `re-run \`k3 verify ${ckpt.dir} --record\``;
  let body: any;
  try {
    body = JSON.parse(readRegularFile(path, "checksum file", "VERIFY").toString("utf8"));
  } catch (err) {
    throw new K3Error("VERIFY", `${path}: not a k3 checksum file (${(err as Error).message}): ${again}`);
  }
  if (body?.format === "k3-checksums-1" || body?.format === "k3-checksums-2" || body?.format === "k3-checksums-3")
    throw new K3Error("VERIFY", `${path} was recorded by an older k3 (whole trunk units, or no embedding rows): ${again}`);
  if (body?.format !== CHECKSUM_FORMAT) throw new K3Error("VERIFY", `${path}: not a k3 checksum file: ${again}`);
  const stale = staleReason(body.shards, now);
  if (stale) throw new K3Error("VERIFY", `${path} was recorded for other shard bytes (${stale}): ${again}`);
  const cfg = ckpt.config;
  const rows = typeof body.embedRows === "string" ? Buffer.from(body.embedRows, "base64") : Buffer.alloc(0);
  if (rows.byteLength !== cfg.vocab * 4) throw new K3Error("VERIFY", `${path}: damaged (embedding rows: ${rows.byteLength / 4} checksums for a vocabulary of ${cfg.vocab}): ${again}`);
  const embedRows = new Uint32Array(cfg.vocab);
  for (let i = 0; i < cfg.vocab; i++) embedRows[i] = rows.readUInt32LE(4 * i);
  return {
    experts: new Map(Object.entries(body.experts ?? {}).map(([k, v]) => [k, Number(v)])),
    trunk: new Map(Object.entries(body.trunk ?? {}).map(([k, v]) => [k, Number(v)])),
    embedRows,
  };
}

/** The recorded checksums `run --verify` checks against; refuses when none exist or they are stale. */
export function loadChecksums(ckpt: Checkpoint): Checksums {
  const found = findChecksums(ckpt);
  if (!found) throw new K3Error("VERIFY", `no checksums recorded for ${ckpt.dir}: run \`k3 verify ${ckpt.dir} --record\` first`);
  return found.sums;
}

/** CRC-32C of a read plan's payload inside a buffer (the bytes the model will use). CRC-32C, not
 *  the zlib CRC-32: SSE4.2 computes it at ~10 GB/s here against ~2 GB/s for tables, so checking
 *  every read keeps up with the disk. */
export function payloadCrc(k: Kernels, plan: ReadPlan, base: number): number {
  let crc = 0;
  for (const r of plan.reads) crc = k.k3_crc32c(crc, (base + r.dst + (r.need - r.payload)) as any, r.payload);
  return crc;
}

/** Read every trunk block, routed expert and embedding row once; their CRC-32Cs. */
export function computeChecksums(k: Kernels, ckpt: Checkpoint, onProgress?: (done: number, total: number) => void): Checksums {
  const cfg = ckpt.config;
  const mem = new CBuffers(k);
  const fds = new Map<string, number>();
  const fd = (f: string) => {
    let d = fds.get(f);
    if (d === undefined) {
      d = k.k3_file_open(f, 0);
      if (d < 0) throw new K3Error("IO", `cannot open ${f} (errno ${-d})`);
      fds.set(f, d);
    }
    return d;
  };
  const embed = ckpt.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`);
  if (!embed) throw new K3Error("CHECKPOINT", "embed_tokens.weight is missing");
  const rowBytes = cfg.hidden * 2;
  const sums: Checksums = { experts: new Map(), trunk: new Map(), embedRows: new Uint32Array(cfg.vocab) };
  try {
    const layout = trunkLayout(ckpt);
    const pieces = pieceReadPlans(layout);
    const experts: [number, number][] = [];
    for (let L = cfg.firstKDense; L < cfg.numLayers; L++) for (let e = 0; e < cfg.numExperts; e++) experts.push([L, e]);
    // Embedding rows in blocks: one read each, a CRC per row inside it.
    const blocks: { first: number; rows: number; plan: ReadPlan }[] = [];
    for (let first = 0; first < cfg.vocab; first += EMBED_BLOCK_ROWS) {
      const rows = Math.min(EMBED_BLOCK_ROWS, cfg.vocab - first);
      const part: TensorEntry = { ...embed, offset: embed.offset + first * rowBytes, bytes: rows * rowBytes, shape: [rows, cfg.hidden] };
      blocks.push({ first, rows, plan: buildReadPlan([part]) });
    }
    const total = pieces.length + experts.length + blocks.length;
    // The buffer the streaming provider's slots need (slots.ts: exact for any layout), or larger.
    const largest = Math.max(expertSlotBytes(ckpt), ...pieces.map((p) => p.slotBytes), ...blocks.map((b) => b.plan.slotBytes));
    const buf = mem.alloc(largest, "verify buffer", ALIGN);
    const readAll = (plan: ReadPlan, what: string) => {
      for (const r of plan.reads) {
        const res = Number(k.k3_read_full(fd(r.file), (buf.ptr + r.dst) as any, r.len, r.off, r.need));
        if (res < r.need) throw new K3Error("IO", `short or failed read of ${what}: ${r.file} at offset ${r.off} (result ${res})`);
      }
    };
    let done = 0;
    pieces.forEach((plan, id) => {
      const piece = layout.pieces[id]!;
      readAll(plan, piece.unit === cfg.numLayers ? "the head" : `layer ${piece.unit}'s trunk`);
      for (const b of piece.blocks) sums.trunk.set(b.key, blockCrc(k, b, plan.offsets, buf.ptr));
      onProgress?.(++done, total);
    });
    for (const [L, e] of experts) {
      const plan = expertReadPlan(ckpt, L, e);
      readAll(plan, `expert ${e} of layer ${L}`);
      sums.experts.set(`${L}:${e}`, payloadCrc(k, plan, buf.ptr));
      onProgress?.(++done, total);
    }
    for (const b of blocks) {
      readAll(b.plan, `embedding rows ${b.first}..${b.first + b.rows - 1}`);
      const r = b.plan.reads[0]!; // one tensor range: one read
      const at = buf.ptr + r.dst + (r.need - r.payload);
      for (let i = 0; i < b.rows; i++) sums.embedRows[b.first + i] = k.k3_crc32c(0, (at + i * rowBytes) as any, rowBytes);
      onProgress?.(++done, total);
    }
  } finally {
    for (const d of fds.values()) k.k3_file_close(d);
    mem.free();
  }
  return sums;
}

/** Write the checksum file: next to the model, else (that failed, or a download) the cache
 *  folder. A failed write removes its temp file; when every location fails, one error names each. */
function writeChecksumFile(ckpt: Checkpoint, sums: Checksums): string {
  const rows = Buffer.alloc(sums.embedRows.length * 4);
  sums.embedRows.forEach((c, i) => rows.writeUInt32LE(c, 4 * i));
  const text = JSON.stringify({
    format: CHECKSUM_FORMAT,
    model: ckpt.dir,
    shards: shardStamps(ckpt),
    trunk: Object.fromEntries(sums.trunk),
    experts: Object.fromEntries(sums.experts),
    embedRows: rows.toString("base64"),
  });
  const failures: string[] = [];
  for (const path of candidatePaths(ckpt)) {
    try {
      if (path !== localPath(ckpt)) ensureCacheDir("checksums");
      // No partial file on a full disk; a directory or FIFO at the path is refused, naming it.
      writeFileAtomic(path, "the checksums", "IO", text);
      return path;
    } catch (e) {
      failures.push(e instanceof K3Error ? e.message : `${path}: ${(e as Error).message}`);
    }
  }
  throw new K3Error("IO", "cannot write the checksums", [...failures, "free some space, or set XDG_CACHE_HOME to a writable folder with room"]);
}

function mismatches(ckpt: Checkpoint, want: Checksums, got: Checksums): string[] {
  const cfg = ckpt.config;
  const out: string[] = [];
  for (const [key, crc] of got.trunk)
    if (want.trunk.get(key) !== crc) out.push(`trunk ${key.includes("@") ? `${key.replace("@", " from row ")}` : key}: read ${crc.toString(16)}, recorded ${want.trunk.get(key)?.toString(16) ?? "nothing"}`);
  for (const [key, crc] of got.experts)
    if (want.experts.get(key) !== crc) {
      const [L, e] = key.split(":").map(Number) as [number, number];
      out.push(`expert ${e} of layer ${L} (${expertTensorNames(L, e)[0]}, …): read ${crc.toString(16)}, recorded ${want.experts.get(key)?.toString(16) ?? "nothing"}`);
    }
  for (let id = 0; id < got.embedRows.length; id++)
    if (want.embedRows[id] !== got.embedRows[id])
      out.push(`embedding row ${id} (${LM_MODEL_PREFIX}embed_tokens.weight): read ${got.embedRows[id]!.toString(16)}, recorded ${want.embedRows[id]!.toString(16)}`);
  return out;
}

/**
 * `k3 verify`: every shard against its header; with `record`, read everything and record the
 * checksums; without, read everything again and compare with what was recorded (if anything
 * was). Throws K3Error VERIFY listing what differs, or when the record is stale.
 */
export function verifyCheckpoint(k: Kernels, ckpt: Checkpoint, opts: { record?: boolean; onProgress?: (done: number, total: number) => void } = {}): VerifyResult {
  const shards = checkShardSizes(ckpt);
  const bad = shards.filter((s) => !s.ok);
  if (bad.length)
    throw new K3Error("CHECKPOINT", `${bad.length} shard(s) do not match their headers`, bad.map((s) => `${s.file}: ${s.bytes} bytes, header says ${s.expected}`));
  // Packs first: they are checked whether or not checksums were recorded (they carry their own).
  const packs = packedFormats(ckpt).map((f) => verifyPack(k, ckpt, f, MAX_LISTED, opts.onProgress));
  const result: VerifyResult = { dir: ckpt.dir, shards, tensors: ckpt.tensors.size, packs };
  const recorded = opts.record ? null : findChecksums(ckpt);
  if (!opts.record && !recorded) return result;
  const t0 = performance.now();
  const sums = computeChecksums(k, ckpt, opts.onProgress);
  const counts = { experts: sums.experts.size, trunkBlocks: sums.trunk.size, embedRows: sums.embedRows.length };
  if (opts.record) {
    const path = writeChecksumFile(ckpt, sums);
    result.recorded = { path, ...counts, ms: performance.now() - t0 };
    return result;
  }
  const diff = mismatches(ckpt, recorded!.sums, sums);
  if (diff.length)
    throw new K3Error("VERIFY", `${ckpt.dir}: ${diff.length} checksum(s) differ from those recorded in ${recorded!.path}`, [
      ...diff.slice(0, MAX_LISTED),
      ...(diff.length > MAX_LISTED ? [`… and ${diff.length - MAX_LISTED} more`] : []),
    ]);
  result.checked = { path: recorded!.path, ...counts, ms: performance.now() - t0 };
  return result;
}
