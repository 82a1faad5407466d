// `k3 serve`: an OpenAI-compatible HTTP server on one engine (docs/SERVER.md).
//
// Routes: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions, and the
// k3 extension GET /k3/stats. JSON lives only in this layer: requests are parsed into native
// options (validate.ts) and answered in OpenAI's shapes (openai.ts). The engine has one owner:
// every generation goes through the FIFO queue (queue.ts), and the server keeps one session, so
// a chat that continues the previous one only feeds its new tokens (prefix reuse in
// conversation.ts).
import { randomUUID } from "node:crypto";
import { streamChat, streamCompletion, type ChatDelta, type ChatResult, type CompletionDelta, type CompletionResult } from "../conversation.ts";
import type { Engine } from "../engine.ts";
import { log } from "../log.ts";
import { apiKeyChecker } from "./auth.ts";
import { ApiError, badRequest, errorResponse, toApiError } from "./errors.ts";
import { chatChunkJson, chatCompletionJson, completionChunkJson, completionJson, k3Json, openAiFinish, toolCallsJson, usageChunkJson, type Envelope } from "./openai.ts";
import { GenerationQueue } from "./queue.ts";
import { runJob, type Job } from "./run-job.ts";
import { checkModel, parseChatRequest, parseCompletionRequest, readJsonObject, type SamplingRequest } from "./validate.ts";

export interface ServerOptions {
  /** Model id reported by /v1/models and required (when given) in requests. */
  modelName: string;
  host?: string;
  /** 0 = a free port. */
  port?: number;
  apiKey?: string;
  /** Requests allowed to wait while one generates (default 16). */
  queue?: number;
}

/** One finished generation, kept for /k3/stats (the last RECENT of them). */
export interface GenerationRecord {
  id: string;
  kind: "chat" | "completion";
  finish_reason: string;
  prompt_tokens: number;
  completion_tokens: number;
  max_tokens: number;
  ms: number;
}
const RECENT = 64;

export interface K3Server {
  url: string;
  port: number;
  queue: GenerationQueue;
  /** Most recent last. */
  recent: GenerationRecord[];
  stop(): Promise<void>;
}

export function startServer(engine: Engine, opts: ServerOptions): K3Server {
  const queue = new GenerationQueue(opts.queue ?? 16);
  const checkKey = apiKeyChecker(opts.apiKey);
  const session = engine.createSession();
  const recent: GenerationRecord[] = [];
  const counts = { requests: 0, generations: 0, cancelled: 0, errors: 0 };
  const created = Math.floor(Date.now() / 1000);
  const model = opts.modelName;

  const record = (r: GenerationRecord) => {
    counts.generations++;
    if (r.finish_reason === "cancelled") counts.cancelled++;
    recent.push(r);
    if (recent.length > RECENT) recent.shift();
    log.debug(`${r.id}: ${r.kind} ${r.prompt_tokens}+${r.completion_tokens} tokens, ${r.finish_reason}, ${r.ms.toFixed(0)} ms`);
  };

  /** Request fields → conversation options; the default length is "until the context is full". */
  const genOptions = (s: SamplingRequest, shouldStop: () => boolean) => ({
    maxTokens: s.maxTokens ?? engine.context,
    temperature: s.temperature,
    topP: s.topP,
    topK: s.topK,
    minP: s.minP,
    seed: s.seed,
    stop: s.stop,
    shouldStop,
  });

  async function chat(req: Request): Promise<Response> {
    const r = parseChatRequest(await readJsonObject(req));
    checkModel(r.model, model);
    const env: Envelope = { id: `chatcmpl-${randomUUID().replaceAll("-", "")}`, created: Math.floor(Date.now() / 1000), model };
    let sentRole = false;
    const job: Job<ChatDelta, ChatResult> = {
      promptParam: "messages",
      start: (shouldStop) =>
        streamChat(engine, session, r.messages, {
          ...genOptions(r, shouldStop),
          thinking: r.thinking,
          thinkingEffort: r.thinkingEffort,
          tools: r.tools,
          toolChoice: r.toolChoice,
          responseFormat: r.responseFormat,
        }),
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
      done: recordDone(env.id, "chat", r.maxTokens),
    };
    return runJob(queue, req, job, r.stream);
  }

  /** The `done` hook of a job: one line in the recent-generations log (GET /k3/stats). */
  function recordDone(id: string, kind: "chat" | "completion", maxTokens: number | undefined) {
    return (res: { finishReason: string; usage: { promptTokens: number; completionTokens: number } }, ms: number) =>
      record({ id, kind, finish_reason: res.finishReason, prompt_tokens: res.usage.promptTokens, completion_tokens: res.usage.completionTokens, max_tokens: maxTokens ?? engine.context, ms });
  }

  async function completion(req: Request): Promise<Response> {
    const r = parseCompletionRequest(await readJsonObject(req));
    checkModel(r.model, model);
    if (Array.isArray(r.prompt)) {
      // An id outside the embedding table would read past it: refuse at the edge.
      const bad = r.prompt.find((id) => id >= engine.config.vocab);
      if (bad !== undefined) throw badRequest(`token id ${bad} is outside the vocabulary (0..${engine.config.vocab - 1})`, "prompt", "invalid_value");
    }
    const env: Envelope = { id: `cmpl-${randomUUID().replaceAll("-", "")}`, created: Math.floor(Date.now() / 1000), model };
    const job: Job<CompletionDelta, CompletionResult> = {
      promptParam: "prompt",
      start: (shouldStop) => streamCompletion(engine, session, r.prompt, genOptions(r, shouldStop)),
      chunks: (d) => (d.text ? [completionChunkJson(env, d.text, null)] : []),
      finalChunks: (res) => {
        const out: unknown[] = [completionChunkJson(env, "", openAiFinish(res.finishReason), { k3: k3Json(res.stats) })];
        if (r.includeUsage) out.push(usageChunkJson(env, "text_completion", res.usage));
        return out;
      },
      body: (res) => completionJson(env, res),
      done: recordDone(env.id, "completion", r.maxTokens),
    };
    return runJob(queue, req, job, r.stream);
  }

  const modelsJson = () => ({
    object: "list",
    data: [{ id: model, object: "model", created, owned_by: "k3", max_model_len: engine.context }],
  });

  async function route(req: Request, server: ReturnType<typeof Bun.serve>): Promise<Response> {
    const path = new URL(req.url).pathname.replace(/\/+$/, "") || "/";
    if (path === "/health" && req.method === "GET") return Response.json({ status: "ok", model, busy: queue.running, waiting: queue.waiting });
    checkKey(req);
    const post = (handler: (req: Request) => Promise<Response>) => {
      if (req.method !== "POST") throw new ApiError(405, `${path} takes POST`, "invalid_request_error", null, "method_not_allowed", { Allow: "POST" });
      // A generation may wait in the queue and then take minutes: no idle cut-off for it.
      server.timeout(req, 0);
      return handler(req);
    };
    switch (path) {
      case "/v1/models":
        if (req.method !== "GET") break;
        return Response.json(modelsJson());
      case `/v1/models/${model}`:
        if (req.method !== "GET") break;
        return Response.json(modelsJson().data[0]);
      case "/v1/chat/completions":
        return post(chat);
      case "/v1/completions":
        return post(completion);
      case "/k3/stats":
        if (req.method !== "GET") break;
        return Response.json({
          model,
          engine: engine.stats(),
          server: { ...counts, queue: { running: queue.running, waiting: queue.waiting, capacity: queue.capacity } },
          recent,
        });
    }
    throw new ApiError(404, `no route for ${req.method} ${path}`, "not_found_error", null, "unknown_route");
  }

  const server = Bun.serve({
    hostname: opts.host ?? "127.0.0.1",
    port: opts.port ?? 8080,
    async fetch(req, srv) {
      counts.requests++;
      try {
        return await route(req, srv);
      } catch (err) {
        const e = toApiError(err);
        if (e.status >= 500 && e.status !== 503) {
          counts.errors++;
          log.error(`${req.method} ${new URL(req.url).pathname}: ${e.message}`);
        }
        return errorResponse(e);
      }
    },
    // Last resort: anything that escapes fetch still gets an OpenAI-shaped 500, never a crash.
    error(err) {
      counts.errors++;
      log.error(`unhandled: ${err.stack ?? err.message}`);
      return errorResponse(toApiError(err));
    },
  });

  const host = server.hostname?.includes(":") ? `[${server.hostname}]` : server.hostname;
  return {
    url: `http://${host}:${server.port}`,
    port: server.port!,
    queue,
    recent,
    async stop() {
      await server.stop(true);
    },
  };
}
