// Text in, text out: chat turns and plain completions on top of the engine.
//
// Used by `k3 run`, `k3 chat` and `k3 serve`; like every client of the engine it imports only
// the public API (src/engine.ts, and the typed errors of src/errors.ts; test/layers.test.ts).
//
// Invariants:
//   - Prefix reuse: the session keeps every token it has seen (history + pending). A request whose
//     rendered ids START WITH those tokens (and add at least one) feeds only the suffix; any other
//     request resets the session and feeds everything. Output is therefore identical with or
//     without reuse (the model state after a prefix does not depend on how it was fed: the engine's
//     incremental == full recompute test).
//   - Chat ends at <|end_of_msg|> or [EOS], looked up by NAME in the tokenizer (ids differ between
//     the release and test tokenizers). The end token stays in the session (pending), so the next
//     turn's rendering, which ends each assistant message with it, can reuse the prefix.
//   - Stop strings are matched on the decoded text across token boundaries and never emitted
//     (StopMatcher); text is decoded with a streaming UTF-8 decoder, so a character split over
//     tokens comes out whole.
//   - The context check happens before any model work (and, for text, before encoding it: see
//     checkPromptBytes): a prompt that cannot fit is a CONTEXT error.
import {
  AssistantStreamParser,
  CLOSE_THINK_OPEN_RESPONSE,
  createSampler,
  joinReplyStats,
  renderChat,
  segmentsToIds,
  StopMatcher,
  type ChatMessage,
  type Engine,
  type GenerationStats,
  type ParsedToolCall,
  type Sampler,
  type Session,
  type SpeculateSetting,
  type TokenEvent,
  type Tokenizer,
} from "./engine.ts";
import { K3Error } from "./errors.ts";

export { reusablePrefix } from "./engine.ts";

export interface GenOptions {
  maxTokens: number;
  /** 0 or absent: greedy (argmax, lowest id on ties). */
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  seed?: number;
  /** Stop strings: matched across token boundaries, never emitted. */
  stop?: string[];
  /** Polled before each token; true ends generation with finishReason "cancelled". */
  shouldStop?: () => boolean;
  onPrefill?: (done: number, total: number) => void;
  /** Speculative decoding for this generation (default: the engine's setting). */
  speculate?: SpeculateSetting;
  /** How sampled drafts are kept (GenerateOptions.acceptRule): "exact" (default, seed-identical) or
   *  the opt-in "rejection" rule (distribution-exact, not seed-identical). */
  acceptRule?: "exact" | "rejection";
  /** Run through the engine's batch scheduler with other generations (GenerateOptions.batched):
   *  the stream then yields `waiting` deltas, on which the caller awaits engine.turn(). */
  batched?: boolean;
}

export interface ChatOptions extends GenOptions {
  /** Default true (the release's default). */
  thinking?: boolean;
  /** "low" | "high" | "max"; ignored when thinking is off. No default here (see docs/CHAT.md). */
  thinkingEffort?: string;
  tools?: unknown[];
  toolChoice?: unknown;
  responseFormat?: unknown;
  /** Reasoning tokens allowed before the think channel is closed for the model (the markup a
   *  rendered turn has between reasoning and answer is fed, and the answer is generated from
   *  there). Absent: no limit. Counts against maxTokens like any generated token. */
  reasoningBudget?: number;
}

export interface ChatDelta {
  reasoning?: string;
  content?: string;
  /** Set once, when the reasoning budget closed the think channel (the answer follows). */
  reasoningCut?: true;
  /** Batched: the generation waits for the engine's next step (await engine.turn()). */
  waiting?: true;
}

export type ChatFinishReason = "stop" | "length" | "cancelled" | "context" | "tool_calls";

export interface Usage {
  /** Tokens of the whole rendered prompt (reused prefix included). */
  promptTokens: number;
  /** Tokens generated (end token not counted). */
  completionTokens: number;
  /** Prompt tokens served from the session instead of being fed again. */
  cachedTokens: number;
}

export interface ChatResult {
  reasoning: string;
  /** True when the reasoning budget closed the think channel (the model did not end it). */
  reasoningCut: boolean;
  content: string;
  toolCalls: ParsedToolCall[];
  finishReason: ChatFinishReason;
  usage: Usage;
  stats: GenerationStats;
}

export interface CompletionResult {
  text: string;
  ids: number[];
  finishReason: "stop" | "length" | "cancelled" | "context";
  usage: Usage;
  stats: GenerationStats;
}

export interface CompletionDelta {
  /** Text that became safe to show with these ids ("" while a character or a possible stop
   *  string is still held back). */
  text: string;
  ids: number[];
  /** Batched: the generation waits for the engine's next step (await engine.turn()). */
  waiting?: true;
}

/** The rendered prompt ids of a chat request (generation prompt included). */
export function chatPromptIds(tok: Tokenizer, messages: ChatMessage[], opts: Omit<ChatOptions, "maxTokens">): number[] {
  return segmentsToIds(renderChatSegments(messages, opts), tok);
}

function renderChatSegments(messages: ChatMessage[], opts: Omit<ChatOptions, "maxTokens">) {
  return renderChat({
    messages,
    tools: opts.tools ?? null,
    tool_choice: opts.toolChoice,
    response_format: opts.responseFormat,
    thinking: opts.thinking ?? true,
    thinking_effort: opts.thinkingEffort ?? null,
    add_generation_prompt: true,
  });
}

/** A chat request's prompt ids, refused (K3Error CONTEXT) before any model work when they cannot
 *  fit the context, and before encoding when the rendered text is too long to fit whatever it
 *  encodes to. The server calls this before queueing a request; streamChat calls it too. */
export function prepareChat(engine: Engine, messages: ChatMessage[], opts: Omit<ChatOptions, "maxTokens">): number[] {
  const tok = engine.tokenizer();
  const segments = renderChatSegments(messages, opts);
  checkPromptBytes(engine, tok, segments.reduce((n, [text]) => n + Buffer.byteLength(text, "utf8"), 0));
  const ids = segmentsToIds(segments, tok);
  checkContext(engine, ids.length);
  return ids;
}

/**
 * Render messages with the K3 chat format, feed only what the session has not seen, generate,
 * stop at <|end_of_msg|> / [EOS] or a stop string, and stream reasoning and answer apart.
 */
export function* streamChat(engine: Engine, session: Session, messages: ChatMessage[], opts: ChatOptions): Generator<ChatDelta, ChatResult> {
  return yield* streamChatIds(engine, session, prepareChat(engine, messages, opts), opts);
}

/** streamChat on prompt ids that prepareChat made from the same messages and options. */
export function* streamChatIds(engine: Engine, session: Session, ids: number[], opts: ChatOptions): Generator<ChatDelta, ChatResult> {
  const tok = engine.tokenizer();
  const thinking = opts.thinking ?? true;
  const endOfMsg = specialIdOrUndefined(tok, "<|end_of_msg|>");
  const stopIds = [endOfMsg, specialIdOrUndefined(tok, "[EOS]")].filter((x): x is number => x !== undefined);
  const parser = new AssistantStreamParser(thinking);
  const budget = thinking ? (opts.reasoningBudget ?? Infinity) : Infinity;
  if (!(budget >= 0)) throw new K3Error("USAGE", `the reasoning budget must be ≥ 0 tokens, got ${opts.reasoningBudget}`);
  const close = () => {
    parser.push(CLOSE_THINK_OPEN_RESPONSE.map(([t]) => t).join(""));
    return segmentsToIds([...CLOSE_THINK_OPEN_RESPONSE], tok);
  };
  // A budget of 0 closes the think channel in the prompt itself: the model answers at once.
  let reasoningCut = budget === 0;
  const prompt = reasoningCut ? [...ids, ...close()] : ids;
  checkContext(engine, prompt.length);
  // Over budget: the first run has generated `budget` tokens (≥ 1, so the prefill is done) and
  // the model is still thinking, with no marker half-parsed.
  const overBudget = () => !reasoningCut && first.generated() >= budget && parser.thinkingAtBoundary;
  const first = new TextGeneration(engine, session, prompt, opts, stopIds, () => parser.finished || overBudget());
  let run = first;
  let stats: GenerationStats | undefined;
  for (;;) {
    for (const piece of run.text()) {
      if (piece === WAITING) {
        yield { waiting: true }; // batched: the caller awaits the engine's next step
        continue;
      }
      if (piece === "") {
        yield {}; // a prefill step: nothing to show, but the caller may run its event loop
        continue;
      }
      const d = parser.push(piece);
      if (d.reasoningDelta || d.contentDelta) yield delta(d.reasoningDelta, d.contentDelta);
    }
    stats = stats ? joinReplyStats(stats, run.stats!) : run.stats!;
    // Budget spent while the model still thinks and tokens are left: close the think channel as a
    // rendered turn does (the engine stopped with "cancelled" for us), and answer from there.
    const left = opts.maxTokens - stats.generatedTokens;
    if (run !== first || !overBudget() || left < 1 || opts.shouldStop?.() || run.stopStringHit()) break;
    reasoningCut = true;
    const markup = close();
    checkContext(engine, session.tokens.length + markup.length);
    run = new TextGeneration(engine, session, [...session.tokens, ...markup], { ...opts, maxTokens: left }, stopIds, () => parser.finished);
    yield { reasoningCut: true };
  }
  const d = parser.finish();
  if (d.reasoningDelta || d.contentDelta) yield delta(d.reasoningDelta, d.contentDelta);

  if (parser.finished && endOfMsg !== undefined && stats.stopReason !== "stop") {
    // The model closed the message (<|close|>message<|sep|>) and we stopped before it wrote
    // <|end_of_msg|>: append it, so the session ends exactly like the rendered turn will.
    session.pending.push(endOfMsg);
  }
  const out = parser.result();
  let finishReason: ChatFinishReason = run.finishReason(parser.finished);
  if (finishReason === "stop" && out.toolCalls.length > 0) finishReason = "tool_calls";
  return {
    reasoning: out.reasoning,
    reasoningCut,
    content: out.content,
    toolCalls: out.toolCalls,
    finishReason,
    usage: { promptTokens: prompt.length, completionTokens: stats.generatedTokens, cachedTokens: first.cachedTokens },
    stats,
  };
}

/** A completion prompt's ids: text is encoded with specials disabled (refused by its byte length
 *  first when it cannot fit), ids are used as given; refused (K3Error CONTEXT) when they cannot
 *  fit the context. Only id prompts work on a model without a tokenizer (K3Error TOKENIZER). */
export function prepareCompletion(engine: Engine, prompt: string | number[]): number[] {
  let ids: number[];
  if (typeof prompt === "string") {
    if (!engine.tokenizerDir) throw new K3Error("TOKENIZER", `${engine.dir} has no tokenizer (tiktoken.model); give token ids instead`);
    const tok = engine.tokenizer();
    checkPromptBytes(engine, tok, Buffer.byteLength(prompt, "utf8"));
    ids = tok.encode(prompt);
  } else ids = prompt;
  if (ids.length === 0) throw new K3Error("USAGE", "the prompt is empty");
  checkContext(engine, ids.length);
  return ids;
}

/** Continue a prompt (see prepareCompletion). Stops at [EOS] (when the tokenizer has one), a stop
 *  string, maxTokens, the context, or shouldStop. A model without a tokenizer works with id
 *  prompts; its deltas then carry ids and no text. */
export function* streamCompletion(
  engine: Engine,
  session: Session,
  prompt: string | number[],
  opts: GenOptions,
): Generator<CompletionDelta, CompletionResult> {
  const tok = engine.tokenizerDir ? engine.tokenizer() : undefined;
  const ids = prepareCompletion(engine, prompt);
  const eos = tok ? specialIdOrUndefined(tok, "[EOS]") : undefined;
  const run = new TextGeneration(engine, session, ids, opts, eos === undefined ? [] : [eos], () => false);

  let text = "";
  const generated: number[] = [];
  let unreported: number[] = [];
  for (const ev of run.events()) {
    if (ev.wait) {
      yield { text: "", ids: [], waiting: true };
      continue;
    }
    if (ev.tick) {
      yield { text: "", ids: [] };
      continue;
    }
    generated.push(ev.id);
    unreported.push(ev.id);
    const piece = ev.text;
    text += piece;
    yield { text: piece, ids: unreported };
    unreported = [];
  }
  const tail = run.flushText();
  text += tail;
  if (tail) yield { text: tail, ids: [] };
  const stats = run.stats!;
  return {
    text,
    ids: generated,
    finishReason: run.finishReason(false),
    usage: { promptTokens: ids.length, completionTokens: stats.generatedTokens, cachedTokens: run.cachedTokens },
    stats,
  };
}

/** Refuse, before any model work, a prompt that cannot fit the engine's context. */
export function checkContext(engine: Engine, promptTokens: number): void {
  if (promptTokens > engine.context - 1) {
    throw new K3Error("CONTEXT", `the prompt (${promptTokens} tokens) exceeds the context limit (${engine.context} tokens)`, [
      "raise --context, or shorten the prompt / conversation",
    ]);
  }
}

/** Refuse, before encoding it, text that cannot fit: each token stands for at most
 *  tok.maxTokenBytes bytes, so `bytes` of text are at least ceil(bytes / maxTokenBytes) tokens.
 *  Encoding a 100 MB prompt only to count it would hold a server's event loop for seconds. */
export function checkPromptBytes(engine: Engine, tok: Tokenizer, bytes: number): void {
  const atLeast = Math.ceil(bytes / tok.maxTokenBytes);
  if (atLeast > engine.context - 1) {
    throw new K3Error(
      "CONTEXT",
      `the prompt (${bytes} bytes: at least ${atLeast} tokens, since no token is longer than ${tok.maxTokenBytes} bytes) exceeds the context limit (${engine.context} tokens)`,
      ["raise --context, or shorten the prompt / conversation"],
    );
  }
}

// ---------------------------------------------------------------------------------------------
// One generation: prefix reuse, sampler, decode, stop strings.

interface TextEvent {
  id: number;
  /** Text released by this token after UTF-8 completion and stop-string hold-back. */
  text: string;
  /** A prefill step, not a token (id −1, no text). */
  tick?: boolean;
  /** Batched: waiting for the engine's next step (id −1, no text). */
  wait?: boolean;
}

/** What run.text() yields while a batched generation waits for the engine's next step. */
const WAITING = null;

/**
 * One generation on a session: validates the options, reuses what the session holds of the
 * prompt, runs the engine's generate, and turns its tokens into text (streaming UTF-8 decode,
 * stop strings held back and never emitted). `done` is polled between steps to stop early.
 */
class TextGeneration {
  /** Prompt tokens the session (or the engine's prefix cache) already held: not fed again. */
  readonly cachedTokens: number;
  private readonly gen: Generator<TokenEvent, GenerationStats>;
  private readonly decoder: ReturnType<Tokenizer["decoder"]> | undefined;
  private readonly stopper: StopMatcher;
  private stopHit = false;
  private generatedCount = 0;
  #stats: GenerationStats | undefined;

  constructor(engine: Engine, session: Session, ids: number[], opts: GenOptions, stopIds: number[], done: () => boolean) {
    if (!Number.isInteger(opts.maxTokens) || opts.maxTokens < 1) {
      throw new K3Error("USAGE", `maxTokens must be a positive integer, got ${opts.maxTokens}`);
    }
    // Validate sampling options before touching the session (a bad request changes nothing).
    const configured = createSampler(samplerOptions(opts));
    // Greedy goes through the engine's own argmax (same rule: lowest id on ties).
    const sampler: Sampler | undefined = opts.temperature ? configured : undefined;
    // What the session (or the engine's prefix cache) already holds of the prompt: only the rest is
    // fed. A session an error interrupted mid-forward starts over (the caller sends the whole
    // conversation every time, so nothing is lost but time). Engine.reusePrefix has the cases.
    this.cachedTokens = engine.reusePrefix(session, ids);
    const feed = ids.slice(this.cachedTokens);

    const tok = engine.tokenizerDir ? engine.tokenizer() : undefined;
    this.decoder = tok?.decoder();
    this.stopper = new StopMatcher(opts.stop ?? []);
    this.gen = engine.generate(session, feed, {
      maxTokens: opts.maxTokens,
      sampler,
      stopIds,
      onPrefill: opts.onPrefill,
      shouldStop: () => this.stopHit || done() || (opts.shouldStop?.() ?? false),
      yieldDuringPrefill: true,
      speculate: opts.speculate,
      acceptRule: opts.acceptRule,
      batched: opts.batched,
    });
  }

  /** Tokens generated so far. */
  generated(): number {
    return this.generatedCount;
  }

  stopStringHit(): boolean {
    return this.stopHit;
  }

  get stats(): GenerationStats | undefined {
    return this.#stats;
  }

  *events(): Generator<TextEvent> {
    try {
      yield* this.textEvents();
    } finally {
      this.gen.return(undefined as never); // abandoned: a batched pass waiting for its step is withdrawn
    }
  }

  private *textEvents(): Generator<TextEvent> {
    for (;;) {
      const r = this.gen.next();
      if (r.done) {
        this.#stats = r.value;
        return;
      }
      if (r.value.wait) {
        yield { id: -1, text: "", wait: true };
        continue;
      }
      if (r.value.prefill) {
        // A prefill step: no token, but a chance for the caller to run its event loop.
        yield { id: -1, text: "", tick: true };
        continue;
      }
      this.generatedCount++;
      let text = "";
      if (this.decoder && !this.stopHit) {
        const s = this.stopper.push(this.decoder.push(r.value.id));
        text = s.text;
        if (s.stopped) this.stopHit = true;
      }
      yield { id: r.value.id, text };
    }
  }

  /** The text held back at the end: an incomplete UTF-8 tail, a possible stop string's start. */
  flushText(): string {
    if (!this.decoder || this.stopHit) return "";
    const a = this.stopper.push(this.decoder.flush());
    if (a.stopped) {
      this.stopHit = true;
      return a.text;
    }
    return a.text + this.stopper.flush().text;
  }

  /** Decoded text pieces (empty ones skipped; "" for a prefill step, WAITING for a batched
   *  wait), the final flush included. */
  *text(): Generator<string | typeof WAITING> {
    for (const ev of this.events()) {
      if (ev.wait) yield WAITING;
      else if (ev.text || ev.tick) yield ev.text;
    }
    const rest = this.flushText();
    if (rest) yield rest;
  }

  /** The engine stops with "cancelled" whenever shouldStop fires; tell our own reasons apart. */
  finishReason(messageClosed: boolean): CompletionResult["finishReason"] {
    const s = this.#stats!.stopReason;
    if (s !== "cancelled") return s;
    if (this.stopHit || messageClosed) return "stop";
    return "cancelled";
  }
}

function samplerOptions(o: GenOptions) {
  return { temperature: o.temperature ?? 0, topK: o.topK, topP: o.topP, minP: o.minP, seed: o.seed };
}

function specialIdOrUndefined(tok: Tokenizer, name: string): number | undefined {
  try {
    return tok.specialId(name);
  } catch {
    return undefined;
  }
}

function delta(reasoning: string, content: string): ChatDelta {
  const d: ChatDelta = {};
  if (reasoning) d.reasoning = reasoning;
  if (content) d.content = content;
  return d;
}
