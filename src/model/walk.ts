// The matrices of each trunk unit, in the order the forward pass (forward.ts) multiplies by them.
// The streaming provider reads the trunk in this order, a few hundred MB at a time (src/memory/
// pieces.ts): while one piece computes, the next is read. The order is a promise the forward pass
// keeps (test/pieces.test.ts, "the walk", records its requests); breaking it costs speed, never
// bits (a piece that is not in memory is read on demand).
//
// A "matrix" here is a 2-D weight used whole by one kernel call (a matmul, or MLA's kv_b). Every
// other trunk tensor (norms, the router gate and bias, convs, gates, the AttnRes projections) is
// small and belongs to the unit's "core", held for the whole layer.
import { LM_HEAD_NAME } from "../checkpoint/shapes.ts";
import type { ModelConfig } from "../checkpoint/types.ts";

export interface WalkMatrix {
  /** Name below `layers.L.` (the full name for the head's lm_head). */
  suffix: string;
  /** May be split into row slices (every matmul computes its rows independently). False for a
   *  matrix a kernel needs whole: MLA's kv_b (k3_mla_attend reads it per head). */
  sliceable: boolean;
  /** May be stored in a compact trunk (int8/int4, `k3 pack`): every matrix a matmul multiplies
   *  by. Not MLA's kv_b, which k3_mla_attend reads as bf16. */
  packable: boolean;
}

const m = (suffix: string, exact = false): WalkMatrix => ({ suffix, sliceable: !exact, packable: !exact });

/** Layer L's matrices in forward order: attention, then the FFN (dense, or router → latent down
 *  → shared experts → latent up). */
export function layerMatrices(cfg: ModelConfig, L: number): WalkMatrix[] {
  const a = "self_attn.";
  const attention =
    cfg.layerKinds[L] === "kda"
      ? [m(`${a}q_proj.weight`), m(`${a}k_proj.weight`), m(`${a}v_proj.weight`), m(`${a}f_a_proj.weight`), m(`${a}f_b_proj.weight`), m(`${a}b_proj.weight`), m(`${a}g_proj.weight`), m(`${a}o_proj.weight`)]
      : [m(`${a}q_a_proj.weight`), m(`${a}q_b_proj.weight`), m(`${a}kv_a_proj_with_mqa.weight`), m(`${a}kv_b_proj.weight`, true), m(`${a}g_proj.weight`), m(`${a}o_proj.weight`)];
  const p = "block_sparse_moe.";
  const ffn =
    L < cfg.firstKDense
      ? [m("mlp.gate_proj.weight"), m("mlp.up_proj.weight"), m("mlp.down_proj.weight")]
      : [m(`${p}routed_expert_down_proj.weight`), m(`${p}shared_experts.gate_proj.weight`), m(`${p}shared_experts.up_proj.weight`), m(`${p}shared_experts.down_proj.weight`), m(`${p}routed_expert_up_proj.weight`)];
  return [...attention, ...ffn];
}

/** The head's matrices (full names): lm_head, one row of x per pass (the last token only). */
export const HEAD_MATRICES: WalkMatrix[] = [m(LM_HEAD_NAME)];
