// Packed trunks: side files `k3 pack DIR --trunk FORMAT` writes and `--trunk FORMAT` on
// run/chat/serve/bench reads the trunk from. Routed experts (the released MXFP4) and embedding rows
// still come from the shards, exact. Two kinds:
//  - int8 / int4 (issue 16): opt-in and lossy (docs/TRUNK.md has the measured error): the trunk's
//    matrices group-quantised (kernels/k3_matmul_q.c: integers in groups of 32 columns, one f32
//    scale each), every other trunk tensor copied exactly;
//  - exact (issue 25, pack-exact.ts): the same model bit for bit, its matrices coded as BX4
//    (kernels/k3_bx4.c: 12 bits per weight plus escapes); engines choose it by default where it
//    reads fewer bytes (plan.ts chooseTrunk).
//
// The file: "K3PACK01" | data (from byte 4096: unit by unit; int8/int4: each unit's core tensors
// by name, then its matrices in forward order, each matrix's q then its scales; exact: the unit's
// matrices first, then its core with the escape tables; no padding, so a piece of consecutive
// matrices is one read) | header JSON | u64 LE header length | u32 LE CRC-32C of the header |
// 4 zero bytes | "K3PACK01".
// The header ties the file to the exact shard bytes it came from (each shard's stamp, as
// `k3 verify --record` records it: src/checkpoint/stamps.ts; a changed shard makes the pack stale,
// refused) and holds, per trunk block (pieces.ts's grid), two CRC-32Cs: of the block as packed
// (checked when the block first lands in an engine, and at every landing with `--verify`) and of
// the exact source rows it was made from (`k3 verify` reads them again from the shards: a shard
// edited with its mtime put back, which the stamp cannot see, makes the pack stale there).
// Nothing here is specific to int8/int4: the exact pack writes the same two tables (its escape
// tables, which are made from no single source block, carry the first only).
//
// Where: `k3-trunk-int4.k3pack` next to the model when that folder can take it, else (read-only
// folder, a Hugging Face download k3 must not write into) k3's cache folder ($XDG_CACHE_HOME/k3/
// packs/). Written to a temp file and renamed: never a partial pack.
import { closeSync, existsSync, readSync } from "node:fs";
import { basename, join } from "node:path";
import { cachePath, ensureCacheDir } from "../cache-dir.ts";
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { openRegularFile, writableDir, writeAll, writeFileAtomic } from "../files.ts";
import { K3_STATUS, loadKernels, type Kernels } from "../kernels.ts";
import type { Addr } from "../model/cmem.ts";
import { unitWalk } from "../model/walk.ts";
import { DEFAULT_BLOCK_BYTES, type Part, type PieceOptions, type TrunkBlock, type TrunkTensor } from "./pieces.ts";
import { escapeCounts, escapesName, exactLayout, writeExactData, type ExactData } from "./pack-exact.ts";
import { walkPackBlocks } from "./pack-io.ts";
import type { StreamSlots } from "./plan.ts";
import { metadataSlots, specTrunkTensors, streamSlots } from "./slots.ts";
import { trunkUnitEntries } from "./units.ts";
import { shardStamps, staleReason } from "../checkpoint/stamps.ts";

export type TrunkFormat = "bf16" | "int8" | "int4" | "exact";
export const TRUNK_FORMATS: readonly TrunkFormat[] = ["bf16", "int8", "int4", "exact"];
/** A trunk read from a pack file: lossy int8/int4, or the exact BX4 coding of the release's bf16. */
export type PackFormat = Exclude<TrunkFormat, "bf16">;
export const PACK_FORMATS: readonly PackFormat[] = ["int8", "int4", "exact"];
const MAGIC = "K3PACK01";
/** -2: per-block CRC-32Cs of the source rows too (-1: of the packed bytes only). */
const FORMAT = "k3-pack-2";
const DATA_START = 4096;
/** Group size of the quantised formats (k3.h). */
const GROUP = 32;
/** The exact format's matrix coding (kernels/k3.h). */
const CODING = "BX4";
/** Bytes after the header: its length, its CRC-32C, padding, the magic again. */
const TAIL = 24;

export interface PackedTrunk {
  path: string;
  format: PackFormat;
  /** Every trunk tensor per unit, where it lives in the pack. */
  tensors: TrunkTensor[][];
  fileBytes: number;
  /** Recorded CRC-32C of a trunk block (by key) as packed: checked as blocks land. */
  blockCrc: (key: string) => number | undefined;
  /** Recorded CRC-32C of the exact source rows a block was made from (`k3 verify`). */
  sourceCrc: (key: string) => number | undefined;
  /** A hash of every block's CRC-32C: the identity of the pack's content (not of where it lives),
   *  what states saved by an engine running this trunk are tied to. */
  contentHash: string;
}

/** The bits of a quantised format. */
const bitsOf = (f: "int8" | "int4"): 8 | 4 => (f === "int8" ? 8 : 4);

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
export function packLayout(cfg: ModelConfig, exact: TrunkTensor[][], format: PackFormat, file = "", escapes: ReadonlyMap<string, number> = new Map()): { tensors: TrunkTensor[][]; dataEnd: number } {
  if (format === "exact") return exactLayout(cfg, exact, DATA_START, file, escapes); // BX4: pack-exact.ts
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
  format: PackFormat;
  fileBytes: number;
  sourceBytes: number; // exact trunk bytes read
  packedMatrices: number;
  exactTensors: number;
  /** Weight error of the quantised matrices: √(Σ(w − q·s)² / Σw²) over all of them, and the
   *  worst single row's (0 for the exact trunk). */
  weightError: { rms: number; worstRow: number };
  /** The exact trunk's coding: matrices and weights coded, their bytes (rows + escape tables) per
   *  weight, the escapes among them; every block was decoded back and compared with the shards. */
  coded?: { matrices: number; weights: number; bytesPerWeight: number; escapes: number };
  ms: number;
}

/**
 * `k3 pack`: read the exact trunk once, write the pack (temp file, then rename). Next to the model
 * when its folder is writable and not a download, else k3's cache folder.
 */
export function writePack(k: Kernels, ckpt: Checkpoint, format: PackFormat, onProgress?: (doneBytes: number, totalBytes: number) => void): PackResult {
  const t0 = performance.now();
  const exact = trunkUnitEntries(ckpt).map((list) => list.map((e): TrunkTensor => ({ name: e.name, file: e.file, offset: e.offset, bytes: e.bytes, dtype: e.dtype, shape: e.shape })));
  const local = join(ckpt.dir, fileName(format));
  const path = !ckpt.download && writableDir(ckpt.dir) ? local : join(ensureCacheDir("packs"), basename(cachedPackPath(ckpt, format)));
  const totalBytes = exact.flat().reduce((a, t) => a + t.bytes, 0);
  const progress = (done: number) => onProgress?.(done, totalBytes);
  let data: PackedData | undefined;
  // A temp file renamed into place: a full disk leaves no partial pack; a directory, FIFO or
  // device at the pack's path is refused naming that path.
  writeFileAtomic(path, "the packed trunk", "IO", (out) => {
    writeAll(out, Buffer.from(MAGIC.padEnd(DATA_START, "\0")), 0);
    data = format === "exact" ? exactData(writeExactData(k, ckpt.config, exact, DATA_START, out, progress)) : writePackData(k, ckpt.config, exact, packLayout(ckpt.config, exact, format), format, out, progress);
    const { tensors, dataEnd } = data;
    const header = packHeader(ckpt, format, tensors, dataEnd, data.crcs, data.sources);
    const tail = Buffer.alloc(TAIL);
    tail.writeBigUInt64LE(BigInt(header.byteLength), 0);
    tail.writeUInt32LE(k.k3_crc32c(0, header, header.byteLength), 8);
    tail.write(MAGIC, 16, "latin1");
    writeAll(out, header, dataEnd);
    writeAll(out, tail, dataEnd + header.byteLength);
  });
  const { packedMatrices, err, coded, tensors } = data!;
  const weightError = coded ? { rms: 0, worstRow: 0 } : { rms: Math.sqrt(err[0]! / err[1]!), worstRow: Math.sqrt(err[2]!) };
  return { path, format, fileBytes: Bun.file(path).size, sourceBytes: totalBytes, packedMatrices, exactTensors: tensors.flat().length - packedMatrices, weightError, coded, ms: performance.now() - t0 };
}

/** What the exact writer reports, as the pack's result needs it (a coded matrix is two tensors:
 *  its rows and its escape table). */
function exactData(d: ExactData): PackedData {
  return { ...d, packedMatrices: 2 * d.codedMatrices, err: new Float64Array(3), coded: { matrices: d.codedMatrices, weights: d.codedWeights, bytesPerWeight: d.codedBytes / d.codedWeights, escapes: d.escapes } };
}

interface PackedData {
  /** The layout written. */
  tensors: TrunkTensor[][];
  dataEnd: number;
  /** CRC-32C of every block as written (pieces.ts's grid), by block key. */
  crcs: Record<string, number>;
  /** CRC-32C of the exact source rows of every block, by block key. */
  sources: Record<string, number>;
  /** Tensors not copied as they are: quantised matrices (int8/int4); BX4 matrices and their escape tables (exact). */
  packedMatrices: number;
  /** k3_quant_error's running sums over every quantised block: Σ(w − q·s)², Σw², the worst row's ratio. */
  err: Float64Array;
  coded?: PackResult["coded"];
}

/** The data section: every trunk tensor of `exact` read block by block from the shards, copied
 *  exactly or quantised, and written where `tensors` (its pack layout) puts it in `out`. */
function writePackData(k: Kernels, cfg: ModelConfig, exact: TrunkTensor[][], layout: { tensors: TrunkTensor[][]; dataEnd: number }, format: "int8" | "int4", out: number, onProgress: (doneBytes: number) => void): PackedData {
  const { tensors } = layout;
  const bits = bitsOf(format);
  const crcs: Record<string, number> = {};
  const sources: Record<string, number> = {};
  let doneBytes = 0;
  const err = new Float64Array(3);
  walkPackBlocks(k, cfg, exact, tensors, ({ t, b, src: from }, src, dst, view) => {
    if (!from || !src) throw new K3Error("INTERNAL", `${t.name}: no source tensor in the trunk`);
    sources[b.key] = k.k3_crc32c(0, src.ptr, from.bytes);
    if (!t.scales) {
      // Copied exactly (cores, MLA's kv_b, matrices whose columns are not whole groups).
      writeAll(out, src.view, b.parts[0]!.offset);
      crcs[b.key] = sources[b.key]!;
    } else {
      const n = b.r1 - b.r0;
      const [data, scales] = b.parts as [Part, Part];
      const st = k.k3_quantize_bf16(src.ptr, n, t.shape[1]!, bits, dst, ((dst as number) + data.bytes) as Addr);
      if (st === K3_STATUS.nonfinite) throw new K3Error("CHECKPOINT", `${t.name} rows ${b.r0}..${b.r1 - 1} hold NaN or infinite weights: this model cannot be packed (check it with k3 verify)`);
      if (st !== K3_STATUS.ok) throw new K3Error("INTERNAL", `k3_quantize_bf16 refused ${t.name} (${n}×${t.shape[1]}, status ${st})`);
      k.k3_quant_error(src.ptr, n, t.shape[1]!, bits, dst, ((dst as number) + data.bytes) as Addr, err);
      writeAll(out, view(dst, data.bytes), data.offset);
      writeAll(out, view((dst as number) + data.bytes, scales.bytes), scales.offset);
      crcs[b.key] = k.k3_crc32c(0, dst, data.bytes + scales.bytes);
    }
    doneBytes += from.bytes;
    onProgress(doneBytes);
  });
  return { ...layout, crcs, sources, packedMatrices: tensors.flat().filter((t) => t.scales).length, err };
}

export interface PackCheck {
  path: string;
  format: PackFormat;
  blocks: number;
  /** Bytes read: the pack's payload and the exact rows it was made from. */
  packBytes: number;
  sourceBytes: number;
  ms: number;
}

/**
 * `k3 verify` for a pack: every block read back from the pack and compared with its recorded CRC
 * (a flipped byte in the payload), and the exact rows it was made from read again from the shards
 * and compared with theirs (a shard edited with its mtime put back: the pack is stale there).
 * Throws K3Error VERIFY listing each block that differs (at most `maxListed`, the rest counted).
 */
export function verifyPack(k: Kernels, ckpt: Checkpoint, format: PackFormat, maxListed: number, onProgress?: (doneBytes: number, totalBytes: number) => void): PackCheck {
  const t0 = performance.now();
  const pack = loadPack(ckpt, format);
  const exact = trunkUnitEntries(ckpt).map((list) => list.map((e): TrunkTensor => ({ name: e.name, file: e.file, offset: e.offset, bytes: e.bytes, dtype: e.dtype, shape: e.shape })));
  const bad: string[] = [];
  const hex = (x: number | undefined) => (x === undefined ? "nothing" : x.toString(16));
  const where = (b: TrunkBlock) => `${b.tensor}${b.key === b.tensor ? "" : ` rows ${b.r0}..${b.r1 - 1}`}`;
  const total = exact.flat().reduce((a, t) => a + t.bytes, 0);
  const { fd: out } = openRegularFile(pack.path, "packed trunk", "CHECKPOINT");
  let blocks = 0;
  let packBytes = 0;
  let sourceBytes = 0;
  try {
    walkPackBlocks(k, ckpt.config, exact, pack.tensors, ({ b, src: from }, src, dst, view) => {
      blocks++;
      // (the exact pack's escape tables are made from no one block of the shards: payload only)
      const source = from && src ? k.k3_crc32c(0, src.ptr, from.bytes) : undefined;
      if (from && source !== pack.sourceCrc(b.key)) bad.push(`${where(b)}: made from other bytes of ${basename(from.file)} (they read ${hex(source)} now, ${hex(pack.sourceCrc(b.key))} when packed): the pack is stale`);
      let off = 0;
      for (const part of b.parts) {
        const got = readSync(out, view((dst as number) + off, part.bytes), 0, part.bytes, part.offset);
        if (got !== part.bytes) throw new K3Error("IO", `${pack.path}: short read of ${where(b)} at offset ${part.offset}`);
        off += part.bytes;
      }
      const crc = k.k3_crc32c(0, dst, off);
      if (crc !== pack.blockCrc(b.key)) bad.push(`${where(b)}: the packed bytes fail their checksum (read ${hex(crc)}, recorded ${hex(pack.blockCrc(b.key))})`);
      packBytes += off;
      sourceBytes += from?.bytes ?? 0;
      onProgress?.(sourceBytes, total);
    });
  } finally {
    closeSync(out);
  }
  if (bad.length)
    throw new K3Error("VERIFY", `${pack.path}: ${bad.length} block(s) of the ${format} trunk differ from what was packed`, [
      ...bad.slice(0, maxListed),
      ...(bad.length > maxListed ? [`… and ${bad.length - maxListed} more`] : []),
      `make it again: k3 pack ${ckpt.dir} --trunk ${format}`,
    ]);
  return { path: pack.path, format, blocks, packBytes, sourceBytes, ms: performance.now() - t0 };
}

/** The formats packed for this checkpoint (a pack file exists where loadPack looks). */
export function packedFormats(ckpt: Checkpoint): PackFormat[] {
  return TRUNK_FORMATS.filter((f): f is PackFormat => f !== "bf16" && candidatePaths(ckpt, f).some((p) => existsSync(p)));
}

/** The header JSON: the format, the model and shard bytes it was made from, the layout, the block CRCs. */
function packHeader(ckpt: Checkpoint, format: PackFormat, tensors: TrunkTensor[][], dataEnd: number, crcs: Record<string, number>, sources: Record<string, number>): Buffer {
  return Buffer.from(
    JSON.stringify({
      format: FORMAT,
      trunk: format,
      ...(format === "exact" ? { coding: CODING } : { group: GROUP }),
      blockBytes: DEFAULT_BLOCK_BYTES,
      model: ckpt.dir,
      fingerprint: fingerprint(ckpt),
      shards: shardStamps(ckpt),
      dataEnd,
      tensors: tensors.map((list) => list.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, offset: t.offset, bytes: t.bytes, scales: t.scales }))),
      crcs,
      sources,
    }),
  );
}

/**
 * The pack of `format` for this checkpoint, validated: magic, header, the model it was made for,
 * the shard bytes it was made from (any shard changed since: refused), every trunk tensor once,
 * inside the data section. K3Error CHECKPOINT naming the file and what is wrong; USAGE when none.
 */
export function loadPack(ckpt: Checkpoint, format: PackFormat): PackedTrunk {
  const pack = findPack(ckpt, format);
  if (!pack)
    throw new K3Error("USAGE", `no ${format} trunk packed for ${ckpt.dir}`, [`make one first: k3 pack ${ckpt.dir} --trunk ${format} (it reads the trunk once; the experts stay exact)`]);
  return pack;
}

/** The pack of `format` if one exists (undefined: none), validated as loadPack says. */
export function findPack(ckpt: Checkpoint, format: PackFormat): PackedTrunk | undefined {
  const path = candidatePaths(ckpt, format).find((p) => existsSync(p));
  if (!path) return undefined;
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
  if (body?.format === "k3-pack-1") bad(`made by an older k3 (k3-pack-1: no checksums of the shard bytes it came from, which \`k3 verify\` needs)`);
  if (body?.format !== FORMAT) bad(`format ${JSON.stringify(body?.format)}, this k3 reads ${FORMAT}`);
  if (body.trunk !== format) bad(`holds a ${body.trunk} trunk, asked for ${format}`);
  if (format === "exact" ? body.coding !== CODING : body.group !== GROUP) bad(format === "exact" ? `codes its matrices as ${body.coding}, this k3 reads ${CODING}` : `holds groups of ${body.group}, this k3 reads groups of ${GROUP}`);
  if (body.fingerprint !== fingerprint(ckpt)) bad(`packed from another model (config or tensors differ from ${ckpt.dir})`);
  const stale = staleReason(body.shards, shardStamps(ckpt), "the trunk was packed");
  if (stale) bad(`packed from other shard bytes (${stale})`);
  const dataEnd = body.dataEnd;
  if (dataEnd + hlen + TAIL !== fileBytes) bad(`${fileBytes} bytes, the header describes ${dataEnd + hlen + TAIL} (bytes added or cut)`);
  // Every trunk tensor exactly once, where the layout rule puts it (a pack that names other
  // offsets or formats is not one this k3 wrote).
  const exact = trunkUnitEntries(ckpt).map((l) => l.map((e): TrunkTensor => ({ name: e.name, file: e.file, offset: e.offset, bytes: e.bytes, dtype: e.dtype, shape: e.shape })));
  const want = packLayout(ckpt.config, exact, format, path, format === "exact" ? headerEscapes(body.tensors, bad) : undefined);
  if (want.dataEnd !== dataEnd) bad(`data section ends at ${dataEnd}, expected ${want.dataEnd}`);
  const got = JSON.stringify(body.tensors);
  const expect = JSON.stringify(want.tensors.map((list) => list.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, offset: t.offset, bytes: t.bytes, scales: t.scales }))));
  if (got !== expect) bad("its tensor table differs from what this model's trunk packs to");
  const crcs: Record<string, unknown> = body.crcs ?? {};
  const sources: Record<string, unknown> = body.sources ?? {};
  const num = (table: Record<string, unknown>, key: string) => (typeof table[key] === "number" ? (table[key] as number) : undefined);
  const contentHash = Bun.hash(JSON.stringify(crcs)).toString(16).padStart(16, "0");
  return { path, format, tensors: want.tensors, fileBytes, blockCrc: (key) => num(crcs, key), sourceCrc: (key) => num(sources, key), contentHash };
}

/** The exact pack's escape counts as its header gives them (each a whole number ≥ 0; the layout
 *  they imply is then compared with the header's, offset by offset). */
function headerEscapes(tensors: unknown, bad: (why: string) => never): Map<string, number> {
  if (!Array.isArray(tensors) || !tensors.every((l) => Array.isArray(l) && l.every((t) => t && typeof t.name === "string" && Array.isArray(t.shape)))) bad("its tensor table is not a list of tensors per unit");
  const counts = escapeCounts((tensors as { name: string; shape: number[] }[][]).flat());
  for (const [name, n] of counts) if (!Number.isSafeInteger(n) || n < 0) bad(`${escapesName(name)} holds ${n} escapes`);
  return counts;
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
