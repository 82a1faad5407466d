// The public API: open a model under a budget, hold sessions, generate, report stats, verify a
// model. The CLI and the server use only this module, plus src/inspect.ts for inspection without
// weights (test/layers.test.ts checks the imports). The work is done in src/engine/: what open
// decides (open.ts), the forward passes (passes.ts), one generation (generation.ts).
import { existsSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint, type Checkpoint } from "./checkpoint/catalogue.ts";
import { openCheckpointCached } from "./checkpoint/index-cache.ts";
import type { ModelConfig } from "./checkpoint/types.ts";
import { K3Error } from "./errors.ts";
import { ISA, loadKernels, type Kernels } from "./kernels.ts";
import { checkKernelLimits, Model } from "./model/forward.ts";
import type { Drafter } from "./speculate/drafter.ts";
import type { Sampler } from "./text/sampling.ts";
import type { SpeculateSetting, SpeculationCounters } from "./speculate/speculator.ts";
import { ResidentWeights } from "./model/resident.ts";
import type { MemoryPlan } from "./memory/plan.ts";
import type { BatchStats } from "./batch/scheduler.ts";
import { PrefixCache, type PrefixCacheStats } from "./batch/prefix-cache.ts";
import type { PolicyName } from "./memory/policy/index.ts";
import type { PieceOptions } from "./memory/pieces.ts";
import { PACK_FORMATS, writePack, type PackedTrunk, type PackFormat, type PackResult, type TrunkFormat } from "./memory/pack.ts";
import { shardStamps } from "./checkpoint/stamps.ts";
import type { DeviceOf } from "./memory/devices.ts";
import { verifyCheckpoint, type VerifyResult } from "./memory/verify.ts";
import { TraceWriter } from "./memory/trace-writer.ts";
import { SessionState } from "./model/state.ts";
import { loadSession as loadSessionFile, saveSession as saveSessionFile, type StateIdentity } from "./model/session-file.ts";
import { Tokenizer } from "./text/tokenizer.ts";
import { readGenerationDefaults, type GenerationDefaults } from "./checkpoint/generation-config.ts";
import type { WeightProvider, WeightStats } from "./model/weights.ts";
import { Generation, passCostPrior, peakRssBytes } from "./engine/generation.ts";
import { openStreaming, sizeEngine } from "./engine/open.ts";
import { openDraft } from "./engine/draft.ts";
import { openDraftCheckpoint } from "./checkpoint/draft.ts";
import { writeDraftPack, type DraftPackResult } from "./memory/draft-pack.ts";
import type { DraftModel } from "./model/draft.ts";
import { MODEL_DRAFTER } from "./engine/model-drafter.ts";
import { Passes } from "./engine/passes.ts";
import { SpeculationCost } from "./speculate/cost.ts";
import { Session } from "./engine/session.ts";
import { computeThreads, type ComputeThreads } from "./engine/threads.ts";

export type { ModelConfig } from "./checkpoint/types.ts";
export type { GenerationDefaults } from "./checkpoint/generation-config.ts";
export type { DeviceStats, WeightStats } from "./model/weights.ts";
export type { BatchStats, StepRecord } from "./batch/scheduler.ts";
export type { PrefixCacheStats } from "./batch/prefix-cache.ts";
export type { VerifyResult } from "./memory/verify.ts";
export { PACK_FORMATS, TRUNK_FORMATS, type PackFormat, type PackResult, type TrunkFormat } from "./memory/pack.ts";
// The text layer is part of the public API: the CLI and the server use it through here.
export { Tokenizer } from "./text/tokenizer.ts";
export { CLOSE_THINK_OPEN_RESPONSE, renderChat, segmentsToIds, SERVED_DEFAULT_THINKING_EFFORT, VALID_THINKING_EFFORTS, type ChatInput, type ChatMessage, type Segment } from "./text/chat.ts";
export { AssistantStreamParser, parseAssistantOutput, type AssistantOutput, type ParsedToolCall } from "./text/chat-parse.ts";
export { createSampler, uniformAt, type Sampler, type SamplerOptions } from "./text/sampling.ts";
export { parseSpeculate, type SpeculateSetting, type SpeculationCounters } from "./speculate/speculator.ts";
/** Drafts per verify pass `--speculate auto` has room for at most. */
export { DEFAULT_MAX_DRAFTS } from "./model/buffers.ts";
export type { Draft, Drafter, DraftRequest } from "./speculate/drafter.ts";
export { StopMatcher } from "./text/stop.ts";
export { deeperThan, MAX_JSON_DEPTH } from "./text/json-depth.ts";
// Which folder a path names (a Hugging Face download resolves to its snapshot), e.g. for the tokenizer.
export { resolveModelFolder, type ModelFolder } from "./checkpoint/model-folder.ts";
export { checkModelFolder } from "./checkpoint/catalogue.ts";
/** The expert-cache policies an engine accepts (EngineOptions.policy). */
export { ONLINE_POLICIES as POLICY_NAMES } from "./memory/policy/index.ts";
// Sessions, and the compute pool's limits and defaults (src/engine/: the engine's own modules).
export { heldPrefix, reusablePrefix, Session } from "./engine/session.ts";
export { defaultThreads, engineLimits, ISA_NAMES, type ComputeThreads } from "./engine/threads.ts";
export { joinReplyStats } from "./engine/reply-stats.ts";

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
  /** I/O threads of each device's read queue (1..the kernels' limit; default 4). Each engine has
   *  its own queues. */
  ioThreads?: number;
  /** Folders holding copies of some or all shards, usually on other drives (`--mirror`, checked
   *  to be the same bytes): a read goes to the copy that will finish it first, a late one is
   *  hedged on another copy, a failed one retried there (docs/DRIVES.md). Same output. */
  mirrors?: string[];
  /** How files are grouped into devices (each gets its own read queue and counters). Default: by
   *  the disk behind each file. For tests on one disk: name the "device" of each file. */
  deviceOf?: DeviceOf;
  /** A read of a mirrored shard is late after this many times its predicted time: then it is
   *  moved or hedged (default DEFAULT_HEDGE_AFTER, measured; Infinity never; 0 at once). */
  hedgeAfter?: number;
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
   *  `blockBytes` (default 32 MiB; other values only for tests: the checksums of `--verify` and of a
   *  packed trunk are on the default's grid, so neither applies to them). */
  trunkPieces?: PieceOptions;
  /** Trunk weights: "auto" (default: the exact pack where one exists and reads fewer bytes at the
   *  budget, else the release's bf16 from the shards — the same bits either way), "bf16", "exact"
   *  (`k3 pack --trunk exact`: the release's values coded in 12 bits plus escapes), or a lossy
   *  compact trunk ("int8", "int4", docs/TRUNK.md). Experts and embedding rows are exact always. */
  trunk?: TrunkFormat | "auto";
  /** ISA override: "auto" or one of ISA_NAMES. */
  isa?: keyof typeof ISA;
  /**
   * Speculative decoding (docs/SPECULATION.md): "auto" (default: the cost model decides each
   * step, up to 8 drafts per pass or chunk − 1), "off", or N (verify up to N drafts whenever the
   * drafter has them). Sizes the verify pass's buffers; requests may ask for less, never more.
   * Output is identical either way: greedy and seeded ids alike (drafts are kept by exact match).
   */
  speculate?: SpeculateSetting;
  /** Sessions that advance together in one pass (batched generation, `k3 serve`): the plan holds
   *  their state. "auto": what the budget allows, at most DEFAULT_PARALLEL_CAP. Default 1. */
  parallel?: number | "auto";
  /** The prefix cache (batched generation only): RAM tier bytes ("auto": the planner's default
   *  share; 0: none) and an optional disk tier (folder, size cap in bytes). Default: off. */
  prefixCache?: { ramBytes?: number | "auto"; dir?: string; diskBytes?: number };
  /**
   * A draft model (`--draft DIR`: a released K3 EAGLE-3 draft, config.json + model.safetensors,
   * docs/DRAFT.md) whose chain the cost model may verify instead of (or besides) the n-gram
   * drafter's. Checked against the target before any weight is read; held resident (the plan
   * counts it). "none" or undefined: no draft. Output is identical either way.
   */
  draft?: string;
  /** The draft's weights: "auto" (default: the format whose plan reads the fewest bytes per token,
   *  among the released bf16 and the packs `k3 pack DRAFT --draft int8|int4` made), or one of them. */
  draftFormat?: "auto" | "bf16" | "int8" | "int4";
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


export interface GenerateOptions {
  maxTokens: number;
  /** Default: greedy (argmax, lowest id on ties). `sample(logits, position)` must be a pure
   *  function of its arguments (createSampler's is: docs/CHAT.md, the sampling contract); then the
   *  output is the same with speculation on or off, at every budget and batch. */
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
   *  is off; N more than the engine's drafts per pass is refused. It changes how many passes the
   *  tokens take, never a token (greedy or seeded). */
  speculate?: SpeculateSetting;
  /** Who drafts (default: the prompt-lookup n-gram drafter, src/speculate/ngram.ts). Its drafts
   *  are checked as they arrive: an id outside the vocabulary, a non-integer or more than asked
   *  for is refused (K3Error USAGE) before the session is touched. */
  drafter?: Drafter;
  /**
   * How a sampled generation's drafts are kept. "exact" (default): a draft is kept when it equals
   * the token the target draws at its position (the sampling contract: seeded output is the
   * non-speculative output). "rejection" (opt-in): the speculative-sampling rule min(1, p/q) with
   * the draft model's q (docs/SPECULATION.md §4b): the same distribution of output, more drafts
   * kept, but NOT the same ids as without speculation for a seed. Greedy generation ignores it.
   */
  acceptRule?: "exact" | "rejection";
  /**
   * Run every forward pass through the engine's batch scheduler, together with the other batched
   * generations (src/batch/scheduler.ts). The generator then yields `wait` events: the caller
   * awaits `engine.turn()` and calls next() again. Output is bit-identical to an unbatched run.
   * The prompt is fed in pieces ending at multiples of the chunk, and with a prefix cache the
   * state at the last such boundary inside the prompt is kept (docs/SERVER.md).
   */
  batched?: boolean;
}

/** The draft model an engine holds (EngineOptions.draft), as stats and /v1/models name it. */
export interface DraftInfo {
  /** Its folder's name (a Hugging Face download: the repo id). */
  name: string;
  dir: string;
  /** "eagle3" or "eagle3.1". */
  variant: string;
  /** Its weights: "bf16" as released, or a pack's "int8" / "int4". */
  format: "bf16" | "int8" | "int4";
  /** One-based completed layers of the target it reads. */
  captureLayers: number[];
  /** Whether it reads the target's embedding rows (its own table equals them) or keeps its own. */
  sharedEmbedding: boolean;
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
  /** The counters of the decode passes alone (io less the prefill's). */
  decodeIo: WeightStats;
  /** Tokens the decode passes decided per second of decode time (null without decode). */
  tokensPerS: number | null;
  /** Decode only: counters of the decode passes divided by the tokens they decided (= decodeSteps
   *  without speculation; more with it: a verify pass decides 1 + accepted drafts). 0 without decode.
   *  Derived in one place with msPerToken and tokensPerS: src/engine/reply-stats.ts. */
  ioPerToken: { bytesRead: number; trunkBytes: number; expertBytes: number; reads: number; hits: number; requests: number };
  /** Drafted / accepted tokens and verify passes (all 0 with speculation off). */
  speculation: SpeculationCounters;
  /** The same per drafter that drafted ("ngram", "model", or a caller's drafter by its name). */
  drafters: Record<string, SpeculationCounters>;
  /** The engine's draft model (undefined without one). */
  draft?: DraftInfo;
  peakRssBytes: number;
  /** Which trunk produced it: the release's (bf16, exact) or a packed one (lossy). */
  trunk: TrunkFormat;
}

export class Engine {
  private constructor(
    readonly dir: string,
    readonly checkpoint: Checkpoint,
    private k: Kernels,
    private passes: Passes,
    private pool: ComputeThreads,
    /** The memory plan the weights follow (undefined with `resident`). */
    readonly plan: MemoryPlan | undefined,
    /** Speculation the engine was opened with (requests default to it). */
    readonly speculate: SpeculateSetting,
    /** Which trunk the weights come from: the release's (bf16, exact) or a packed one. */
    readonly trunk: TrunkFormat,
    /** The packed trunk, when `trunk` is not bf16. */
    private readonly pack: PackedTrunk | undefined,
  ) {}

  /** The packed trunk's file, when `trunk` is not bf16. */
  get trunkFile(): string | undefined {
    return this.pack?.path;
  }

  /** Context limit in tokens (EngineOptions.context, else the default for the model). */
  get context(): number {
    return this.passes.context;
  }

  /** Sessions that advance together in one batched pass (EngineOptions.parallel). */
  get parallel(): number {
    return this.passes.parallel;
  }

  /** The draft model (EngineOptions.draft), or undefined. */
  get draft(): DraftInfo | undefined {
    return this.passes.draft?.info;
  }

  /** Tokens per prefill pass (EngineOptions.chunk, else the planner's choice). */
  get prefillChunk(): number {
    return this.passes.model.chunk;
  }

  /** Drafts a verify pass has room for (0: this engine does not speculate). */
  get maxDrafts(): number {
    return this.passes.model.drafts;
  }

  /** Who drafts for speculation (none when the engine does not speculate): the n-gram drafter,
   *  and the model drafter when a draft model is loaded (--draft). */
  get drafters(): string[] {
    if (this.maxDrafts === 0) return [];
    return this.passes.draft ? ["ngram", MODEL_DRAFTER] : ["ngram"];
  }

  private genDefaults?: GenerationDefaults;
  /** The sampling defaults of the model folder's generation_config.json ({} without one); read
   *  once; K3Error CONFIG for a file that is there but wrong. */
  generationDefaults(): GenerationDefaults {
    return (this.genDefaults ??= readGenerationDefaults(this.dir));
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
    const size = sizeEngine(k, checkpoint, opts, threads.threads);
    // The trace records one sequence, chunk by chunk: a batched pass of several sessions cannot
    // be written to it, so the combination is refused here, before any weight is read.
    if (opts.trace !== undefined && size.parallel > 1)
      throw new K3Error("USAGE", `--trace records one generation at a time, and this engine batches ${size.parallel} sessions (--parallel ${size.parallel}${opts.parallel === "auto" ? ", the default here" : ""})`, ["add --parallel 1 to trace"]);
    // A plan exactly when not resident: the streamed weights follow it.
    const weights: WeightProvider = size.plan ? yield* openStreaming(k, checkpoint, size.plan, size.pack, size.mirrors, opts) : new ResidentWeights(k, cfg, checkpoint.tensors);
    let model: Model;
    let draft: DraftModel | undefined;
    try {
      draft = size.draft && openDraft(k, size.draft, cfg, weights, size.context, size.drafts);
      model = new Model(k, cfg, weights, size.chunk, size.context, size.drafts, size.parallel, draft?.cfg.captureLayers ?? []);
      model.lookahead = opts.lookahead ?? true;
      model.tapSink = draft;
    } catch (err) {
      draft?.free();
      weights.close();
      throw err;
    }
    // Batched steps place their draft rows by what a step of R rows costs here (learnt per step).
    const stepCost = size.drafts > 0 ? new SpeculationCost(passCostPrior(cfg, checkpoint.layout.census, size.plan)) : undefined;
    const passes = new Passes(k, model, weights, size.context, size.parallel, draft, stepCost);
    // The folder actually read (a Hugging Face repo folder resolves to its snapshot).
    const engine = new Engine(checkpoint.dir, checkpoint, k, passes, threads, size.plan, size.speculate, size.trunk, size.pack);
    try {
      if (opts.prefixCache)
        passes.prefix = new PrefixCache({ k, identity: engine.identity, modelName: engine.name, vocab: cfg.vocab, ramBytes: size.prefixRam, dir: opts.prefixCache.dir, diskBytes: opts.prefixCache.diskBytes });
      if (opts.trace) {
        const trace = new TraceWriter(opts.trace);
        passes.trace = trace;
        model.onRouting = (_L, idx, T, K) => trace.record(idx, T, K);
      }
    } catch (err) {
      engine.close();
      throw err;
    }
    return engine;
  }

  /** Resolves once the batch scheduler's next step has run: what a caller awaits when a batched
   *  generation yields a `wait` event. */
  turn(): Promise<void> {
    return this.passes.batch.turn();
  }

  /** Batched generation so far: steps, sessions per step, the recent steps. */
  batchStats(): BatchStats {
    return this.passes.batch.stats();
  }

  /** Write the prefix cache's RAM-only entries to its disk tier now (close() does it too); they
   *  stay in RAM as well. Nothing without a disk tier. */
  persistPrefixCache(): void {
    this.passes.alive();
    this.passes.prefix?.persist();
  }

  /** The prefix cache's counters (undefined when the engine has none). */
  prefixStats(): PrefixCacheStats | undefined {
    return this.passes.prefix?.stats();
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
    return this.passes.reusePrefix(session, ids);
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

  private id?: StateIdentity;
  /**
   * What this engine's states are computed with, which every saved state (session files, the
   * prefix cache) is tied to: the model (fingerprint) and the exact weights — the trunk format,
   * the pack's content when the trunk is packed, and each shard's stamp (src/checkpoint/stamps.ts:
   * size, header, mtime, a content sample; taken once, at the first use).
   */
  get identity(): StateIdentity {
    this.id ??= {
      model: this.fingerprint,
      weights: {
        trunk: this.trunk,
        ...(this.pack ? { trunkFile: { bytes: this.pack.fileBytes, contentHash: this.pack.contentHash } } : {}),
        shards: shardStamps(this.checkpoint, true),
      },
    };
    return this.id;
  }

  /** Save a session's state (KDA, conv, MLA cache, position, tokens) to a file, with optional
   *  JSON metadata the caller wants back (a chat keeps its messages there). */
  saveSession(session: Session, path: string, meta?: unknown): void {
    this.passes.alive();
    if (session.closed) throw new K3Error("USAGE", "cannot save a closed session");
    if (session.dirty) throw new K3Error("SESSION", "cannot save a session interrupted by an error: its state does not match its tokens");
    saveSessionFile(this.k, session.state, session.pending, this.identity, this.name, path, meta);
  }

  /** A new session restored from a file saved by the same model and weights (refused otherwise,
   *  naming why: another model, trunk, pack or shard bytes). */
  loadSession(path: string): Session {
    const session = this.createSession();
    try {
      const loaded = loadSessionFile(this.k, session.state, this.identity, path);
      session.pending = loaded.pending;
      session.meta = loaded.meta;
    } catch (err) {
      session.state.free();
      throw err;
    }
    return session;
  }

  createSession(): Session {
    this.passes.alive();
    const state = new SessionState(this.k, this.config, this.context);
    try {
      state.draft = this.passes.draft?.newState();
    } catch (err) {
      state.free();
      throw err;
    }
    return new Session(state);
  }

  /** Run prompt tokens through the model without sampling (returns last logits, a view). */
  prefill(session: Session, ids: number[], onChunk?: (done: number, total: number) => void): Float32Array {
    const steps = this.passes.prefillSteps(session, ids, onChunk);
    for (;;) {
      const r = steps.next();
      if (r.done) return r.value;
    }
  }

  /**
   * Generate after `prompt` (appended to the session). Yields each token as soon as it is
   * sampled; the caller may stop iterating at any time (the session stays consistent: the last
   * emitted token is kept pending and fed first next time). src/engine/generation.ts has the loop.
   */
  *generate(session: Session, prompt: number[], opts: GenerateOptions): Generator<TokenEvent, GenerationStats> {
    const setup = { speculate: this.speculate, trunk: this.trunk, costPrior: () => passCostPrior(this.config, this.checkpoint.layout.census, this.plan), draft: this.draft };
    return yield* new Generation(this.passes, setup, session, prompt, opts).run();
  }

  /** Counters since open (bytes read, reads, hits, direct I/O, per device), the compute threads
   *  (how many, of how many hardware threads, and the pool's limit: the default stops there), the
   *  I/O threads of each device's queue, the time since open, and the draft model (--draft). */
  stats(): WeightStats & ComputeThreads & { peakRssBytes: number; ioThreads: number; trunk: TrunkFormat; uptimeMs: number; draft?: DraftInfo } {
    const weights = this.passes.weights;
    return { ...weights.stats(), peakRssBytes: peakRssBytes(), ...this.pool, ioThreads: weights.ioThreads ?? 0, trunk: this.trunk, uptimeMs: performance.now() - this.openedAt, draft: this.draft };
  }

  /** When the engine finished opening (performance.now()): devices' busy fractions are of the time since. */
  private readonly openedAt = performance.now();

  /** C memory held now: the forward pass's scratch and the weights (sessions report their own). */
  allocatedBytes(): { forward: number; weights: number } {
    return { forward: this.passes.model.allocatedBytes, weights: this.passes.weights.allocatedBytes };
  }

  close(): void {
    this.passes.close();
  }
}

/**
 * `k3 verify`: every shard against its header; `record` reads everything and records a CRC-32C
 * per trunk unit, routed expert and embedding row; without it, what was recorded (if anything)
 * is read again and compared (src/memory/verify.ts). Every packed trunk of the model is read in
 * full against its own checksums and those of the shard rows it came from.
 */
export function verifyModel(dir: string, opts: { record?: boolean; onProgress?: (done: number, total: number) => void } = {}): VerifyResult {
  return verifyCheckpoint(loadKernels(), openCheckpoint(dir), opts);
}

/**
 * `k3 pack DRAFT --draft int8|int4`: write a packed copy of a draft model (its matrices in the
 * compact trunk's int8/int4 groups, the rest exact) next to it or in k3's cache folder
 * (src/memory/draft-pack.ts). Engines use it when its plan reads fewer bytes (EngineOptions.draftFormat).
 */
export function packDraft(dir: string, format: "int8" | "int4", onProgress?: (doneBytes: number, totalBytes: number) => void): DraftPackResult {
  if (format !== "int8" && format !== "int4") throw new K3Error("USAGE", `--draft must be int8 or int4 to pack, got ${JSON.stringify(format)}`);
  return writeDraftPack(loadKernels(), openDraftCheckpoint(dir), format, onProgress);
}

/**
 * `k3 pack`: write a packed trunk for `dir` next to the model, or in k3's cache folder when that
 * folder cannot take it or is a Hugging Face download (src/memory/pack.ts): "exact" (the same
 * model, its matrices coded in 12 bits plus escapes; engines choose it by default where it reads
 * fewer bytes), or the lossy "int8"/"int4" (matrices in groups of 32; used only with `trunk`).
 */
export function packTrunk(dir: string, format: PackFormat, onProgress?: (doneBytes: number, totalBytes: number) => void): PackResult {
  if (!PACK_FORMATS.includes(format)) throw new K3Error("USAGE", `--trunk must be ${PACK_FORMATS.join(", ")} to pack, got ${JSON.stringify(format)}`);
  return writePack(loadKernels(), openCheckpointCached(dir), format, onProgress);
}
