// Byte census of a checkpoint, from the config alone (MODEL.md §3): what a token must always read
// (trunk, embedding row, lm_head, final norms) against what it reads by choice (routed experts).
// Computed from shapes, so it is the same with or without the shards present.
import { expertBytes, globalSpecs, isMoeLayer, layerTrunkSpecs, tensorBytes } from "./shapes.ts";
import type { ModelConfig } from "./types.ts";

export interface ByteCensus {
  trunkBytesPerLayer: number[]; // [numLayers]: non-expert tensors of each layer
  trunkBytes: number; // Σ trunkBytesPerLayer (108,811,877,376 for K3)
  trunkTensors: number; // count of per-layer non-expert tensors
  expertBytes: number; // one routed expert, packed + scales (17,547,264 for K3)
  expertCount: number; // MoE layers × num_experts (82,432 for K3)
  expertTensors: number; // 6 × expertCount
  embedBytes: number; // embed_tokens
  headBytes: number; // lm_head (untied)
  finalBytes: number; // norm + output_attn_res_{norm,proj}
  globalTensors: number; // embed, lm_head and the final tensors
  nonExpertTensors: number; // globalTensors + trunkTensors (2,460 for K3)
  totalBytes: number; // every language-model tensor
}

export function computeCensus(cfg: ModelConfig): ByteCensus {
  const trunkBytesPerLayer: number[] = [];
  let trunkTensors = 0;
  let moeLayers = 0;
  for (let l = 0; l < cfg.numLayers; l++) {
    const specs = layerTrunkSpecs(cfg, l);
    trunkTensors += specs.length;
    trunkBytesPerLayer.push(specs.reduce((a, s) => a + tensorBytes(s), 0));
    if (isMoeLayer(cfg, l)) moeLayers++;
  }
  const globals = globalSpecs(cfg);
  const bytesOf = (cls: string) => globals.filter((s) => s.cls === cls).reduce((a, s) => a + tensorBytes(s), 0);
  const trunkBytes = trunkBytesPerLayer.reduce((a, b) => a + b, 0);
  const expertCount = moeLayers * cfg.numExperts;
  const eBytes = expertBytes(cfg);
  const embedBytes = bytesOf("embed"), headBytes = bytesOf("head"), finalBytes = bytesOf("final");
  return {
    trunkBytesPerLayer, trunkBytes, trunkTensors,
    expertBytes: eBytes, expertCount, expertTensors: 6 * expertCount,
    embedBytes, headBytes, finalBytes,
    globalTensors: globals.length,
    nonExpertTensors: globals.length + trunkTensors,
    totalBytes: trunkBytes + expertCount * eBytes + embedBytes + headBytes + finalBytes,
  };
}
