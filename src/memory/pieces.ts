// Trunk pieces (issue 16): what the trunk ring reads at once. A trunk unit (a layer's non-expert
// tensors, or the head) is split into
//   - its core: every small tensor (norms, router gate and bias, convs, gates, AttnRes
//     projections), held for the whole layer and read through a ring of its own, and
//   - matrix pieces: the unit's matrices in forward order (src/model/walk.ts), grouped up to
//     `pieceBytes`; a sliceable matrix larger than that is cut into row slices.
// So the ring's slots are a few hundred MB whatever the largest layer (K3's dense layer 0 is
// 2.34 GB, lm_head 2.35 GB): two slots always fit, the next piece is read while one computes, and
// the memory this frees pins more trunk. Bits are unchanged: every matmul computes its rows
// independently, in the same order, whichever slice they come from (k3.h).
//
// Row slices follow a fixed grid of "blocks" (a matrix over `blockBytes` is cut every
// floor(blockBytes / row bytes) rows; everything else is one block), independent of the piece
// size: a block is also the unit of the trunk's checksums (`k3 verify --record`, pack files), so
// a piece of any size is checked block by block before use.
import type { ModelConfig, TensorEntry } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import type { ByteRange } from "./readplan.ts";
import { unitWalk, type WalkMatrix } from "../model/walk.ts";
import type { WeightDType } from "../model/weights.ts";

/** Default target size of a matrix piece. */
export const DEFAULT_PIECE_BYTES = 256 * 2 ** 20;
/** Row-slice grid of large matrices (and the trunk's checksum granularity). */
export const DEFAULT_BLOCK_BYTES = 32 * 2 ** 20;
/** `pieceBytes` value for one matrix piece per unit: the layout before issue 16 (benchmarks). */
export const WHOLE_UNITS = Infinity;


/** One trunk tensor where the bytes live: a shard (exact) or a pack file (packed). */
export interface TrunkTensor {
  name: string;
  file: string;
  offset: number; // absolute byte offset of the data
  bytes: number;
  dtype: WeightDType;
  shape: number[];
  /** Q8/Q4: the f32 group scales [rows][cols/32], in the same file. */
  scales?: { offset: number; bytes: number };
}

/** A byte range to read: a block's data, or its scales. `key` names it inside a read plan. */
export interface Part {
  key: string;
  file: string;
  offset: number;
  bytes: number;
}

/** Rows [r0, r1) of one tensor (all of it for a tensor that is not cut): the checksum unit. */
export interface TrunkBlock {
  key: string; // the tensor's name, or "name@r0" for a row block
  tensor: string;
  r0: number;
  r1: number;
  parts: Part[]; // data, then scales (Q8/Q4)
}

export interface TrunkPiece {
  id: number; // position in the walk (unit by unit: core, then matrix pieces)
  unit: number; // layer, or numLayers for the head
  kind: "core" | "matrix";
  blocks: TrunkBlock[];
  bytes: number; // payload bytes (what a read of this piece counts)
}

/** Rows [r0, r1) of a matrix held by one piece. */
export interface MatrixSegment {
  piece: number;
  r0: number;
  r1: number;
  blocks: TrunkBlock[]; // consecutive row blocks (contiguous in the file and in the slot)
}

export interface TrunkLayout {
  pieces: TrunkPiece[];
  /** Core piece id of each unit ([numLayers + 1]). */
  coreOf: number[];
  tensors: Map<string, TrunkTensor>;
  /** Matrix name → its segments in row order (one segment: the matrix is whole in one piece). */
  matrices: Map<string, MatrixSegment[]>;
  pieceBytes: number;
  blockBytes: number;
}

export interface PieceOptions {
  pieceBytes?: number;
  blockBytes?: number;
}

const totalBytes = (t: TrunkTensor): number => t.bytes + (t.scales?.bytes ?? 0);

/** Row blocks of a tensor: whole unless it is a sliceable matrix over `blockBytes`. */
export function blocksOf(t: TrunkTensor, sliceable: boolean, blockBytes: number): TrunkBlock[] {
  const rows = t.shape[0] ?? 1;
  const whole = (): TrunkBlock[] => [
    { key: t.name, tensor: t.name, r0: 0, r1: rows, parts: [{ key: t.name, file: t.file, offset: t.offset, bytes: t.bytes }, ...(t.scales ? [{ key: `${t.name}#scales`, file: t.file, offset: t.scales.offset, bytes: t.scales.bytes }] : [])] },
  ];
  if (!sliceable || t.shape.length !== 2 || totalBytes(t) <= blockBytes) return whole();
  const rowData = t.bytes / rows;
  const rowScales = (t.scales?.bytes ?? 0) / rows;
  const per = Math.max(1, Math.floor(blockBytes / (rowData + rowScales)));
  const out: TrunkBlock[] = [];
  for (let r0 = 0; r0 < rows; r0 += per) {
    const r1 = Math.min(rows, r0 + per);
    const key = `${t.name}@${r0}`;
    const parts: Part[] = [{ key, file: t.file, offset: t.offset + r0 * rowData, bytes: (r1 - r0) * rowData }];
    if (t.scales) parts.push({ key: `${key}#scales`, file: t.file, offset: t.scales.offset + r0 * rowScales, bytes: (r1 - r0) * rowScales });
    out.push({ key, tensor: t.name, r0, r1, parts });
  }
  return out;
}

const blockBytesOf = (b: TrunkBlock): number => b.parts.reduce((a, p) => a + p.bytes, 0);

/**
 * Split the trunk into pieces. `units[u]` lists unit u's tensors (layers 0..N−1, then the head).
 * Deterministic: the same tensors and options give the same pieces (the planner and the streaming
 * provider each call this and must agree).
 */
export function buildTrunkLayout(cfg: ModelConfig, units: TrunkTensor[][], opts: PieceOptions = {}): TrunkLayout {
  const pieceBytes = opts.pieceBytes ?? DEFAULT_PIECE_BYTES;
  const blockBytes = opts.blockBytes ?? DEFAULT_BLOCK_BYTES;
  if (!(pieceBytes > 0) || !(blockBytes > 0)) throw new K3Error("USAGE", `trunk piece and block sizes must be > 0 bytes, got ${pieceBytes} and ${blockBytes}`);
  const N = cfg.numLayers;
  if (units.length !== N + 1) throw new K3Error("INTERNAL", `trunk tensors for ${units.length} units, config has ${N} layers + the head`);
  const pieces: TrunkPiece[] = [];
  const coreOf: number[] = [];
  const tensors = new Map<string, TrunkTensor>();
  const matrices = new Map<string, MatrixSegment[]>();

  units.forEach((list, u) => {
    const byName = new Map(list.map((t) => [t.name, t]));
    for (const t of list) tensors.set(t.name, t);
    const walk: WalkMatrix[] = unitWalk(cfg, u);
    const mats = walk.map((w) => {
      const t = byName.get(w.suffix);
      if (!t) throw new K3Error("INTERNAL", `trunk matrix ${w.suffix} is missing from unit ${u}`);
      return { t, sliceable: w.sliceable };
    });
    const isMatrix = new Set(mats.map((x) => x.t.name));
    const core = list.filter((t) => !isMatrix.has(t.name)).sort((a, b) => (a.name < b.name ? -1 : 1));
    const newPiece = (kind: TrunkPiece["kind"]): TrunkPiece => {
      const p: TrunkPiece = { id: pieces.length, unit: u, kind, blocks: [], bytes: 0 };
      pieces.push(p);
      return p;
    };
    const add = (p: TrunkPiece, b: TrunkBlock) => {
      p.blocks.push(b);
      p.bytes += blockBytesOf(b);
    };
    const corePiece = newPiece("core");
    coreOf[u] = corePiece.id;
    for (const t of core) for (const b of blocksOf(t, false, blockBytes)) add(corePiece, b);

    // Matrices in walk order: whole ones grouped while the piece stays ≤ pieceBytes; a sliceable
    // matrix over pieceBytes is cut at block boundaries into as few balanced slices as fit, each
    // starting a piece (the matrices after it may join its last piece).
    let cur: TrunkPiece | null = null;
    for (const { t, sliceable } of mats) {
      const size = totalBytes(t);
      const segs: MatrixSegment[] = [];
      if (size <= pieceBytes || !sliceable) {
        if (!cur || cur.bytes + size > pieceBytes) cur = newPiece("matrix");
        const blocks = blocksOf(t, sliceable, blockBytes);
        for (const b of blocks) add(cur, b);
        segs.push({ piece: cur.id, r0: 0, r1: t.shape[0] ?? 1, blocks });
        if (size > pieceBytes) cur = null; // an unsliceable giant fills its piece alone
      } else {
        // Balanced slices on a fresh piece: as few as fit (each ≤ pieceBytes), blocks spread evenly.
        const blocks = blocksOf(t, true, blockBytes);
        const perSlice = Math.max(1, Math.floor(pieceBytes / blockBytesOf(blocks[0]!)));
        const n = Math.ceil(blocks.length / perSlice);
        for (let i = 0; i < n; i++) {
          const mine = blocks.slice(Math.floor((i * blocks.length) / n), Math.floor(((i + 1) * blocks.length) / n));
          cur = newPiece("matrix");
          for (const b of mine) add(cur, b);
          segs.push({ piece: cur.id, r0: mine[0]!.r0, r1: mine.at(-1)!.r1, blocks: mine });
        }
      }
      matrices.set(t.name, segs);
    }
  });
  return { pieces, coreOf, tensors, matrices, pieceBytes, blockBytes };
}

/** The exact trunk: every unit's tensors as the shards hold them. */
export function exactTrunkTensors(unitEntries: TensorEntry[][]): TrunkTensor[][] {
  return unitEntries.map((list) => list.map((e) => ({ name: e.name, file: e.file, offset: e.offset, bytes: e.bytes, dtype: e.dtype, shape: e.shape })));
}

/** Every part of a piece, as the read planner takes them (name = the part's key). */
export function pieceParts(p: TrunkPiece): ByteRange[] {
  return p.blocks.flatMap((b) => b.parts.map((x) => ({ name: x.key, file: x.file, offset: x.offset, bytes: x.bytes })));
}

/** "layer 3, piece 2 of 7 (self_attn.q_proj.weight, …)": for errors and `k3 plan`. */
export function describePiece(layout: TrunkLayout, id: number, numLayers: number): string {
  const p = layout.pieces[id]!;
  const where = p.unit === numLayers ? "the head" : `layer ${p.unit}`;
  const names = [...new Set(p.blocks.map((b) => b.tensor))];
  return `${where}'s ${p.kind === "core" ? "core" : "matrix piece"} ${id} (${names.slice(0, 2).join(", ")}${names.length > 2 ? ", …" : ""})`;
}

/** CRC-32C of a block's parts, in order (data, then scales), as they sit in a buffer at `base`
 *  (`offsets`: part key → offset, from the read plan that filled it). */
export function blockCrc(k: Kernels, b: TrunkBlock, offsets: Map<string, number>, base: number): number {
  let crc = 0;
  for (const p of b.parts) {
    const off = offsets.get(p.key);
    if (off === undefined) throw new K3Error("INTERNAL", `${p.key} is not in the buffer being checked`);
    crc = k.k3_crc32c(crc, (base + off) as any, p.bytes);
  }
  return crc;
}
