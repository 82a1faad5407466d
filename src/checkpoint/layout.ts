// Layout facts: can a layer's trunk be fetched in one read, and each routed expert in one read?
// MODEL.md §3: in the release the six tensors of an expert are adjacent in their shard and the
// non-expert tensors of a layer form one contiguous byte run. An engine must CHECK this per
// checkpoint and fall back to several reads when it does not hold; this module is that check.
//
// "Contiguous" means the tensors' byte ranges, in one file, tile one range exactly (in any order,
// no gaps, no alignment padding). Anything else reports not contiguous and no extent.
import { K3Error } from "../errors.ts";
import { type ByteCensus, computeCensus } from "./census.ts";
import { expertTensorNames, isMoeLayer, layerTrunkSpecs } from "./shapes.ts";
import type { Extent, LayerKind, ModelConfig, TensorEntry } from "./types.ts";

export interface LayerLayout {
  layer: number; // zero-based
  kind: LayerKind;
  moe: boolean;
  trunkBytes: number;
  trunkTensors: number;
  /** Set iff the layer's non-expert tensors tile one byte range of one file. */
  trunkExtent: Extent | null;
}

/**
 * Per-(layer, expert) facts, compact: 82,432 experts in the release. Slot of (layer, e) is
 * (layer − firstMoeLayer) · experts + e. Offsets are f64 (exact to 2^53; shards are < 2^40).
 */
export interface ExpertLayout {
  firstMoeLayer: number;
  experts: number; // per MoE layer
  bytes: number; // of one expert (all six tensors)
  adjacent: Uint8Array; // [slots] 1 = the six tensors tile one range of one file
  fileIndex: Int32Array; // [slots] index into LayoutFacts.files (of w1.weight_packed's file)
  offset: Float64Array; // [slots] start of the run when adjacent, else w1.weight_packed's offset
}

export interface LayoutFacts {
  census: ByteCensus;
  files: string[]; // shard files, referenced by ExpertLayout.fileIndex
  layers: LayerLayout[]; // [numLayers]
  contiguousLayers: number; // layers whose trunk is one read
  experts: ExpertLayout;
  adjacentExperts: number; // experts that are one read
}

/** The one byte range `parts` tile exactly, or null (different files, gaps, overlaps). */
export function tiledExtent(parts: readonly TensorEntry[]): Extent | null {
  if (parts.length === 0) return null;
  const file = parts[0]!.file;
  if (parts.some((p) => p.file !== file)) return null;
  const sorted = [...parts].sort((a, b) => a.offset - b.offset);
  let end = sorted[0]!.offset;
  for (const p of sorted) {
    if (p.offset !== end) return null;
    end += p.bytes;
  }
  return { file, offset: sorted[0]!.offset, bytes: end - sorted[0]!.offset };
}

function need(tensors: Map<string, TensorEntry>, name: string): TensorEntry {
  const t = tensors.get(name);
  if (!t) throw new K3Error("CHECKPOINT", `layout: tensor ${name} is missing from the catalogue`);
  return t;
}

/** Layout facts for a catalogue whose tensors were already checked against the config. */
export function computeLayout(cfg: ModelConfig, tensors: Map<string, TensorEntry>): LayoutFacts {
  const census = computeCensus(cfg);
  const files: string[] = [];
  const fileIds = new Map<string, number>();
  const fileId = (f: string) => {
    let id = fileIds.get(f);
    if (id === undefined) fileIds.set(f, (id = files.push(f) - 1));
    return id;
  };

  const layers: LayerLayout[] = [];
  for (let l = 0; l < cfg.numLayers; l++) {
    const entries = layerTrunkSpecs(cfg, l).map((s) => need(tensors, s.name));
    for (const e of entries) fileId(e.file);
    layers.push({
      layer: l,
      kind: cfg.layerKinds[l]!,
      moe: isMoeLayer(cfg, l),
      trunkBytes: census.trunkBytesPerLayer[l]!,
      trunkTensors: entries.length,
      trunkExtent: tiledExtent(entries),
    });
  }

  const firstMoeLayer = Math.min(cfg.firstKDense, cfg.numLayers);
  const slots = census.expertCount;
  const experts: ExpertLayout = {
    firstMoeLayer,
    experts: cfg.numExperts,
    bytes: census.expertBytes,
    adjacent: new Uint8Array(slots),
    fileIndex: new Int32Array(slots),
    offset: new Float64Array(slots),
  };
  let adjacentExperts = 0;
  for (let l = firstMoeLayer; l < cfg.numLayers; l++) {
    for (let e = 0; e < cfg.numExperts; e++) {
      const slot = (l - firstMoeLayer) * cfg.numExperts + e;
      const parts = expertTensorNames(l, e).map((n) => need(tensors, n));
      const run = tiledExtent(parts);
      experts.fileIndex[slot] = fileId(parts[0]!.file);
      if (run) {
        experts.adjacent[slot] = 1;
        experts.offset[slot] = run.offset;
        adjacentExperts++;
      } else {
        experts.offset[slot] = parts[0]!.offset;
      }
    }
  }
  return { census, files, layers, contiguousLayers: layers.filter((x) => x.trunkExtent).length, experts, adjacentExperts };
}

/** The single read that fetches expert `e` of zero-based `layer`, or null when it needs several. */
export function expertExtent(facts: LayoutFacts, layer: number, e: number): Extent | null {
  const x = facts.experts;
  if (layer < x.firstMoeLayer || e < 0 || e >= x.experts) return null;
  const slot = (layer - x.firstMoeLayer) * x.experts + e;
  if (slot >= x.adjacent.length || !x.adjacent[slot]) return null;
  return { file: facts.files[x.fileIndex[slot]!]!, offset: x.offset[slot]!, bytes: x.bytes };
}
