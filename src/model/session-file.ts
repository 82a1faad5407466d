// Saved sessions: KDA state, conv history, MLA latent cache, position, token history. Restoring
// one replaces a re-prefill of the whole conversation (STREAMING.md §2: 0.3 s vs minutes).
//
// File: "K3SESS01" (8 bytes) · u32 LE header length · header JSON · payload.
// The header records what produced the state (StateIdentity: the model fingerprint — config +
// every tensor's name, dtype and shape — and the exact weights: the trunk format, the pack it came
// from if any, each shard's stamp), the buffers in order with their byte counts, and a CRC-32 of
// the tokens and payload. Loading into another model or other weights (another trunk, a changed
// shard, a same-shape fine-tune), a truncated or a corrupted file is refused with the reason.
// Trust: the CRC-32 finds accidents, not tampering — whoever can write a session file (or the
// prefix cache's folder) can make it say anything, and so steer the replies that continue from it
// (docs/CLI.md, docs/SERVER.md).
import { closeSync } from "node:fs";
import { openRegularFile, readAt, readRegularFile, writeAll, writeFileAtomic } from "../files.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import { staleReason, type ShardStamp } from "../checkpoint/stamps.ts";
import { checkSnapshotFits, liveViews, restoreState, type StateSnapshot } from "./snapshot.ts";
import type { SessionState } from "./state.ts";

const MAGIC = "K3SESS01";

/** What produced a saved state: refused (or, in the prefix cache, never used) under anything else. */
export interface StateIdentity {
  /** The model: config and every tensor's name, dtype and shape (Engine.fingerprint). */
  model: string;
  weights: WeightsIdentity;
}

/** The exact weights an engine computes with. */
export interface WeightsIdentity {
  /** The trunk's format: "bf16" (the release's, from the shards) or a packed one ("int8", …). */
  trunk: string;
  /** The side file the trunk came from when not the shards: its size and content hash (a hash of
   *  its per-block checksums: the same pack made again is the same file, wherever it lives). */
  trunkFile?: { bytes: number; contentHash: string };
  /** Each shard's stamp (src/checkpoint/stamps.ts): size, header hash, mtime, content sample. */
  shards: ShardStamp[];
}

/** A short hash of an identity, for file names (the prefix cache's disk tier). */
export function identityHash(id: StateIdentity): string {
  return Bun.hash(JSON.stringify([id.model, id.weights])).toString(16).padStart(16, "0");
}

/** Session files this k3 writes; 1 (no `weights`) is refused by name. */
const FORMAT = 2;

export interface SessionHeader {
  format: typeof FORMAT;
  model: string; // fingerprint
  modelName: string;
  weights: WeightsIdentity;
  pos: number;
  history: number[];
  pending: number[];
  buffers: { name: string; bytes: number }[];
  /** What the caller keeps with the state (e.g. a chat's messages); covered by the checksum. */
  meta?: unknown;
  crc32: number; // CRC-32 of [pos, history, pending] (as JSON) continued over the payload
}

/** CRC-32 of the header's token fields, the start of the checksum that then covers the payload. */
function headerCrc(k: Kernels, pos: number, history: number[], pending: number[], meta?: unknown): number {
  const bytes = Buffer.from(JSON.stringify(meta === undefined ? [pos, history, pending] : [pos, history, pending, meta]));
  return k.k3_crc32(0, bytes, bytes.byteLength);
}

/** The parts a file holds: names and bytes, in order (a live state's views, or a snapshot's). */
interface FileState {
  pos: number;
  history: number[];
  parts: { name: string; view: Uint8Array }[];
}

export function saveSession(k: Kernels, state: SessionState, pending: number[], identity: StateIdentity, modelName: string, path: string, meta?: unknown): void {
  writeStateFile(k, { pos: state.pos, history: state.history, parts: liveViews(state) }, pending, identity, modelName, path, meta);
}

/** Write a snapshot (src/model/snapshot.ts) as a session file: the prefix cache's disk tier. */
export function saveSnapshot(k: Kernels, snap: StateSnapshot, identity: StateIdentity, modelName: string, path: string, meta?: unknown): void {
  let off = 0;
  const parts = snap.parts.map((p) => {
    const view = snap.data.subarray(off, off + p.bytes);
    off += p.bytes;
    return { name: p.name, view };
  });
  writeStateFile(k, { pos: snap.pos, history: snap.history, parts }, [], identity, modelName, path, meta);
}

function writeStateFile(k: Kernels, state: FileState, pending: number[], identity: StateIdentity, modelName: string, path: string, meta?: unknown): void {
  const parts = state.parts;
  let crc = headerCrc(k, state.pos, state.history, pending, meta);
  for (const p of parts) crc = k.k3_crc32(crc, p.view, p.view.byteLength);
  const header: SessionHeader = {
    format: FORMAT,
    model: identity.model,
    modelName,
    weights: identity.weights,
    pos: state.pos,
    history: state.history,
    pending,
    buffers: parts.map((p) => ({ name: p.name, bytes: p.view.byteLength })),
    ...(meta === undefined ? {} : { meta }),
    crc32: crc,
  };
  const json = Buffer.from(JSON.stringify(header));
  const head = Buffer.alloc(12);
  head.write(MAGIC, 0, "latin1");
  head.writeUInt32LE(json.length, 8);
  // Only a regular file or a new path is written (a FIFO or device there is refused, naming it);
  // a failed save (a full disk) leaves no partial file behind.
  writeFileAtomic(path, "session file", "SESSION", (fd) => {
    writeAll(fd, head);
    writeAll(fd, json);
    for (const p of parts) writeAll(fd, p.view);
  });
}

/** Read a session file's header only (to check it before allocating anything). Only a regular
 *  file is opened (a FIFO would block, a directory fail inside a read). */
export function readSessionHeader(path: string): { header: SessionHeader; payloadOffset: number; fileBytes: number } {
  const { fd, bytes: fileBytes } = openRegularFile(path, "session file", "SESSION");
  try {
    const head = readAt(fd, 12, 0);
    if (head.length !== 12 || head.toString("latin1", 0, 8) !== MAGIC) throw new K3Error("SESSION", `${path} is not a k3 session file`);
    const n = head.readUInt32LE(8);
    if (12 + n > fileBytes) throw new K3Error("SESSION", `${path}: header runs past the end of the file (truncated?)`);
    const json = readAt(fd, n, 12);
    let header: unknown;
    try {
      header = JSON.parse(json.toString("utf8"));
    } catch {
      throw new K3Error("SESSION", `${path}: the header is not valid JSON (corrupted?)`);
    }
    return { header: validateHeader(path, header), payloadOffset: 12 + n, fileBytes };
  } catch (e) {
    if (e instanceof K3Error) throw e;
    throw new K3Error("SESSION", `cannot read session file ${path}: ${(e as Error).message}`);
  } finally {
    closeSync(fd);
  }
}

const isId = (x: unknown): x is number => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;
const isObject = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === "object" && !Array.isArray(x);
const isStamp = (x: unknown) => isObject(x) && typeof x.file === "string" && isId(x.bytes) && typeof x.mtimeMs === "number" && typeof x.headerHash === "string" && typeof x.sample === "string"; // a saved state's stamps carry the sample
const isWeights = (x: unknown) =>
  isObject(x) && typeof x.trunk === "string" && Array.isArray(x.shards) && x.shards.every(isStamp) && (x.trunkFile === undefined || (isObject(x.trunkFile) && isId(x.trunkFile.bytes) && typeof x.trunkFile.contentHash === "string"));

/**
 * Every field of a session header with the type it must have, checked before any is used: a
 * header edited by hand or damaged on disk (the checksum covers the tokens and the payload, not
 * the field types) is refused with the field's name, never a TypeError.
 */
function validateHeader(path: string, h: unknown): SessionHeader {
  if (h === null || typeof h !== "object" || Array.isArray(h)) throw new K3Error("SESSION", `${path}: unknown session format (the header is not a JSON object)`);
  const o = h as Record<string, unknown>;
  if (o.format === 1)
    throw new K3Error("SESSION", `${path} was saved by an older k3 (session format 1: not tied to the exact weights, so it cannot be checked against these)`, ["start a new session (its conversation can be sent again)"]);
  if (o.format !== FORMAT) throw new K3Error("SESSION", `${path}: unknown session format ${JSON.stringify(o.format)} (this k3 reads format ${FORMAT})`);
  const problems: string[] = [];
  const want = (ok: boolean, field: string, what: string) => {
    if (!ok) problems.push(`${field}: expected ${what}, got ${JSON.stringify(o[field])?.slice(0, 60) ?? "nothing"}`);
  };
  want(typeof o.model === "string", "model", "the model fingerprint (a string)");
  want(typeof o.modelName === "string", "modelName", "a string");
  want(isWeights(o.weights), "weights", "what the state was computed with ({trunk, trunkFile?, shards: [stamps]})");
  want(isId(o.pos), "pos", "a non-negative integer");
  want(Array.isArray(o.history) && o.history.every(isId), "history", "a list of token ids");
  want(Array.isArray(o.pending) && o.pending.every(isId), "pending", "a list of token ids");
  want(
    Array.isArray(o.buffers) && o.buffers.every((b) => b !== null && typeof b === "object" && typeof b.name === "string" && isId(b.bytes)),
    "buffers", "a list of {name, bytes}",
  );
  want(typeof o.crc32 === "number" && Number.isInteger(o.crc32) && o.crc32 >= 0 && o.crc32 <= 0xffffffff, "crc32", "a 32-bit checksum");
  if (problems.length) throw new K3Error("SESSION", `${path}: invalid session header`, problems);
  const header = o as unknown as SessionHeader;
  if (header.history.length !== header.pos)
    throw new K3Error("SESSION", `${path}: header is inconsistent (position ${header.pos}, ${header.history.length} history tokens)`);
  return header;
}

/** Fill `state` from a file written by saveSession for the same model; returns the pending ids
 *  and the caller's metadata. */
export function loadSession(k: Kernels, state: SessionState, identity: StateIdentity, path: string): { pending: number[]; meta: unknown } {
  // Cheap refusals (context, buffer layout) before the payload is read.
  const { snap, pending, meta } = readSnapshot(k, state.cfg.vocab, identity, path, (h) => checkSnapshotFits(state, { pos: h.pos, history: h.history, parts: h.buffers }, path));
  restoreState(state, snap, path);
  return { pending, meta };
}

/**
 * A session file's state, checked whole before anything uses it: magic, header fields, what
 * produced it (identityMismatch), size, token ids, then the CRC-32 over tokens and payload.
 * `check` sees the header before the payload is read (to refuse a wrong layout early).
 */
export function readSnapshot(k: Kernels, vocab: number, identity: StateIdentity, path: string, check?: (h: SessionHeader) => void): { snap: StateSnapshot; pending: number[]; meta: unknown } {
  const { header, payloadOffset, fileBytes } = readSessionHeader(path);
  const mismatch = identityMismatch(header, identity, path);
  if (mismatch) throw mismatch;
  check?.(header);
  const total = header.buffers.reduce((a, b) => a + b.bytes, 0);
  if (payloadOffset + total !== fileBytes) throw new K3Error("SESSION", `${path}: ${fileBytes} bytes, the header describes ${payloadOffset + total} (truncated or padded)`);
  const ids = [...header.history, ...header.pending];
  const bad = ids.find((id) => id >= vocab);
  if (bad !== undefined) throw new K3Error("SESSION", `${path}: token id ${bad} is outside this model's vocabulary`);
  const data = readRegularFile(path, "session file", "SESSION").subarray(payloadOffset);
  if (data.byteLength !== total) throw new K3Error("SESSION", `${path}: ${data.byteLength} payload bytes, the header describes ${total} (the file changed while read?)`);
  const crc = k.k3_crc32(headerCrc(k, header.pos, header.history, header.pending, header.meta), data, data.byteLength);
  if (crc !== header.crc32) throw new K3Error("SESSION", `${path}: checksum mismatch (corrupted header tokens or payload)`);
  return { snap: { pos: header.pos, history: header.history, parts: header.buffers, data }, pending: header.pending, meta: header.meta };
}

/**
 * Why a saved state (its header) was not produced by `now`'s model and weights, as the K3Error to
 * refuse it with; null when it was. The checks go from the coarsest: another model, another trunk
 * format, another pack of it, other shard bytes (each naming what differs).
 */
export function identityMismatch(saved: Pick<SessionHeader, "model" | "modelName" | "weights">, now: StateIdentity, path: string): K3Error | null {
  if (saved.model !== now.model)
    return new K3Error("SESSION", `${path} belongs to another model (${saved.modelName}, fingerprint ${saved.model.slice(0, 12)}…), not this one (${now.model.slice(0, 12)}…)`);
  const [was, is] = [saved.weights, now.weights];
  const start = "start a new session (its conversation can be sent again)";
  if (was.trunk !== is.trunk)
    return new K3Error("SESSION", `${path} was saved by an engine running the ${was.trunk} trunk; this one runs ${is.trunk}: a saved state holds what its weights computed`, [`open the model with --trunk ${was.trunk} to use it, or ${start}`]);
  if (JSON.stringify(was.trunkFile ?? null) !== JSON.stringify(is.trunkFile ?? null))
    return new K3Error("SESSION", `${path} was saved with another ${was.trunk} pack of this model (its blocks' checksums differ from the pack's now: it was made again from other shard bytes)`, [start]);
  const stale = staleReason(was.shards, is.shards, "the state was saved");
  if (stale) return new K3Error("SESSION", `${path} was saved for other weights of this model (${stale})`, ["the model's files changed since (an update in place, another copy, a same-shape fine-tune)", start]);
  return null;
}
