// The compact trunk (issue 16): opt-in, never the default. `k3 pack DIR --trunk int8|int4` writes
// a side file with the trunk's matrices group-quantised (kernels/k3_matmul_q.c: integers in groups
// of 32 columns, one f32 scale each) and every other trunk tensor copied exactly; `--trunk` on
// run/chat/serve/bench reads the trunk from it. Routed experts (the released MXFP4) and embedding
// rows still come from the shards, exact. Lossy: docs/TRUNK.md has the measured error.
//
// The file: "K3PACK01" | data (from byte 4096: unit by unit, each unit's core tensors by name,
// then its matrices in forward order, each matrix's q then its scales, no padding, so a piece of
// consecutive matrices is one read) | header JSON | u64 LE header length | u32 LE CRC-32C of the
// header | 4 zero bytes | "K3PACK01".
// The header ties the file to the exact shard bytes it came from (each shard's header hash, size
// and mtime, as `k3 verify --record` does: a changed shard makes the pack stale, refused) and
// holds a CRC-32C per trunk block (pieces.ts's grid) so `--verify` checks every landed piece.
//
// Where: `k3-trunk-int4.k3pack` next to the model when that folder can take it, else (read-only
// folder, a Hugging Face download k3 must not write into) k3's cache folder ($XDG_CACHE_HOME/k3/
// packs/). Written to a temp file and renamed: never a partial pack.
import { closeSync, existsSync, openSync, readSync } from "node:fs";
import { basename, join } from "node:path";
import { toArrayBuffer } from "bun:ffi";
import { cachePath, ensureCacheDir } from "../cache-dir.ts";
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { openRegularFile, writableDir, writeAll, writeFileAtomic } from "../files.ts";
import { K3_STATUS, loadKernels, type Kernels } from "../kernels.ts";
import { CBuffers } from "../model/cmem.ts";
import { HEAD_MATRICES, layerMatrices } from "../model/walk.ts";
import { LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import { DEFAULT_BLOCK_BYTES, blocksOf, type Part, type PieceOptions, type TrunkTensor } from "./pieces.ts";
import type { StreamSlots } from "./plan.ts";
import { metadataSlots, specTrunkTensors, streamSlots } from "./slots.ts";
import { trunkUnitEntries } from "./units.ts";
import { stamps, staleReason, type ShardStamp } from "./verify.ts";

export type TrunkFormat = "bf16" | "int8" | "int4";
export const TRUNK_FORMATS: readonly TrunkFormat[] = ["bf16", "int8", "int4"];
const MAGIC = "K3PACK01";
const FORMAT = "k3-pack-1";
const DATA_START = 4096;
/** Group size of the packed formats (k3.h). */
const GROUP = 32;
/** Bytes after the header: its length, its CRC-32C, padding, the magic again. */
const TAIL = 24;

export interface PackedTrunk {
  path: string;
  format: Exclude<TrunkFormat, "bf16">;
  /** Every trunk tensor per unit, where it lives in the pack. */
  tensors: TrunkTensor[][];
  fileBytes: number;
  /** Recorded CRC-32C of a trunk block (by key), for `--verify`. */
  blockCrc: (key: string) => number | undefined;
}

/** The bits of a packed format. */
const bitsOf = (f: Exclude<TrunkFormat, "bf16">): 8 | 4 => (f === "int8" ? 8 : 4);

/** Unit u's matrices in walk order, by full name. */
function unitWalk(cfg: ModelConfig, u: number) {
  return u === cfg.numLayers ? HEAD_MATRICES : layerMatrices(cfg, u).map((m) => ({ ...m, suffix: `${LM_MODEL_PREFIX}layers.${u}.${m.suffix}` }));
}

/** Each unit's matrices that a pack stores quantised: the walk's packable bf16 matrices whose
 *  columns are whole groups (every K3 matrix; some of a tiny test model's are not). */
function packableNames(cfg: ModelConfig, u: number): Set<string> {
  return new Set(unitWalk(cfg, u).filter((m) => m.packable).map((m) => m.suffix));
}

const canPack = (t: { dtype: string; shape: number[] }) => t.dtype === "BF16" && t.shape.length === 2 && t.shape[1]! % GROUP === 0;

/** The order tensors take in a pack: per unit, core tensors by name, then matrices in walk order. */
function unitOrder(cfg: ModelConfig, u: number, list: TrunkTensor[]): TrunkTensor[] {
  const byName = new Map(list.map((t) => [t.name, t]));
  const walk = unitWalk(cfg, u).map((m) => m.suffix).filter((n) => byName.has(n));
  const inWalk = new Set(walk);
  const core = list.filter((t) => !inWalk.has(t.name)).sort((a, b) => (a.name < b.name ? -1 : 1));
  return [...core, ...walk.map((n) => byName.get(n)!)];
}

/**
 * Where every trunk tensor goes in a pack of `format`, from the exact trunk (real entries, or the
 * config's specs for a plan without shards): quantised matrices become Q8/Q4 with their scales
 * after their data, everything else keeps its dtype and bytes. Offsets from DATA_START, packed.
 */
export function packLayout(cfg: ModelConfig, exact: TrunkTensor[][], format: Exclude<TrunkFormat, "bf16">, file = ""): { tensors: TrunkTensor[][]; dataEnd: number } {
  const bits = bitsOf(format);
  let off = DATA_START;
  const tensors = exact.map((list, u) => {
    const packable = packableNames(cfg, u);
    return unitOrder(cfg, u, list).map((t): TrunkTensor => {
      if (packable.has(t.name) && canPack(t)) {
        const [rows, cols] = t.shape as [number, number];
        const bytes = bits === 8 ? rows * cols : (rows * cols) / 2;
        const scales = { offset: off + bytes, bytes: (rows * cols * 4) / GROUP };
        const out: TrunkTensor = { name: t.name, file, offset: off, bytes, dtype: bits === 8 ? "Q8" : "Q4", shape: t.shape, scales };
        off += bytes + scales.bytes;
        return out;
      }
      const out: TrunkTensor = { name: t.name, file, offset: off, bytes: t.bytes, dtype: t.dtype, shape: t.shape };
      off += t.bytes;
      return out;
    });
  });
  return { tensors, dataEnd: off };
}

/** Identity of the model a pack belongs to: config and every trunk tensor's name, dtype, shape. */
function fingerprint(ckpt: Checkpoint): string {
  const names = trunkUnitEntries(ckpt).flat().map((t) => `${t.name}:${t.dtype}:${t.shape.join("x")}`).sort();
  return Bun.hash(JSON.stringify(ckpt.config) + names.join("|")).toString(16).padStart(16, "0");
}

const fileName = (format: TrunkFormat) => `k3-trunk-${format}.k3pack`;
const cachedPackPath = (ckpt: Checkpoint, format: TrunkFormat) => join(cachePath("packs"), `${Bun.hash(ckpt.dir).toString(16)}-${format}.k3pack`);

/** Where a pack may be: next to the model (not for a download), then k3's cache folder. */
function candidatePaths(ckpt: Checkpoint, format: TrunkFormat): string[] {
  const cached = cachedPackPath(ckpt, format);
  return ckpt.download ? [cached] : [join(ckpt.dir, fileName(format)), cached];
}

export interface PackResult {
  path: string;
  format: Exclude<TrunkFormat, "bf16">;
  fileBytes: number;
  sourceBytes: number; // exact trunk bytes read
  packedMatrices: number;
  exactTensors: number;
  /** Weight error of the quantised matrices: √(Σ(w − q·s)² / Σw²) over all of them, and the
   *  worst single row's. */
  weightError: { rms: number; worstRow: number };
  ms: number;
}

/**
 * `k3 pack`: read the exact trunk once, write the pack (temp file, then rename). Next to the model
 * when its folder is writable and not a download, else k3's cache folder.
 */
export function writePack(k: Kernels, ckpt: Checkpoint, format: Exclude<TrunkFormat, "bf16">, onProgress?: (doneBytes: number, totalBytes: number) => void): PackResult {
  const t0 = performance.now();
  const exact = trunkUnitEntries(ckpt).map((list) => list.map((e): TrunkTensor => ({ name: e.name, file: e.file, offset: e.offset, bytes: e.bytes, dtype: e.dtype, shape: e.shape })));
  const { tensors, dataEnd } = packLayout(ckpt.config, exact, format);
  const local = join(ckpt.dir, fileName(format));
  const path = !ckpt.download && writableDir(ckpt.dir) ? local : join(ensureCacheDir("packs"), basename(cachedPackPath(ckpt, format)));
  const totalBytes = exact.flat().reduce((a, t) => a + t.bytes, 0);
  let data: PackedData | undefined;
  // A temp file renamed into place: a full disk leaves no partial pack; a directory, FIFO or
  // device at the pack's path is refused naming that path.
  writeFileAtomic(path, "the packed trunk", "IO", (out) => {
    writeAll(out, Buffer.from(MAGIC.padEnd(DATA_START, "\0")), 0);
    data = writePackData(k, ckpt.config, exact, tensors, format, out, (done) => onProgress?.(done, totalBytes));
    const header = packHeader(ckpt, format, tensors, dataEnd, data.crcs);
    const tail = Buffer.alloc(TAIL);
    tail.writeBigUInt64LE(BigInt(header.byteLength), 0);
    tail.writeUInt32LE(k.k3_crc32c(0, header, header.byteLength), 8);
    tail.write(MAGIC, 16, "latin1");
    writeAll(out, header, dataEnd);
    writeAll(out, tail, dataEnd + header.byteLength);
  });
  const { packedMatrices, err } = data!;
  return { path, format, fileBytes: Bun.file(path).size, sourceBytes: totalBytes, packedMatrices, exactTensors: tensors.flat().length - packedMatrices, weightError: { rms: Math.sqrt(err[0]! / err[1]!), worstRow: Math.sqrt(err[2]!) }, ms: performance.now() - t0 };
}

interface PackedData {
  /** CRC-32C of every block as written (pieces.ts's grid), by block key. */
  crcs: Record<string, number>;
  packedMatrices: number;
  /** k3_quant_error's running sums over every quantised block: Σ(w − q·s)², Σw², the worst row's ratio. */
  err: Float64Array;
}

/** The data section: every trunk tensor of `exact` read block by block from the shards, copied
 *  exactly or quantised, and written where `tensors` (its pack layout) puts it in `out`. */
function writePackData(k: Kernels, cfg: ModelConfig, exact: TrunkTensor[][], tensors: TrunkTensor[][], format: Exclude<TrunkFormat, "bf16">, out: number, onProgress: (doneBytes: number) => void): PackedData {
  const bits = bitsOf(format);
  const source = new Map(exact.flat().map((t) => [t.name, t]));
  const mem = new CBuffers(k);
  const fds = new Map<string, number>();
  const crcs: Record<string, number> = {};
  let doneBytes = 0;
  let packedMatrices = 0;
  const err = new Float64Array(3);
  const fd = (f: string) => {
    let d = fds.get(f);
    if (d === undefined) fds.set(f, (d = openSync(f, "r")));
    return d;
  };
  try {
    // Every tensor in the blocks pieces.ts cuts it into (the checksum grid the engine checks).
    const sliceable = new Set(exact.flatMap((_, u) => unitWalk(cfg, u).filter((m) => m.sliceable).map((m) => m.suffix)));
    const work = tensors.flat().map((t) => {
      const s = source.get(t.name)!;
      const rowSrc = s.bytes / (t.shape[0] ?? 1);
      return { t, s, rowSrc, blocks: blocksOf(t, sliceable.has(t.name), DEFAULT_BLOCK_BYTES) };
    });
    const maxSrc = Math.max(64, ...work.flatMap((w) => w.blocks.map((b) => (b.r1 - b.r0) * w.rowSrc)));
    const maxOut = Math.max(64, ...work.flatMap((w) => w.blocks.map((b) => b.parts.reduce((a, p) => a + p.bytes, 0))));
    const src = mem.alloc(maxSrc, "pack source rows");
    const dst = mem.alloc(maxOut, "pack output rows");
    const view = (ptr: number, bytes: number) => new Uint8Array(toArrayBuffer(ptr as any, 0, bytes));
    for (const { t, s, rowSrc, blocks } of work) {
      if (t.scales) packedMatrices++;
      for (const b of blocks) {
        const n = b.r1 - b.r0;
        const bytes = n * rowSrc;
        const off = s.offset + b.r0 * rowSrc;
        const got = readSync(fd(s.file), view(src.ptr, bytes), 0, bytes, off);
        if (got !== bytes) throw new K3Error("IO", `${s.file}: short read of ${t.name} at offset ${off} (${got} of ${bytes} bytes)`);
        if (!t.scales) {
          // Copied exactly (cores, MLA's kv_b, matrices whose columns are not whole groups).
          writeAll(out, view(src.ptr, bytes), b.parts[0]!.offset);
          crcs[b.key] = k.k3_crc32c(0, src.ptr, bytes);
        } else {
          const [data, scales] = b.parts as [Part, Part];
          const st = k.k3_quantize_bf16(src.ptr, n, t.shape[1]!, bits, dst.ptr, (dst.ptr + data.bytes) as any);
          if (st === K3_STATUS.nonfinite) throw new K3Error("CHECKPOINT", `${t.name} rows ${b.r0}..${b.r1 - 1} hold NaN or infinite weights: this model cannot be packed (check it with k3 verify)`);
          if (st !== K3_STATUS.ok) throw new K3Error("INTERNAL", `k3_quantize_bf16 refused ${t.name} (${n}×${t.shape[1]}, status ${st})`);
          k.k3_quant_error(src.ptr, n, t.shape[1]!, bits, dst.ptr, (dst.ptr + data.bytes) as any, err);
          writeAll(out, view(dst.ptr, data.bytes), data.offset);
          writeAll(out, view(dst.ptr + data.bytes, scales.bytes), scales.offset);
          crcs[b.key] = k.k3_crc32c(0, dst.ptr, data.bytes + scales.bytes);
        }
        doneBytes += bytes;
        onProgress(doneBytes);
      }
    }
  } finally {
    for (const d of fds.values()) closeSync(d);
    mem.free();
  }
  return { crcs, packedMatrices, err };
}

/** The header JSON: the format, the model and shard bytes it was made from, the layout, the block CRCs. */
function packHeader(ckpt: Checkpoint, format: Exclude<TrunkFormat, "bf16">, tensors: TrunkTensor[][], dataEnd: number, crcs: Record<string, number>): Buffer {
  return Buffer.from(
    JSON.stringify({
      format: FORMAT,
      trunk: format,
      group: GROUP,
      blockBytes: DEFAULT_BLOCK_BYTES,
      model: ckpt.dir,
      fingerprint: fingerprint(ckpt),
      shards: stamps(ckpt),
      dataEnd,
      tensors: tensors.map((list) => list.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, offset: t.offset, bytes: t.bytes, scales: t.scales }))),
      crcs,
    }),
  );
}

/**
 * The pack of `format` for this checkpoint, validated: magic, header, the model it was made for,
 * the shard bytes it was made from (any shard changed since: refused), every trunk tensor once,
 * inside the data section. K3Error CHECKPOINT naming the file and what is wrong; USAGE when none.
 */
export function loadPack(ckpt: Checkpoint, format: Exclude<TrunkFormat, "bf16">): PackedTrunk {
  const path = candidatePaths(ckpt, format).find((p) => existsSync(p));
  if (!path)
    throw new K3Error("USAGE", `no ${format} trunk packed for ${ckpt.dir}`, [`make one first: k3 pack ${ckpt.dir} --trunk ${format} (it reads the trunk once; the experts stay exact)`]);
  const again = `make it again: k3 pack ${ckpt.dir} --trunk ${format}`;
  const bad = (why: string): never => {
    throw new K3Error("CHECKPOINT", `${path}: ${why}`, [again]);
  };
  let fd = -1;
  let body: any;
  let fileBytes = 0;
  let hlen = 0;
  try {
    // A regular file only, opened without blocking: a FIFO at the pack's path must not hang.
    ({ fd, bytes: fileBytes } = openRegularFile(path, "packed trunk", "CHECKPOINT"));
    if (fileBytes < DATA_START + TAIL) bad(`${fileBytes} bytes: too short for a packed trunk`);
    const tail = Buffer.alloc(TAIL);
    readSync(fd, tail, 0, TAIL, fileBytes - TAIL);
    const head = Buffer.alloc(8);
    readSync(fd, head, 0, 8, 0);
    if (head.toString("latin1") !== MAGIC || tail.toString("latin1", 16) !== MAGIC) bad("not a k3 packed trunk (or cut short)");
    hlen = Number(tail.readBigUInt64LE(0));
    if (hlen <= 0 || hlen > fileBytes - DATA_START - TAIL) bad(`header length ${hlen} does not fit the file`);
    const hb = Buffer.alloc(hlen);
    readSync(fd, hb, 0, hlen, fileBytes - TAIL - hlen);
    if (loadKernels().k3_crc32c(0, hb, hlen) !== tail.readUInt32LE(8)) bad("damaged header (its checksum does not match)");
    try {
      body = JSON.parse(hb.toString("utf8"));
    } catch (e) {
      bad(`damaged header (${(e as Error).message})`);
    }
  } catch (err) {
    if (err instanceof K3Error) throw err;
    throw new K3Error("IO", `cannot read ${path}: ${(err as Error).message}`);
  } finally {
    if (fd >= 0) closeSync(fd);
  }
  if (body?.format !== FORMAT) bad(`format ${JSON.stringify(body?.format)}, this k3 reads ${FORMAT}`);
  if (body.trunk !== format || body.group !== GROUP) bad(`holds a ${body.trunk} trunk in groups of ${body.group}, asked for ${format} in groups of ${GROUP}`);
  if (body.fingerprint !== fingerprint(ckpt)) bad(`packed from another model (config or tensors differ from ${ckpt.dir})`);
  const stale = staleReason(body.shards, stamps(ckpt), "the trunk was packed");
  if (stale) bad(`packed from other shard bytes (${stale})`);
  const dataEnd = body.dataEnd;
  if (dataEnd + hlen + TAIL !== fileBytes) bad(`${fileBytes} bytes, the header describes ${dataEnd + hlen + TAIL} (bytes added or cut)`);
  // Every trunk tensor exactly once, where the layout rule puts it (a pack that names other
  // offsets or formats is not one this k3 wrote).
  const want = packLayout(ckpt.config, trunkUnitEntries(ckpt).map((l) => l.map((e): TrunkTensor => ({ name: e.name, file: e.file, offset: e.offset, bytes: e.bytes, dtype: e.dtype, shape: e.shape }))), format, path);
  if (want.dataEnd !== dataEnd) bad(`data section ends at ${dataEnd}, expected ${want.dataEnd}`);
  const got = JSON.stringify(body.tensors);
  const expect = JSON.stringify(want.tensors.map((list) => list.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, offset: t.offset, bytes: t.bytes, scales: t.scales }))));
  if (got !== expect) bad("its tensor table differs from what this model's trunk packs to");
  const crcs: Record<string, unknown> = body.crcs ?? {};
  return { path, format, tensors: want.tensors, fileBytes, blockCrc: (key) => (typeof crcs[key] === "number" ? (crcs[key] as number) : undefined) };
}

/**
 * The planner's figures for a trunk format: the exact trunk, the pack when one was made, else what
 * the pack would be (`packed: false`: for `k3 plan` before `k3 pack`, same figures as the file).
 */
export function trunkSlots(ckpt: Checkpoint, format: TrunkFormat, pieces: PieceOptions = {}): { slots: StreamSlots; packed: boolean | null } {
  if (format === "bf16") return { slots: streamSlots(ckpt, pieces), packed: null };
  const path = candidatePaths(ckpt, format).find((p) => existsSync(p));
  if (path) return { slots: streamSlots(ckpt, { ...pieces, tensors: loadPack(ckpt, format).tensors }), packed: true };
  const exact = trunkUnitEntries(ckpt).map((l) => l.map((e): TrunkTensor => ({ name: e.name, file: e.file, offset: e.offset, bytes: e.bytes, dtype: e.dtype, shape: e.shape })));
  return { slots: streamSlots(ckpt, { ...pieces, tensors: packLayout(ckpt.config, exact, format, "(not packed yet)").tensors }), packed: false };
}

/** The same from the config alone (`k3 plan --config --index --trunk int4`). */
export function metadataTrunkSlots(cfg: ModelConfig, format: TrunkFormat): StreamSlots {
  return metadataSlots(cfg, format === "bf16" ? {} : { tensors: packLayout(cfg, specTrunkTensors(cfg), format).tensors });
}
