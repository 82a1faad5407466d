// The memory planner: sums every allocation before any is made (STREAMING.md §6) and decides
// which trunk units are pinned, how many ring slots stream the rest, and how many expert slots
// the cache gets. Pure arithmetic on the config and byte figures: printable without weights.
//
// Decisions (docs/PLAN.md has the reasoning):
//  - A "trunk unit" is one layer's non-expert tensors or lm_head: both are read in full every
//    token, so each pinned byte saves exactly one byte of disk read per token, whichever unit it
//    belongs to. Units are pinned largest first (ties: lower layer first, lm_head after layers of
//    equal size): the largest streamed unit sets the ring slot size, so pinning big units first
//    shrinks the ring. Greedy: a unit that does not fit is skipped and smaller ones are tried.
//  - Trunk before expert cache (STREAMING.md §2): experts get what the trunk leaves, but never
//    fewer than top-k slots (one layer's experts must be resident at once).
//  - Ring: 2 slots of the largest streamed unit (next read in flight while one computes); 1 slot
//    only if 2 do not fit, and then the reader must not run ahead (it would overwrite the layer
//    in use: STREAMING.md §2). 0 when everything is pinned.
//  - Embedding: rows gathered from disk per token (one E-wide bf16 row per token: 14 KB on K3),
//    never resident: 2.3 GB resident would buy 14 KB of reads per token, the same bytes buy
//    ~130 expert slots.
//  - Every disk buffer is sized for an O_DIRECT read widened to 4096-byte alignment.
import { K3Error } from "../errors.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { gib } from "./ram.ts";

/** Bun + catalogue + tokenizer + JIT/GC growth. Measured: 206 MB RSS after the release's metadata
 *  catalogue (497k tensor specs) on bun 1.4.5; the rest is margin. */
export const RUNTIME_HEADROOM_BYTES = 384 * 2 ** 20;
export const IO_ALIGN = 4096;
export const DEFAULT_PREFILL_CHUNK = 32;
export const DEFAULT_CONTEXT = 4096;
const F32 = 4;

export interface PlanInput {
  cfg: ModelConfig;
  trunkBytesPerLayer: number[]; // [numLayers] non-expert bytes of each layer
  expertBytes: number; // one routed expert (packed + scales)
  embedBytes: number;
  headBytes: number;
  finalBytes: number;
  budgetBytes: number; // usable RAM for this process
  contextTokens: number; // MLA cache is sized for this many positions
  threads?: number; // compute threads (per-thread scratch)
  prefillChunk?: number; // tokens per prefill chunk (scratch)
}

/** The planner's input from a byte census (checkpoint or release metadata). */
export function planInputFromCensus(
  cfg: ModelConfig,
  census: { trunkBytesPerLayer: number[]; expertBytes: number; embedBytes: number; headBytes: number; finalBytes: number },
  budgetBytes: number,
  contextTokens: number,
  threads?: number,
  prefillChunk?: number,
): PlanInput {
  return {
    cfg,
    trunkBytesPerLayer: census.trunkBytesPerLayer,
    expertBytes: census.expertBytes,
    embedBytes: census.embedBytes,
    headBytes: census.headBytes,
    finalBytes: census.finalBytes,
    budgetBytes,
    contextTokens,
    threads,
    prefillChunk,
  };
}

export interface PlanItem {
  name: string;
  bytes: number;
  count?: number;
  note: string;
}

export interface TrunkUnit {
  name: string; // "layer 5" | "lm_head"
  layer: number | null; // null for lm_head
  bytes: number;
}

export interface MemoryPlan {
  budgetBytes: number;
  contextTokens: number;
  threads: number;
  prefillChunk: number;
  items: PlanItem[]; // every allocation; Σ bytes = totalBytes
  totalBytes: number;
  freeBytes: number; // budget − total (less than one expert slot unless the cache holds every expert)
  pinnedLayers: number[];
  streamedLayers: number[];
  head: "resident" | "streamed";
  embed: "gathered";
  ringSlots: 0 | 1 | 2;
  ringSlotBytes: number;
  readerMayRunAhead: boolean; // false with one ring slot
  expertSlots: number;
  expertSlotBytes: number;
  expertWorkingSet: number; // top-k × MoE layers: one token's expert requests
  expertCount: number; // every routed expert in the checkpoint
  streamedBytesPerToken: number; // trunk units read from disk each token (decode)
  expertBytesPerTokenAllMiss: number; // expert bytes a token reads with 0 cache hits
}

/** Buffer for an O_DIRECT read of `bytes` at any offset: widened to 4096 on both ends. */
export const ioBufferBytes = (bytes: number): number => Math.ceil(bytes / IO_ALIGN) * IO_ALIGN + IO_ALIGN;

export const moeLayerCount = (cfg: ModelConfig): number => cfg.numLayers - cfg.firstKDense;

/** KDA recurrent state of one layer: H·D·D f32 + conv history (kernel−1) × 3 (q,k,v) × P f32. */
export function kdaStateBytesPerLayer(cfg: ModelConfig): number {
  const P = cfg.kdaHeads * cfg.kdaHeadDim;
  return F32 * (cfg.kdaHeads * cfg.kdaHeadDim * cfg.kdaHeadDim + (cfg.convKernel - 1) * 3 * P);
}

/** MLA latent cache of one position in one layer: (kv_lora_rank + qk_rope) f32 (576 on K3). */
export const mlaBytesPerPosition = (cfg: ModelConfig): number => F32 * (cfg.kvLoraRank + cfg.qkRope);

/**
 * Activations for one prefill chunk (an estimate from the forward step, MODEL.md §4, f32):
 * per token the residual + AttnRes sources, the larger of the attention and FFN buffers (reused
 * between the two), MLA scores over the whole context; once: logits; per thread: one expert's
 * intermediate; plus the gathered bf16 embedding rows.
 */
export function scratchBytes(cfg: ModelConfig, chunk: number, contextTokens: number, threads: number): number {
  const E = cfg.hidden;
  const sources = Math.ceil(cfg.numLayers / cfg.attnResBlock) + 1; // snapshots + running P
  const residual = E * (sources + 4); // bank, P, h, h2, normed x
  const P = cfg.kdaHeads * cfg.kdaHeadDim;
  const kda = 6 * P + cfg.kdaHeadDim + cfg.kdaHeads; // q,k,v,g,f,o + f_a + β
  const Hm = cfg.mlaHeads;
  const mla =
    cfg.qLoraRank + Hm * (cfg.qkNope + cfg.qkRope) + cfg.kvLoraRank + cfg.qkRope + Hm * cfg.kvLoraRank /* absorbed q */ +
    Hm * contextTokens /* scores */ + 2 * Hm * cfg.vHead; // output + gate
  const dense = cfg.firstKDense > 0 ? 2 * cfg.denseInter : 0;
  const moe = cfg.numExperts + 2 * cfg.latent + 2 * cfg.numSharedExperts * cfg.moeInter;
  const perToken = residual + Math.max(kda, mla, dense, moe);
  const perThread = 2 * cfg.moeInter + cfg.latent;
  const embedRows = chunk * ioBufferBytes(2 * E);
  return F32 * (chunk * perToken + cfg.vocab + threads * perThread) + embedRows;
}

/** Units in pinning order: largest first; ties → layers in order, then lm_head. */
function trunkUnits(input: PlanInput): TrunkUnit[] {
  const units: TrunkUnit[] = input.trunkBytesPerLayer.map((bytes, layer) => ({ name: `layer ${layer}`, layer, bytes }));
  units.push({ name: "lm_head", layer: null, bytes: input.headBytes });
  return units.sort((a, b) => b.bytes - a.bytes || (a.layer ?? Infinity) - (b.layer ?? Infinity));
}

/** Allocations that do not depend on the pin/stream choice (expert floor included). */
function fixedItems(input: PlanInput, threads: number, chunk: number): PlanItem[] {
  const { cfg, contextTokens } = input;
  const kdaLayers = cfg.layerKinds.filter((k) => k === "kda").length;
  const mlaLayers = cfg.layerKinds.filter((k) => k === "mla").length;
  return [
    { name: "runtime", bytes: RUNTIME_HEADROOM_BYTES, note: "bun, catalogue, tokenizer, GC headroom" },
    { name: "final norms", bytes: ioBufferBytes(input.finalBytes), note: "norm + output AttnRes mix, resident" },
    { name: "embedding", bytes: 0, note: `rows gathered from disk (${gib(input.embedBytes)} not resident)` },
    { name: "KDA state", bytes: kdaLayers * kdaStateBytesPerLayer(cfg), count: kdaLayers, note: "H·D·D + conv history, f32, per KDA layer" },
    {
      name: "MLA cache",
      bytes: mlaLayers * contextTokens * mlaBytesPerPosition(cfg),
      count: mlaLayers,
      note: `${cfg.kvLoraRank + cfg.qkRope} f32 × ${contextTokens} positions per MLA layer`,
    },
    { name: "scratch", bytes: scratchBytes(cfg, chunk, contextTokens, threads), note: `activations, ${chunk}-token prefill chunk, ${threads} threads` },
  ];
}

const sum = (items: { bytes: number }[]): number => items.reduce((a, i) => a + i.bytes, 0);

/** The smallest total any plan needs at this context: nothing pinned, one ring slot, top-k experts. */
export function floorBytes(input: PlanInput, threads: number, chunk: number): number {
  const largest = Math.max(input.headBytes, ...input.trunkBytesPerLayer);
  return sum(fixedItems(input, threads, chunk)) + ioBufferBytes(largest) + input.cfg.topK * ioBufferBytes(input.expertBytes);
}

export function planMemory(input: PlanInput): MemoryPlan {
  const { cfg, budgetBytes, contextTokens } = input;
  const threads = input.threads ?? 1;
  const chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK;
  if (input.trunkBytesPerLayer.length !== cfg.numLayers)
    throw new K3Error("INTERNAL", `trunk sizes for ${input.trunkBytesPerLayer.length} layers, config has ${cfg.numLayers}`);
  if (!Number.isInteger(contextTokens) || contextTokens < 1) throw new K3Error("USAGE", `context must be ≥ 1 token, got ${contextTokens}`);

  const floor = floorBytes(input, threads, chunk);
  if (floor > budgetBytes) {
    const maxContext = maxContextAt(input, threads, chunk);
    throw new K3Error("BUDGET", `RAM budget ${gib(budgetBytes)} is below the floor ${gib(floor)} for a ${contextTokens}-token context`, [
      `need ${floor} bytes (${gib(floor)}): whole trunk streamed through 1 ring slot, ${cfg.topK} expert slots`,
      `usable ${budgetBytes} bytes (${gib(budgetBytes)})`,
      maxContext > 0 ? `at this budget the context could be at most ${maxContext} tokens (--context ${maxContext})` : "no context length fits this budget",
    ]);
  }

  const expertSlotBytes = ioBufferBytes(input.expertBytes);
  const expertFloor = cfg.topK * expertSlotBytes;
  const fixed = fixedItems(input, threads, chunk);
  const forTrunk = budgetBytes - sum(fixed) - expertFloor; // what pinned units + ring may use

  // Greedy pinning, largest first. cost = Σ pinned buffers + ringSlots × buffer(largest streamed).
  const units = trunkUnits(input);
  const largestUnit = units[0]!.bytes;
  const ringSlots: 1 | 2 = 2 * ioBufferBytes(largestUnit) <= forTrunk ? 2 : 1;
  const pinned = new Set<TrunkUnit>();
  let pinnedBytes = 0;
  const ringCost = () => {
    const largestStreamed = units.find((u) => !pinned.has(u));
    return largestStreamed ? ringSlots * ioBufferBytes(largestStreamed.bytes) : 0;
  };
  for (const u of units) {
    pinned.add(u);
    const cost = pinnedBytes + ioBufferBytes(u.bytes) + ringCost();
    if (cost <= forTrunk) pinnedBytes += ioBufferBytes(u.bytes);
    else pinned.delete(u);
  }
  const streamed = units.filter((u) => !pinned.has(u));
  const ring = streamed.length ? ringSlots : 0;
  const ringSlotBytes = streamed.length ? ioBufferBytes(streamed[0]!.bytes) : 0;

  const expertCount = moeLayerCount(cfg) * cfg.numExperts;
  const left = forTrunk - pinnedBytes - ring * ringSlotBytes + expertFloor;
  const expertSlots = Math.min(expertCount, Math.floor(left / expertSlotBytes));

  const pinnedLayers = [...pinned].filter((u) => u.layer !== null).map((u) => u.layer!).sort((a, b) => a - b);
  const streamedLayers = streamed.filter((u) => u.layer !== null).map((u) => u.layer!).sort((a, b) => a - b);
  const headResident = [...pinned].some((u) => u.layer === null);
  const pinnedLayerBytes = pinnedLayers.reduce((a, l) => a + ioBufferBytes(input.trunkBytesPerLayer[l]!), 0);
  const items: PlanItem[] = [
    ...fixed,
    {
      name: "pinned trunk",
      bytes: pinnedLayerBytes,
      count: pinnedLayers.length,
      note: `${pinnedLayers.length} of ${cfg.numLayers} layers resident (largest first)`,
    },
    { name: "lm_head", bytes: headResident ? ioBufferBytes(input.headBytes) : 0, note: headResident ? "resident" : "streamed through the ring" },
    {
      name: "trunk ring",
      bytes: ring * ringSlotBytes,
      count: ring,
      note: ring === 0 ? "nothing streamed" : ring === 1 ? "1 slot: the reader must not run ahead" : "2 slots: next unit read while one computes",
    },
    {
      name: "expert slots",
      bytes: expertSlots * expertSlotBytes,
      count: expertSlots,
      note: `${(expertSlots / (cfg.topK * moeLayerCount(cfg))).toFixed(2)}× one token's working set of ${cfg.topK * moeLayerCount(cfg)}`,
    },
  ];
  const totalBytes = sum(items);
  if (totalBytes > budgetBytes) throw new K3Error("INTERNAL", `plan sums to ${totalBytes} over the budget ${budgetBytes}`);
  return {
    budgetBytes, contextTokens, threads, prefillChunk: chunk,
    items, totalBytes, freeBytes: budgetBytes - totalBytes,
    pinnedLayers, streamedLayers,
    head: headResident ? "resident" : "streamed",
    embed: "gathered",
    ringSlots: ring as 0 | 1 | 2,
    ringSlotBytes,
    readerMayRunAhead: ring === 2,
    expertSlots, expertSlotBytes,
    expertWorkingSet: cfg.topK * moeLayerCount(cfg),
    expertCount,
    streamedBytesPerToken: streamed.reduce((a, u) => a + u.bytes, 0),
    expertBytesPerTokenAllMiss: cfg.topK * moeLayerCount(cfg) * input.expertBytes,
  };
}

/** Largest context whose floor fits the budget (0 if none): binary search, floor grows with context. */
export function maxContextAt(input: PlanInput, threads = input.threads ?? 1, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  const fits = (ctx: number) => floorBytes({ ...input, contextTokens: ctx }, threads, chunk) <= input.budgetBytes;
  if (!fits(1)) return 0;
  let lo = 1;
  let hi = 2;
  while (fits(hi) && hi < 2 ** 40) hi *= 2;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}
