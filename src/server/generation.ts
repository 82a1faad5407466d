// POST /v1/chat/completions and POST /v1/completions: parse the request, check it against the
// model (name, tokenizer, vocabulary, context: all before queueing, so a request that cannot run
// never waits for the engine), then run it as a Job (run-job.ts), batched with the other running
// generations, on the session the pool lends it (sessions.ts).
import { randomInt, randomUUID } from "node:crypto";
import {
  prepareChat,
  prepareCompletion,
  streamChatIds,
  streamCompletion,
  type ChatDelta,
  type ChatResult,
  type CompletionDelta,
  type CompletionResult,
} from "../conversation.ts";
import { readJson, type ServerContext } from "./context.ts";
import { badRequest, toApiError } from "./errors.ts";
import { chatChunkJson, chatCompletionJson, completionChunkJson, completionJson, k3Json, openAiFinish, progressChunkJson, toolCallsJson, usageChunkJson, type Envelope } from "./openai.ts";
import { PrefillProgress } from "./progress.ts";
import { runJob, type Job } from "./run-job.ts";
import { parseChatRequest, parseCompletionRequest, type ChatRequest, type SamplingRequest } from "./validate.ts";

/** A seed for a request that sends none: a new one every request (so "regenerate" at a
 *  temperature gives another reply), returned as `k3.seed` so the reply can be reproduced. */
export const freshSeed = () => randomInt(0, 2 ** 32);

/** Request fields → conversation options, the server's defaults filled in: the length "until the
 *  context is full", the temperature RequestDefaults says, a fresh seed. */
function genOptions(ctx: ServerContext, s: SamplingRequest, seed: number, shouldStop: () => boolean, progress: PrefillProgress) {
  return {
    maxTokens: s.maxTokens ?? ctx.engine.context,
    temperature: s.temperature ?? ctx.defaults.temperature,
    topP: s.topP,
    topK: s.topK,
    minP: s.minP,
    seed,
    stop: s.stop,
    speculate: s.speculate,
    shouldStop,
    onPrefill: progress.onPrefill,
    batched: true,
  };
}

/** A chat reply's reasoning budget: the request's, else the server's, else half its max_tokens
 *  (as k3 chat: half of --gen), so a small max_tokens still leaves room for an answer. */
function reasoningBudget(ctx: ServerContext, r: ChatRequest): number | undefined {
  const b = r.reasoningBudget !== undefined ? r.reasoningBudget : ctx.defaults.reasoningBudget !== undefined ? ctx.defaults.reasoningBudget : Math.floor((r.maxTokens ?? ctx.engine.context) / 2);
  return b === null ? undefined : b;
}

/** Text needs the tokenizer; a model without one can only continue token ids. */
function needTokenizer(ctx: ServerContext, what: string): void {
  if (!ctx.engine.tokenizerDir)
    throw badRequest(`${what} needs a tokenizer, and the served model has none (no tiktoken.model in its folder); send token ids to /v1/completions instead`, null, "no_tokenizer");
}

/** Runs `prepare` (render / encode / context check) as the request's own step: its errors are
 *  the request's (400 context_length_exceeded, …), answered before the request is queued. */
function prepared<T>(prepare: () => T, promptParam: string): T {
  try {
    return prepare();
  } catch (err) {
    throw toApiError(err, promptParam);
  }
}

type Finished = { finishReason: string; usage: { promptTokens: number; completionTokens: number; cachedTokens: number } };

/** Queues a prepared job; when it has run, one line goes to the counters and the recent log. */
function enqueue<D, R extends Finished>(ctx: ServerContext, req: Request, r: SamplingRequest, kind: "chat" | "completion", id: string, job: Omit<Job<D, R>, "done" | "ended">) {
  const done = (res: R, ms: number) => {
    ctx.access.generated(req, { prompt: res.usage.promptTokens, completion: res.usage.completionTokens, cached: res.usage.cachedTokens, finish: res.finishReason });
    ctx.counters.generated({
      id,
      kind,
      finish_reason: res.finishReason,
      prompt_tokens: res.usage.promptTokens,
      cached_tokens: res.usage.cachedTokens,
      completion_tokens: res.usage.completionTokens,
      max_tokens: r.maxTokens ?? ctx.engine.context,
      ms,
    });
  };
  ctx.holdOpen(req);
  return runJob(ctx, req, { ...job, done, ended: () => ctx.access.ended(req) }, r.stream);
}

const envelope = (ctx: ServerContext, prefix: string): Envelope => ({
  id: `${prefix}-${randomUUID().replaceAll("-", "")}`,
  created: Math.floor(Date.now() / 1000),
  model: ctx.names.id,
});

export async function chat(ctx: ServerContext, req: Request): Promise<Response> {
  const r = parseChatRequest(await readJson(ctx, req));
  ctx.names.check(r.model);
  needTokenizer(ctx, "chat");
  const opts = { thinking: r.thinking, thinkingEffort: r.thinkingEffort, tools: r.tools, toolChoice: r.toolChoice, responseFormat: r.responseFormat };
  const ids = prepared(() => prepareChat(ctx.engine, r.messages, opts), "messages");
  const env = envelope(ctx, "chatcmpl");
  const seed = r.seed ?? freshSeed();
  const progress = new PrefillProgress(r.stream && r.includeProgress);
  const budget = reasoningBudget(ctx, r);
  let sentRole = false;
  const job: Omit<Job<ChatDelta, ChatResult>, "done" | "ended"> = {
    promptParam: "messages",
    ids,
    start: (shouldStop, session) => {
      progress.begin();
      return streamChatIds(ctx.engine, session, ids, { ...genOptions(ctx, r, seed, shouldStop, progress), ...opts, reasoningBudget: budget });
    },
    chunks: (d) => {
      const out: unknown[] = progress.take().map((p) => progressChunkJson(env, "chat.completion.chunk", p));
      // OpenAI's first chunk carries the role and empty content.
      if (!sentRole) {
        sentRole = true;
        out.push(chatChunkJson(env, { role: "assistant", content: "" }, null));
      }
      if (d.reasoning || d.content) progress.firstToken();
      if (d.reasoning) out.push(chatChunkJson(env, { reasoning_content: d.reasoning }, null));
      if (d.content) out.push(chatChunkJson(env, { content: d.content }, null));
      return out;
    },
    finalChunks: (res) => {
      const out = sentRole ? [] : [chatChunkJson(env, { role: "assistant", content: "" }, null)];
      sentRole = true;
      const calls = toolCallsJson(res.toolCalls, env.id);
      if (calls.length > 0) out.push(chatChunkJson(env, { tool_calls: calls.map((c, index) => ({ index, ...c })) }, null));
      out.push(chatChunkJson(env, {}, openAiFinish(res.finishReason), { k3: chatK3(res, seed, budget) }));
      if (r.includeUsage) out.push(usageChunkJson(env, "chat.completion.chunk", res.usage));
      return out;
    },
    body: (res) => ({ ...chatCompletionJson(env, res), k3: chatK3(res, seed, budget) }),
  };
  return enqueue(ctx, req, r, "chat", env.id, job);
}

/** A chat reply's `k3` object: the stats, the seed it ran with, and what the reasoning budget did. */
const chatK3 = (res: ChatResult, seed: number, budget: number | undefined) => ({ ...k3Json(res.stats), seed, reasoning_budget: budget ?? null, reasoning_cut: res.reasoningCut });

export async function completion(ctx: ServerContext, req: Request): Promise<Response> {
  const r = parseCompletionRequest(await readJson(ctx, req));
  ctx.names.check(r.model);
  const vocab = ctx.engine.config.vocab;
  if (typeof r.prompt === "string") needTokenizer(ctx, "a text prompt");
  // An id outside the embedding table would read past it: refuse at the edge.
  else {
    const bad = r.prompt.find((id) => id >= vocab);
    if (bad !== undefined) throw badRequest(`token id ${bad} is outside the vocabulary (0..${vocab - 1})`, "prompt", "invalid_value");
  }
  const ids = prepared(() => prepareCompletion(ctx.engine, r.prompt), "prompt");
  const env = envelope(ctx, "cmpl");
  const seed = r.seed ?? freshSeed();
  const progress = new PrefillProgress(r.stream && r.includeProgress);
  const job: Omit<Job<CompletionDelta, CompletionResult>, "done" | "ended"> = {
    promptParam: "prompt",
    ids,
    start: (shouldStop, session) => {
      progress.begin();
      return streamCompletion(ctx.engine, session, ids, genOptions(ctx, r, seed, shouldStop, progress));
    },
    // Each chunk carries the ids it adds (k3.token_ids): text may be held back (a split
    // character, a possible stop string) or, without a tokenizer, never exist.
    chunks: (d) => {
      const out: unknown[] = progress.take().map((p) => progressChunkJson(env, "text_completion", p));
      if (d.ids.length > 0) progress.firstToken();
      if (d.text || d.ids.length > 0) out.push(completionChunkJson(env, d.text, null, d.ids.length > 0 ? { k3: { token_ids: d.ids } } : {}));
      return out;
    },
    finalChunks: (res) => [
      completionChunkJson(env, "", openAiFinish(res.finishReason), { k3: { ...k3Json(res.stats), seed } }),
      ...(r.includeUsage ? [usageChunkJson(env, "text_completion", res.usage)] : []),
    ],
    body: (res) => {
      const b = completionJson(env, res);
      return { ...b, k3: { ...b.k3, seed } };
    },
  };
  return enqueue(ctx, req, r, "completion", env.id, job);
}
