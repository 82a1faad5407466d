// Read plans of the streamed things and the buffer sizes they need, computed once per checkpoint:
// the streaming provider allocates exactly these and the planner sums exactly these
// (`streamSlots` → PlanInput.slots), whatever the layout (a release-like checkpoint needs one
// aligned read per unit and per expert; a broken layout needs several, and larger buffers).
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { expertTensorNames } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import type { StreamSlots } from "./plan.ts";
import { ALIGN, buildReadPlan, type ReadPlan } from "./readplan.ts";
import { trunkUnitEntries } from "./units.ts";

/** Read plan of each trunk unit: [numLayers + 1], the head last. */
export function unitReadPlans(ckpt: Checkpoint): ReadPlan[] {
  return trunkUnitEntries(ckpt).map((list) => buildReadPlan(list));
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
  const adjacentBound = Math.ceil(x.bytes / ALIGN) * ALIGN + ALIGN;
  let max = 0;
  for (let L = cfg.firstKDense; L < cfg.numLayers; L++)
    for (let e = 0; e < cfg.numExperts; e++) {
      const s = (L - x.firstMoeLayer) * cfg.numExperts + e;
      max = Math.max(max, x.adjacent[s] ? adjacentBound : expertReadPlan(ckpt, L, e).slotBytes);
    }
  return Math.ceil(max / ALIGN) * ALIGN;
}

/** What the streaming provider will allocate per unit and per expert slot, for the planner. */
export function streamSlots(ckpt: Checkpoint): StreamSlots {
  return { unitBytes: unitReadPlans(ckpt).map((p) => p.slotBytes), expertBytes: expertSlotBytes(ckpt) };
}
