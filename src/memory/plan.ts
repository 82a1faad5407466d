// The memory planner: sums every allocation before any is made (STREAMING.md §6) and decides
// which trunk units are pinned, how many ring slots stream the rest, and how many expert slots
// the cache gets. Pure arithmetic on the config and byte figures: printable without weights.
//
// What it sums is what the code allocates: the forward pass's scratch and a session's state come
// from the model's buffer table (src/model/buffers.ts), disk buffers from the streaming
// provider's read plans (StreamSlots); test/plan-allocations.test.ts checks plan ≥ allocation.
//
// Decisions (docs/PLAN.md has the reasoning):
//  - A "trunk unit" is one layer's non-expert tensors or the head (lm_head + final norms): each
//    is read in full every token, so each pinned byte saves exactly one byte of disk read per
//    token, whichever unit it belongs to. Units are pinned largest first (ties: lower layer
//    first, the head after layers of equal size): the largest streamed unit sets the ring slot
//    size, so pinning big units first shrinks the ring. Greedy: a unit that does not fit is
//    skipped and smaller ones are tried.
//  - Trunk before expert cache (STREAMING.md §2): experts get what the trunk leaves, but never
//    fewer than top-k slots (one layer's experts must be resident at once).
//  - Ring: 2 slots of the largest streamed unit (next read in flight while one computes); 1 slot
//    only if 2 do not fit, and then the reader must not run ahead (it would overwrite the layer
//    in use: STREAMING.md §2). 0 when everything is pinned.
//  - Embedding: rows gathered from disk per token (one E-wide bf16 row per token: 14 KB on K3),
//    never resident: 2.3 GB resident would buy 14 KB of reads per token, the same bytes buy
//    ~130 expert slots.
//  - Every disk buffer is sized for an O_DIRECT read widened to 4096-byte alignment.
//  - Parallel sessions (`parallel`, k3 serve): each holds its own KDA state and an MLA cache for
//    the whole context; one pass carries a decode row per session plus a prefill chunk, so the
//    scratch has chunk + parallel − 1 rows and parallel logit rows (src/model/buffers.ts
//    passShape). Sessions come before the trunk: each one costs pins (or expert slots) at every
//    budget, and buys one more stream per trunk read (docs/PLAN.md, the trade-off).
//  - The prefix cache's RAM tier (`prefixCacheBytes`) is a fixed item like the sessions.
import { K3Error } from "../errors.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { autoDrafts, forwardBufferBytes, kdaStateBytes, mlaCacheBytes, passShape } from "../model/buffers.ts";
import { embedRowBufferBytes } from "./embed-rows.ts";
import { gib } from "./ram.ts";

/** Bun + catalogue + tokenizer + JIT/GC growth. Measured: 206 MB RSS after the release's metadata
 *  catalogue (497k tensor specs) on bun 1.4.5; the rest is margin. */
export const RUNTIME_HEADROOM_BYTES = 384 * 2 ** 20;
export const IO_ALIGN = 4096;
export const DEFAULT_PREFILL_CHUNK = 32;
export const DEFAULT_CONTEXT = 4096;
/** Sessions `k3 serve` runs at once when the budget allows and nothing else is asked: past ~4,
 *  a step's distinct experts (≈ streams × top-k per layer) grow as fast as the streams, so only
 *  the trunk's share keeps amortising, while every session costs its state (docs/PLAN.md). */
export const DEFAULT_PARALLEL_CAP = 4;
/** The most sessions one engine runs at once (a pass has a logit row per session). */
export const MAX_PARALLEL = 64;
/** The prefix cache's default RAM tier: at most this share of the budget (and at most one
 *  full-context snapshot per parallel session, and never below the floor). */
export const PREFIX_CACHE_BUDGET_SHARE = 0.1;

/**
 * The context limit to size for: `requested`, else DEFAULT_CONTEXT, never past the model's
 * `max_position_embeddings` (positions the model was not built for). The default is lowered to
 * it quietly (a small model); a request past it is a usage error naming both numbers.
 */
export function contextFor(cfg: ModelConfig, requested: number | undefined): number {
  if (requested !== undefined && requested > cfg.maxPositions)
    throw new K3Error("USAGE", `--context ${requested} is more than this model's max_position_embeddings (${cfg.maxPositions})`, [
      `use --context ${cfg.maxPositions} or less`,
    ]);
  return requested ?? Math.min(DEFAULT_CONTEXT, cfg.maxPositions);
}

/**
 * Buffer sizes the streaming provider allocates for each trunk unit (layers 0..N−1, then the
 * head: lm_head + final norms) and for one expert slot. From a checkpoint they are its read
 * plans' sizes (src/memory/slots.ts: exact, whatever the layout); from metadata alone, the
 * release's layout is assumed (`censusSlots`).
 */
export interface StreamSlots {
  unitBytes: number[]; // [numLayers + 1]
  expertBytes: number;
}

export interface PlanInput {
  cfg: ModelConfig;
  trunkBytesPerLayer: number[]; // [numLayers] non-expert bytes of each layer
  expertBytes: number; // one routed expert (packed + scales)
  embedBytes: number;
  headBytes: number;
  finalBytes: number;
  budgetBytes: number; // usable RAM for this process
  contextTokens: number; // MLA cache is sized for this many positions
  threads?: number; // compute threads (reported; the scratch does not depend on it)
  prefillChunk?: number; // tokens per forward pass (sizes the scratch)
  slots?: StreamSlots; // default: censusSlots (one aligned read per unit and per expert)
  drafts?: number; // most drafts per speculative verify pass (sizes its scratch); default autoDrafts(chunk)
  parallel?: number; // sessions held at once, each with its own state (default 1)
  prefixCacheBytes?: number; // the prefix cache's RAM tier (default 0)
}

/** The planner's input from a byte census (checkpoint or release metadata). */
export function planInputFromCensus(
  cfg: ModelConfig,
  census: { trunkBytesPerLayer: number[]; expertBytes: number; embedBytes: number; headBytes: number; finalBytes: number },
  budgetBytes: number,
  contextTokens: number,
  threads?: number,
  prefillChunk?: number,
  slots?: StreamSlots,
  drafts?: number,
  sessions: { parallel?: number; prefixCacheBytes?: number } = {},
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
    slots,
    drafts,
    ...sessions,
  };
}

export interface PlanItem {
  name: string;
  bytes: number;
  count?: number;
  note: string;
}

export interface TrunkUnit {
  name: string; // "layer 5" | "head"
  layer: number | null; // null for the head
  bytes: number; // payload read per token when streamed
  slotBytes: number; // buffer it needs (pinned or as a ring slot)
}

export interface MemoryPlan {
  budgetBytes: number;
  contextTokens: number;
  threads: number;
  prefillChunk: number;
  parallel: number; // sessions held at once
  prefixCacheBytes: number; // the prefix cache's RAM tier
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

/** The release's layout (MODEL.md §3): a layer's trunk and an expert are one read each; the head
 *  is lm_head plus the final norms, two reads (they sit apart in the shards). */
export function censusSlots(input: Pick<PlanInput, "trunkBytesPerLayer" | "headBytes" | "finalBytes" | "expertBytes">): StreamSlots {
  return {
    unitBytes: [...input.trunkBytesPerLayer.map(ioBufferBytes), ioBufferBytes(input.headBytes) + ioBufferBytes(input.finalBytes)],
    expertBytes: ioBufferBytes(input.expertBytes),
  };
}

export const moeLayerCount = (cfg: ModelConfig): number => cfg.numLayers - cfg.firstKDense;

/** Units in pinning order: largest buffer first; ties → layers in order, then the head. */
function trunkUnits(input: PlanInput): TrunkUnit[] {
  const slots = input.slots ?? censusSlots(input);
  const N = input.cfg.numLayers;
  if (slots.unitBytes.length !== N + 1) throw new K3Error("INTERNAL", `slot sizes for ${slots.unitBytes.length} trunk units, config has ${N} layers + the head`);
  const units: TrunkUnit[] = input.trunkBytesPerLayer.map((bytes, layer) => ({ name: `layer ${layer}`, layer, bytes, slotBytes: slots.unitBytes[layer]! }));
  units.push({ name: "head", layer: null, bytes: input.headBytes + input.finalBytes, slotBytes: slots.unitBytes[N]! });
  return units.sort((a, b) => b.slotBytes - a.slotBytes || (a.layer ?? Infinity) - (b.layer ?? Infinity));
}

/** Sessions the input asks for, checked. */
function parallelOf(input: PlanInput): number {
  const p = input.parallel ?? 1;
  if (!Number.isInteger(p) || p < 1 || p > MAX_PARALLEL) throw new K3Error("USAGE", `--parallel must be an integer from 1 to ${MAX_PARALLEL}, got ${p}`);
  return p;
}

/** Bytes of one session's state (KDA state and conv history, MLA cache for the whole context). */
export function sessionStateBytes(cfg: ModelConfig, contextTokens: number): number {
  const kdaLayers = cfg.layerKinds.filter((k) => k === "kda").length;
  const mlaLayers = cfg.layerKinds.filter((k) => k === "mla").length;
  return kdaLayers * kdaStateBytes(cfg) + mlaLayers * mlaCacheBytes(cfg, contextTokens);
}

/** Allocations that do not depend on the pin/stream choice (the expert floor is added apart). */
function fixedItems(input: PlanInput, chunk: number): PlanItem[] {
  const { cfg, contextTokens } = input;
  const drafts = input.drafts ?? autoDrafts(chunk);
  const P = parallelOf(input);
  const prefix = input.prefixCacheBytes ?? 0;
  if (!Number.isSafeInteger(prefix) || prefix < 0) throw new K3Error("USAGE", `the prefix cache's RAM size must be ≥ 0 bytes, got ${prefix}`);
  const kdaLayers = cfg.layerKinds.filter((k) => k === "kda").length;
  const mlaLayers = cfg.layerKinds.filter((k) => k === "mla").length;
  const per = P === 1 ? "" : `, × ${P} sessions`;
  return [
    { name: "runtime", bytes: RUNTIME_HEADROOM_BYTES, note: "bun, catalogue, tokenizer, GC headroom" },
    { name: "embedding", bytes: embedRowBufferBytes(cfg), note: `one row buffer: rows gathered from disk (${gib(input.embedBytes)} not resident)` },
    { name: "KDA state", bytes: P * kdaLayers * kdaStateBytes(cfg), count: P * kdaLayers, note: `H·D·D + conv history, f32, per KDA layer${per}` },
    {
      name: "MLA cache",
      bytes: P * mlaLayers * mlaCacheBytes(cfg, contextTokens),
      count: P * mlaLayers,
      note: `${cfg.kvLoraRank + cfg.qkRope} f32 × ${contextTokens} positions per MLA layer${per}`,
    },
    {
      name: "scratch",
      bytes: forwardBufferBytes(cfg, passShape(chunk, P, contextTokens, drafts)),
      note: `forward-pass buffers (src/model/buffers.ts) for ${chunk}-token chunks${P === 1 ? "" : ` + ${P - 1} decode rows`}${drafts > 0 ? `, verify passes of up to ${drafts} drafts` : ""}`,
    },
    ...(prefix > 0 ? [{ name: "prefix cache", bytes: prefix, note: "RAM tier: session snapshots keyed by token prefix" }] : []),
  ];
}

const sum = (items: { bytes: number }[]): number => items.reduce((a, i) => a + i.bytes, 0);

/** The smallest total any plan needs at this context: nothing pinned, one ring slot, top-k experts. */
export function floorBytes(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  const slots = input.slots ?? censusSlots(input);
  return sum(fixedItems(input, chunk)) + Math.max(...slots.unitBytes) + input.cfg.topK * slots.expertBytes;
}

/**
 * Greedy pinning, largest first, within `forTrunk` bytes: cost = Σ pinned buffers + ringSlots ×
 * buffer(largest streamed unit). Two ring slots when two of the largest unit fit, else one.
 */
function choosePinned(units: TrunkUnit[], forTrunk: number): { pinned: Set<TrunkUnit>; pinnedBytes: number; ringSlots: 1 | 2 } {
  const ringSlots: 1 | 2 = 2 * units[0]!.slotBytes <= forTrunk ? 2 : 1;
  const pinned = new Set<TrunkUnit>();
  let pinnedBytes = 0;
  const ringCost = () => {
    const largestStreamed = units.find((u) => !pinned.has(u));
    return largestStreamed ? ringSlots * largestStreamed.slotBytes : 0;
  };
  for (const u of units) {
    pinned.add(u);
    const cost = pinnedBytes + u.slotBytes + ringCost();
    if (cost <= forTrunk) pinnedBytes += u.slotBytes;
    else pinned.delete(u);
  }
  return { pinned, pinnedBytes, ringSlots };
}

export function planMemory(input: PlanInput): MemoryPlan {
  const { cfg, budgetBytes, contextTokens } = input;
  const threads = input.threads ?? 1;
  const chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK;
  if (input.trunkBytesPerLayer.length !== cfg.numLayers)
    throw new K3Error("INTERNAL", `trunk sizes for ${input.trunkBytesPerLayer.length} layers, config has ${cfg.numLayers}`);
  if (!Number.isInteger(contextTokens) || contextTokens < 1) throw new K3Error("USAGE", `context must be ≥ 1 token, got ${contextTokens}`);
  if (!Number.isInteger(chunk) || chunk < 1) throw new K3Error("USAGE", `prefill chunk must be ≥ 1 token, got ${chunk}`);

  const floor = floorBytes(input, chunk);
  if (floor > budgetBytes) {
    const maxContext = maxContextAt(input, chunk);
    const sessions = parallelOf(input) > 1 ? ` and ${parallelOf(input)} sessions` : "";
    throw new K3Error("BUDGET", `RAM budget ${gib(budgetBytes)} is below the floor ${gib(floor)} for a ${contextTokens}-token context${sessions}`, [
      `need ${floor} bytes (${gib(floor)}): whole trunk streamed through 1 ring slot, ${cfg.topK} expert slots`,
      `usable ${budgetBytes} bytes (${gib(budgetBytes)})`,
      maxContext > 0 ? `at this budget the context could be at most ${maxContext} tokens (--context ${maxContext})` : "no context length fits this budget",
      ...(parallelOf(input) > 1 ? [`${parallelOf(input)} parallel sessions: at most ${maxParallelAt(input, chunk)} fit this budget (--parallel)`] : []),
      ...((input.prefixCacheBytes ?? 0) > 0 ? [`the prefix cache's RAM tier takes ${gib(input.prefixCacheBytes!)}`] : []),
    ]);
  }

  const expertSlotBytes = (input.slots ?? censusSlots(input)).expertBytes;
  const expertFloor = cfg.topK * expertSlotBytes;
  const fixed = fixedItems(input, chunk);
  const forTrunk = budgetBytes - sum(fixed) - expertFloor; // what pinned units + ring may use

  const units = trunkUnits(input);
  const { pinned, pinnedBytes, ringSlots } = choosePinned(units, forTrunk);
  const streamed = units.filter((u) => !pinned.has(u));
  const ring = streamed.length ? ringSlots : 0;
  const ringSlotBytes = streamed.length ? streamed[0]!.slotBytes : 0;

  const expertCount = moeLayerCount(cfg) * cfg.numExperts;
  const left = forTrunk - pinnedBytes - ring * ringSlotBytes + expertFloor;
  const expertSlots = Math.min(expertCount, Math.floor(left / expertSlotBytes));

  const pinnedLayers = [...pinned].filter((u) => u.layer !== null).map((u) => u.layer!).sort((a, b) => a - b);
  const streamedLayers = streamed.filter((u) => u.layer !== null).map((u) => u.layer!).sort((a, b) => a - b);
  const head = units.find((u) => u.layer === null)!;
  const headResident = pinned.has(head);
  const workingSet = cfg.topK * moeLayerCount(cfg);
  const items: PlanItem[] = [
    ...fixed,
    {
      name: "pinned trunk",
      bytes: pinnedBytes - (headResident ? head.slotBytes : 0),
      count: pinnedLayers.length,
      note: `${pinnedLayers.length} of ${cfg.numLayers} layers resident (largest first)`,
    },
    { name: "head", bytes: headResident ? head.slotBytes : 0, note: headResident ? "lm_head + final norms, resident" : "lm_head + final norms, streamed through the ring" },
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
      note: `${(expertSlots / workingSet).toFixed(2)}× one token's working set of ${workingSet}`,
    },
  ];
  const totalBytes = sum(items);
  if (totalBytes > budgetBytes) throw new K3Error("INTERNAL", `plan sums to ${totalBytes} over the budget ${budgetBytes}`);
  return {
    budgetBytes, contextTokens, threads, prefillChunk: chunk,
    parallel: parallelOf(input), prefixCacheBytes: input.prefixCacheBytes ?? 0,
    items, totalBytes, freeBytes: budgetBytes - totalBytes,
    pinnedLayers, streamedLayers,
    head: headResident ? "resident" : "streamed",
    embed: "gathered",
    ringSlots: ring as 0 | 1 | 2,
    ringSlotBytes,
    readerMayRunAhead: ring === 2,
    expertSlots, expertSlotBytes,
    expertWorkingSet: workingSet,
    expertCount,
    streamedBytesPerToken: streamed.reduce((a, u) => a + u.bytes, 0),
    expertBytesPerTokenAllMiss: workingSet * input.expertBytes,
  };
}

/** Largest context whose floor fits the budget (0 if none): binary search, floor grows with context. */
export function maxContextAt(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  const fits = (ctx: number) => floorBytes({ ...input, contextTokens: ctx }, chunk) <= input.budgetBytes;
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

/** Most sessions (≤ MAX_PARALLEL) whose floor fits the budget at this context (0 if none). */
export function maxParallelAt(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  let best = 0;
  for (let p = 1; p <= MAX_PARALLEL; p++) {
    if (floorBytes({ ...input, parallel: p }, chunk) > input.budgetBytes) break;
    best = p;
  }
  return best;
}

/** `k3 serve`'s default: what the budget allows, at most DEFAULT_PARALLEL_CAP (1 when even one
 *  does not fit: planMemory then refuses with the numbers). */
export function defaultParallel(input: PlanInput): number {
  return Math.max(1, Math.min(DEFAULT_PARALLEL_CAP, maxParallelAt(input)));
}

/**
 * The prefix cache's default RAM tier for `input.parallel` sessions: one full-context snapshot
 * per session, at most PREFIX_CACHE_BUDGET_SHARE of the budget, and only what is left above the
 * floor (0 when nothing is). The disk tier (--prefix-cache-dir) holds more.
 */
export function defaultPrefixCacheBytes(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  const P = parallelOf(input);
  const above = input.budgetBytes - floorBytes({ ...input, prefixCacheBytes: 0 }, chunk);
  const want = Math.min(P * sessionStateBytes(input.cfg, input.contextTokens), Math.floor(PREFIX_CACHE_BUDGET_SHARE * input.budgetBytes));
  return Math.max(0, Math.min(want, above));
}
