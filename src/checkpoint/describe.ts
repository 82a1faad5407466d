// What `k3 info` reports, as one plain JSON-able object, plus its human rendering. Built from an
// opened checkpoint (layout facts known) or from release metadata alone (layout unknown).
import { formatBytes, formatRanges } from "../format.ts";
import { catalogueFromMetadata, openCheckpoint } from "./catalogue.ts";
import type { ByteCensus } from "./census.ts";
import { isMoeLayer } from "./shapes.ts";
import type { ModelConfig } from "./types.ts";

export interface InfoReport {
  source: { dir?: string; config?: string; index?: string | null };
  architecture: {
    modelType: string;
    hidden: number;
    layers: number;
    vocab: number;
    kdaHeads: number;
    kdaHeadDim: number;
    mlaHeads: number;
    qLoraRank: number;
    kvLoraRank: number;
    experts: number;
    topK: number;
    sharedExperts: number;
    moeInter: number;
    latent: number;
    denseInter: number;
    attnResBlock: number;
  };
  layerMap: { kda: number[]; mla: number[]; dense: number[]; moe: number[] }; // zero-based
  tensors: {
    nonExpert: number;
    expert: number;
    ignored: number; // vision / non-LM tensors, noted and ignored
    listed: number; // names in the index or shard headers, all accounted for
    shards: number;
  };
  census: ByteCensus;
  /** null when only metadata was read (no shard headers, so no offsets). */
  layout: { contiguousLayers: number; layers: number; adjacentExperts: number; experts: number; nonContiguousLayers: number[] } | null;
}

function architecture(cfg: ModelConfig): InfoReport["architecture"] {
  return {
    modelType: cfg.modelType, hidden: cfg.hidden, layers: cfg.numLayers, vocab: cfg.vocab,
    kdaHeads: cfg.kdaHeads, kdaHeadDim: cfg.kdaHeadDim, mlaHeads: cfg.mlaHeads,
    qLoraRank: cfg.qLoraRank, kvLoraRank: cfg.kvLoraRank,
    experts: cfg.numExperts, topK: cfg.topK, sharedExperts: cfg.numSharedExperts,
    moeInter: cfg.moeInter, latent: cfg.latent, denseInter: cfg.denseInter, attnResBlock: cfg.attnResBlock,
  };
}

function layerMap(cfg: ModelConfig): InfoReport["layerMap"] {
  const all = cfg.layerKinds.map((_, i) => i);
  return {
    kda: all.filter((i) => cfg.layerKinds[i] === "kda"),
    mla: all.filter((i) => cfg.layerKinds[i] === "mla"),
    dense: all.filter((i) => !isMoeLayer(cfg, i)),
    moe: all.filter((i) => isMoeLayer(cfg, i)),
  };
}

export function describeCheckpoint(dir: string): InfoReport {
  const ck = openCheckpoint(dir);
  const c = ck.layout.census;
  return {
    source: { dir: ck.dir, index: ck.index },
    architecture: architecture(ck.config),
    layerMap: layerMap(ck.config),
    tensors: {
      nonExpert: c.nonExpertTensors, expert: c.expertTensors, ignored: ck.ignored.length,
      listed: ck.tensors.size + ck.ignored.length, shards: ck.shards.length,
    },
    census: c,
    layout: {
      contiguousLayers: ck.layout.contiguousLayers, layers: ck.layout.layers.length,
      adjacentExperts: ck.layout.adjacentExperts, experts: c.expertCount,
      nonContiguousLayers: ck.layout.layers.filter((l) => !l.trunkExtent).map((l) => l.layer),
    },
  };
}

export function describeMetadata(configPath: string, indexPath: string): InfoReport {
  const m = catalogueFromMetadata(configPath, indexPath);
  const c = m.census;
  return {
    source: { config: configPath, index: indexPath },
    architecture: architecture(m.config),
    layerMap: layerMap(m.config),
    tensors: { nonExpert: c.nonExpertTensors, expert: c.expertTensors, ignored: m.ignored.length, listed: m.indexNames, shards: m.shards.length },
    census: c,
    layout: null,
  };
}

const n = (x: number) => x.toLocaleString("en-US");

export function renderInfo(r: InfoReport): string {
  const a = r.architecture, c = r.census, m = r.layerMap;
  const lines: string[] = [];
  lines.push(r.source.dir ? `checkpoint ${r.source.dir}` : `metadata ${r.source.config} + ${r.source.index} (no shards read)`);
  lines.push("", "architecture");
  lines.push(`  ${a.modelType}: hidden ${a.hidden}, ${a.layers} layers, vocab ${n(a.vocab)}`);
  lines.push(`  KDA ${a.kdaHeads} heads × ${a.kdaHeadDim}; MLA ${a.mlaHeads} heads, q_lora ${a.qLoraRank}, kv_lora ${a.kvLoraRank}`);
  lines.push(`  MoE ${a.experts} experts, top-${a.topK}, ${a.sharedExperts} shared, expert inter ${a.moeInter}, latent ${a.latent}; dense inter ${a.denseInter}`);
  lines.push(`  AttnRes block ${a.attnResBlock}`);
  lines.push("", "layer map (zero-based)");
  lines.push(`  KDA ${formatRanges(m.kda)}`, `  MLA ${formatRanges(m.mla)}`);
  lines.push(`  dense ${formatRanges(m.dense)}`, `  MoE ${formatRanges(m.moe)}`);
  lines.push("", "tensors");
  lines.push(`  ${n(r.tensors.nonExpert)} language-model non-expert + ${n(r.tensors.expert)} expert; ${n(r.tensors.ignored)} non-LM (vision) ignored`);
  lines.push(`  all ${n(r.tensors.listed)} names accounted for, in ${r.tensors.shards} shards`);
  lines.push("", "bytes");
  // Trunk sizes grouped by (kind, ffn), e.g. "1,267,744,256 × 68 (KDA+MoE)".
  const groups = new Map<string, { bytes: number; count: number }>();
  c.trunkBytesPerLayer.forEach((b, l) => {
    const key = `${m.mla.includes(l) ? "MLA" : "KDA"}+${m.moe.includes(l) ? "MoE" : "dense"} ${b}`;
    const g = groups.get(key) ?? { bytes: b, count: 0 };
    g.count++;
    groups.set(key, g);
  });
  lines.push(`  trunk ${n(c.trunkBytes)} (${formatBytes(c.trunkBytes)}) over ${c.trunkBytesPerLayer.length} layers:`);
  for (const [key, g] of groups) lines.push(`    ${n(g.bytes)} × ${g.count} (${key.split(" ")[0]})`);
  lines.push(`  experts ${n(c.expertCount)} × ${n(c.expertBytes)} = ${n(c.expertCount * c.expertBytes)} (${formatBytes(c.expertCount * c.expertBytes)})`);
  lines.push(`  embedding + lm_head ${n(c.embedBytes)} + ${n(c.headBytes)} = ${n(c.embedBytes + c.headBytes)}`);
  lines.push(`  final norms ${n(c.finalBytes)}; language model total ${n(c.totalBytes)} (${formatBytes(c.totalBytes)})`);
  lines.push("", "layout");
  if (!r.layout) lines.push("  unknown (offsets live only in shard headers)");
  else {
    const L = r.layout;
    lines.push(`  contiguous trunk runs: ${L.contiguousLayers}/${L.layers} layers${L.nonContiguousLayers.length ? ` (not: ${formatRanges(L.nonContiguousLayers)})` : ""}`);
    lines.push(`  adjacent experts: ${n(L.adjacentExperts)}/${n(L.experts)}`);
  }
  return `${lines.join("\n")}\n`;
}
