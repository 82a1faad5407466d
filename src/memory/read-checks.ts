// Checks of what the streaming provider reads, before the model sees a byte. Each hook throws
// K3Error VERIFY naming what failed, and counts the time it took.
//   - `--verify`: every read — trunk pieces, experts, embedding rows — against the CRC-32Cs that
//     `k3 verify --record` wrote (src/memory/verify.ts); a packed trunk's pieces against the
//     pack's own (checksumChecks);
//   - a packed trunk without `--verify`: each piece the first time it lands in this engine, against
//     the pack's own CRC-32Cs (firstLandingChecks). A pack is k3's own file and carries a checksum
//     per block, so a flipped byte in it is never used; the cost is one CRC-32C pass over the pack
//     per engine (SSE4.2: ~10 GB/s), paid as pieces land (the pinned ones at open). Later reads of
//     a piece are not checked again: a pack changed under a running engine, or a read that returns
//     other bytes than the disk holds, is what `--verify` (every landing) is for. The release's
//     shards carry no checksums: without `--verify` nothing of them is checked.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { expertTensorNames, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import type { Addr } from "../model/cmem.ts";
import { blockCrc, describePiece, type TrunkLayout } from "./pieces.ts";
import type { ReadPlan } from "./readplan.ts";
import { payloadCrc, type Checksums } from "./verify.ts";

export interface ReadChecks {
  /** Trunk piece `id` of the layout landed at `base` following `plan`: each of its blocks. */
  trunkPiece(id: number, plan: ReadPlan, base: number): void;
  /** Expert `e` of `layer` landed at `base` following `plan`. */
  expert(layer: number, e: number, plan: ReadPlan, base: number): void;
  /** Embedding row `id` (bf16, `bytes` long) was read to `row`. */
  embedRow(id: number, row: Addr, bytes: number): void;
  /** Time spent checking, ms. */
  readonly ms: number;
  /** Payload bytes checked (and found as recorded). */
  readonly bytes: number;
}

const hex = (x: number | undefined) => (x === undefined ? "nothing" : x.toString(16));

/** Trunk pieces checked block by block against `want` at every landing; time and bytes counted. */
class PieceChecks implements Pick<ReadChecks, "trunkPiece" | "ms" | "bytes"> {
  ms = 0;
  bytes = 0;
  constructor(
    protected readonly k: Kernels,
    private readonly layout: TrunkLayout,
    private readonly numLayers: number,
    private readonly want: (key: string) => number | undefined,
  ) {}

  trunkPiece(id: number, plan: ReadPlan, base: number): void {
    const t0 = performance.now();
    try {
      for (const b of this.layout.pieces[id]!.blocks) {
        const crc = blockCrc(this.k, b, plan.offsets, base);
        const recorded = this.want(b.key);
        if (recorded === undefined || crc !== recorded)
          throw new K3Error("VERIFY", `${b.tensor}${b.key === b.tensor ? "" : ` rows ${b.r0}..${b.r1 - 1}`} (in ${describePiece(this.layout, id, this.numLayers)}) fails its checksum: read ${hex(crc)}, recorded ${hex(recorded)}`);
      }
    } finally {
      this.ms += performance.now() - t0;
    }
    this.bytes += plan.payloadBytes;
  }

  /** f's result, its time counted. */
  protected timed<T>(f: () => T): T {
    const t0 = performance.now();
    try {
      return f();
    } finally {
      this.ms += performance.now() - t0;
    }
  }
}

/** `--verify`: everything, at every landing (the header of this file). */
class ChecksumChecks extends PieceChecks implements ReadChecks {
  constructor(k: Kernels, layout: TrunkLayout, numLayers: number, trunkCrc: (key: string) => number | undefined, private readonly sums: Checksums) {
    super(k, layout, numLayers, trunkCrc);
  }

  expert(layer: number, e: number, plan: ReadPlan, base: number): void {
    const crc = this.timed(() => payloadCrc(this.k, plan, base));
    const want = this.sums.experts.get(`${layer}:${e}`);
    if (want === undefined || crc !== want)
      throw new K3Error("VERIFY", `expert ${e} of layer ${layer} (${expertTensorNames(layer, e).join(", ")}) fails its checksum: read ${hex(crc)}, recorded ${hex(want)}`);
    this.bytes += plan.payloadBytes;
  }

  embedRow(id: number, row: Addr, rowBytes: number): void {
    const crc = this.timed(() => this.k.k3_crc32c(0, row, rowBytes));
    const want = this.sums.embedRows[id];
    if (want === undefined || crc !== want)
      throw new K3Error("VERIFY", `embedding row ${id} (${LM_MODEL_PREFIX}embed_tokens.weight) fails its checksum: read ${hex(crc)}, recorded ${hex(want)}`);
    this.bytes += rowBytes;
  }
}

/**
 * The hooks for one engine. Trunk blocks are checked against `trunkCrc` when given (a packed
 * trunk's own header), else against the recorded exact trunk (`sums.trunk`).
 */
export function checksumChecks(k: Kernels, ckpt: Checkpoint, sums: Checksums, layout: TrunkLayout, trunkCrc?: (key: string) => number | undefined): ReadChecks {
  return new ChecksumChecks(k, layout, ckpt.config.numLayers, trunkCrc ?? ((key) => sums.trunk.get(key)), sums);
}

/** A packed trunk's pieces, each checked the first time it lands against the pack's own CRC-32Cs
 *  (the header of this file says why and what it leaves to `--verify`). */
class FirstLandingChecks extends PieceChecks {
  private readonly checked: Uint8Array;
  constructor(k: Kernels, layout: TrunkLayout, numLayers: number, packCrc: (key: string) => number | undefined) {
    super(k, layout, numLayers, packCrc);
    this.checked = new Uint8Array(layout.pieces.length);
  }

  override trunkPiece(id: number, plan: ReadPlan, base: number): void {
    if (this.checked[id]) return;
    super.trunkPiece(id, plan, base);
    this.checked[id] = 1; // only once it passed: a failed piece is checked again if it is read again
  }
}

export function firstLandingChecks(k: Kernels, layout: TrunkLayout, numLayers: number, packCrc: (key: string) => number | undefined): Pick<ReadChecks, "trunkPiece" | "ms" | "bytes"> {
  return new FirstLandingChecks(k, layout, numLayers, packCrc);
}
