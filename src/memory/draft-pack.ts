// A packed draft (`k3 pack DRAFT_DIR --draft int8|int4`; docs/DRAFT.md "Packed drafts"): the
// draft's matrices group-quantised with the compact trunk's kernels (kernels/k3_matmul_q.c:
// integers in groups of 32 columns, one f32 scale each), everything else copied exactly — the
// norms, and kv_b_proj, which the absorbed MLA kernel reads in bf16. The draft's numbers never
// decide an output (every draft is verified by the target), so a lossy draft changes how many
// drafts are accepted, never a token; it takes ~0.5 (int8) or ~0.27 (int4) of the bf16 bytes.
//
// The file: "K3DRAFT1" | data (from byte 4096: the tensors in the released roster's order, a
// quantised matrix's integers then its scales) | header JSON | u64 LE header length | u32 LE
// CRC-32C of the header | 4 zero bytes | "K3DRAFT1". The header ties the file to the draft's
// safetensors file it was made from (its size, header hash and mtime: a changed draft makes the
// pack stale, refused) and holds a CRC-32C per tensor, checked as the engine reads it (the whole
// draft is read at open anyway). Next to the draft when that folder can take it, else k3's cache
// folder; written to a temp file and renamed.
import { closeSync, existsSync, fstatSync, openSync, readSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { toArrayBuffer } from "bun:ffi";
import { cachePath, ensureCacheDir } from "../cache-dir.ts";
import { draftTensorShapes, type DraftCheckpoint } from "../checkpoint/draft.ts";
import { K3Error } from "../errors.ts";
import { writableDir } from "../files.ts";
import { K3_STATUS, loadKernels, type Kernels } from "../kernels.ts";
import { at, CBuffers } from "../model/cmem.ts";
import type { DraftTensorSource } from "../model/weights.ts";

export type DraftFormat = "bf16" | "int8" | "int4";
export const DRAFT_FORMATS: readonly DraftFormat[] = ["bf16", "int8", "int4"];
const MAGIC = "K3DRAFT1";
const FORMAT = "k3-draft-pack-1";
const DATA_START = 4096;
const GROUP = 32;
const TAIL = 24;
/** Rows are quantised in blocks of at most this many source bytes (lm_head is 2.35 GB on K3). */
const BLOCK_BYTES = 32 * 2 ** 20;

const bitsOf = (f: Exclude<DraftFormat, "bf16">): 8 | 4 => (f === "int8" ? 8 : 4);
/** The MLA kernel reads kv_b in bf16; 1-D tensors are norms. */
const packable = (name: string, shape: number[]) => shape.length === 2 && shape[1]! % GROUP === 0 && !name.endsWith("kv_b_proj.weight");

/** Where a pack of the draft may be: next to it (not inside a download), then k3's cache folder. */
function candidatePaths(ck: DraftCheckpoint, format: DraftFormat): string[] {
  const cached = join(cachePath("packs"), `${Bun.hash(ck.dir).toString(16)}-draft-${format}.k3pack`);
  return ck.dir.includes("/snapshots/") ? [cached] : [join(ck.dir, `k3-draft-${format}.k3pack`), cached];
}

/** The pack's layout for `format`: every tensor of the roster where it goes, from DATA_START. */
export function draftPackLayout(ck: DraftCheckpoint, format: Exclude<DraftFormat, "bf16">, file = ""): { tensors: DraftTensorSource[]; dataEnd: number } {
  const bits = bitsOf(format);
  let off = DATA_START;
  const tensors = [...draftTensorShapes(ck.config)].map(([name, shape]): DraftTensorSource => {
    const src = ck.tensors.get(name)!;
    if (!packable(name, shape)) {
      const t: DraftTensorSource = { name, file, offset: off, bytes: src.bytes, dtype: src.dtype, shape };
      off += src.bytes;
      return t;
    }
    const [rows, cols] = shape as [number, number];
    const bytes = bits === 8 ? rows * cols : (rows * cols) / 2;
    const t: DraftTensorSource = { name, file, offset: off, bytes, dtype: bits === 8 ? "Q8" : "Q4", shape, scales: { offset: off + bytes, bytes: (rows * cols * 4) / GROUP } };
    off += bytes + t.scales!.bytes;
    return t;
  });
  return { tensors, dataEnd: off };
}

/** What the pack was made from: the draft's safetensors file as it was. */
function sourceStamp(ck: DraftCheckpoint) {
  return { bytes: ck.fileBytes, headerHash: ck.headerHash, mtimeMs: Math.floor(statSync(ck.file).mtimeMs) };
}

export interface DraftPackResult {
  path: string;
  format: Exclude<DraftFormat, "bf16">;
  fileBytes: number;
  sourceBytes: number;
  packedMatrices: number;
  /** √(Σ(w − q·s)² / Σw²) over every quantised matrix, and the worst row's. */
  weightError: { rms: number; worstRow: number };
  ms: number;
}

/** `k3 pack DRAFT_DIR --draft int8|int4`: read the draft once, write its pack (temp file, renamed). */
export function writeDraftPack(k: Kernels, ck: DraftCheckpoint, format: Exclude<DraftFormat, "bf16">, onProgress?: (done: number, total: number) => void): DraftPackResult {
  const t0 = performance.now();
  const { tensors, dataEnd } = draftPackLayout(ck, format);
  const paths = candidatePaths(ck, format);
  const path = paths.length > 1 && writableDir(ck.dir) ? paths[0]! : join(ensureCacheDir("packs"), paths.at(-1)!.split("/").at(-1)!);
  const tmp = `${path}.${process.pid}.tmp`;
  const total = tensors.reduce((a, t) => a + ck.tensors.get(t.name)!.bytes, 0);
  let out = -1;
  let stats: { crcs: Record<string, number>; packed: number; err: Float64Array };
  try {
    out = openSync(tmp, "w");
    writeSync(out, Buffer.from(MAGIC.padEnd(DATA_START, "\0")), 0, DATA_START, 0);
    stats = writeData(k, ck, tensors, format, out, (d) => onProgress?.(d, total));
    const header = Buffer.from(JSON.stringify({ format: FORMAT, draft: format, group: GROUP, source: sourceStamp(ck), dataEnd, tensors, crcs: stats.crcs }));
    const tail = Buffer.alloc(TAIL);
    tail.writeBigUInt64LE(BigInt(header.byteLength), 0);
    tail.writeUInt32LE(k.k3_crc32c(0, header, header.byteLength), 8);
    tail.write(MAGIC, 16, "latin1");
    writeSync(out, header, 0, header.byteLength, dataEnd);
    writeSync(out, tail, 0, TAIL, dataEnd + header.byteLength);
    closeSync(out);
    out = -1;
    renameSync(tmp, path);
  } catch (err) {
    if (out >= 0) closeSync(out);
    rmSync(tmp, { force: true });
    throw err;
  }
  const e = stats.err;
  return { path, format, fileBytes: Bun.file(path).size, sourceBytes: total, packedMatrices: stats.packed, weightError: { rms: Math.sqrt(e[0]! / e[1]!), worstRow: Math.sqrt(e[2]!) }, ms: performance.now() - t0 };
}

/** The data section: each tensor read from the draft in row blocks, copied or quantised, written at its layout offset. */
function writeData(k: Kernels, ck: DraftCheckpoint, tensors: DraftTensorSource[], format: Exclude<DraftFormat, "bf16">, out: number, onProgress: (done: number) => void) {
  const bits = bitsOf(format);
  const mem = new CBuffers(k);
  const fd = openSync(ck.file, "r");
  const crcs: Record<string, number> = {};
  const err = new Float64Array(3);
  let packed = 0;
  let done = 0;
  try {
    const src = mem.alloc(BLOCK_BYTES + 2 * ck.config.hidden * 64, "draft pack source rows");
    const dst = mem.alloc(BLOCK_BYTES + 2 * ck.config.hidden * 64, "draft pack output rows");
    const view = (ptr: number, bytes: number) => new Uint8Array(toArrayBuffer(ptr as any, 0, bytes));
    for (const t of tensors) {
      const s = ck.tensors.get(t.name)!;
      const rows = t.shape[0]!;
      const rowSrc = s.bytes / rows;
      const perBlock = Math.max(1, Math.floor(BLOCK_BYTES / rowSrc));
      const rowOut = t.bytes / rows;
      const rowScales = t.scales ? t.scales.bytes / rows : 0;
      let crc = 0;
      let crcScales = 0;
      if (t.scales) packed++;
      for (let r0 = 0; r0 < rows; r0 += perBlock) {
        const n = Math.min(perBlock, rows - r0);
        const bytes = n * rowSrc;
        if (readSync(fd, view(src.ptr, bytes), 0, bytes, s.offset + r0 * rowSrc) !== bytes) throw new K3Error("IO", `${ck.file}: short read of ${t.name}`);
        if (!t.scales) {
          writeSync(out, view(src.ptr, bytes), 0, bytes, t.offset + r0 * rowSrc);
          crc = k.k3_crc32c(crc, src.ptr, bytes);
        } else {
          const q = n * rowOut;
          const st = k.k3_quantize_bf16(src.ptr, n, t.shape[1]!, bits, dst.ptr, at(dst.ptr, q));
          if (st === K3_STATUS.nonfinite) throw new K3Error("CHECKPOINT", `${ck.file}: ${t.name} rows ${r0}..${r0 + n - 1} hold NaN or infinite weights: this draft cannot be packed`);
          if (st !== K3_STATUS.ok) throw new K3Error("INTERNAL", `k3_quantize_bf16 refused ${t.name} (status ${st})`);
          k.k3_quant_error(src.ptr, n, t.shape[1]!, bits, dst.ptr, at(dst.ptr, q), err);
          writeSync(out, view(dst.ptr, q), 0, q, t.offset + r0 * rowOut);
          writeSync(out, view(dst.ptr + q, n * rowScales), 0, n * rowScales, t.scales.offset + r0 * rowScales);
          crc = k.k3_crc32c(crc, dst.ptr, q);
          crcScales = k.k3_crc32c(crcScales, at(dst.ptr, q), n * rowScales);
        }
        done += bytes;
        onProgress(done);
      }
      crcs[t.name] = crc;
      if (t.scales) crcs[`${t.name}:scales`] = crcScales;
    }
  } finally {
    closeSync(fd);
    mem.free();
  }
  return { crcs, packed, err };
}

/** The pack's tensors (sources in its file) and their recorded CRC-32Cs, validated; USAGE when none was made. */
export function loadDraftPack(ck: DraftCheckpoint, format: Exclude<DraftFormat, "bf16">): { path: string; tensors: DraftTensorSource[]; crcs: Record<string, number> } {
  const path = candidatePaths(ck, format).find((p) => existsSync(p));
  if (!path) throw new K3Error("USAGE", `no ${format} pack of the draft ${ck.dir}`, [`make one first: k3 pack ${ck.dir} --draft ${format}`]);
  const bad = (why: string): never => {
    throw new K3Error("CHECKPOINT", `${path}: ${why}`, [`make it again: k3 pack ${ck.dir} --draft ${format}`]);
  };
  const body = readHeader(path, bad);
  if (body.format !== FORMAT || body.draft !== format || body.group !== GROUP) bad(`holds ${JSON.stringify(body.format)} ${body.draft} in groups of ${body.group}, asked for ${FORMAT} ${format} in groups of ${GROUP}`);
  const now = sourceStamp(ck);
  const was = body.source ?? {};
  if (was.bytes !== now.bytes || was.headerHash !== now.headerHash || was.mtimeMs !== now.mtimeMs) bad(`packed from other draft bytes (${ck.file} changed since: size, header or mtime)`);
  const want = draftPackLayout(ck, format, path);
  if (body.dataEnd !== want.dataEnd || JSON.stringify(body.tensors) !== JSON.stringify(draftPackLayout(ck, format).tensors)) bad("its tensor table differs from what this draft packs to");
  return { path, tensors: want.tensors, crcs: body.crcs ?? {} };
}

/** The header JSON of a pack file (magic, length and CRC checked). */
function readHeader(path: string, bad: (why: string) => never): any {
  let fd = -1;
  try {
    fd = openSync(path, "r");
    const st = fstatSync(fd);
    if (!st.isFile()) bad("not a regular file");
    if (st.size < DATA_START + TAIL) bad(`${st.size} bytes: too short for a packed draft`);
    const tail = Buffer.alloc(TAIL);
    readSync(fd, tail, 0, TAIL, st.size - TAIL);
    const head = Buffer.alloc(8);
    readSync(fd, head, 0, 8, 0);
    if (head.toString("latin1") !== MAGIC || tail.toString("latin1", 16) !== MAGIC) bad("not a k3 packed draft (or cut short)");
    const hlen = Number(tail.readBigUInt64LE(0));
    if (hlen <= 0 || hlen > st.size - DATA_START - TAIL) bad(`header length ${hlen} does not fit the file`);
    const hb = Buffer.alloc(hlen);
    readSync(fd, hb, 0, hlen, st.size - TAIL - hlen);
    if (loadKernels().k3_crc32c(0, hb, hlen) !== tail.readUInt32LE(8)) bad("damaged header (its checksum does not match)");
    const body = JSON.parse(hb.toString("utf8"));
    if (body.dataEnd + hlen + TAIL !== st.size) bad(`${st.size} bytes, the header describes ${body.dataEnd + hlen + TAIL}`);
    return body;
  } catch (err) {
    if (err instanceof K3Error) throw err;
    return bad(`cannot read it (${(err as Error).message})`);
  } finally {
    if (fd >= 0) closeSync(fd);
  }
}

/** Which packs of this draft exist (bf16, the released file, always). */
export function draftFormatsAvailable(ck: DraftCheckpoint): DraftFormat[] {
  return DRAFT_FORMATS.filter((f) => f === "bf16" || candidatePaths(ck, f).some((p) => existsSync(p)));
}
