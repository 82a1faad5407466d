// Types shared by the checkpoint reader (src/checkpoint/) and its users (model, memory, engine).
// One place defines what a checkpoint is once validated; parsing lives in config.ts,
// safetensors.ts and catalogue.ts.

/** safetensors dtypes that appear in K3 checkpoints (MODEL.md §3). */
export type DType = "BF16" | "F32" | "U8";

/** Which attention a layer uses (MODEL.md §2: one-based lists in the config, zero-based here). */
export type LayerKind = "kda" | "mla";

/** The validated language-model config (MODEL.md §2), with every shape derived once. */
export interface ModelConfig {
  // identity
  modelType: string; // top-level model_type ("kimi_k3")
  bosTokenId: number;
  eosTokenId: number;
  padTokenId: number;
  maxPositions: number; // max_position_embeddings (1,048,576 for K3)

  // trunk
  hidden: number; // E = hidden_size
  numLayers: number;
  vocab: number;
  rmsEps: number;
  tieWordEmbeddings: boolean; // must be false for K3; kept to name it in errors
  attnResBlock: number; // attn_res_block_size

  // layer map (zero-based): kinds[i] is "mla" iff i+1 ∈ full_attn_layers
  layerKinds: LayerKind[];
  firstKDense: number; // layers [0, firstKDense) are dense FFN, the rest MoE

  // dense FFN
  denseInter: number; // intermediate_size

  // MoE
  numExperts: number;
  topK: number;
  numSharedExperts: number;
  moeInter: number; // moe_intermediate_size (per expert and per shared expert)
  latent: number; // routed_expert_hidden_size
  latentNorm: boolean; // latent_moe_use_norm (must be true: the engine implements that form)
  routerActivation: "sigmoid";
  renormalize: true; // moe_renormalize: the router always renormalises; false is refused
  routedScaling: number;
  situBeta: number; // activation_situ_beta (β1)
  situLinearBeta: number; // activation_situ_linear_beta (β2)

  // MLA
  mlaHeads: number;
  qLoraRank: number;
  kvLoraRank: number; // R
  qkNope: number; // dn
  qkRope: number; // dr
  vHead: number; // dv
  mlaUseNope: boolean;
  mlaOutputGate: boolean;

  // KDA
  kdaHeads: number; // H
  kdaHeadDim: number; // D
  convKernel: number; // short_conv_kernel_size (4)
  gateLowerBound: number;
  kdaFullRankGate: boolean; // use_full_rank_gate
  // A_log is stored with head_dim entries (the release: 128 for 96 heads); only the first
  // kdaHeads are used (MODEL.md §7.1), so the config must have kdaHeads ≤ kdaHeadDim.
}

/** What the config implies a tensor must be (MODEL.md §3). */
export type TensorClass = "embed" | "head" | "final" | "trunk" | "expert";

export interface TensorSpec {
  name: string;
  dtype: DType;
  shape: number[];
  cls: TensorClass;
  layer?: number; // zero-based, for trunk and expert tensors
  expert?: number; // for expert tensors
  /** A trunk matrix (shapes.ts: the trunk table): may it be cut into row slices, stored packed. */
  matrix?: { sliceable: boolean; packable: boolean };
}

/** One tensor found in a shard, validated. */
export interface TensorEntry {
  name: string;
  file: string; // absolute path of the shard
  offset: number; // absolute byte offset in the file
  bytes: number;
  dtype: DType;
  shape: number[];
}

/** A byte range in one file. */
export interface Extent {
  file: string;
  offset: number;
  bytes: number;
}
