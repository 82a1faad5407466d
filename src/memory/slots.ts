// Read plans of the streamed things and the buffer sizes they need, computed once per checkpoint:
// the streaming provider allocates exactly these and the planner sums exactly these
// (`streamSlots` → PlanInput.slots), whatever the layout (a release-like checkpoint needs one
// aligned read per run of adjacent tensors; a broken layout needs more, and larger buffers).
// Without a checkpoint (`k3 plan --config --index`), `metadataSlots` bounds them from the config:
// every part its own aligned read.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { expertTensorNames, globalSpecs, layerTrunkSpecs, expertBytes as expertBytesOf, tensorBytes } from "../checkpoint/shapes.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { buildTrunkLayout, exactTrunkTensors, pieceParts, type PieceOptions, type TrunkLayout, type TrunkTensor } from "./pieces.ts";
import type { StreamSlots } from "./plan.ts";
import { ALIGN, buildReadPlan, type ReadPlan } from "./readplan.ts";
import { isHeadTensor, trunkUnitEntries } from "./units.ts";

/** Largest single read a trunk piece is submitted as: a device queue's threads share one piece. */
export const TRUNK_READ_BYTES = 64 * 2 ** 20;
/** … when its shards have copies on other drives: finer, so a piece's reads spread evenly over
 *  every copy (a 256 MiB piece in 32 reads over 3 drives: 11/11/10, against 2/1/1 of 64 MiB). */
export const MIRRORED_READ_BYTES = 8 * 2 ** 20;

/** An O_DIRECT read of `bytes` at any offset: widened to 4096 on both ends. */
const alignedBuffer = (bytes: number): number => Math.ceil(bytes / ALIGN) * ALIGN + ALIGN;

/** The trunk's pieces for this checkpoint (the exact trunk unless `tensors` names another: a pack). */
export function trunkLayout(ckpt: Checkpoint, opts: PieceOptions & { tensors?: TrunkTensor[][] } = {}): TrunkLayout {
  return buildTrunkLayout(ckpt.config, opts.tensors ?? exactTrunkTensors(trunkUnitEntries(ckpt)), opts);
}

/** Read plan of every piece: [pieces.length], in reads of at most `maxRead` bytes. */
export function pieceReadPlans(layout: TrunkLayout, maxRead = TRUNK_READ_BYTES): ReadPlan[] {
  return layout.pieces.map((p) => buildReadPlan(pieceParts(p), maxRead));
}

/** Read plan of expert `e` of `layer` (six tensors, usually one read). */
export function expertReadPlan(ckpt: Checkpoint, layer: number, e: number): ReadPlan {
  return buildReadPlan(
    expertTensorNames(layer, e).map((n) => {
      const t = ckpt.tensors.get(n);
      if (!t) throw new K3Error("CHECKPOINT", `tensor ${n} is missing`);
      return t;
    }),
  );
}

/** One expert slot: the largest read plan any expert needs. */
export function expertSlotBytes(ckpt: Checkpoint): number {
  const cfg = ckpt.config;
  const x = ckpt.layout.experts;
  // An adjacent run of b bytes at any offset fits in ceil(b/4096)·4096 + 4096 aligned bytes; only
  // experts whose tensors are not adjacent need their read plan built.
  const adjacentBound = alignedBuffer(x.bytes);
  let max = 0;
  for (let L = cfg.firstKDense; L < cfg.numLayers; L++)
    for (let e = 0; e < cfg.numExperts; e++) {
      const s = (L - x.firstMoeLayer) * cfg.numExperts + e;
      max = Math.max(max, x.adjacent[s] ? adjacentBound : expertReadPlan(ckpt, L, e).slotBytes);
    }
  return Math.ceil(max / ALIGN) * ALIGN;
}

/** The planner's figures from a trunk layout and its read plans (or bounds on them). */
function slotsOf(layout: TrunkLayout, slotBytes: (i: number) => number, expertBytes: number): StreamSlots {
  return {
    pieces: layout.pieces.map((p, i) => ({ unit: p.unit, kind: p.kind, bytes: p.bytes, slotBytes: slotBytes(i) })),
    expertBytes,
    pieceBytes: layout.pieceBytes,
  };
}

/** What the streaming provider will allocate per piece and per expert slot, for the planner. */
export function streamSlots(ckpt: Checkpoint, opts: PieceOptions & { tensors?: TrunkTensor[][] } = {}): StreamSlots {
  const layout = trunkLayout(ckpt, opts);
  const plans = pieceReadPlans(layout);
  return slotsOf(layout, (i) => plans[i]!.slotBytes, expertSlotBytes(ckpt));
}

/** The trunk's tensors as the config implies them (no files: sizes only). */
export function specTrunkTensors(cfg: ModelConfig): TrunkTensor[][] {
  const spec = (s: { name: string; dtype: TrunkTensor["dtype"]; shape: number[] }, bytes: number): TrunkTensor => ({ name: s.name, file: "", offset: 0, bytes, dtype: s.dtype, shape: s.shape });
  const units: TrunkTensor[][] = [];
  for (let L = 0; L < cfg.numLayers; L++) units.push(layerTrunkSpecs(cfg, L).map((s) => spec(s, tensorBytes(s))));
  units.push(globalSpecs(cfg).filter((s) => isHeadTensor(s.name)).map((s) => spec(s, tensorBytes(s))));
  return units;
}

/**
 * Bounds on the same figures from the config alone: every part of a piece (a tensor, a row block,
 * a pack's scales) counted as its own aligned read, which no layout exceeds.
 */
export function metadataSlots(cfg: ModelConfig, opts: PieceOptions & { tensors?: TrunkTensor[][] } = {}): StreamSlots {
  const layout = buildTrunkLayout(cfg, opts.tensors ?? specTrunkTensors(cfg), opts);
  const bound = (i: number) => pieceParts(layout.pieces[i]!).reduce((a, p) => a + alignedBuffer(p.bytes), 0);
  return slotsOf(layout, bound, alignedBuffer(expertBytesOf(cfg)));
}
