// The streamed trunk: two rings over the trunk's pieces (pieces.ts, trunk-ring.ts).
//  - cores: one per unit, acquired with the layer (acquireLayer … releaseLayer) and held for all
//    of it; the next layer's core is read meanwhile, so the router lookahead finds it in memory.
//  - matrix pieces: acquired when the forward pass asks for a matrix (LayerRef.t). A matrix's
//    address stays valid until the pass asks for another matrix (or releases the layer): every
//    kernel call uses at most one matrix, and the pass asks for each right before its call.
//    Moving to a matrix of another piece releases the previous piece, so its slot takes the next
//    read while this one computes.
import { LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import { at, type CBuffers } from "../model/cmem.ts";
import type { EscapeTable, LayerRef, MatrixSlice, TensorRef } from "../model/weights.ts";
import { escapesName } from "./pack-exact.ts";
import { describePiece, type MatrixSegment, type TrunkLayout } from "./pieces.ts";
import type { ReadPlan } from "./readplan.ts";
import type { ShardReader } from "./reader.ts";
import { pieceReadPlans } from "./slots.ts";
import { PieceRing } from "./trunk-ring.ts";

export interface TrunkOptions {
  /** Piece ids kept resident. */
  pinned: number[];
  /** Ring slots for streamed matrix pieces (≥ 1 when any is streamed). */
  matrixSlots: number;
  /** Ring slots for streamed cores (≥ 1 when any is streamed). */
  coreSlots: number;
  /** Read ahead while a piece computes (needs slots ≥ 2). */
  prefetch: boolean;
  /** Called when a piece's bytes landed, before any use (--verify); throws to refuse them. */
  check?: (piece: number, plan: ReadPlan, base: number) => void;
  /** Largest read a piece is submitted as (default TRUNK_READ_BYTES; finer with mirrors). */
  readBytes?: number;
  /** Progress of loading the pinned pieces at open, in bytes (called with 0 first): pieces
   *  differ in size by 1000×, so a count of pieces would stall on the big ones. */
  onProgress?: (doneBytes: number, totalBytes: number) => void;
}

export class StreamedTrunk {
  private cores: PieceRing;
  private matrices: PieceRing;
  private plans: ReadPlan[];
  private readonly N: number;
  /** The matrix piece the forward pass holds now (−1: none), and its base address. */
  private current = -1;
  private currentBase = 0;

  constructor(
    mem: CBuffers,
    reader: ShardReader,
    private layout: TrunkLayout,
    numLayers: number,
    opts: TrunkOptions,
  ) {
    this.N = numLayers;
    this.plans = pieceReadPlans(layout, opts.readBytes);
    const plans = new Map(this.plans.map((p, i) => [i, p]));
    const pinned = new Set(opts.pinned);
    const describe = (id: number) => describePiece(layout, id, numLayers);
    const totalBytes = layout.pieces.reduce((n, p) => n + (pinned.has(p.id) ? this.plans[p.id]!.payloadBytes : 0), 0);
    let landedBytes = 0;
    this.startProgress = () => opts.onProgress?.(0, totalBytes);
    const progress = (bytes: number) => opts.onProgress?.((landedBytes += bytes), totalBytes);
    const ring = (kind: "core" | "matrix", slots: number) =>
      new PieceRing(mem, reader, { pieces: layout.pieces.filter((p) => p.kind === kind), plans, pinned, slots, prefetch: opts.prefetch, headUnit: numLayers, describe, check: opts.check }, progress);
    this.cores = ring("core", opts.coreSlots);
    try {
      this.matrices = ring("matrix", opts.matrixSlots);
    } catch (err) {
      this.cores.close();
      throw err;
    }
  }

  private startProgress: () => void;

  /** Read the pinned pieces (cores, then matrices): yields as each lands; must finish before the
   *  first acquire. The constructor allocates the rings and reads nothing. */
  *loadPinned(): Generator<void> {
    this.startProgress();
    yield* this.cores.loadPinned();
    yield* this.matrices.loadPinned();
  }

  get bytesRead(): number {
    return this.cores.bytesRead + this.matrices.bytesRead;
  }

  set headNext(yes: boolean) {
    this.cores.headNext = yes;
    this.matrices.headNext = yes;
  }

  /** The matrix piece `id` in memory (switching from the previous one); its base address. */
  private useMatrixPiece(id: number): number {
    if (this.current === id) return this.currentBase;
    this.dropMatrix();
    this.currentBase = this.matrices.acquire(id);
    this.current = id;
    return this.currentBase;
  }

  private dropMatrix(): void {
    if (this.current >= 0) this.matrices.release(this.current);
    this.current = -1;
  }

  private sliceAt(seg: MatrixSegment, base: number): MatrixSlice {
    const offsets = this.plans[seg.piece]!.offsets;
    const b0 = seg.blocks[0]!;
    // Consecutive row blocks of one tensor are adjacent in the file, hence in the slot: check it,
    // since the kernel reads the segment's rows as one array.
    let expect = offsets.get(b0.parts[0]!.key)!;
    for (const b of seg.blocks) {
      if (offsets.get(b.parts[0]!.key) !== expect) throw new K3Error("INTERNAL", `row blocks of ${b.tensor} are not contiguous in their piece`);
      expect += b.parts[0]!.bytes;
    }
    const scalesKey = b0.parts[1]?.key;
    return { r0: seg.r0, r1: seg.r1, ptr: at(base, offsets.get(b0.parts[0]!.key)!), scales: scalesKey === undefined ? undefined : at(base, offsets.get(scalesKey)!) };
  }

  /** A matrix by full name: whole (one piece), or in row slices fetched one after another. A BX4
   *  matrix carries its escape table, which lives in the unit's core (held for the whole unit). */
  private matrix(name: string, segs: MatrixSegment[], u: number, coreBase: number): TensorRef {
    const t = this.layout.tensors.get(name)!;
    let escapes: EscapeTable | undefined;
    if (t.dtype === "BX4") {
      const e = this.coreTensor(u, coreBase, escapesName(name));
      escapes = { ptr: e.ptr, rows: t.shape[0]!, count: e.shape[0]! - t.shape[0]! - 1 };
    }
    if (segs.length === 1) {
      const s = this.sliceAt(segs[0]!, this.useMatrixPiece(segs[0]!.piece));
      return { name, ptr: s.ptr, scales: s.scales, escapes, dtype: t.dtype, shape: t.shape, bytes: t.bytes };
    }
    return {
      name,
      get ptr(): never {
        throw new K3Error("INTERNAL", `${name} is streamed in row slices: use rowSlices / slice()`);
      },
      dtype: t.dtype,
      shape: t.shape,
      bytes: t.bytes,
      escapes,
      rowSlices: segs.map((s) => ({ r0: s.r0, r1: s.r1 })),
      slice: (i: number) => ({ ...this.sliceAt(segs[i]!, this.useMatrixPiece(segs[i]!.piece)), escapes }),
    };
  }

  /** A core tensor of unit u at the core's base. */
  private coreTensor(u: number, coreBase: number, name: string): TensorRef {
    const core = this.layout.coreOf[u]!;
    const off = this.plans[core]!.offsets.get(name);
    const t = this.layout.tensors.get(name);
    if (off === undefined || !t) throw new K3Error("CHECKPOINT", `tensor ${name} is not part of ${describePiece(this.layout, core, this.N)}`);
    return { name, ptr: at(coreBase, off), dtype: t.dtype, shape: t.shape, bytes: t.bytes };
  }

  /** Tensor `name` of unit u: a core tensor at the core's base, or a matrix (acquired; not
   *  through a peek, which never waits). */
  private tensor(u: number, coreBase: number, name: string, peeked = false): TensorRef {
    const segs = this.layout.matrices.get(name);
    if (segs) {
      if (peeked) throw new K3Error("INTERNAL", `${name}: a matrix asked of a layer that was only peeked at`);
      return this.matrix(name, segs, u, coreBase);
    }
    return this.coreTensor(u, coreBase, name);
  }

  private ref(L: number, coreBase: number, peeked = false): LayerRef {
    const prefix = `${LM_MODEL_PREFIX}layers.${L}.`;
    return { layer: L, t: (suffix: string) => this.tensor(L, coreBase, prefix + suffix, peeked) };
  }

  /** Layer L's core in memory (blocking); matrices are fetched as the pass asks for them. */
  acquireLayer(L: number): LayerRef {
    return this.ref(L, this.cores.acquire(this.layout.coreOf[L]!));
  }

  releaseLayer(L: number): void {
    this.dropMatrix();
    this.cores.release(this.layout.coreOf[L]!);
  }

  /** Layer L's core tensors if its core is in memory now (never waits; no matrices). */
  peekLayer(L: number): LayerRef | null {
    const base = this.cores.peek(this.layout.coreOf[L]!);
    return base === null ? null : this.ref(L, base, true);
  }

  /** The head's core (blocking) and a way to its tensors by full name. */
  acquireHead(): (name: string) => TensorRef {
    const base = this.cores.acquire(this.layout.coreOf[this.N]!);
    return (name) => this.tensor(this.N, base, name);
  }

  releaseHead(): void {
    this.dropMatrix();
    this.cores.release(this.layout.coreOf[this.N]!);
  }

  close(): void {
    this.cores.close();
    this.matrices.close();
  }
}
