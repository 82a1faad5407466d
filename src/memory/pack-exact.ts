// The exact trunk pack (issue 25, `k3 pack --trunk exact`): every bf16 matrix the forward pass
// multiplies by coded as BX4 (kernels/k3.h: 12 bits per weight plus rare escapes, decoded to
// exactly the release's bf16 values), every other trunk tensor copied. This file is its layout and
// its writer; the container — header, tie to the shard bytes, CRC per block, where the file lives,
// loading — is pack.ts's, shared with the lossy int8/int4 packs. docs/TRUNK.md, "The exact trunk".
//
// Per unit: its matrices in walk order, then its core tensors by name, among them each BX4
// matrix's escape table `name#escapes` (u32: the [rows + 1] index, then the entries: kernels/k3.h).
// A table's size is known only once its matrix is coded, so a unit's core follows its matrices:
// the writer streams the matrices block by block, then writes the core. Every block is decoded
// back and compared with the shard's bytes before it is written.
import type { ModelConfig } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { K3_STATUS, type Kernels } from "../kernels.ts";
import { CBuffers, type Addr, type CBuf } from "../model/cmem.ts";
import { unitWalk } from "../model/walk.ts";
import { writeAll } from "../files.ts";
import { cView, walkPackBlocks } from "./pack-io.ts";
import { blocksOf, DEFAULT_BLOCK_BYTES, type TrunkTensor } from "./pieces.ts";

/** Bytes of one BX4 row record of `cols` weights (kernels/k3_bx4_internal.h). */
export const bx4RowBytes = (cols: number): number => 16 + 8 * Math.ceil(cols / 16) + cols;
/** The core tensor holding a BX4 matrix's escape table. */
export const escapesName = (matrix: string): string => `${matrix}#escapes`;
/** An escape's column is 24 bits (kernels/k3.h). */
const MAX_COLS = 2 ** 24;

const canCode = (t: { dtype: string; shape: number[] }) => t.dtype === "BF16" && t.shape.length === 2 && t.shape[1]! >= 1 && t.shape[1]! < MAX_COLS;

interface ExactUnit {
  matrices: TrunkTensor[]; // walk order, in the file first
  core: TrunkTensor[]; // by name, after the matrices
  end: number;
  /** Walk flags of each matrix (sliceable: cut into row blocks). */
  sliceable: Map<string, boolean>;
}

/** Unit u of an exact pack starting at byte `start`; `escapes` gives each coded matrix's escape
 *  count (absent: 0, what `k3 plan` assumes before packing). */
function exactUnit(cfg: ModelConfig, u: number, list: TrunkTensor[], start: number, file: string, escapes: ReadonlyMap<string, number>): ExactUnit {
  const byName = new Map(list.map((t) => [t.name, t]));
  const walk = unitWalk(cfg, u).filter((m) => byName.has(m.suffix));
  const inWalk = new Set(walk.map((m) => m.suffix));
  const core: TrunkTensor[] = list.filter((t) => !inWalk.has(t.name)).map((t) => ({ name: t.name, file, offset: 0, bytes: t.bytes, dtype: t.dtype, shape: t.shape }));
  const matrices: TrunkTensor[] = [];
  let off = start;
  for (const m of walk) {
    const t = byName.get(m.suffix)!;
    if (m.packable && canCode(t)) {
      const [rows, cols] = t.shape as [number, number];
      matrices.push({ name: t.name, file, offset: off, bytes: rows * bx4RowBytes(cols), dtype: "BX4", shape: t.shape });
      const n = escapes.get(t.name) ?? 0;
      core.push({ name: escapesName(t.name), file, offset: 0, bytes: 4 * (rows + 1 + n), dtype: "BX4E", shape: [rows + 1 + n] });
    } else matrices.push({ name: t.name, file, offset: off, bytes: t.bytes, dtype: t.dtype, shape: t.shape });
    off += matrices.at(-1)!.bytes;
  }
  core.sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const t of core) (t.offset = off), (off += t.bytes);
  return { matrices, core, end: off, sliceable: new Map(walk.map((m) => [m.suffix, m.sliceable])) };
}

/** Where every trunk tensor goes in an exact pack (the tables list each unit's core first, like
 *  the other packs'). */
export function exactLayout(cfg: ModelConfig, exact: TrunkTensor[][], start: number, file: string, escapes: ReadonlyMap<string, number>): { tensors: TrunkTensor[][]; dataEnd: number } {
  let off = start;
  const tensors = exact.map((list, u) => {
    const unit = exactUnit(cfg, u, list, off, file, escapes);
    off = unit.end;
    return [...unit.core, ...unit.matrices];
  });
  return { tensors, dataEnd: off };
}

/** Each coded matrix's escape count, read back from a layout's escape tables. */
export function escapeCounts(tensors: readonly { name: string; shape: number[] }[]): Map<string, number> {
  const rows = new Map(tensors.map((t) => [t.name, t.shape[0] ?? 0]));
  const out = new Map<string, number>();
  for (const t of tensors)
    if (t.name.endsWith("#escapes")) {
      const m = t.name.slice(0, -"#escapes".length);
      out.set(m, (t.shape[0] ?? 0) - (rows.get(m) ?? 0) - 1);
    }
  return out;
}

export interface ExactData {
  tensors: TrunkTensor[][];
  dataEnd: number;
  crcs: Record<string, number>;
  sources: Record<string, number>;
  codedMatrices: number;
  codedWeights: number;
  codedBytes: number; // row records + escape tables of the coded matrices
  escapes: number;
}

/** One matrix's escape table as the encoder builds it block by block. */
class EscapeTable {
  index: Uint32Array;
  private entries: number[] = [];
  constructor(rows: number) {
    this.index = new Uint32Array(rows + 1);
  }
  get count(): number {
    return this.entries.length;
  }
  /** A block's local index (rows + 1 values from 0) and entries. */
  add(r0: number, local: Uint32Array, rows: number, ent: Uint32Array, n: number): void {
    const base = this.entries.length;
    for (let i = 0; i <= rows; i++) this.index[r0 + i] = base + local[i]!;
    for (let i = 0; i < n; i++) this.entries.push(ent[i]!);
  }
  bytes(): Uint8Array {
    const all = new Uint32Array(this.index.length + this.entries.length);
    all.set(this.index);
    all.set(this.entries, this.index.length);
    return new Uint8Array(all.buffer);
  }
}

/** C buffers for coding one block: the records, its local escape index and entries (grown on
 *  demand), and the decoded check. */
class BlockCoder {
  private mem: CBuffers;
  private out: CBuf;
  private idx: CBuf;
  private ent: CBuf;
  private back: CBuf;
  constructor(
    private k: Kernels,
    maxRows: number,
    maxOut: number,
    maxWeights: number,
  ) {
    this.mem = new CBuffers(k);
    this.out = this.mem.alloc(maxOut, "exact pack: coded rows");
    this.idx = this.mem.alloc(4 * (maxRows + 1), "exact pack: escape index");
    this.ent = this.mem.alloc(4 * Math.max(1024, maxWeights >> 8), "exact pack: escapes");
    this.back = this.mem.alloc(2 * maxWeights, "exact pack: decoded check");
  }

  /** Codes rows × cols bf16 at `src`, checks that they decode back bit for bit; the records, the
   *  local escape index and the entries. */
  code(name: string, r0: number, src: Addr, rows: number, cols: number): { out: CBuf; bytes: number; index: Uint32Array; entries: Uint32Array; n: number } {
    let n = Number(this.k.k3_bx4_encode(src, rows, cols, this.out.ptr, this.idx.ptr, this.ent.ptr, this.ent.bytes / 4, 0));
    if (n > this.ent.bytes / 4) {
      this.ent = this.mem.alloc(4 * n, "exact pack: escapes");
      n = Number(this.k.k3_bx4_encode(src, rows, cols, this.out.ptr, this.idx.ptr, this.ent.ptr, n, 0));
    }
    if (n < 0) throw new K3Error("INTERNAL", `k3_bx4_encode refused ${name} rows ${r0}..${r0 + rows - 1} (${rows}×${cols}, status ${n})`);
    const st = this.k.k3_bx4_decode(this.out.ptr, this.idx.ptr, this.ent.ptr, n, rows, cols, this.back.ptr);
    if (st !== K3_STATUS.ok || !Buffer.from(cView(this.back.ptr, 2 * rows * cols)).equals(cView(src, 2 * rows * cols)))
      throw new K3Error("INTERNAL", `${name} rows ${r0}..${r0 + rows - 1}: the coded rows do not decode to the shard's bytes (status ${st}); the pack was not written`);
    const u32 = (b: CBuf, count: number) => new Uint32Array(cView(b.ptr, 4 * count).slice().buffer);
    return { out: this.out, bytes: rows * bx4RowBytes(cols), index: u32(this.idx, rows + 1), entries: u32(this.ent, n), n };
  }

  free(): void {
    this.mem.free();
  }
}

const grid = (t: TrunkTensor, sliceable: boolean) => blocksOf(t, sliceable, DEFAULT_BLOCK_BYTES);

/** The largest BX4 block of the checksum grid: its rows, coded bytes and weights (the coder's
 *  buffers are sized for it). */
function largestBlock(cfg: ModelConfig, exact: TrunkTensor[][]): { maxRows: number; maxOut: number; maxWeights: number } {
  let maxRows = 1;
  let maxOut = 64;
  let maxWeights = 32;
  exact.forEach((list, u) => {
    const unit = exactUnit(cfg, u, list, 0, "", new Map());
    for (const t of unit.matrices.filter((m) => m.dtype === "BX4"))
      for (const b of grid(t, unit.sliceable.get(t.name) ?? false)) {
        maxRows = Math.max(maxRows, b.r1 - b.r0);
        maxOut = Math.max(maxOut, b.parts[0]!.bytes);
        maxWeights = Math.max(maxWeights, (b.r1 - b.r0) * t.shape[1]!);
      }
  });
  return { maxRows, maxOut, maxWeights };
}

/**
 * The data section of an exact pack from byte `start` of `out`: the exact trunk read block by
 * block from the shards (pack-io.ts), matrices coded (and checked), the rest copied, each unit's
 * core last. Returns the layout it wrote (the one exactLayout gives for the escape counts found)
 * and, per block (pieces.ts's grid), the CRC-32C of its packed bytes and of the shard rows it was
 * made from — the two tables every pack carries (pack.ts); an escape table has the first only.
 */
export function writeExactData(k: Kernels, cfg: ModelConfig, exact: TrunkTensor[][], start: number, out: number, onProgress: (doneBytes: number) => void): ExactData {
  const escapes = new Map<string, number>();
  const crcs: Record<string, number> = {};
  const sources: Record<string, number> = {};
  const { maxRows, maxOut, maxWeights } = largestBlock(cfg, exact);
  const coder = new BlockCoder(k, maxRows, maxOut, maxWeights);
  const stats = { codedMatrices: 0, codedWeights: 0, codedBytes: 0, escapes: 0 };
  let off = start;
  let done = 0;
  const tensors: TrunkTensor[][] = [];
  try {
    exact.forEach((list, u) => {
      const unit = exactUnit(cfg, u, list, off, "", escapes); // matrix offsets do not depend on the counts
      const tables = new Map<string, EscapeTable>();
      walkPackBlocks(k, cfg, exact, [unit.matrices], ({ t, b, src: from }, src) => {
        sources[b.key] = k.k3_crc32c(0, src!.ptr, from!.bytes);
        if (t.dtype === "BX4") {
          const table = tables.get(t.name) ?? tables.set(t.name, new EscapeTable(t.shape[0]!)).get(t.name)!;
          const c = coder.code(t.name, b.r0, src!.ptr, b.r1 - b.r0, t.shape[1]!);
          table.add(b.r0, c.index, b.r1 - b.r0, c.entries, c.n);
          writeAll(out, cView(c.out.ptr, c.bytes), b.parts[0]!.offset);
          crcs[b.key] = k.k3_crc32c(0, c.out.ptr, c.bytes);
        } else {
          writeAll(out, src!.view, b.parts[0]!.offset);
          crcs[b.key] = sources[b.key]!;
        }
        onProgress((done += from!.bytes));
      });
      for (const t of unit.matrices.filter((m) => m.dtype === "BX4")) {
        const table = tables.get(t.name)!;
        escapes.set(t.name, table.count);
        stats.codedMatrices++;
        stats.codedWeights += t.shape[0]! * t.shape[1]!;
        stats.codedBytes += t.bytes + 4 * (table.index.length + table.count);
        stats.escapes += table.count;
      }
      const final = exactUnit(cfg, u, list, off, "", escapes);
      walkPackBlocks(k, cfg, exact, [final.core.filter((t) => t.dtype !== "BX4E")], ({ b, src: from }, src) => {
        writeAll(out, src!.view, b.parts[0]!.offset);
        crcs[b.key] = sources[b.key] = k.k3_crc32c(0, src!.ptr, from!.bytes);
        onProgress((done += from!.bytes));
      });
      for (const t of final.core.filter((c) => c.dtype === "BX4E")) {
        const bytes = tables.get(t.name.slice(0, -"#escapes".length))!.bytes();
        writeAll(out, bytes, t.offset);
        crcs[t.name] = k.k3_crc32c(0, bytes, bytes.byteLength);
      }
      tensors.push([...final.core, ...final.matrices]);
      off = final.end;
    });
  } finally {
    coder.free();
  }
  return { tensors, dataEnd: off, crcs, sources, ...stats };
}
