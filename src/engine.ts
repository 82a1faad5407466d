// The public API: open a model under a budget, hold sessions, generate, report stats, verify a
// model. The CLI and the server use only this module, plus src/inspect.ts for inspection without
// weights (test/layers.test.ts checks the imports).
import { existsSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint, type Checkpoint } from "./checkpoint/catalogue.ts";
import { openCheckpointCached } from "./checkpoint/index-cache.ts";
import type { ModelConfig } from "./checkpoint/types.ts";
import { K3Error } from "./errors.ts";
import { ISA, kernelLimits, loadKernels, type Kernels } from "./kernels.ts";
import { checkKernelLimits, Model } from "./model/forward.ts";
import { autoDrafts } from "./model/buffers.ts";
import { verifyDrafts, type TargetRule } from "./speculate/accept.ts";
import { SpeculationCost, type PassCostPrior } from "./speculate/cost.ts";
import type { Drafter } from "./speculate/drafter.ts";
import { NgramDrafter } from "./speculate/ngram.ts";
import { parseSpeculate, Speculator, type SpeculateSetting, type SpeculationCounters } from "./speculate/speculator.ts";
import { ResidentWeights } from "./model/resident.ts";
import { contextFor, DEFAULT_PARALLEL_CAP, defaultParallel, defaultPrefixCacheBytes, planInputFromCensus, planMemory, residentChunk, sessionStateBytes, type MemoryPlan } from "./memory/plan.ts";
import { BatchScheduler, type BatchStats, type PassPart, type TicketKind } from "./batch/scheduler.ts";
import { PrefixCache, type PrefixCacheStats } from "./batch/prefix-cache.ts";
import type { PolicyName } from "./memory/policy/index.ts";
import { gib, resolveBudget, usableRam } from "./memory/ram.ts";
import { streamSlots } from "./memory/slots.ts";
import type { PieceOptions } from "./memory/pieces.ts";
import { loadPack, TRUNK_FORMATS, writePack, type PackResult, type TrunkFormat } from "./memory/pack.ts";
import { StreamingWeights } from "./memory/stream.ts";
import { loadChecksums, verifyCheckpoint, type VerifyResult } from "./memory/verify.ts";
import { TraceWriter } from "./memory/trace-writer.ts";
import { SessionState } from "./model/state.ts";
import { loadSession as loadSessionFile, saveSession as saveSessionFile } from "./model/session-file.ts";
import { Tokenizer } from "./text/tokenizer.ts";
import { addStats, diffStats, zeroStats, type WeightProvider, type WeightStats } from "./model/weights.ts";

export type { ModelConfig } from "./checkpoint/types.ts";
export type { WeightStats } from "./model/weights.ts";
export type { BatchStats, StepRecord } from "./batch/scheduler.ts";
export type { PrefixCacheStats } from "./batch/prefix-cache.ts";
export type { VerifyResult } from "./memory/verify.ts";
export { TRUNK_FORMATS, type PackResult, type TrunkFormat } from "./memory/pack.ts";
// The text layer is part of the public API: the CLI and the server use it through here.
export { Tokenizer } from "./text/tokenizer.ts";
export { CLOSE_THINK_OPEN_RESPONSE, renderChat, segmentsToIds, SERVED_DEFAULT_THINKING_EFFORT, VALID_THINKING_EFFORTS, type ChatInput, type ChatMessage, type Segment } from "./text/chat.ts";
export { AssistantStreamParser, parseAssistantOutput, type AssistantOutput, type ParsedToolCall } from "./text/chat-parse.ts";
export { createSampler, type SamplerOptions } from "./text/sampling.ts";
export { parseSpeculate, type SpeculateSetting, type SpeculationCounters } from "./speculate/speculator.ts";
export type { Draft, Drafter, DraftRequest } from "./speculate/drafter.ts";
export { StopMatcher } from "./text/stop.ts";
export { deeperThan, MAX_JSON_DEPTH } from "./text/json-depth.ts";
// Which folder a path names (a Hugging Face download resolves to its snapshot), e.g. for the tokenizer.
export { resolveModelFolder, type ModelFolder } from "./checkpoint/model-folder.ts";
/** The expert-cache policies an engine accepts (EngineOptions.policy). */
export { ONLINE_POLICIES as POLICY_NAMES } from "./memory/policy/index.ts";

export interface EngineOptions {
  /** RAM budget preset: laptop | desktop | workstation | server | auto (default auto). */
  preset?: string;
  /** RAM budget as a size ("6G", "512M"); wins over preset. */
  ram?: string;
  /** Read the next trunk unit while the current one computes (default: when the plan allows). */
  prefetch?: boolean;
  /** Router lookahead during decode (default on). */
  lookahead?: boolean;
  /** Ask for O_DIRECT (default on; the probe decides and stats report it). */
  direct?: boolean;
  /** Expert cache policy (default lfru). */
  policy?: PolicyName;
  /** I/O threads (1..the kernels' limit). The I/O pool is process-wide: the first engine starts
   *  it (default 4) and later ones join it; asking a later one for another size is refused. */
  ioThreads?: number;
  /** Every weight resident, no planner (the baseline the streaming path must match). */
  resident?: boolean;
  /** Check every read against the CRC-32Cs `k3 verify --record` wrote (refuses if none exist). */
  verify?: boolean;
  /** Write per-token expert routing (JSONL, the reference traces' format) to this file. */
  trace?: string;
  /** Progress of long steps at open: "indexing shards" (first open; shards), "loading pinned
   *  layers" (bytes: `unit` says so). */
  onProgress?: (label: string, done: number, total: number, unit?: "bytes") => void;
  /** Compute threads (process-wide pool; 1..the pool's limit, 64); default: every hardware
   *  thread up to that limit (stats say when the limit applied). */
  threads?: number;
  /** Open even when the RAM budget (--ram / --preset) is more than this machine's usable RAM
   *  (it would swap). Default false: such a budget is refused at open. */
  allowOverRam?: boolean;
  /** Context limit in tokens (sizes the MLA cache). */
  context?: number;
  /** Prefill chunk in tokens. Default: the planner's choice for the budget (plan.chunkChoice
   *  says why); with `resident`, the smallest chunk giving expert matmuls enough rows. */
  chunk?: number;
  /** How the streamed trunk is cut (src/memory/pieces.ts): matrix pieces up to `pieceBytes`
   *  (default 256 MiB; Infinity = one piece per unit, the layout before issue 16), row blocks of
   *  `blockBytes` (default 32 MiB; other values only for tests: `--verify` checks the default's). */
  trunkPieces?: PieceOptions;
  /** Trunk weights: "bf16" (default: the release's, exact) or a compact trunk made by `k3 pack`
   *  ("int8", "int4": lossy, docs/TRUNK.md). Experts and embedding rows are exact either way. */
  trunk?: TrunkFormat;
  /** ISA override: "auto" or one of ISA_NAMES. */
  isa?: keyof typeof ISA;
  /**
   * Speculative decoding (docs/SPECULATION.md): "auto" (default: the cost model decides each
   * step, up to 8 drafts per pass or chunk − 1), "off", or N (verify up to N drafts whenever the
   * drafter has them). Sizes the verify pass's buffers; requests may ask for less, never more.
   * Output is identical either way (greedy: the same ids; sampling: the same distribution).
   */
  speculate?: SpeculateSetting;
  /** Sessions that advance together in one pass (batched generation, `k3 serve`): the plan holds
   *  their state. "auto": what the budget allows, at most DEFAULT_PARALLEL_CAP. Default 1. */
  parallel?: number | "auto";
  /** The prefix cache (batched generation only): RAM tier bytes ("auto": the planner's default
   *  share; 0: none) and an optional disk tier (folder, size cap in bytes). Default: off. */
  prefixCache?: { ramBytes?: number | "auto"; dir?: string; diskBytes?: number };
}

export interface TokenEvent {
  /** The token, or −1 for a prefill step (only with `yieldDuringPrefill`) or a wait (`batched`). */
  id: number;
  /** Batched generation: this generation waits for the scheduler's next step (Engine.turn()). */
  wait?: true;
  /** Set on prefill steps: tokens of the prompt fed so far. */
  prefill?: { done: number; total: number };
  /** 0-based index among generated tokens. */
  index: number;
  /** Wall time spent producing this token (ms): prefill for index 0, one decode step after. */
  ms: number;
}

export interface Sampler {
  sample(logits: Float32Array): number;
  /** What `sample` draws from (createSampler provides it): needed to speculate while sampling. */
  readonly distribution?: { weights(logits: Float32Array): Float64Array; uniform(): number };
}

export interface GenerateOptions {
  maxTokens: number;
  /** Default: greedy (argmax, lowest id on ties). */
  sampler?: Sampler;
  /** Token ids that end generation (not emitted). */
  stopIds?: number[];
  onPrefill?: (done: number, total: number) => void;
  /** Checked before every step (and between prefill chunks); true stops cleanly. */
  shouldStop?: () => boolean;
  /** Also yield an event (id −1, `prefill` set) between prefill chunks, so an async caller can
   *  run its event loop during a long prefill (Ctrl-C, disconnects). */
  yieldDuringPrefill?: boolean;
  /** This request's speculation (default: the engine's). "auto" on an engine opened with "off"
   *  is off; N more than the engine's drafts per pass is refused. A sampler without a
   *  `distribution` cannot speculate exactly: speculation is then off. */
  speculate?: SpeculateSetting;
  /** Who drafts (default: the prompt-lookup n-gram drafter, src/speculate/ngram.ts). */
  drafter?: Drafter;
  /**
   * Run every forward pass through the engine's batch scheduler, together with the other batched
   * generations (src/batch/scheduler.ts). The generator then yields `wait` events: the caller
   * awaits `engine.turn()` and calls next() again. Output is bit-identical to an unbatched run.
   * The prompt is fed in pieces ending at multiples of the chunk, and with a prefix cache the
   * state at the last such boundary inside the prompt is kept (docs/SERVER.md).
   */
  batched?: boolean;
}

export interface GenerationStats {
  promptTokens: number;
  generatedTokens: number;
  prefillMs: number;
  decodeMs: number;
  msPerToken: number;
  stopReason: "length" | "stop" | "cancelled" | "context";
  io: WeightStats; // counters accumulated during this generation (prefill + decode); batched: its share of each pass
  /** Forward passes after the prefill: one position each, or a verify pass over 1 + drafts. */
  decodeSteps: number;
  /** Tokens the decode passes decided (emitted, or a stop token): decodeSteps plus the accepted
   *  drafts that were used. The per-token figures divide by it. */
  decodedTokens: number;
  /** Decode only: counters of the decode passes divided by the tokens they decided (= decodeSteps
   *  without speculation; more with it: a verify pass decides 1 + accepted drafts). 0 without decode. */
  ioPerToken: { bytesRead: number; trunkBytes: number; expertBytes: number; reads: number; hits: number; requests: number };
  /** Drafted / accepted tokens and verify passes (all 0 with speculation off). */
  speculation: SpeculationCounters;
  peakRssBytes: number;
  /** Which trunk produced it: the release's (bf16, exact) or a packed one (lossy). */
  trunk: TrunkFormat;
}

/** The most compute and I/O threads an engine accepts (the kernel library's pools). */
export function engineLimits(): { threads: number; ioThreads: number } {
  const l = kernelLimits();
  return { threads: l.poolThreads, ioThreads: l.ioThreads };
}

/** The kernel paths EngineOptions.isa can force (besides "auto"). */
export const ISA_NAMES = (Object.keys(ISA) as (keyof typeof ISA)[]).filter((n) => n !== "auto");

/** The compute pool's size for an engine, and why (reported in stats). */
export interface ComputeThreads {
  threads: number;
  hardwareThreads: number;
  /** The pool's limit (kernels/k3.h); the default is capped by it on bigger machines. */
  limit: number;
}

/** The compute threads an engine uses when none are asked for: every hardware thread, up to the
 *  pool's limit (`k3 plan` assumes the same). */
export function defaultThreads(hardwareThreads = navigator.hardwareConcurrency ?? 1): number {
  return Math.max(1, Math.min(hardwareThreads, kernelLimits().poolThreads));
}

/**
 * Size the process-wide compute pool: `requested`, or defaultThreads(). A request past the
 * pool's limit is a usage error, not a silent cap.
 */
function computeThreads(k: Kernels, requested: number | undefined, hardwareThreads = navigator.hardwareConcurrency ?? 1): ComputeThreads {
  const limit = kernelLimits(k).poolThreads;
  if (requested !== undefined && (!Number.isInteger(requested) || requested < 1 || requested > limit))
    throw new K3Error("USAGE", `--threads must be an integer from 1 to ${limit} (the compute pool's limit), got ${requested}`);
  const threads = requested ?? defaultThreads(hardwareThreads);
  const got = k.k3_pool_init(threads);
  if (got !== threads) throw new K3Error("INTERNAL", `the compute pool started ${got} threads, asked for ${threads} (the OS refused a thread)`);
  return { threads, hardwareThreads, limit };
}

/** A budget past usable RAM would push the machine into swap: refused unless allowOverRam. */
function refuseOverRam(budget: { bytes: number; source: string }): void {
  const usable = usableRam();
  if (budget.bytes > usable.bytes)
    throw new K3Error("BUDGET", `the budget ${budget.source} (${gib(budget.bytes)}) is more than this machine's usable RAM ${gib(usable.bytes)} (${usable.binding.source}): it would swap`, [
      "choose a smaller --preset or --ram (k3 plan shows what each one does, for any machine)",
      "or pass --allow-over-ram (EngineOptions.allowOverRam) if you know the memory will be there",
    ]);
}

/** What a batched generation yields while its pass waits for the scheduler's next step. */
const WAIT_EVENT: TokenEvent = Object.freeze({ id: -1, index: -1, ms: 0, wait: true as const });

/** Length of the session's tokens when they are a proper prefix of `ids`, else 0. A prefix equal
 *  to the whole prompt is not reusable: the engine needs at least one new token for logits. */
export function reusablePrefix(seen: number[], ids: number[]): number {
  if (seen.length === 0 || seen.length >= ids.length) return 0;
  for (let i = 0; i < seen.length; i++) if (seen[i] !== ids[i]) return 0;
  return seen.length;
}

/**
 * Prompt tokens of `ids` that `session` already holds, without touching it: all of them when its
 * tokens (history + pending) are exactly `ids` (a restored session continues), the length of its
 * tokens when they are a proper prefix of `ids`, else 0 (also for a dirty or closed session).
 */
export function heldPrefix(session: Session, ids: number[]): number {
  if (session.dirty || session.closed) return 0;
  const tokens = session.tokens;
  if (session.pending.length > 0 && tokens.length === ids.length && tokens.every((t, i) => t === ids[i])) return ids.length;
  return reusablePrefix(tokens, ids);
}

/** Frees a session's C memory if its owner dropped it without close() (backstop, not the plan). */
const sessionFinalizer = new FinalizationRegistry<SessionState>((state) => state.free());

/** One conversation / sequence: model state plus tokens not yet fed to the model. */
export class Session {
  /** A sampled token that has been emitted but not yet run through the model. */
  pending: number[] = [];
  /** Metadata restored by Engine.loadSession (what saveSession was given), else undefined. */
  meta: unknown;
  constructor(readonly state: SessionState) {
    sessionFinalizer.register(this, state, this);
  }
  /** Release the session's state memory (KDA state, MLA cache). The session is unusable after. */
  close(): void {
    sessionFinalizer.unregister(this);
    this.state.free();
  }
  get position(): number {
    return this.state.pos;
  }
  /** Every token of the sequence: processed ones, then pending ones. */
  get tokens(): number[] {
    return [...this.state.history, ...this.pending];
  }
  reset(): void {
    this.state.reset();
    this.pending = [];
  }
  /** A failed forward pass left the state inconsistent: reset() before using it again. */
  get dirty(): boolean {
    return this.state.dirty;
  }
  get closed(): boolean {
    return this.state.freed;
  }
  /** The session's speculation cost model (pass bytes, acceptance): it persists across turns. */
  speculationCost?: SpeculationCost;
  /** C memory this session's state holds (KDA state, conv history, MLA cache). */
  get allocatedBytes(): number {
    return this.state.bytes;
  }
}

export class Engine {
  private constructor(
    readonly dir: string,
    readonly checkpoint: Checkpoint,
    private k: Kernels,
    private weights: WeightProvider,
    private model: Model,
    readonly context: number,
    private pool: ComputeThreads,
    /** The memory plan the weights follow (undefined with `resident`). */
    readonly plan: MemoryPlan | undefined,
    /** Speculation the engine was opened with (requests default to it). */
    readonly speculate: SpeculateSetting,
    /** Which trunk the weights come from: the release's (bf16, exact) or a packed one. */
    readonly trunk: TrunkFormat,
    /** The packed trunk's file, when `trunk` is not bf16. */
    readonly trunkFile: string | undefined,
  ) {}

  /** Tokens per prefill pass (EngineOptions.chunk, else the planner's choice). */
  get prefillChunk(): number {
    return this.model.chunk;
  }

  /** Compute threads this engine asked the (process-wide) pool for. */
  get threads(): number {
    return this.pool.threads;
  }

  /** The compute threads, this machine's hardware threads and the pool's limit (for stats). */
  get computeThreads(): ComputeThreads {
    return { ...this.pool };
  }

  get config(): ModelConfig {
    return this.checkpoint.config;
  }

  /** The model's name: a Hugging Face download's repo id ("moonshotai/Kimi-K3"), else its folder's name. */
  get name(): string {
    return this.checkpoint.name;
  }

  /** The tokenizer folder, if the model directory has one. */
  get tokenizerDir(): string | undefined {
    return existsSync(join(this.dir, "tiktoken.model")) ? this.dir : undefined;
  }

  private tok?: Tokenizer;
  /** The model's tokenizer (loaded once); K3Error TOKENIZER if the folder has none. */
  tokenizer(): Tokenizer {
    if (!this.tok) {
      if (!this.tokenizerDir) throw new K3Error("TOKENIZER", `${this.dir} has no tokenizer (tiktoken.model + tokenizer_config.json)`);
      this.tok = Tokenizer.load(this.tokenizerDir);
    }
    return this.tok;
  }

  /** Open a model: every check, the plan, then the pinned layers read (synchronously). */
  static open(dir: string, opts: EngineOptions = {}): Engine {
    const steps = Engine.opening(dir, opts);
    for (;;) {
      const s = steps.next();
      if (s.done) return s.value;
    }
  }

  /**
   * Engine.open that lets the event loop run between pinned trunk pieces (a layer's core or a
   * piece of its matrices: at most a unit, 2.3 GB at real size), so a caller can draw progress
   * and be interrupted: once `signal` aborts, loading stops after the piece landing now (reads still in flight are waited for, every buffer
   * is freed) and the promise rejects with K3Error CANCELLED.
   */
  static async openAsync(dir: string, opts: EngineOptions & { signal?: AbortSignal } = {}): Promise<Engine> {
    const steps = Engine.opening(dir, opts);
    for (;;) {
      if (opts.signal?.aborted) {
        steps.return(undefined as never); // runs the opening's cleanup: reads drained, memory freed
        throw new K3Error("CANCELLED", "interrupted while loading the model");
      }
      const s = steps.next();
      if (s.done) return s.value;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Engine.open as steps: yields after each pinned trunk piece lands. */
  private static *opening(dir: string, opts: EngineOptions): Generator<void, Engine> {
    const k = loadKernels();
    const isa = opts.isa ?? "auto";
    if (k.k3_isa_set(ISA[isa]) < 0) throw new K3Error("USAGE", `ISA path "${isa}" is not supported by this CPU`);
    const threads = computeThreads(k, opts.threads);
    const indexing = opts.onProgress && ((d: number, t: number) => opts.onProgress!("indexing shards", d, t));
    // --verify trusts nothing cached: the headers are read again, so a shard whose header changed
    // with its size and mtime kept is seen (its recorded checksums are then refused as stale).
    const checkpoint = opts.verify ? openCheckpoint(dir, indexing) : openCheckpointCached(dir, indexing);
    const cfg = checkpoint.config;
    checkKernelLimits(k, cfg);
    const context = contextFor(cfg, opts.context);
    // Without --chunk: the planner's choice under a budget (below), the compute rule when resident.
    let chunk = opts.chunk ?? residentChunk(cfg, context);
    const speculate = parseSpeculate(opts.speculate ?? "auto", "speculate");
    // Automatic drafts follow the chunk (autoDrafts); a given number must fit one verify pass.
    const draftsFor = (c: number) => (speculate === "off" ? 0 : speculate === "auto" ? autoDrafts(c) : speculate);
    let drafts = draftsFor(chunk);
    // With several sessions per pass batched generation does not speculate (speculates()): "auto"
    // then allocates no verify buffers; an explicit N keeps them (for unbatched generation).
    const noAutoDrafts = () => {
      if (speculate === "auto" && parallel > 1) drafts = 0;
    };
    const checkDrafts = (c: number) => {
      if (typeof speculate === "number" && 1 + speculate > c)
        throw new K3Error("USAGE", `--speculate ${speculate} needs a verify pass of ${1 + speculate} positions, more than the ${c}-token chunk`, [`use --chunk ${1 + speculate} or more, or fewer drafts per pass`]);
    };
    if (opts.chunk !== undefined || opts.resident) checkDrafts(chunk);
    let weights: WeightProvider;
    let plan: MemoryPlan | undefined;
    // Sessions and the prefix cache's RAM tier: sized before the plan, which holds them.
    let parallel = opts.parallel === "auto" ? DEFAULT_PARALLEL_CAP : (opts.parallel ?? 1);
    const ramOpt = opts.prefixCache?.ramBytes ?? (opts.prefixCache ? "auto" : 0);
    let prefixRam = typeof ramOpt === "number" ? ramOpt : parallel * sessionStateBytes(cfg, context);
    const trunk = opts.trunk ?? "bf16";
    if (!TRUNK_FORMATS.includes(trunk)) throw new K3Error("USAGE", `--trunk must be one of ${TRUNK_FORMATS.join(", ")}, got ${JSON.stringify(trunk)}`);
    if (opts.resident && trunk !== "bf16") throw new K3Error("USAGE", "--resident reads the release's exact trunk; a packed trunk (--trunk) is read through the planner (give a budget that fits it all instead)");
    const pack = trunk === "bf16" ? undefined : loadPack(checkpoint, trunk);
    if (opts.resident) {
      noAutoDrafts();
      weights = new ResidentWeights(k, cfg, checkpoint.tensors);
    } else {
      const budget = resolveBudget(opts.preset, opts.ram);
      if (!budget.source.startsWith("auto") && !opts.allowOverRam) refuseOverRam(budget);
      const pieces = { ...opts.trunkPieces, tensors: pack?.tensors };
      const input = planInputFromCensus(cfg, checkpoint.layout.census, budget.bytes, context, threads.threads, opts.chunk, streamSlots(checkpoint, pieces), drafts);
      if (opts.parallel === "auto") parallel = defaultParallel(input);
      input.parallel = parallel;
      noAutoDrafts();
      // auto drafts with one session follow the chunk, which the planner may still choose
      input.drafts = speculate === "auto" && drafts > 0 && opts.chunk === undefined ? undefined : drafts;
      if (ramOpt === "auto") prefixRam = defaultPrefixCacheBytes(input);
      input.prefixCacheBytes = prefixRam;
      plan = planMemory(input); // without opts.chunk the planner chooses the chunk (plan.chunkChoice says why)
      chunk = plan.prefillChunk;
      checkDrafts(chunk);
      if (input.drafts === undefined) drafts = autoDrafts(chunk);
      const streaming = new StreamingWeights(k, checkpoint, {
        pinnedPieces: plan.pinnedPieces,
        ringSlots: plan.ringSlots,
        coreSlots: plan.coreSlots,
        pieces: opts.trunkPieces,
        trunk: pack && { tensors: pack.tensors, files: [{ file: pack.path, bytes: pack.fileBytes }], blockCrc: pack.blockCrc },
        expertSlots: plan.expertSlots,
        prefetch: (opts.prefetch ?? true) && plan.readerMayRunAhead,
        direct: opts.direct ?? true,
        ioThreads: opts.ioThreads,
        policy: opts.policy ?? "lfru",
        checksums: opts.verify ? loadChecksums(checkpoint) : undefined,
        onProgress: opts.onProgress && ((d, t) => opts.onProgress!("loading pinned layers", d, t, "bytes")),
      });
      let loaded = false;
      try {
        yield* streaming.loadPinned();
        loaded = true;
      } finally {
        if (!loaded) streaming.close(); // an error, or the caller stopped the opening
      }
      weights = streaming;
    }
    let model: Model;
    try {
      model = new Model(k, cfg, weights, chunk, context, drafts, parallel);
      model.lookahead = opts.lookahead ?? true;
    } catch (err) {
      weights.close();
      throw err;
    }
    // The folder actually read (a Hugging Face repo folder resolves to its snapshot).
    const engine = new Engine(checkpoint.dir, checkpoint, k, weights, model, context, threads, plan, speculate, trunk, pack?.path);
    engine.parallel = parallel;
    engine.batch = new BatchScheduler((parts) => engine.passOver(parts), model.rows, parallel, () => weights.stats());
    if (opts.prefixCache) {
      try {
        engine.prefix = new PrefixCache({ k, fingerprint: engine.fingerprint, modelName: engine.name, vocab: cfg.vocab, ramBytes: prefixRam, dir: opts.prefixCache.dir, diskBytes: opts.prefixCache.diskBytes });
      } catch (err) {
        engine.close();
        throw err;
      }
    }
    if (opts.trace) {
      let trace: TraceWriter;
      try {
        trace = new TraceWriter(opts.trace);
      } catch (err) {
        engine.close();
        throw err;
      }
      engine.trace = trace;
      model.onRouting = (_L, idx, T, K) => trace.record(idx, T, K);
    }
    return engine;
  }

  private trace?: TraceWriter;
  /** Sessions that advance together in one batched pass (EngineOptions.parallel). */
  parallel = 1;
  private batch!: BatchScheduler;
  private prefix?: PrefixCache;

  /**
   * One batched pass over several sessions' parts (the scheduler's pass function). Each part's
   * logits are copied out: the next pass reuses the model's buffer.
   */
  private passOver(parts: PassPart[]): (Float32Array | Float32Array[] | null)[] {
    this.alive();
    if (parts[0]?.verify) {
      // The scheduler runs a verify pass alone; its rows are copied out like any logits.
      return [this.model.verify(parts[0].state, parts[0].ids).map((r) => r.slice())];
    }
    if (this.trace) {
      // The trace records one sequence's rows: one session per pass.
      if (parts.length > 1) throw new K3Error("USAGE", "--trace records one sequence: it cannot be used with batched generation of several sessions");
      const pos = parts[0]!.state.pos;
      const out = this.model.forwardBatch(parts);
      this.trace.flush(pos);
      return out;
    }
    return this.model.forwardBatch(parts);
  }

  /** Resolves once the batch scheduler's next step has run: what a caller awaits when a batched
   *  generation yields a `wait` event. */
  turn(): Promise<void> {
    return this.batch.turn();
  }

  /** Batched generation so far: steps, sessions per step, the recent steps. */
  batchStats(): BatchStats {
    return this.batch.stats();
  }

  /** The prefix cache's counters (undefined when the engine has none). */
  prefixStats(): PrefixCacheStats | undefined {
    return this.prefix?.stats();
  }

  /**
   * Prepare `session` for a prompt of `ids` and return how many of them it already holds (the
   * caller feeds only the rest):
   *   - a session whose tokens (history + pending) are exactly `ids` continues (a restored one);
   *   - a session whose tokens are a proper prefix of `ids` keeps them;
   *   - the prefix cache may hold a longer prefix (at most ids.length − 1 tokens: one is fed for
   *     logits): it is restored into the session;
   *   - otherwise the session starts over.
   * Before a session's state is replaced, it is offered to the prefix cache (when there is one),
   * so a conversation that loses its session keeps its prefix. A dirty session starts over.
   * Output never depends on which case applied (incremental == full recompute).
   */
  reusePrefix(session: Session, ids: number[]): number {
    this.alive();
    if (session.dirty) session.reset();
    const own = heldPrefix(session, ids);
    if (own === ids.length) return own;
    const tokens = session.tokens;
    if (this.prefix) {
      if (own === 0) this.prefix.store(session.state);
      const restored = this.prefix.restoreLongest(session.state, ids, ids.length - 1, own);
      if (restored > 0) {
        session.pending = [];
        return restored;
      }
    }
    if (own === 0 && tokens.length > 0) session.reset();
    return own;
  }

  /**
   * Whether a batched generation may speculate: only with one session per pass (--parallel 1).
   * A verify pass's rows, logit rows and rollback scratch are one session's, so it runs alone, and
   * its accepted drafts must be kept before any other pass runs: with several streams a verify
   * step would stall the others for what a batch step already gives them (the trunk read once for
   * every stream in it). docs/SERVER.md, "Speculation".
   */
  private speculates(): boolean {
    return this.parallel === 1;
  }

  /** A speculative verify pass: direct, or (batched) a verify ticket that runs alone, after which
   *  the session holds the scheduler until its decided tokens are out (generate releases it). */
  private *verifyPass(session: Session, ids: number[], batched: boolean, acc: { io: WeightStats }): Generator<TokenEvent, Float32Array[]> {
    if (!batched) return this.model.verify(session.state, ids);
    const t = this.batch.submit({ state: session.state, ids, logits: true, verify: true }, "verify");
    try {
      while (!t.done) yield WAIT_EVENT;
    } finally {
      if (!t.done) this.batch.cancel(t);
    }
    if (t.share) acc.io = addStats(acc.io, t.share);
    if (t.error) throw t.error;
    this.batch.hold(session.state);
    return t.rows!;
  }

  /** One forward of a generation: direct, or (batched) a ticket for the scheduler's next step,
   *  waited for with `wait` events. The ticket's share of the pass's reads goes to `acc`. */
  private *pass(session: Session, ids: number[], logits: boolean, kind: TicketKind, batched: boolean, acc: { io: WeightStats }): Generator<TokenEvent, Float32Array | null> {
    if (!batched) return this.forward(session, ids, logits);
    const t = this.batch.submit({ state: session.state, ids, logits }, kind);
    try {
      while (!t.done) yield WAIT_EVENT;
    } finally {
      if (!t.done) this.batch.cancel(t); // abandoned while waiting: the pass never runs it
    }
    if (t.share) acc.io = addStats(acc.io, t.share);
    if (t.error) throw t.error;
    return t.logits;
  }

  /** Every forward goes through here, so the trace sees every chunk. */
  private forward(session: Session, ids: number[], logits = true): Float32Array | null {
    this.alive(); // a generator may be resumed after close(): never touch freed buffers
    const pos = session.state.pos;
    const out = this.model.forward(session.state, ids, { logits });
    this.trace?.flush(pos);
    return out;
  }

  /**
   * Prefill as steps: one model chunk per step, yielding between chunks so a caller can let the
   * event loop run (Ctrl-C, a client disconnect) and stop early; returns the last logits.
   * Batched: each piece is a scheduler ticket (WAIT_EVENT is yielded until it ran), pieces end at
   * multiples of the chunk counted from position 0 (so prefix snapshots sit at the same
   * boundaries whoever fed them), and with a prefix cache the state at the last boundary inside
   * the prompt is kept.
   */
  private *prefillSteps(
    session: Session,
    ids: number[],
    onChunk?: (done: number, total: number) => void,
    batched = false,
    acc = { io: zeroStats("buffered") },
  ): Generator<{ done: number; total: number } | TokenEvent, Float32Array> {
    this.alive();
    const all = [...session.pending, ...ids];
    this.model.check(session.state, all); // every id, before the first chunk changes any state
    session.pending = [];
    const C = this.model.chunk;
    const p0 = session.state.pos;
    const keepAt = batched && this.prefix ? Math.floor((p0 + all.length - 1) / C) * C : -1;
    for (let s = 0; ; ) {
      const end = batched ? Math.min(all.length, (Math.floor((p0 + s) / C) + 1) * C - p0) : Math.min(all.length, s + C);
      const last = end >= all.length;
      const logits = yield* this.pass(session, all.slice(s, end), last, "prefill", batched, acc);
      s = end;
      onChunk?.(s, all.length);
      if (p0 + s === keepAt) this.prefix!.store(session.state);
      if (last) return logits!;
      yield { done: s, total: all.length };
    }
  }

  private fp?: string;
  /** Identity of the model a session belongs to: config and every tensor's name, dtype, shape. */
  get fingerprint(): string {
    if (!this.fp) {
      const names = [...this.checkpoint.tensors.values()].map((t) => `${t.name}:${t.dtype}:${t.shape.join("x")}`).sort();
      this.fp = Bun.hash(JSON.stringify(this.config) + names.join("|")).toString(16).padStart(16, "0");
    }
    return this.fp;
  }

  /** Save a session's state (KDA, conv, MLA cache, position, tokens) to a file, with optional
   *  JSON metadata the caller wants back (a chat keeps its messages there). */
  saveSession(session: Session, path: string, meta?: unknown): void {
    this.alive();
    if (session.closed) throw new K3Error("USAGE", "cannot save a closed session");
    if (session.dirty) throw new K3Error("SESSION", "cannot save a session interrupted by an error: its state does not match its tokens");
    saveSessionFile(this.k, session.state, session.pending, this.fingerprint, this.name, path, meta);
  }

  /** A new session restored from a file saved by the same model (refused otherwise). */
  loadSession(path: string): Session {
    const session = this.createSession();
    try {
      const loaded = loadSessionFile(this.k, session.state, this.fingerprint, path);
      session.pending = loaded.pending;
      session.meta = loaded.meta;
    } catch (err) {
      session.state.free();
      throw err;
    }
    return session;
  }

  private closed = false;
  private alive(): void {
    if (this.closed) throw new K3Error("USAGE", "this engine was closed");
  }

  createSession(): Session {
    this.alive();
    return new Session(new SessionState(this.k, this.config, this.context));
  }

  /** Run prompt tokens through the model without sampling (returns last logits, a view). */
  prefill(session: Session, ids: number[], onChunk?: (done: number, total: number) => void): Float32Array {
    const steps = this.prefillSteps(session, ids, onChunk);
    for (;;) {
      const r = steps.next();
      if (r.done) return r.value;
    }
  }

  /**
   * Generate after `prompt` (appended to the session). Yields each token as soon as it is
   * sampled; the caller may stop iterating at any time (the session stays consistent: the last
   * emitted token is kept pending and fed first next time).
   */
  *generate(session: Session, prompt: number[], opts: GenerateOptions): Generator<TokenEvent, GenerationStats> {
    const stop = new Set(opts.stopIds ?? []);
    const batched = opts.batched ?? false;
    const before = this.weights.stats();
    // Batched: this generation's share of each pass; else everything read while it ran.
    const acc = { io: zeroStats(before.ioMode) };
    const ioSoFar = () => (batched ? acc.io : diffStats(this.weights.stats(), before));
    const t0 = performance.now();
    const promptTokens = session.pending.length + prompt.length;
    if (promptTokens === 0) throw new K3Error("USAGE", "nothing to generate from: the prompt is empty");
    if (session.position + promptTokens > this.context)
      throw new K3Error("CONTEXT", `prompt of ${promptTokens} tokens does not fit the context limit (${this.context} tokens, ${session.position} used)`);
    // Before any model work: a request asking for more drafts than the engine has room for is
    // refused. Batched generations speculate only where a verify pass cannot hold up others
    // (speculates()); elsewhere a request's setting has no effect, and is not checked.
    const spec = batched && !this.speculates() ? undefined : this.speculator(session, opts);
    const steps = this.prefillSteps(session, prompt, opts.onPrefill, batched, acc);
    let step = steps.next();
    try {
      while (!step.done) {
        if (step.value === WAIT_EVENT) {
          yield WAIT_EVENT;
          step = steps.next();
          continue;
        }
        // Between prefill chunks: let the caller breathe (event loop) and honour a stop request.
        if (opts.yieldDuringPrefill) yield { id: -1, index: -1, ms: 0, prefill: step.value as { done: number; total: number } };
        if (opts.shouldStop?.()) break;
        step = steps.next();
      }
    } finally {
      // Abandoned while a piece waited for its step: withdraw the ticket (pass()'s finally).
      if (!step.done) steps.return(undefined as never);
    }
    const prefillMs = performance.now() - t0;
    const run = { promptTokens, prefillMs, io: ioSoFar, afterPrefill: ioSoFar(), generated: 0, decodeSteps: 0, extraTokens: 0, decodeMs: 0, spec };
    // Stopped inside the prefill: the tokens fed so far stay in the session, the rest never entered
    // it (no token was produced, so no time per token either).
    if (!step.done) return { ...this.generationStats(run, "cancelled"), msPerToken: 0 };
    let logits = step.value;
    let stopReason: GenerationStats["stopReason"] = "length";
    let stepMs = prefillMs;
    // Tokens the last verify pass decided, in order; `next` is the next one to emit. decided[0]
    // follows the pass's first position, which the session already holds; decided[i ≥ 1] follows
    // the kept draft decided[i − 1], which the session takes (model.keep) just before.
    let decided: number[] = [];
    let next = 0;
    /** A verify pass whose trace rows wait for the number of positions kept. */
    let traced: number | undefined;
    const flushTrace = () => {
      if (traced !== undefined) this.trace?.flush(traced, session.state.pos - traced);
      traced = undefined;
    };
    try {
      while (run.generated < opts.maxTokens) {
        if (opts.shouldStop?.()) {
          stopReason = "cancelled";
          break;
        }
        let id: number;
        if (next < decided.length) {
          if (next > 0) {
            // The pending token is an accepted draft: the session takes it (no weights read).
            const s = performance.now();
            this.model.keep(session.state);
            session.pending = [];
            stepMs = performance.now() - s;
            run.decodeMs += stepMs;
            run.extraTokens++;
          }
          id = decided[next++]!;
        } else id = this.pick(logits, opts.sampler, run.generated, session.position);
        if (stop.has(id)) {
          // The stop token is part of the sequence (a chat turn ends with it) but not emitted.
          session.pending.push(id);
          stopReason = "stop";
          break;
        }
        // Pending before the yield: a caller that stops iterating here leaves the session
        // consistent (the emitted token is fed first on the next call).
        session.pending.push(id);
        yield { id, index: run.generated, ms: stepMs };
        run.generated++;
        if (run.generated >= opts.maxTokens) break;
        if (session.position + session.pending.length > this.context) {
          stopReason = "context";
          break;
        }
        if (next < decided.length) continue;
        // Every decided token is out: other sessions' passes may run again (verifyPass held them).
        if (batched) this.batch.release(session.state);
        // The next decode pass: the pending token alone, or with drafts (a verify pass).
        flushTrace();
        const s = performance.now();
        const draft = spec ? spec.propose(session.tokens, Math.min(this.context - session.position - 1, opts.maxTokens - run.generated - 1)) : { tokens: [] };
        const bytesBefore = this.weights.stats();
        let accepted = 0;
        if (draft.tokens.length === 0) {
          logits = (yield* this.pass(session, session.pending.splice(0), true, "decode", batched, acc))!;
          decided = [];
        } else {
          const pos0 = session.position;
          const ids = [...session.pending.splice(0), ...draft.tokens];
          const rows = yield* this.verifyPass(session, ids, batched, acc);
          traced = pos0;
          const row = (i: number) => {
            this.pick(rows[i]!, undefined, run.generated + i, pos0 + i); // every row used is checked finite
            return rows[i]!;
          };
          const verdict = verifyDrafts(row, draft, this.targetRule(opts.sampler));
          decided = verdict.tokens;
          accepted = verdict.accepted;
        }
        next = 0;
        spec?.observe(1 + draft.tokens.length, ...bytesSince(this.weights.stats(), bytesBefore), draft.tokens.length, accepted);
        run.decodeSteps++;
        stepMs = performance.now() - s;
        run.decodeMs += stepMs;
      }
    } finally {
      flushTrace();
      if (batched) this.batch.release(session.state);
    }
    return this.generationStats(run, stopReason);
  }

  /**
   * This request's speculator, or undefined when it does not speculate: off (engine or request),
   * or a sampler that does not expose its distribution (exact speculative sampling needs it).
   */
  private speculator(session: Session, opts: GenerateOptions): Speculator | undefined {
    const setting = parseSpeculate(opts.speculate ?? this.speculate, "speculate");
    const room = this.model.drafts;
    if (typeof setting === "number" && setting > room)
      throw new K3Error("USAGE", `speculate ${setting}: this engine has room for ${room} drafts per pass (opened with --speculate ${this.speculate})`);
    if (setting === "off" || room === 0 || (opts.sampler && !opts.sampler.distribution)) return undefined;
    session.speculationCost ??= new SpeculationCost(this.passCostPrior());
    return new Speculator(setting, room, opts.drafter ?? new NgramDrafter(), session.speculationCost);
  }

  /** What a one-position decode pass is expected to read and multiply, before any is measured. */
  private passCostPrior(): PassCostPrior {
    const cfg = this.config;
    const census = this.checkpoint.layout.census;
    const moeLayers = cfg.numLayers - cfg.firstKDense;
    const plan = this.plan;
    const missShare = plan ? Math.max(0, 1 - plan.expertSlots / plan.expertCount) : 0;
    return {
      trunkBytes: plan ? plan.streamedBytesPerToken : 0,
      expertBytes: plan ? plan.expertBytesPerTokenAllMiss * missShare : 0,
      activeBytes: census.trunkBytes + census.headBytes + moeLayers * cfg.topK * census.expertBytes,
      numExperts: cfg.numExperts,
      topK: cfg.topK,
    };
  }

  /** How a verify pass decides: greedy is the engine's own argmax (as in plain decoding). */
  private targetRule(sampler: Sampler | undefined): TargetRule {
    if (sampler?.distribution) return { kind: "sample", distribution: sampler.distribution };
    return { kind: "greedy", argmax: (l) => this.k.k3_argmax(l, l.length) };
  }

  /** The next token from `logits`: checked finite first (never an answer picked around a NaN),
   *  then the sampler's choice, or greedy (their argmax, lowest id on ties). */
  private pick(logits: Float32Array, sampler: Sampler | undefined, generated: number, position: number): number {
    const greedy = this.k.k3_argmax(logits, logits.length);
    if (greedy < 0) throw nonFiniteLogits(logits, generated === 0 ? "after the prompt" : `after generated token ${generated}`, position);
    return sampler ? sampler.sample(logits) : greedy;
  }

  /** A generation's figures: counters over the whole run (`io()`: batched, its share of each
   *  pass), and per decode step after the prefill. */
  private generationStats(
    run: { promptTokens: number; prefillMs: number; io: () => WeightStats; afterPrefill: WeightStats; generated: number; decodeSteps: number; extraTokens: number; decodeMs: number; spec?: Speculator },
    stopReason: GenerationStats["stopReason"],
  ): GenerationStats {
    const io = run.io();
    const dec = diffStats(io, run.afterPrefill);
    // Per token decided by a decode pass: one per pass, plus the accepted drafts that were used.
    const decided = run.decodeSteps + run.extraTokens;
    const per = (x: number) => (decided > 0 ? x / decided : 0);
    return {
      promptTokens: run.promptTokens,
      generatedTokens: run.generated,
      prefillMs: run.prefillMs,
      decodeMs: run.decodeMs,
      msPerToken: decided > 0 ? run.decodeMs / decided : run.prefillMs,
      stopReason,
      io,
      decodeSteps: run.decodeSteps,
      decodedTokens: decided,
      ioPerToken: {
        bytesRead: per(dec.trunkBytesRead + dec.expertBytesRead),
        trunkBytes: per(dec.trunkBytesRead),
        expertBytes: per(dec.expertBytesRead),
        reads: per(dec.reads),
        hits: per(dec.expertHits),
        requests: per(dec.expertRequests),
      },
      speculation: run.spec ? { ...run.spec.counters } : { draftedTokens: 0, acceptedTokens: 0, verifyPasses: 0 },
      peakRssBytes: peakRssBytes(),
      trunk: this.trunk,
    };
  }

  /** Counters since open (bytes read, reads, hits, direct I/O), the compute threads (how many, of
   *  how many hardware threads, and the pool's limit: the default stops there), the I/O threads. */
  stats(): WeightStats & ComputeThreads & { peakRssBytes: number; ioThreads: number; trunk: TrunkFormat } {
    return { ...this.weights.stats(), peakRssBytes: peakRssBytes(), ...this.pool, ioThreads: this.weights.ioThreads ?? 0, trunk: this.trunk };
  }

  /** C memory held now: the forward pass's scratch and the weights (sessions report their own). */
  allocatedBytes(): { forward: number; weights: number } {
    return { forward: this.model.allocatedBytes, weights: this.weights.allocatedBytes };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.prefix?.persist();
    this.trace?.close();
    this.model.free();
    this.weights.close();
  }
}

/** Trunk and expert bytes read between two snapshots. */
function bytesSince(a: WeightStats, b: WeightStats): [number, number] {
  return [a.trunkBytesRead - b.trunkBytesRead, a.expertBytesRead - b.expertBytesRead];
}

/** The model produced NaN or ±inf logits: broken weights. Never pick a token from them. */
function nonFiniteLogits(logits: Float32Array, step: string, position: number): K3Error {
  let nan = 0;
  let inf = 0;
  let first = -1;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i]!;
    if (Number.isFinite(v)) continue;
    if (first < 0) first = i;
    if (Number.isNaN(v)) nan++;
    else inf++;
  }
  return new K3Error("CHECKPOINT", `the model's logits ${step} (position ${position}) are not finite: ${nan} NaN and ${inf} infinite of ${logits.length}, the first at token id ${first}`, [
    "a weight of this model is NaN or infinite (or produces such values): check the checkpoint (k3 verify, or a fresh download)",
  ]);
}

/** Peak resident set size from the OS (getrusage maxrss, KiB on Linux). */
function peakRssBytes(): number {
  return process.resourceUsage().maxRSS * 1024;
}

/**
 * `k3 verify`: every shard against its header; `record` reads everything and records a CRC-32C
 * per trunk unit, routed expert and embedding row; without it, what was recorded (if anything)
 * is read again and compared (src/memory/verify.ts).
 */
export function verifyModel(dir: string, opts: { record?: boolean; onProgress?: (done: number, total: number) => void } = {}): VerifyResult {
  return verifyCheckpoint(loadKernels(), openCheckpoint(dir), opts);
}

/**
 * `k3 pack`: write a compact trunk for `dir` (int8 or int4 matrices in groups of 32, everything
 * else copied exactly) next to the model, or in k3's cache folder when that folder cannot take it
 * or is a Hugging Face download (src/memory/pack.ts). Opt-in: engines use it only with `trunk`.
 */
export function packTrunk(dir: string, format: Exclude<TrunkFormat, "bf16">, onProgress?: (doneBytes: number, totalBytes: number) => void): PackResult {
  if (format !== "int8" && format !== "int4") throw new K3Error("USAGE", `--trunk must be int8 or int4 to pack, got ${JSON.stringify(format)}`);
  return writePack(loadKernels(), openCheckpointCached(dir), format, onProgress);
}
