// RAM budgets for tests that need a particular plan on a generated checkpoint: the floor
// (nothing pinned, one ring slot, top-k expert slots) and the floor plus a second ring slot (the
// reader may run ahead, the lookahead finds layers in memory). Sized from the same figures the
// engine plans with (the checkpoint's read plans), so the plan is exactly the one named.
import { openCheckpoint } from "../../src/checkpoint/catalogue.ts";
import { floorBytes, planInputFromCensus, type PlanInput } from "../../src/memory/plan.ts";
import { streamSlots } from "../../src/memory/slots.ts";

/** The planner's input for `dir` at a budget (context 4096 and chunk 32 unless given). */
export function planInputFor(dir: string, budgetBytes: number, opts: { chunk?: number; context?: number } = {}): PlanInput {
  const ck = openCheckpoint(dir);
  return planInputFromCensus(ck.config, ck.layout.census, budgetBytes, opts.context ?? 4096, 1, opts.chunk ?? 32, streamSlots(ck));
}

/** Bytes of the floor plan (ringSlots 1) or of the floor plus a second ring slot (ringSlots 2). */
export function streamingBudget(dir: string, opts: { chunk?: number; context?: number; ringSlots?: 1 | 2 } = {}): number {
  const input = planInputFor(dir, 0, opts);
  const second = (opts.ringSlots ?? 1) === 2 ? Math.max(...input.slots!.unitBytes) : 0;
  return floorBytes(input) + second;
}
