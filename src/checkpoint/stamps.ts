// What ties k3's own files to the exact shard bytes they came from: recorded checksums
// (`k3 verify --record`), packed trunks (`k3 pack`), saved sessions and prefix-cache entries.
// One stamp per shard, checked before any such file is used; a mismatch means the file describes
// other bytes (the model was updated in place, another copy, a fine-tune with the same shapes).
//
// A stamp is each shard's name, size, header hash (safetensors.ts: its length field and header
// JSON, so any tensor moved, renamed or re-typed) and modification time; a saved state's stamp
// (sessions, prefix-cache entries) adds a sample of the content: a hash of 16 windows of 4 KiB
// spread evenly over the file (64 KiB read per shard, ~1,000 small reads for K3's 64 shards).
// What a stamp catches: any change of size, of the header, of the mtime (an edit, a copy that did
// not keep times) and, with the sample, of the bytes in a sampled window — a different model of
// the same shapes (a fine-tune, a reseeded model) differs nearly everywhere, so its sample differs
// even when it was copied with the other's mtimes. What it does not: an edit outside the sampled
// windows with the mtime put back (bit rot, a tool that restores times). Only a checksum of every
// byte sees that: `k3 verify` (against `--record`, and every pack against the shard bytes it was
// made from), `run --verify` for every read. Checksum files and packs are tied without the
// sample on purpose: there a changed byte is what their checksums report, naming the block —
// calling the record stale instead would ask to record (or pack) the damaged bytes again.
// The inode change time would see in-place edits too, but it also changes on a plain copy, a move
// or a chmod, which would make every saved state stale: not used.
import { closeSync, fstatSync } from "node:fs";
import { basename } from "node:path";
import { openRegularFile, readAt } from "../files.ts";
import type { Checkpoint } from "./catalogue.ts";

/** Windows and their size in a shard's content sample. */
const SAMPLE_WINDOWS = 16;
const SAMPLE_BYTES = 4096;

export interface ShardStamp {
  file: string; // name inside the model folder
  bytes: number;
  mtimeMs: number;
  headerHash: string;
  /** Hash of the sampled windows (hex): saved states' stamps only. */
  sample?: string;
}

/** The stamps of a checkpoint's shards now; `sample`: with the content sample (saved states). */
export function shardStamps(ckpt: Checkpoint, sample = false): ShardStamp[] {
  return ckpt.shards.map((s) => {
    const { fd, bytes } = openRegularFile(s.file, "shard", "CHECKPOINT");
    try {
      // Whole milliseconds: tools that copy with times kept (cp -p, rsync -t) do not all keep nanoseconds.
      const mtimeMs = Math.trunc(fstatSync(fd).mtimeMs);
      return { file: basename(s.file), bytes, mtimeMs, headerHash: s.headerHash, ...(sample ? { sample: contentSample(fd, bytes) } : {}) };
    } finally {
      closeSync(fd);
    }
  });
}

/** Hash of SAMPLE_WINDOWS windows spread evenly over [0, bytes) (the whole file when it is small). */
function contentSample(fd: number, bytes: number): string {
  const span = SAMPLE_WINDOWS * SAMPLE_BYTES;
  const windows =
    bytes <= span ? [readAt(fd, bytes, 0)] : Array.from({ length: SAMPLE_WINDOWS }, (_, i) => readAt(fd, SAMPLE_BYTES, Math.floor((i * (bytes - SAMPLE_BYTES)) / (SAMPLE_WINDOWS - 1))));
  return Bun.hash(Buffer.concat(windows)).toString(16).padStart(16, "0");
}

/** Why a recorded stamp list does not describe the shards now, or null when it does (samples are
 *  compared when both sides have one). */
export function staleReason(recorded: unknown, now: ShardStamp[], when = "the checksums were recorded"): string | null {
  if (!Array.isArray(recorded)) return "it lists no shards";
  const byName = new Map<string, ShardStamp>(recorded.map((s: ShardStamp) => [s?.file, s]));
  for (const s of now) {
    const r = byName.get(s.file);
    if (!r) return `${s.file} was not recorded`;
    if (r.bytes !== s.bytes) return `${s.file} is ${s.bytes} bytes, recorded at ${r.bytes}`;
    if (r.headerHash !== s.headerHash) return `${s.file}'s header changed`;
    if (r.sample !== undefined && s.sample !== undefined && r.sample !== s.sample) return `${s.file}'s content differs from what it was when ${when}`;
    if (r.mtimeMs !== s.mtimeMs) return `${s.file} was modified after ${when}`;
  }
  if (byName.size !== now.length) return "the model has other shards now";
  return null;
}
