// The whole-model tolerance against the float64 reference (docs/NUMERICS.md §4): each of ≤ 12
// chained reductions per layer carries ≤ n_max·u relative error, L layers, scaled by max |logit|.
export function tolerance(cfg: { numLayers: number; hidden: number; kdaHeads: number; kdaHeadDim: number; denseInter: number; numSharedExperts: number; moeInter: number; numExperts: number }, maxLogit: number): number {
  const nMax = Math.max(cfg.hidden, cfg.kdaHeads * cfg.kdaHeadDim, cfg.denseInter, cfg.numSharedExperts * cfg.moeInter, cfg.numExperts);
  return 12 * cfg.numLayers * nMax * 2 ** -24 * Math.max(1, maxLogit);
}

/**
 * The draft's logits against the float64 reference (docs/NUMERICS.md §6), relative to
 * max(1, max |logit|): the taps carry the target's error after its deepest tapped layer (≤ 12
 * chained reductions per layer, as above, L layers at most), and each chain step adds the draft
 * layer's ≤ 16 chained reductions (fc_norm, fc, the two input norms, q_a, its norm, q_b, RoPE's
 * three roundings, kv_a, its norm, the attention's two dot products and output, o_proj, the MLP
 * norm, gate/up, SiLU-GLU, down, the final norm, lm_head), each ≤ n_max·u relative, n_max the
 * widest reduction of either model.
 */
export function draftTolerance(
  target: { numLayers: number; hidden: number; kdaHeads: number; kdaHeadDim: number; denseInter: number; numSharedExperts: number; moeInter: number; numExperts: number },
  draft: { hidden: number; captureLayers: number[]; intermediate: number; heads: number; vHead: number; qLoraRank: number; qkNope: number; qkRope: number; kvLoraRank: number },
  steps: number,
): number {
  const nTarget = Math.max(target.hidden, target.kdaHeads * target.kdaHeadDim, target.denseInter, target.numSharedExperts * target.moeInter, target.numExperts);
  const nDraft = Math.max(draft.captureLayers.length * draft.hidden, 2 * draft.hidden, draft.intermediate, draft.heads * draft.vHead, draft.qLoraRank, draft.kvLoraRank + draft.qkRope);
  return (12 * target.numLayers + 16 * steps) * Math.max(nTarget, nDraft) * 2 ** -24;
}
