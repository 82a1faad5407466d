// The test-model presets (MODEL.md §8). Every field is a config value written to config.json, or a
// generator knob documented next to it. docs/TEST-MODELS.md explains which preset shows which trap.
//
// Invariants every preset keeps (checked by `validatePreset`):
//   - kdaHeads < kdaHeadDim: A_log ships with head_dim entries, only the first kdaHeads are used
//     (MODEL.md §7.1); the tail is zeros (release-like) or random (makes the per-channel trap loud).
//   - latent and moeInter are multiples of 32 (MXFP4 group size along each expert input).
//   - layer 0 is dense; MLA layers (one-based) are the multiples of 4 plus the last two layers,
//     like the release's [4, 8, …, 92, 93].

export interface GenPreset {
  description: string;
  hidden: number; // E
  layers: number;
  vocab: number; // V; specials at V-256..V-1
  attnResBlock: number; // attn_res_block_size
  rmsEps: number;
  denseInter: number; // intermediate_size (layer 0)
  // KDA
  kdaHeads: number; // H
  kdaHeadDim: number; // D
  aLogTail: "zero" | "random"; // A_log[H..D): zeros like the release, or random (trap 7.1 loud)
  gateLowerBound: number;
  // MLA
  mlaHeads: number;
  qLoraRank: number;
  kvLoraRank: number;
  qkNope: number; // dn
  qkRope: number; // dr
  vHead: number; // dv
  // MoE
  experts: number;
  topK: number;
  sharedExperts: number; // shared FFN width = sharedExperts × moeInter
  moeInter: number;
  latent: number; // routed_expert_hidden_size
  routedScaling: number;
  // Generator knobs (not config values)
  /** Every n-th row of dense/shared up_proj gets a ~30× larger scale so |up| passes SiTU's cap
   *  (β2 = 25) sometimes; 0 disables (the `slice` preset, which only has to be sane and fast). */
  capRowsEvery: number;
  /** Keep every tensor's bytes in the GenerateResult (tests compare them); off for big presets. */
  keepData: boolean;
}

const TINY_COMMON = {
  rmsEps: 1e-5,
  gateLowerBound: -5.0,
  sharedExperts: 2,
  capRowsEvery: 8,
  keepData: true,
} as const;

export const PRESETS: Record<string, GenPreset> = {
  "tiny-a": {
    ...TINY_COMMON,
    description: "hidden 64, 8 layers (AttnRes block 3), KDA 4×12 with random A_log tail, MLA dn≠dv, 16 experts top-4, latent 32",
    hidden: 64,
    layers: 8,
    vocab: 1024,
    attnResBlock: 3,
    denseInter: 128,
    kdaHeads: 4,
    kdaHeadDim: 12,
    aLogTail: "random",
    mlaHeads: 2,
    qLoraRank: 24,
    kvLoraRank: 16,
    qkNope: 8,
    qkRope: 4,
    vHead: 12,
    experts: 16,
    topK: 4,
    moeInter: 64,
    latent: 32,
    routedScaling: 1.0,
  },
  "tiny-b": {
    ...TINY_COMMON,
    description: "hidden 96, 9 layers (AttnRes block 4), KDA 6×16 with zero A_log tail (release-like), 8 experts top-2, routed_scaling 2.5",
    hidden: 96,
    layers: 9,
    vocab: 1024,
    attnResBlock: 4,
    denseInter: 192,
    kdaHeads: 6,
    kdaHeadDim: 16,
    aLogTail: "zero",
    mlaHeads: 4,
    qLoraRank: 32,
    kvLoraRank: 32,
    qkNope: 16,
    qkRope: 8,
    vHead: 16,
    experts: 8,
    topK: 2,
    moeInter: 32,
    latent: 64,
    routedScaling: 2.5,
  },
  "tiny-c": {
    ...TINY_COMMON,
    description: "hidden 48, 7 layers (AttnRes block 3, last block partial), KDA 3×16 random tail, 12 experts top-3, latent 64 > hidden",
    hidden: 48,
    layers: 7,
    vocab: 768,
    attnResBlock: 3,
    denseInter: 96,
    kdaHeads: 3,
    kdaHeadDim: 16,
    aLogTail: "random",
    mlaHeads: 3,
    qLoraRank: 16,
    kvLoraRank: 24,
    qkNope: 12,
    qkRope: 6,
    vHead: 8,
    experts: 12,
    topK: 3,
    moeInter: 32,
    latent: 64,
    routedScaling: 1.0,
  },
  demo: {
    ...TINY_COMMON,
    description: "the random-weight demo (the out-of-the-box model before the trained one in assets/demo; kept for tests and comparisons): hidden 192, 8 layers, vocab 8192, 16 experts top-4",
    hidden: 192,
    layers: 8,
    vocab: 8192,
    attnResBlock: 3,
    denseInter: 512,
    kdaHeads: 6,
    kdaHeadDim: 32,
    aLogTail: "zero",
    mlaHeads: 4,
    qLoraRank: 64,
    kvLoraRank: 32,
    qkNope: 16,
    qkRope: 8,
    vHead: 16,
    experts: 16,
    topK: 4,
    moeInter: 64,
    latent: 96,
    routedScaling: 1.0,
  },
  slice: {
    description: "the release's real widths, 6 layers × 64 experts, vocab 32768: a multi-GB streaming benchmark",
    hidden: 7168,
    layers: 6,
    vocab: 32768,
    attnResBlock: 3,
    rmsEps: 1e-5,
    denseInter: 33792,
    kdaHeads: 96,
    kdaHeadDim: 128,
    aLogTail: "zero",
    gateLowerBound: -5.0,
    mlaHeads: 96,
    qLoraRank: 1536,
    kvLoraRank: 512,
    qkNope: 128,
    qkRope: 64,
    vHead: 128,
    experts: 64,
    topK: 16,
    sharedExperts: 2,
    moeInter: 3072,
    latent: 3584,
    routedScaling: 1.0,
    capRowsEvery: 0,
    keepData: false,
  },
};

/** One-based MLA layer indices: multiples of 4 plus the last two (release: [4, 8, …, 92, 93]). */
export function mlaLayersOneBased(layers: number): number[] {
  const set = new Set<number>();
  for (let l = 4; l <= layers; l += 4) set.add(l);
  if (layers >= 2) set.add(layers - 1);
  set.add(layers);
  return [...set].sort((a, b) => a - b);
}

/** One-based KDA layer indices: every layer not in the MLA list. */
export function kdaLayersOneBased(layers: number): number[] {
  const mla = new Set(mlaLayersOneBased(layers));
  const out: number[] = [];
  for (let l = 1; l <= layers; l++) if (!mla.has(l)) out.push(l);
  return out;
}

/** Throws naming every violated invariant at once. */
export function validatePreset(name: string, p: GenPreset): void {
  const problems: string[] = [];
  if (p.kdaHeads >= p.kdaHeadDim) problems.push(`kdaHeads ${p.kdaHeads} must be < kdaHeadDim ${p.kdaHeadDim}`);
  if (p.latent % 32) problems.push(`latent ${p.latent} must be a multiple of 32`);
  if (p.moeInter % 32) problems.push(`moeInter ${p.moeInter} must be a multiple of 32`);
  if (p.topK > p.experts || p.topK < 1) problems.push(`topK ${p.topK} must be in 1..experts (${p.experts})`);
  if (p.vocab < 768) problems.push(`vocab ${p.vocab} must be ≥ 768 (256 specials + all single bytes)`);
  if (!(p.denseInter >= 1)) problems.push(`denseInter ${p.denseInter} must be ≥ 1`);
  if (p.layers < 3) problems.push(`layers ${p.layers} must be ≥ 3 (dense layer 0, KDA, MLA)`);
  if (kdaLayersOneBased(p.layers)[0] !== 1) problems.push("layer 1 (one-based) must be KDA");
  if (problems.length) throw new Error(`preset ${name} is invalid:\n  - ${problems.join("\n  - ")}`);
}
