// The whole-model tolerance against the float64 reference (docs/NUMERICS.md §4): each of ≤ 12
// chained reductions per layer carries ≤ n_max·u relative error, L layers, scaled by max |logit|.
export function tolerance(cfg: { numLayers: number; hidden: number; kdaHeads: number; kdaHeadDim: number; denseInter: number; numSharedExperts: number; moeInter: number; numExperts: number }, maxLogit: number): number {
  const nMax = Math.max(cfg.hidden, cfg.kdaHeads * cfg.kdaHeadDim, cfg.denseInter, cfg.numSharedExperts * cfg.moeInter, cfg.numExperts);
  return 12 * cfg.numLayers * nMax * 2 ** -24 * Math.max(1, maxLogit);
}
