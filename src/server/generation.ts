// POST /v1/chat/completions and POST /v1/completions: parse the request, check it against the
// model (name, tokenizer, vocabulary, context: all before queueing, so a request that cannot run
// never waits for the engine), then run it as a Job (run-job.ts), batched with the other running
// generations, on the session the pool lends it (sessions.ts).
import { randomUUID } from "node:crypto";
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
import { chatChunkJson, chatCompletionJson, completionChunkJson, completionJson, k3Json, openAiFinish, toolCallsJson, usageChunkJson, type Envelope } from "./openai.ts";
import { runJob, type Job } from "./run-job.ts";
import { parseChatRequest, parseCompletionRequest, type SamplingRequest } from "./validate.ts";

/** Request fields → conversation options; the default length is "until the context is full". */
function genOptions(ctx: ServerContext, s: SamplingRequest, shouldStop: () => boolean) {
  return {
    maxTokens: s.maxTokens ?? ctx.engine.context,
    temperature: s.temperature,
    topP: s.topP,
    topK: s.topK,
    minP: s.minP,
    seed: s.seed,
    stop: s.stop,
    speculate: s.speculate,
    shouldStop,
    batched: true,
  };
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
function enqueue<D, R extends Finished>(ctx: ServerContext, req: Request, r: SamplingRequest, kind: "chat" | "completion", id: string, job: Omit<Job<D, R>, "done">) {
  const done = (res: R, ms: number) =>
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
  ctx.holdOpen(req);
  return runJob(ctx, req, { ...job, done }, r.stream);
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
  let sentRole = false;
  const job: Omit<Job<ChatDelta, ChatResult>, "done"> = {
    promptParam: "messages",
    ids,
    start: (shouldStop, session) => streamChatIds(ctx.engine, session, ids, { ...genOptions(ctx, r, shouldStop), ...opts }),
    chunks: (d) => {
      const out: unknown[] = [];
      // OpenAI's first chunk carries the role and empty content.
      if (!sentRole) {
        sentRole = true;
        out.push(chatChunkJson(env, { role: "assistant", content: "" }, null));
      }
      if (d.reasoning) out.push(chatChunkJson(env, { reasoning_content: d.reasoning }, null));
      if (d.content) out.push(chatChunkJson(env, { content: d.content }, null));
      return out;
    },
    finalChunks: (res) => {
      const out = sentRole ? [] : [chatChunkJson(env, { role: "assistant", content: "" }, null)];
      sentRole = true;
      const calls = toolCallsJson(res.toolCalls, env.id);
      if (calls.length > 0) out.push(chatChunkJson(env, { tool_calls: calls.map((c, index) => ({ index, ...c })) }, null));
      out.push(chatChunkJson(env, {}, openAiFinish(res.finishReason), { k3: k3Json(res.stats) }));
      if (r.includeUsage) out.push(usageChunkJson(env, "chat.completion.chunk", res.usage));
      return out;
    },
    body: (res) => chatCompletionJson(env, res),
  };
  return enqueue(ctx, req, r, "chat", env.id, job);
}

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
  const job: Omit<Job<CompletionDelta, CompletionResult>, "done"> = {
    promptParam: "prompt",
    ids,
    start: (shouldStop, session) => streamCompletion(ctx.engine, session, ids, genOptions(ctx, r, shouldStop)),
    // Each chunk carries the ids it adds (k3.token_ids): text may be held back (a split
    // character, a possible stop string) or, without a tokenizer, never exist.
    chunks: (d) => (d.text || d.ids.length > 0 ? [completionChunkJson(env, d.text, null, d.ids.length > 0 ? { k3: { token_ids: d.ids } } : {})] : []),
    finalChunks: (res) => [
      completionChunkJson(env, "", openAiFinish(res.finishReason), { k3: k3Json(res.stats) }),
      ...(r.includeUsage ? [usageChunkJson(env, "text_completion", res.usage)] : []),
    ],
    body: (res) => completionJson(env, res),
  };
  return enqueue(ctx, req, r, "completion", env.id, job);
}
