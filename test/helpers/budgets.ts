// RAM budgets for tests that need a particular plan on a generated checkpoint: the floor
// (nothing pinned, the rings at their minimum, top-k expert slots) and, for a layout of whole
// units (which may fall back to one matrix slot), the floor plus a second ring slot. Sized from
// the same figures the engine plans with (the checkpoint's read plans), so the plan is exactly
// the one named.
import { openCheckpoint } from "../../src/checkpoint/catalogue.ts";
import type { PieceOptions } from "../../src/memory/pieces.ts";
import { floorBytes, planInputFromCensus, type PlanInput } from "../../src/memory/plan.ts";
import { streamSlots } from "../../src/memory/slots.ts";
import { trunkSlots, type TrunkFormat } from "../../src/memory/pack.ts";

/** Pieces small enough to cut a tiny model's matrices into row slices (and lm_head into many). */
export const SPLIT_PIECES: PieceOptions = { pieceBytes: 8192, blockBytes: 2048 };

/** The planner's input for `dir` at a budget (context 4096 and chunk 32 unless given; the bf16
 *  trunk from the shards unless `trunk` names a pack). */
export function planInputFor(dir: string, budgetBytes: number, opts: { chunk?: number; context?: number; pieces?: PieceOptions; trunk?: TrunkFormat } = {}): PlanInput {
  const ck = openCheckpoint(dir);
  const slots = opts.trunk && opts.trunk !== "bf16" ? trunkSlots(ck, opts.trunk, opts.pieces).slots : streamSlots(ck, opts.pieces);
  return planInputFromCensus(ck.config, ck.layout.census, budgetBytes, opts.context ?? 4096, 1, opts.chunk ?? 32, slots);
}

/** Bytes of the floor plan, or (ringSlots 2, whole units) of the floor plus a second matrix slot. */
export function streamingBudget(dir: string, opts: { chunk?: number; context?: number; ringSlots?: 1 | 2; pieces?: PieceOptions; trunk?: TrunkFormat } = {}): number {
  const input = planInputFor(dir, 0, opts);
  const slots = input.slots!;
  const largest = Math.max(...slots.pieces.filter((p) => p.kind === "matrix").map((p) => p.slotBytes));
  const second = (opts.ringSlots ?? 1) === 2 && slots.pieceBytes === Infinity ? largest : 0;
  return floorBytes(input) + second;
}
