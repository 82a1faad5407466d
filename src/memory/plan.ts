// The memory planner: sums every allocation before any is made (STREAMING.md §6) and decides
// which trunk units are pinned, how many ring slots stream the rest, and how many expert slots
// the cache gets. Pure arithmetic on the config and byte figures: printable without weights.
//
// What it sums is what the code allocates: the forward pass's scratch and a session's state come
// from the model's buffer table (src/model/buffers.ts), disk buffers from the streaming
// provider's read plans (StreamSlots); test/plan-allocations.test.ts checks plan ≥ allocation.
//
// Decisions (docs/PLAN.md has the reasoning):
//  - The trunk (each layer's non-expert tensors and the head: lm_head + final norms) is read in
//    full every token, so each pinned byte saves exactly one byte of disk read per token. It is
//    split into pieces (src/memory/pieces.ts): each unit's small tensors (its "core") and its
//    matrices in pieces of a few hundred MB. Pieces are pinned largest first (ties: walk order)
//    greedily: a piece that does not fit is skipped and smaller ones are tried; the largest
//    streamed piece of each kind sets its ring's slot size.
//  - Trunk before expert cache (STREAMING.md §2): experts get what the trunk leaves, but never
//    fewer than top-k slots (one layer's experts must be resident at once).
//  - Rings: 2 slots each (next piece read while one computes), also at the floor. Only a layout
//    of whole units (pieceBytes = Infinity, the layout before issue 16) may fall back to 1 matrix
//    slot, and then the reader must not run ahead (it would overwrite the piece in use:
//    STREAMING.md §2). 0 when every piece of that kind is pinned.
//  - Embedding: rows gathered from disk per token (one E-wide bf16 row per token: 14 KB on K3),
//    never resident: 2.3 GB resident would buy 14 KB of reads per token, the same bytes buy
//    ~130 expert slots.
//  - Every disk buffer is sized for an O_DIRECT read widened to 4096-byte alignment.
//  - Parallel sessions (`parallel`, k3 serve): each holds its own KDA state and an MLA cache for
//    the whole context; one pass carries a decode row per session plus a prefill chunk, so the
//    scratch has chunk + parallel − 1 rows and a logit row per session (with speculation, per
//    verify row, and a rollback slot per session: batched steps verify several sessions' drafts;
//    src/model/buffers.ts passShape). Sessions come before the trunk: each one costs pins (or expert slots) at every
//    budget, and buys one more stream per trunk read (docs/PLAN.md, the trade-off).
//  - The prefix cache's RAM tier (`prefixCacheBytes`) is a fixed item like the sessions.
//  - Prefill chunk (when not given): the size, 32…1024 tokens, with the fewest modeled disk bytes
//    for a reference session (a REFERENCE_PROMPT-token prompt, then REFERENCE_GENERATION decoded
//    tokens): a bigger chunk reads the streamed trunk and each distinct expert once for more
//    tokens, but its scratch (src/model/buffers.ts, per row) is taken from the pins and the expert
//    cache. Sizes whose disk bytes tie (everything resident) go to the smallest chunk that gives
//    every expert matmul ≥ ROWS_PER_EXPERT_CALL rows (the batched kernels' efficient range).
import { K3Error } from "../errors.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { autoDrafts, forwardBufferBytes, kdaStateBytes, mlaCacheBytes, passShape } from "../model/buffers.ts";
import type { DraftPlanInput } from "./draft-plan.ts";
import { embedRowBufferBytes } from "./embed-rows.ts";
import { formatBytes, formatBytesApart } from "../format.ts";
import { gib } from "./ram.ts";

/** Bun + catalogue + tokenizer + JIT/GC growth. Measured: 206 MB RSS after the release's metadata
 *  catalogue (497k tensor specs) on bun 1.4.5; the rest is margin. */
export const RUNTIME_HEADROOM_BYTES = 384 * 2 ** 20;
export const IO_ALIGN = 4096;
/** The smallest prefill chunk the planner considers, and the floor's chunk. */
export const DEFAULT_PREFILL_CHUNK = 32;
export const MAX_PREFILL_CHUNK = 1024;
/** The session the chunk choice is made for: prompt tokens, then decoded tokens. */
export const REFERENCE_PROMPT = 1024;
export const REFERENCE_GENERATION = 256;
/** Rows per expert matmul from which the batched kernels run near their peak (docs/BENCH-KERNELS.md). */
export const ROWS_PER_EXPERT_CALL = 64;
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

/** One trunk piece as the planner sees it (src/memory/slots.ts computes these). */
export interface PieceSlot {
  unit: number; // layer, or numLayers for the head
  kind: "core" | "matrix";
  bytes: number; // payload read per token when streamed
  slotBytes: number; // buffer it needs (pinned, or as a ring slot)
}

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
 * Buffer sizes the streaming provider allocates for each trunk piece (in walk order: ids are
 * indices) and for one expert slot. From a checkpoint they are its read plans' sizes
 * (src/memory/slots.ts: exact, whatever the layout); from metadata alone, bounds.
 */
export interface StreamSlots {
  pieces: PieceSlot[];
  expertBytes: number;
  /** Target size of a matrix piece; Infinity = one piece per unit (the layout before issue 16). */
  pieceBytes: number;
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
  prefillChunk?: number; // tokens per forward pass (sizes the scratch); default: the planner chooses
  promptTokens?: number; // prompt length the chunk is chosen for (default REFERENCE_PROMPT)
  slots?: StreamSlots; // default: censusSlots (one aligned read per unit and per expert)
  drafts?: number; // most drafts per speculative verify pass (sizes its scratch); default autoDrafts(chunk)
  parallel?: number; // sessions held at once, each with its own state (default 1)
  prefixCacheBytes?: number; // the prefix cache's RAM tier (default 0)
  hedgeBuffers?: number; // spare expert buffers for hedged reads (with --mirror; default 0)
  draft?: DraftPlanInput; // a draft model (--draft): resident weights, per-session state, scratch, capture
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
  sessions: { parallel?: number; prefixCacheBytes?: number; draft?: DraftPlanInput } = {},
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

export interface PlanPiece extends PieceSlot {
  id: number;
  pinned: boolean;
}

export interface MemoryPlan {
  budgetBytes: number;
  contextTokens: number;
  threads: number;
  prefillChunk: number;
  parallel: number; // sessions held at once
  prefixCacheBytes: number; // the prefix cache's RAM tier
  chunkChoice: ChunkChoice; // how prefillChunk was decided
  items: PlanItem[]; // every allocation; Σ bytes = totalBytes
  totalBytes: number;
  freeBytes: number; // budget − total (less than one expert slot unless the cache holds every expert)
  /** Every trunk piece in walk order, and whether it is pinned. */
  pieces: PlanPiece[];
  pieceBytes: number; // target size of a matrix piece (Infinity: whole units)
  pinnedPieces: number[];
  pinnedLayers: number[]; // layers whose every piece is pinned
  streamedLayers: number[]; // layers with at least one piece streamed
  head: "resident" | "streamed"; // resident when every piece of the head is pinned
  embed: "gathered";
  ringSlots: 0 | 1 | 2; // matrix pieces' ring
  ringSlotBytes: number;
  coreSlots: 0 | 2; // cores' ring
  coreSlotBytes: number;
  readerMayRunAhead: boolean; // false with one matrix ring slot
  expertSlots: number;
  expertSlotBytes: number;
  expertWorkingSet: number; // top-k × MoE layers: one token's expert requests
  expertCount: number; // every routed expert in the checkpoint
  streamedBytesPerToken: number; // trunk units read from disk each token (decode)
  expertBytesPerTokenAllMiss: number; // expert bytes a token reads with 0 cache hits
  hedgeBuffers: number; // spare expert buffers for hedged reads (the "hedge buffers" item)
}

/** Buffer for an O_DIRECT read of `bytes` at any offset: widened to 4096 on both ends. */
export const ioBufferBytes = (bytes: number): number => Math.ceil(bytes / IO_ALIGN) * IO_ALIGN + IO_ALIGN;

/** Without the pieces' figures (hand-made inputs): each unit one piece, read as the release lays
 *  it out — a layer's trunk in one read, the head in two (lm_head and the final norms sit apart). */
export function censusSlots(input: Pick<PlanInput, "trunkBytesPerLayer" | "headBytes" | "finalBytes" | "expertBytes">): StreamSlots {
  const layers = input.trunkBytesPerLayer.map((bytes, unit): PieceSlot => ({ unit, kind: "matrix", bytes, slotBytes: ioBufferBytes(bytes) }));
  const head: PieceSlot = { unit: layers.length, kind: "matrix", bytes: input.headBytes + input.finalBytes, slotBytes: ioBufferBytes(input.headBytes) + ioBufferBytes(input.finalBytes) };
  return { pieces: [...layers, head], expertBytes: ioBufferBytes(input.expertBytes), pieceBytes: Infinity };
}

export const moeLayerCount = (cfg: ModelConfig): number => cfg.numLayers - cfg.firstKDense;

/** Pieces in pinning order: largest buffer first; ties → walk order (the head's pieces last). */
function pinningOrder(slots: StreamSlots, numLayers: number): PlanPiece[] {
  const units = new Set(slots.pieces.map((p) => p.unit));
  if (units.size !== numLayers + 1 || slots.pieces.some((p) => p.unit < 0 || p.unit > numLayers))
    throw new K3Error("INTERNAL", `trunk pieces cover units ${[...units].sort((a, b) => a - b).join(",")}, config has ${numLayers} layers + the head`);
  return slots.pieces.map((p, id) => ({ ...p, id, pinned: false })).sort((a, b) => b.slotBytes - a.slotBytes || a.id - b.id);
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

const largestOf = (pieces: PieceSlot[], kind: PieceSlot["kind"]): number => pieces.reduce((m, p) => (p.kind === kind ? Math.max(m, p.slotBytes) : m), 0);

/** Matrix ring slots a plan never goes below: 2, except for whole units (the old layout), 1. */
const minMatrixSlots = (slots: StreamSlots): 1 | 2 => (slots.pieceBytes === Infinity ? 1 : 2);

/** Allocations that do not depend on the pin/stream choice (the expert floor is added apart). */
function fixedItems(input: PlanInput, chunk: number): PlanItem[] {
  const { cfg, contextTokens } = input;
  // Speculation's verify buffers by default at any number of sessions: batched steps verify
  // several sessions' drafts, each in a rollback slot of its own (docs/SERVER.md "How a step is filled").
  const drafts = input.drafts ?? autoDrafts(chunk);
  const P = parallelOf(input);
  const prefix = input.prefixCacheBytes ?? 0;
  const hedges = input.hedgeBuffers ?? 0;
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
      bytes: forwardBufferBytes(cfg, passShape(chunk, P, contextTokens, drafts, input.draft?.taps ?? 0)),
      note: `forward-pass buffers (src/model/buffers.ts) for ${chunk}-token chunks${P === 1 ? "" : ` + ${P - 1} decode rows`}${drafts > 0 ? `, verify passes of up to ${drafts} drafts${P === 1 ? "" : ` per session, ${P} rollback slots`}` : ""}${input.draft ? `, capture of ${input.draft.taps} layers` : ""}`,
    },
    ...draftItems(input.draft, P),
    ...(prefix > 0 ? [{ name: "prefix cache", bytes: prefix, note: "RAM tier: session snapshots keyed by token prefix" }] : []),
    ...(hedges > 0
      ? [{ name: "hedge buffers", bytes: hedges * (input.slots ?? censusSlots(input)).expertBytes, count: hedges, note: "spare expert buffers: a late read of a mirrored shard is read again into one (--mirror)" }]
      : []),
  ];
}

const sum = (items: { bytes: number }[]): number => items.reduce((a, i) => a + i.bytes, 0);

/** A draft model's lines (src/memory/draft-plan.ts): resident weights, one state per session, scratch. */
function draftItems(d: DraftPlanInput | undefined, sessions: number): PlanItem[] {
  if (!d) return [];
  return [
    { name: "draft", bytes: d.weightBytes, note: `${d.name} (${d.variant}, ${d.format}) resident${d.sharedEmbedding ? ", the target's embedding rows shared" : ", with its own embedding table"}` },
    { name: "draft state", bytes: sessions * d.stateBytes, count: sessions, note: "latent cache for the context + taps ring, per session" },
    { name: "draft scratch", bytes: d.scratchBytes, note: "the draft layer's buffers (src/model/buffers.ts)" },
  ];
}

/** The smallest total any plan needs at this context: nothing pinned, the rings at their minimum
 *  (2 slots; 1 matrix slot for whole units), top-k expert slots. */
export function floorBytes(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  const slots = input.slots ?? censusSlots(input);
  const rings = 2 * largestOf(slots.pieces, "core") + minMatrixSlots(slots) * largestOf(slots.pieces, "matrix");
  return sum(fixedItems(input, chunk)) + rings + input.cfg.topK * slots.expertBytes;
}

/**
 * Greedy pinning, largest first, within `forTrunk` bytes: cost = Σ pinned buffers + Σ per ring
 * slots × buffer(its largest streamed piece). Two matrix slots when two fit, else (whole units
 * only) one; cores always get two.
 */
function choosePinned(order: PlanPiece[], forTrunk: number): { pinnedBytes: number; matrixSlots: 1 | 2 } {
  const matrixSlots: 1 | 2 = 2 * largestOf(order, "matrix") + 2 * largestOf(order, "core") <= forTrunk ? 2 : 1;
  let pinnedBytes = 0;
  const ringCost = () => {
    const core = order.find((p) => !p.pinned && p.kind === "core");
    const matrix = order.find((p) => !p.pinned && p.kind === "matrix");
    return (core ? 2 * core.slotBytes : 0) + (matrix ? matrixSlots * matrix.slotBytes : 0);
  };
  for (const p of order) {
    p.pinned = true;
    if (pinnedBytes + p.slotBytes + ringCost() <= forTrunk) pinnedBytes += p.slotBytes;
    else p.pinned = false;
  }
  return { pinnedBytes, matrixSlots };
}

/** One prefill chunk size the planner weighed (modeled disk bytes: see chunkCosts). */
export interface ChunkCandidate {
  chunk: number;
  scratchBytes: number; // the forward pass's buffers at this chunk
  prefillBytesPerToken: number; // disk bytes per prompt token (reference prompt)
  decodeBytesPerToken: number; // disk bytes per decoded token under this plan
  sessionBytes: number; // reference prompt + reference generation
  rowsPerExpertCall: number; // chunk·topK/numExperts: tokens one expert matmul sees
}

export interface ChunkChoice {
  source: "given" | "planner";
  promptTokens: number;
  candidates: ChunkCandidate[]; // every size that fits, smallest first (empty when given)
  why: string;
}

type FixedPlan = Omit<MemoryPlan, "chunkChoice">;

/**
 * Modeled disk bytes of a plan at a chunk size. Routing is taken as uniform: a C-token chunk
 * uses N·(1 − (1 − K/N)^C) distinct experts per MoE layer, and a cache holding a fraction f of
 * all experts hits with probability f (a cache holding all of them reads each expert once per
 * session, counted as 0 here). Each pass over a chunk reads the streamed trunk once and each of
 * its distinct experts that misses once; a decoded token reads the streamed trunk and its top-k
 * experts per MoE layer that miss.
 */
function chunkCosts(input: PlanInput, plan: FixedPlan, chunk: number, prompt: number): ChunkCandidate {
  const { cfg } = input;
  const N = cfg.numExperts, K = cfg.topK;
  const miss = expertMiss(plan);
  const expertRead = moeLayerCount(cfg) * input.expertBytes * miss;
  let prefill = 0;
  for (let done = 0; done < prompt; done += chunk) {
    const c = Math.min(chunk, prompt - done);
    prefill += plan.streamedBytesPerToken + expertRead * N * (1 - (1 - K / N) ** c);
  }
  const decode = decodeBytesPerToken(plan);
  return {
    chunk,
    scratchBytes: plan.items.find((i) => i.name === "scratch")!.bytes,
    prefillBytesPerToken: prefill / prompt,
    decodeBytesPerToken: decode,
    sessionBytes: prefill + REFERENCE_GENERATION * decode,
    rowsPerExpertCall: (chunk * K) / N,
  };
}

/** The modeled miss rate of the expert cache: uniform routing, a cache holding a fraction f of
 *  every expert hits with probability f (0 when it holds them all). */
const expertMiss = (plan: Pick<MemoryPlan, "expertSlots" | "expertCount">): number => (plan.expertSlots >= plan.expertCount ? 0 : 1 - plan.expertSlots / plan.expertCount);

/** Modeled disk bytes one decoded token reads under a plan: the streamed trunk, then its top-k
 *  experts per MoE layer that miss the cache (chunkCosts). What the default trunk is chosen by. */
export function decodeBytesPerToken(plan: Pick<MemoryPlan, "expertSlots" | "expertCount" | "streamedBytesPerToken" | "expertBytesPerTokenAllMiss">): number {
  return plan.streamedBytesPerToken + plan.expertBytesPerTokenAllMiss * expertMiss(plan);
}

/**
 * The default trunk (docs/TRUNK.md "The exact trunk"): the exact pack — the same bits — where one
 * exists and its plan reads fewer modeled disk bytes per decoded token than the bf16 trunk's at
 * this budget (more of it pinned, more room for experts); else the bf16 trunk. A plan that does not
 * fit is its BUDGET error: when neither fits, the bf16 one is thrown.
 */
export function chooseTrunk(bf16: MemoryPlan | K3Error, exact: MemoryPlan | K3Error | undefined): { trunk: "bf16" | "exact"; why: string } {
  if (bf16 instanceof K3Error && (!exact || exact instanceof K3Error)) throw bf16;
  if (!exact) return { trunk: "bf16", why: "no exact pack" };
  if (exact instanceof K3Error) return { trunk: "bf16", why: "the exact pack's plan does not fit the budget" };
  if (bf16 instanceof K3Error) return { trunk: "exact", why: "only the exact pack's plan fits the budget" };
  const [x, b] = [decodeBytesPerToken(exact), decodeBytesPerToken(bf16)];
  const gb = (n: number) => `${(n / 1e9).toFixed(2)} GB`;
  return x < b
    ? { trunk: "exact", why: `the exact pack reads ${gb(x)} per decoded token, the bf16 trunk ${gb(b)}` }
    : { trunk: "bf16", why: `the exact pack reads no fewer bytes per decoded token (${gb(x)} vs ${gb(b)})` };
}

/** Candidate chunk sizes: 32, 64, … up to MAX_PREFILL_CHUNK, the prompt and the context. */
export function chunkSizes(promptTokens: number, contextTokens: number): number[] {
  const top = Math.min(MAX_PREFILL_CHUNK, Math.max(promptTokens, 1), Math.max(contextTokens, 1));
  const out = [DEFAULT_PREFILL_CHUNK];
  while (out.at(-1)! < top) out.push(out.at(-1)! * 2);
  return out;
}

/**
 * The chunk for a budget: fewest modeled disk bytes for the reference session (a
 * `promptTokens`-token prompt, then REFERENCE_GENERATION decoded tokens). Sizes within 1% of the
 * fewest tie; among them the smallest reaching ROWS_PER_EXPERT_CALL rows per expert matmul (or
 * the largest tied size): past that point a bigger chunk only takes memory.
 */
export function chooseChunk(candidates: ChunkCandidate[], promptTokens: number, noFit?: number): { chunk: number; why: string } {
  const best = Math.min(...candidates.map((c) => c.sessionBytes));
  const tied = candidates.filter((c) => c.sessionBytes <= best * 1.01);
  const enough = tied.find((c) => c.rowsPerExpertCall >= ROWS_PER_EXPERT_CALL);
  const pick = enough ?? tied.at(-1)!;
  const rows = `${pick.rowsPerExpertCall.toFixed(1)} rows per expert matmul`;
  const parts = [
    best > 0
      ? `fewest modeled disk bytes for a ${promptTokens}-token prompt + ${REFERENCE_GENERATION} decoded tokens`
      : "no disk reads at any size (everything resident)",
  ];
  if (tied.length > 1) {
    if (best > 0) parts.push(`${tied.map((c) => c.chunk).join(", ")} within 1%`);
    parts.push(enough ? `${pick.chunk} is the smallest of those with ≥ ${ROWS_PER_EXPERT_CALL} (${rows})` : `the largest of those (${rows})`);
  }
  if (noFit !== undefined) parts.push(`${noFit} does not fit the budget with two ring slots`);
  return { chunk: pick.chunk, why: parts.join("; ") };
}

export function planMemory(input: PlanInput): MemoryPlan {
  const prompt = input.promptTokens ?? REFERENCE_PROMPT;
  if (!Number.isInteger(prompt) || prompt < 1) throw new K3Error("USAGE", `prompt length must be ≥ 1 token, got ${prompt}`);
  // A RAM tier bigger than the whole budget it lives in: said with the real limit, not as a floor
  // (nor as "must be ≥ 0 bytes" for a size past what a double counts exactly).
  const prefix = input.prefixCacheBytes ?? 0;
  if (prefix > input.budgetBytes)
    throw new K3Error("USAGE", `the prefix cache's RAM tier (${formatBytes(prefix)}) is more than the whole RAM budget ${gib(input.budgetBytes)} it lives inside`, [prefixCacheLimit(input)]);
  if (input.prefillChunk !== undefined)
    return { ...planAt(input, input.prefillChunk), chunkChoice: { source: "given", promptTokens: prompt, candidates: [], why: "given (--chunk)" } };
  const plans = new Map<number, FixedPlan>();
  const candidates: ChunkCandidate[] = [];
  let noFit: number | undefined;
  for (const chunk of chunkSizes(prompt, input.contextTokens)) {
    let plan: FixedPlan;
    try {
      plan = planAt(input, chunk);
    } catch (err) {
      // The smallest size's refusal is the user's error (below the floor); a larger size that
      // does not fit only ends the search (scratch grows with the chunk).
      if (chunk === DEFAULT_PREFILL_CHUNK || !(err instanceof K3Error && err.code === "BUDGET")) throw err;
      noFit = chunk;
      break;
    }
    // A chunk whose scratch leaves one ring slot would serialise every streamed read with the
    // compute (readerMayRunAhead false) where the smallest chunk overlaps them: never worth it.
    if (plan.ringSlots === 1 && plans.size > 0 && plans.get(DEFAULT_PREFILL_CHUNK)!.ringSlots === 2) {
      noFit = chunk;
      break;
    }
    plans.set(chunk, plan);
    candidates.push(chunkCosts(input, plan, chunk, prompt));
  }
  const { chunk, why } = chooseChunk(candidates, prompt, noFit);
  return { ...plans.get(chunk)!, chunkChoice: { source: "planner", promptTokens: prompt, candidates, why } };
}

/** The chunk without a budget (weights resident, no planner): the smallest size giving expert
 * matmuls ROWS_PER_EXPERT_CALL rows, or the largest size (no disk reads to weigh). */
export function residentChunk(cfg: ModelConfig, contextTokens: number, promptTokens = REFERENCE_PROMPT): number {
  const sizes = chunkSizes(promptTokens, contextTokens);
  return sizes.find((c) => (c * cfg.topK) / cfg.numExperts >= ROWS_PER_EXPERT_CALL) ?? sizes.at(-1)!;
}

/** The plan at a fixed prefill chunk (the scratch is sized for it). */
function planAt(input: PlanInput, chunk: number): FixedPlan {
  const { cfg, budgetBytes, contextTokens } = input;
  const threads = input.threads ?? 1;
  if (input.trunkBytesPerLayer.length !== cfg.numLayers)
    throw new K3Error("INTERNAL", `trunk sizes for ${input.trunkBytesPerLayer.length} layers, config has ${cfg.numLayers}`);
  if (!Number.isInteger(contextTokens) || contextTokens < 1) throw new K3Error("USAGE", `context must be ≥ 1 token, got ${contextTokens}`);
  if (!Number.isInteger(chunk) || chunk < 1) throw new K3Error("USAGE", `prefill chunk must be ≥ 1 token, got ${chunk}`);

  refuseBelowFloor(input, chunk);

  const slots = input.slots ?? censusSlots(input);
  const expertSlotBytes = slots.expertBytes;
  const expertFloor = cfg.topK * expertSlotBytes;
  const fixed = fixedItems(input, chunk);
  const forTrunk = budgetBytes - sum(fixed) - expertFloor; // what pinned pieces + rings may use

  const order = pinningOrder(slots, cfg.numLayers);
  const { pinnedBytes, matrixSlots } = choosePinned(order, forTrunk);
  const pieces = [...order].sort((a, b) => a.id - b.id);
  const streamed = order.filter((p) => !p.pinned); // largest first
  const streamedCore = streamed.find((p) => p.kind === "core");
  const streamedMatrix = streamed.find((p) => p.kind === "matrix");
  const ring = streamedMatrix ? matrixSlots : 0;
  const ringSlotBytes = streamedMatrix?.slotBytes ?? 0;
  const coreSlots = streamedCore ? 2 : 0;
  const coreSlotBytes = streamedCore?.slotBytes ?? 0;

  const expertCount = moeLayerCount(cfg) * cfg.numExperts;
  const left = forTrunk - pinnedBytes - ring * ringSlotBytes - coreSlots * coreSlotBytes + expertFloor;
  const expertSlots = Math.min(expertCount, Math.floor(left / expertSlotBytes));

  const N = cfg.numLayers;
  const unitPinned = (u: number) => pieces.every((p) => p.unit !== u || p.pinned);
  const layers = Array.from({ length: N }, (_, L) => L);
  const pinnedLayers = layers.filter(unitPinned);
  const streamedLayers = layers.filter((L) => !unitPinned(L));
  const headResident = unitPinned(N);
  const workingSet = cfg.topK * moeLayerCount(cfg);
  const placed = { ring, ringSlotBytes, coreSlots, coreSlotBytes, expertSlots, expertSlotBytes };
  const items: PlanItem[] = [...fixed, ...placedItems(cfg, pieces, slots.pieceBytes, placed, pinnedLayers.length, headResident)];
  const totalBytes = sum(items);
  if (totalBytes > budgetBytes) throw new K3Error("INTERNAL", `plan sums to ${totalBytes} over the budget ${budgetBytes}`);
  return {
    budgetBytes, contextTokens, threads, prefillChunk: chunk,
    parallel: parallelOf(input), prefixCacheBytes: input.prefixCacheBytes ?? 0,
    items, totalBytes, freeBytes: budgetBytes - totalBytes,
    pieces,
    pieceBytes: slots.pieceBytes,
    pinnedPieces: pieces.filter((p) => p.pinned).map((p) => p.id),
    pinnedLayers, streamedLayers,
    head: headResident ? "resident" : "streamed",
    embed: "gathered",
    ringSlots: ring as 0 | 1 | 2,
    ringSlotBytes,
    coreSlots: coreSlots as 0 | 2,
    coreSlotBytes,
    readerMayRunAhead: ring === 2,
    expertSlots, expertSlotBytes,
    expertWorkingSet: workingSet,
    expertCount,
    streamedBytesPerToken: streamed.reduce((a, p) => a + p.bytes, 0),
    expertBytesPerTokenAllMiss: workingSet * input.expertBytes,
    hedgeBuffers: input.hedgeBuffers ?? 0,
  };
}

/** Below the floor no plan exists: refused with the numbers, and what would fit this budget. */
function refuseBelowFloor(input: PlanInput, chunk: number): void {
  const { cfg, budgetBytes, contextTokens } = input;
  const floor = floorBytes(input, chunk);
  if (floor <= budgetBytes) return;
  const maxContext = maxContextAt(input, chunk);
  const sessions = parallelOf(input) > 1 ? ` and ${parallelOf(input)} sessions` : "";
  const [budgetText, floorText] = formatBytesApart(budgetBytes, floor);
  throw new K3Error("BUDGET", `RAM budget ${budgetText} is below the floor ${floorText} for a ${contextTokens}-token context${sessions}`, [
    `need ${floor} bytes (${gib(floor)}): whole trunk streamed through the rings at their minimum, ${cfg.topK} expert slots`,
    `usable ${budgetBytes} bytes (${gib(budgetBytes)})`,
    maxContext > 0 ? `at this budget the context could be at most ${maxContext} tokens (--context ${maxContext})` : "no context length fits this budget",
    ...(parallelOf(input) > 1 ? [`${parallelOf(input)} parallel sessions: at most ${maxParallelAt(input, chunk)} fit this budget (--parallel)`] : []),
    ...((input.prefixCacheBytes ?? 0) > 0 ? [prefixCacheLimit(input, chunk)] : []),
    ...(input.draft ? [`the draft ${input.draft.name} takes ${formatBytes(sum(draftItems(input.draft, parallelOf(input))))} (--draft none: without it)`] : []),
  ]);
}

/** The plan's lines for what was placed within the budget: pinned layer pieces, the head, the
 *  two rings and the expert slots. */
function placedItems(
  cfg: ModelConfig,
  pieces: PlanPiece[],
  pieceBytes: number,
  p: { ring: number; ringSlotBytes: number; coreSlots: number; coreSlotBytes: number; expertSlots: number; expertSlotBytes: number },
  pinnedLayers: number,
  headResident: boolean,
): PlanItem[] {
  const N = cfg.numLayers;
  const pinnedOf = (head: boolean) => pieces.filter((x) => x.pinned && (x.unit === N) === head);
  const headPinned = pinnedOf(true);
  const layerPinned = pinnedOf(false);
  const workingSet = cfg.topK * moeLayerCount(cfg);
  const pieceNote = pieceBytes === Infinity ? "whole units" : `pieces ≤ ${gib(pieceBytes)}`;
  return [
    {
      name: "pinned trunk",
      bytes: sum(layerPinned.map((x) => ({ bytes: x.slotBytes }))),
      count: layerPinned.length,
      note: `${layerPinned.length} of ${pieces.filter((x) => x.unit < N).length} layer pieces resident (largest first): ${pinnedLayers} of ${N} layers whole`,
    },
    {
      name: "head",
      bytes: sum(headPinned.map((x) => ({ bytes: x.slotBytes }))),
      note: headResident ? "lm_head + final norms, resident" : headPinned.length ? "lm_head + final norms, partly resident" : "lm_head + final norms, streamed through the rings",
    },
    {
      name: "trunk ring",
      bytes: p.ring * p.ringSlotBytes,
      count: p.ring,
      note: p.ring === 0 ? "no matrix streamed" : p.ring === 1 ? "1 slot: the reader must not run ahead" : `2 slots (${pieceNote}): next piece read while one computes`,
    },
    { name: "core ring", bytes: p.coreSlots * p.coreSlotBytes, count: p.coreSlots, note: p.coreSlots === 0 ? "every layer's small tensors resident" : "2 slots: the next layer's small tensors (norms, router) read ahead" },
    {
      name: "expert slots",
      bytes: p.expertSlots * p.expertSlotBytes,
      count: p.expertSlots,
      note: `${(p.expertSlots / workingSet).toFixed(2)}× one token's working set of ${workingSet}`,
    },
  ];
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

/** The most RAM the prefix cache's tier may take at this budget: what the floor without it leaves. */
export function maxPrefixCacheAt(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  return Math.max(0, input.budgetBytes - floorBytes({ ...input, prefixCacheBytes: 0 }, chunk));
}

/** "the prefix cache's RAM tier takes X; at most Y fits this budget": the real limit, in bytes
 *  too when it is small. */
export function prefixCacheLimit(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): string {
  const max = maxPrefixCacheAt(input, chunk);
  const most = max > 0 ? `at most ${gib(max)} (${max} bytes) fits this budget beside the model` : "none fits this budget beside the model";
  return `the prefix cache's RAM tier takes ${formatBytes(input.prefixCacheBytes ?? 0)}: ${most} (--prefix-cache-ram; 0 = no RAM tier)`;
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

/**
 * The smallest total a plan needs with two slots in each ring (the next piece read while one
 * computes): what the defaults below keep. A second ring slot is worth more than a session or a
 * prefix cache: without it every streamed read stops the compute (STREAMING.md §2). With the
 * trunk in pieces the floor always has two; with whole units (pieceBytes Infinity) it may not.
 */
function floorTwoSlots(input: PlanInput, chunk: number): number {
  const slots = input.slots ?? censusSlots(input);
  return sum(fixedItems(input, chunk)) + 2 * largestOf(slots.pieces, "core") + 2 * largestOf(slots.pieces, "matrix") + input.cfg.topK * slots.expertBytes;
}

/** The floor the defaults respect: two ring slots when one session (and no prefix cache) gets
 *  them at this budget, else the plain floor. */
function defaultsFloor(input: PlanInput, chunk: number): (x: PlanInput) => number {
  const two = floorTwoSlots({ ...input, parallel: 1, prefixCacheBytes: 0 }, chunk) <= input.budgetBytes;
  return (x) => (two ? floorTwoSlots(x, chunk) : floorBytes(x, chunk));
}

/** `k3 serve`'s default: as many sessions as fit, at most DEFAULT_PARALLEL_CAP, without taking
 *  the ring's second slot (1 when even one does not fit: planMemory then refuses with the numbers). */
export function defaultParallel(input: PlanInput, chunk = input.prefillChunk ?? DEFAULT_PREFILL_CHUNK): number {
  const floor = defaultsFloor(input, chunk);
  for (let p = DEFAULT_PARALLEL_CAP; p > 1; p--) if (floor({ ...input, parallel: p, prefixCacheBytes: 0 }) <= input.budgetBytes) return p;
  return 1;
}

/**
 * The prefix cache's default RAM tier for `input.parallel` sessions: one full-context snapshot
 * per session, at most PREFIX_CACHE_BUDGET_SHARE of the budget, and only what the plan would
 * give the expert cache beyond its top-k floor (0 when nothing is left): the trunk keeps its pins
 * and ring, and the bytes come out of expert slots, which hit ~0% below one token's working set
 * (docs/CACHE.md). The disk tier (--prefix-cache-dir) holds more.
 */
export function defaultPrefixCacheBytes(input: PlanInput): number {
  const P = parallelOf(input);
  const want = Math.min(P * sessionStateBytes(input.cfg, input.contextTokens), Math.floor(PREFIX_CACHE_BUDGET_SHARE * input.budgetBytes));
  let plan: MemoryPlan;
  try {
    plan = planMemory({ ...input, prefixCacheBytes: 0 });
  } catch {
    return 0; // below the floor: planMemory refuses with the numbers
  }
  const spare = (plan.expertSlots - input.cfg.topK) * plan.expertSlotBytes + plan.freeBytes;
  return Math.max(0, Math.min(want, spare));
}
