// StreamingWeights: the WeightProvider that reads the release in place within a RAM budget. It
// only composes the parts, each with one job:
//   ShardReader     (reader.ts)       open shards and copies, a read queue per device, routing, counters
//   StreamedTrunk   (trunk.ts)        pinned trunk pieces + the rings that stream the rest
//   EmbeddingRows   (embed-rows.ts)   one embedding row per token, read on demand
//   ExpertSlotCache (expert-cache.ts) the routed experts' slots, eviction, lookahead reads
//   ReadChecks      (read-checks.ts)  --verify: every landed read checked before use; a packed
//                                     trunk's pieces, the first time each lands, without it
// Buffer sizes come from slots.ts, the same figures the planner sums.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { LM_HEAD_NAME, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import { DEFAULT_BLOCK_BYTES, type PieceOptions, type TrunkTensor } from "./pieces.ts";
import type { Kernels } from "../kernels.ts";
import { CBuffers, type Addr } from "../model/cmem.ts";
import type { ExpertRef, LayerRef, TensorRef, WeightProvider, WeightStats } from "../model/weights.ts";
import { EmbeddingRows } from "./embed-rows.ts";
import { ExpertSlotCache } from "./expert-cache.ts";
import type { PolicyName } from "./policy/index.ts";
import { checksumChecks, firstLandingChecks, type ReadChecks } from "./read-checks.ts";
import { ShardReader } from "./reader.ts";
import { MIRRORED_READ_BYTES, TRUNK_READ_BYTES, trunkLayout } from "./slots.ts";
import { StreamedTrunk } from "./trunk.ts";
import type { Checksums } from "./verify.ts";
import type { DeviceOf } from "./devices.ts";
import type { MirrorCopies } from "./mirrors.ts";

export interface StreamOptions {
  /** Trunk pieces (ids in walk order, src/memory/pieces.ts) kept resident. */
  pinnedPieces: number[];
  /** Ring slots for streamed matrix pieces (≥ 1 when any is streamed). */
  ringSlots: number;
  /** Ring slots for streamed cores (≥ 1 when any is streamed). */
  coreSlots: number;
  expertSlots: number;
  /** Read the next streamed piece while the current one computes (needs ringSlots ≥ 2). */
  prefetch: boolean;
  /** How the trunk is cut into pieces (the planner must have used the same). */
  pieces?: PieceOptions;
  /** A compact trunk (`k3 pack`): its tensors per unit, the files they live in and the CRC-32C of
   *  each block (each piece is checked against them when it first lands); default the shards'
   *  exact trunk. */
  trunk?: { tensors: TrunkTensor[][]; files: { file: string; bytes: number }[]; blockCrc: (key: string) => number | undefined };
  /** Ask for O_DIRECT; the probe decides, and stats say what happened. */
  direct: boolean;
  /** Threads of each device's read queue (default DEFAULT_IO_THREADS). */
  ioThreads?: number;
  /** Checked copies of shards on other drives (`--mirror`, src/memory/mirrors.ts). */
  mirrors?: MirrorCopies;
  /** Spare expert buffers a late expert read may be hedged into (with mirrors; the plan holds them). */
  hedgeBuffers?: number;
  /** Groups files into devices another way (tests); default: by the disk behind each file. */
  deviceOf?: DeviceOf;
  /** A read is late after this many times its predicted time (reader.ts DEFAULT_HEDGE_AFTER). */
  hedgeAfter?: number;
  policy: PolicyName;
  /** Recorded CRC-32Cs (`k3 verify --record`): every read is checked against them. */
  checksums?: Checksums;
  /** Progress of loading the pinned units at open, in bytes (called with 0 first). */
  onProgress?: (doneBytes: number, totalBytes: number) => void;
}

export class StreamingWeights implements WeightProvider {
  private mem: CBuffers;
  private reader: ShardReader;
  private trunk: StreamedTrunk;
  private rows: EmbeddingRows;
  private experts: ExpertSlotCache;
  private checks?: Pick<ReadChecks, "ms" | "bytes">;

  constructor(k: Kernels, ckpt: Checkpoint, opts: StreamOptions) {
    const mem = new CBuffers(k);
    const reader = new ShardReader(k, ckpt, {
      direct: opts.direct,
      ioThreads: opts.ioThreads,
      extraFiles: opts.trunk?.files,
      mirrors: opts.mirrors,
      deviceOf: opts.deviceOf,
      hedgeAfter: opts.hedgeAfter,
    });
    let trunk: StreamedTrunk | undefined;
    try {
      const layout = trunkLayout(ckpt, { ...opts.pieces, tensors: opts.trunk?.tensors });
      // --verify: the exact trunk's blocks against `k3 verify --record`, a pack's against its own
      // header, at every landing; without it a pack's blocks the first time they land.
      const checks = opts.checksums && checksumChecks(k, ckpt, opts.checksums, layout, opts.trunk?.blockCrc);
      // (A pack's checksums are on the default block grid: the test-only grids of other sizes have none.)
      const packGrid = layout.blockBytes === DEFAULT_BLOCK_BYTES;
      const trunkChecks = checks ?? (opts.trunk && packGrid ? firstLandingChecks(k, layout, ckpt.config.numLayers, opts.trunk.blockCrc) : undefined);
      this.checks = checks ?? trunkChecks;
      trunk = new StreamedTrunk(mem, reader, layout, ckpt.config.numLayers, {
        pinned: opts.pinnedPieces,
        matrixSlots: opts.ringSlots,
        coreSlots: opts.coreSlots,
        prefetch: opts.prefetch,
        readBytes: reader.mirrored ? MIRRORED_READ_BYTES : TRUNK_READ_BYTES,
        check: trunkChecks && ((id, plan, base) => trunkChecks.trunkPiece(id, plan, base)),
        onProgress: opts.onProgress,
      });
      this.rows = new EmbeddingRows(k, mem, reader, ckpt, checks && ((id, row, bytes) => checks.embedRow(id, row, bytes)));
      this.experts = new ExpertSlotCache(mem, reader, ckpt, {
        slots: opts.expertSlots,
        spares: reader.mirrored ? (opts.hedgeBuffers ?? 0) : 0,
        policy: opts.policy,
        check: checks && ((layer, e, plan, base) => checks.expert(layer, e, plan, base)),
      });
    } catch (err) {
      // Nothing of the expert cache is in flight yet; the ring may have a read running.
      trunk?.close();
      reader.close();
      mem.free();
      throw err;
    }
    this.mem = mem;
    this.reader = reader;
    this.trunk = trunk;
  }

  /** Read the pinned trunk pieces (StreamedTrunk.loadPinned): yields as each lands; must finish
   *  before the first forward pass. The constructor allocates and reads none of them. */
  *loadPinned(): Generator<void> {
    yield* this.trunk.loadPinned();
  }

  /** C memory this provider holds (pinned units, ring, expert slots, the row buffer). */
  get allocatedBytes(): number {
    return this.mem.totalBytes;
  }

  get ioThreads(): number {
    return this.reader.ioThreads;
  }

  embedRow(id: number, dst: Addr): void {
    this.rows.read(id, dst);
  }

  acquireLayer(L: number): LayerRef {
    if (L === 0) this.experts.epoch++;
    return this.trunk.acquireLayer(L);
  }

  releaseLayer(L: number): void {
    this.trunk.releaseLayer(L);
  }

  peekLayer(L: number): LayerRef | null {
    return this.trunk.peekLayer(L);
  }

  setHeadNext(yes: boolean): void {
    this.trunk.headNext = yes;
  }

  head(): { lmHead: TensorRef; norm: TensorRef; outResProj: TensorRef; outResNorm: TensorRef } {
    const t = this.trunk.acquireHead();
    return {
      lmHead: t(LM_HEAD_NAME),
      norm: t(`${LM_MODEL_PREFIX}norm.weight`),
      outResProj: t(`${LM_MODEL_PREFIX}output_attn_res_proj.weight`),
      outResNorm: t(`${LM_MODEL_PREFIX}output_attn_res_norm.weight`),
    };
  }

  /** The head's slot is released once the logits are computed. */
  releaseHead(): void {
    this.trunk.releaseHead();
  }

  requestExperts(L: number, experts: number[]): void {
    this.experts.request(L, experts);
  }

  nextExpert(L: number): { expert: number; ref: ExpertRef } {
    return this.experts.next(L);
  }

  releaseExperts(_L: number): void {
    this.experts.release();
  }

  hintExperts(L: number, experts: number[]): void {
    this.experts.hint(L, experts);
  }

  stats(): WeightStats {
    const x = this.experts.counters;
    return {
      trunkBytesRead: this.trunk.bytesRead + this.rows.bytesRead,
      expertBytesRead: x.bytesRead,
      reads: this.reader.reads,
      expertRequests: x.requests,
      expertHits: x.hits,
      lookaheadIssued: x.lookaheadIssued,
      lookaheadUsed: x.lookaheadUsed,
      ioWaitMs: this.reader.waitMs,
      verifyMs: this.checks?.ms ?? 0,
      verifiedBytes: this.checks?.bytes ?? 0,
      extraReads: this.reader.extraReads,
      extraBytesRead: this.reader.extraBytes,
      hedgesIssued: this.reader.hedgesIssued,
      hedgesWon: this.reader.hedgesWon,
      retries: this.reader.retries,
      directIo: this.reader.directIo,
      ioMode: this.reader.ioMode,
      devices: this.reader.deviceStats(),
    };
  }

  close(): void {
    // Drain every read in flight before freeing the buffers they write into.
    this.trunk.close();
    this.experts.close();
    this.reader.close();
    this.mem.free();
  }
}
