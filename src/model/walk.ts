// The matrices of each trunk unit, in the order the forward pass (forward.ts) multiplies by them:
// a view of the trunk table (src/checkpoint/shapes.ts), where each matrix's shape, dtype, walk
// position and sliceable / packable role are written once. The streaming provider reads the trunk
// in this order, a few hundred MB at a time (src/memory/pieces.ts): while one piece computes, the
// next is read. The order is a promise the forward pass keeps (test/pieces.test.ts, "the walk",
// records its requests); breaking it costs speed, never bits (a piece that is not in memory is
// read on demand).
import { LM_MODEL_PREFIX, unitMatrices } from "../checkpoint/shapes.ts";
import type { ModelConfig } from "../checkpoint/types.ts";

export interface WalkMatrix {
  /** Name below `layers.L.` (layerMatrices), or the full name (unitWalk). */
  suffix: string;
  /** May be split into row slices (every matmul computes its rows independently). False for a
   *  matrix a kernel needs whole: MLA's kv_b (k3_mla_attend reads it per head). */
  sliceable: boolean;
  /** May be stored in a compact trunk (int8/int4, `k3 pack`): every matrix a matmul multiplies
   *  by. Not MLA's kv_b, which k3_mla_attend reads as bf16. */
  packable: boolean;
}

/** Layer L's matrices in forward order (names below `layers.L.`): attention, then the FFN (dense,
 *  or latent down → shared experts → latent up). */
export function layerMatrices(cfg: ModelConfig, L: number): WalkMatrix[] {
  const prefix = `${LM_MODEL_PREFIX}layers.${L}.`;
  return unitWalk(cfg, L).map((m) => ({ ...m, suffix: m.suffix.slice(prefix.length) }));
}

/** Unit u's matrices in forward order, full names: layer u's, or for u = numLayers the head's
 *  (lm_head, one row of x per pass: the last token only). */
export function unitWalk(cfg: ModelConfig, u: number): WalkMatrix[] {
  return unitMatrices(cfg, u).map((s) => ({ suffix: s.name, ...s.matrix }));
}
