// StreamingWeights: the WeightProvider that reads the release in place within a RAM budget. It
// only composes the parts, each with one job:
//   ShardReader     (reader.ts)       open shards, the I/O pool, reads in flight, counters
//   TrunkRing       (trunk-ring.ts)   pinned units + the ring that streams the rest
//   EmbeddingRows   (embed-rows.ts)   one embedding row per token, read on demand
//   ExpertSlotCache (expert-cache.ts) the routed experts' slots, eviction, lookahead reads
//   ReadChecks      (read-checks.ts)  --verify: every landed read checked before use
// Buffer sizes come from slots.ts, the same figures the planner sums.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { LM_HEAD_NAME, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import type { Kernels } from "../kernels.ts";
import { CBuffers, type Addr } from "../model/cmem.ts";
import type { ExpertRef, LayerRef, TensorRef, WeightProvider, WeightStats } from "../model/weights.ts";
import { EmbeddingRows } from "./embed-rows.ts";
import { ExpertSlotCache } from "./expert-cache.ts";
import type { PolicyName } from "./policy/index.ts";
import { checksumChecks, type ReadChecks } from "./read-checks.ts";
import { ShardReader } from "./reader.ts";
import { TrunkRing } from "./trunk-ring.ts";
import type { Checksums } from "./verify.ts";

export interface StreamOptions {
  /** Trunk units (layer indices; numLayers = the head) kept resident. */
  pinnedUnits: number[];
  /** Ring slots for streamed units (≥ 1 when any unit is streamed). */
  ringSlots: number;
  expertSlots: number;
  /** Read the next streamed unit while the current one computes (needs ringSlots ≥ 2). */
  prefetch: boolean;
  /** Ask for O_DIRECT; the probe decides, and stats say what happened. */
  direct: boolean;
  /** I/O threads; undefined joins the process's pool as it runs (see joinIoPool). */
  ioThreads?: number;
  policy: PolicyName;
  /** Recorded CRC-32Cs (`k3 verify --record`): every read is checked against them. */
  checksums?: Checksums;
  /** Progress of loading the pinned units at open, in bytes (called with 0 first). */
  onProgress?: (doneBytes: number, totalBytes: number) => void;
}

export class StreamingWeights implements WeightProvider {
  private mem: CBuffers;
  private reader: ShardReader;
  private trunk: TrunkRing;
  private rows: EmbeddingRows;
  private experts: ExpertSlotCache;
  private checks?: ReadChecks;
  private readonly headUnit: number;

  constructor(k: Kernels, ckpt: Checkpoint, opts: StreamOptions) {
    const mem = new CBuffers(k);
    const reader = new ShardReader(k, ckpt, { direct: opts.direct, ioThreads: opts.ioThreads });
    const checks = opts.checksums && checksumChecks(k, ckpt, opts.checksums);
    let trunk: TrunkRing | undefined;
    try {
      trunk = new TrunkRing(mem, reader, ckpt, {
        pinnedUnits: opts.pinnedUnits,
        ringSlots: opts.ringSlots,
        prefetch: opts.prefetch,
        check: checks && ((u, plan, base) => checks.trunkUnit(u, plan, base)),
        onProgress: opts.onProgress,
      });
      this.rows = new EmbeddingRows(k, mem, reader, ckpt, checks && ((id, row, bytes) => checks.embedRow(id, row, bytes)));
      this.experts = new ExpertSlotCache(mem, reader, ckpt, {
        slots: opts.expertSlots,
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
    this.checks = checks;
    this.headUnit = ckpt.config.numLayers;
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
    return this.trunk.layerRef(L, this.trunk.acquire(L));
  }

  releaseLayer(L: number): void {
    this.trunk.release(L);
  }

  peekLayer(L: number): LayerRef | null {
    const base = this.trunk.peek(L);
    return base === null ? null : this.trunk.layerRef(L, base);
  }

  setHeadNext(yes: boolean): void {
    this.trunk.headNext = yes;
  }

  head(): { lmHead: TensorRef; norm: TensorRef; outResProj: TensorRef; outResNorm: TensorRef } {
    const u = this.headUnit;
    const base = this.trunk.acquire(u);
    const t = (name: string) => this.trunk.tensor(u, base, name);
    return {
      lmHead: t(LM_HEAD_NAME),
      norm: t(`${LM_MODEL_PREFIX}norm.weight`),
      outResProj: t(`${LM_MODEL_PREFIX}output_attn_res_proj.weight`),
      outResNorm: t(`${LM_MODEL_PREFIX}output_attn_res_norm.weight`),
    };
  }

  /** The head's slot is released once the logits are computed. */
  releaseHead(): void {
    this.trunk.release(this.headUnit);
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
      directIo: this.reader.directIo,
      ioMode: this.reader.ioMode,
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
