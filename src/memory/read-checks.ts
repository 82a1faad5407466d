// `--verify`: every read the streaming provider lands is checked against the CRC-32Cs that
// `k3 verify --record` wrote (src/memory/verify.ts), before the model sees a byte. One hook per
// kind of read; each throws K3Error VERIFY naming what failed, and counts the time it took.
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

/**
 * The hooks for one engine. Trunk blocks are checked against `trunkCrc` when given (a packed
 * trunk's own header), else against the recorded exact trunk (`sums.trunk`).
 */
export function checksumChecks(k: Kernels, ckpt: Checkpoint, sums: Checksums, layout: TrunkLayout, trunkCrc?: (key: string) => number | undefined): ReadChecks {
  let ms = 0;
  let bytes = 0;
  const numLayers = ckpt.config.numLayers;
  const want = trunkCrc ?? ((key: string) => sums.trunk.get(key));
  const timed = <T>(f: () => T): T => {
    const t0 = performance.now();
    try {
      return f();
    } finally {
      ms += performance.now() - t0;
    }
  };
  return {
    get ms() {
      return ms;
    },
    get bytes() {
      return bytes;
    },
    trunkPiece(id, plan, base) {
      for (const b of layout.pieces[id]!.blocks) {
        const crc = timed(() => blockCrc(k, b, plan.offsets, base));
        const recorded = want(b.key);
        if (recorded === undefined || crc !== recorded)
          throw new K3Error("VERIFY", `${b.tensor}${b.key === b.tensor ? "" : ` rows ${b.r0}..${b.r1 - 1}`} (in ${describePiece(layout, id, numLayers)}) fails its checksum: read ${hex(crc)}, recorded ${hex(recorded)}`);
      }
      bytes += plan.payloadBytes;
    },
    expert(layer, e, plan, base) {
      const crc = timed(() => payloadCrc(k, plan, base));
      const want = sums.experts.get(`${layer}:${e}`);
      if (want === undefined || crc !== want)
        throw new K3Error("VERIFY", `expert ${e} of layer ${layer} (${expertTensorNames(layer, e).join(", ")}) fails its checksum: read ${hex(crc)}, recorded ${hex(want)}`);
      bytes += plan.payloadBytes;
    },
    embedRow(id, row, rowBytes) {
      const crc = timed(() => k.k3_crc32c(0, row, rowBytes));
      const want = sums.embedRows[id];
      if (want === undefined || crc !== want)
        throw new K3Error("VERIFY", `embedding row ${id} (${LM_MODEL_PREFIX}embed_tokens.weight) fails its checksum: read ${hex(crc)}, recorded ${hex(want)}`);
      bytes += rowBytes;
    },
  };
}
