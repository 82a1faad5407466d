// k3 serve, driven as clients drive it: the official openai npm client (streaming and not), and
// raw fetch with bad inputs. Greedy output through the server must equal the engine's own.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { Engine } from "../src/engine.ts";
import { chatChunkJson, chatCompletionJson, toolCallsJson } from "../src/server/openai.ts";
import type { K3Server } from "../src/server/server.ts";
import { directGreedy, openTinyEngine, post, readSse, serve } from "./server.helpers.ts";

let engine: Engine;
let server: K3Server;
let client: OpenAI;

beforeAll(async () => {
  engine = await openTinyEngine();
  server = serve(engine);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(async () => {
  await server.stop();
  engine.close();
});

/** The error an openai-client call rejects with (its APIPromise is a lazy thenable, which
 *  expect().rejects does not await), or a failure if it resolves. */
async function caught(p: PromiseLike<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected the call to fail");
}

const messages = [{ role: "user" as const, content: "Say hello." }];

describe("discovery", () => {
  test("binds to loopback on a random port", () => {
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(server.port).toBeGreaterThan(0);
  });
  test("GET /health", async () => {
    const res = await fetch(`${server.url}/health`);
    expect(res.status).toBe(200);
    expect((await res.json()) as any).toMatchObject({ status: "ok", model: "tiny-a" });
  });
  test("models.list names the served model", async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(["tiny-a"]);
    expect((await client.models.retrieve("tiny-a")).id).toBe("tiny-a");
  });
});

describe("completions", () => {
  test("non-streaming text prompt equals the engine's direct greedy output", async () => {
    const r = await client.completions.create({ model: "tiny-a", prompt: "The capital of France is", max_tokens: 24 });
    const want = directGreedy(engine, "The capital of France is", 24);
    expect(r.object).toBe("text_completion");
    expect(r.choices[0]!.text).toBe(want.text);
    expect(r.usage!.completion_tokens).toBe(want.ids.length);
    expect(r.choices[0]!.finish_reason).toBe(want.ids.length === 24 ? "length" : "stop");
    expect(r.usage!.total_tokens).toBe(r.usage!.prompt_tokens + r.usage!.completion_tokens);
  });

  test("token-id prompt, streamed, equals the direct greedy output; k3 stats on the last chunk", async () => {
    const prompt = [5, 17, 300, 42, 7];
    const want = directGreedy(engine, prompt, 20);
    const stream = await client.completions.create({ model: "tiny-a", prompt, max_tokens: 20, stream: true, stream_options: { include_usage: true } });
    let text = "";
    const chunks: any[] = [];
    for await (const c of stream) {
      chunks.push(c);
      text += c.choices[0]?.text ?? "";
    }
    expect(text).toBe(want.text);
    const finish = chunks.find((c) => c.choices[0]?.finish_reason);
    expect(finish.k3.generated_tokens).toBe(want.ids.length);
    expect(finish.k3.bytes_read).toBeGreaterThan(0);
    expect(typeof finish.k3.ms_per_token).toBe("number");
    const usage = chunks.at(-1);
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: want.ids.length });
  });

  test("a one-element prompt batch is unwrapped", async () => {
    const a = await client.completions.create({ model: "tiny-a", prompt: ["abc"], max_tokens: 6 });
    const b = await client.completions.create({ model: "tiny-a", prompt: "abc", max_tokens: 6 });
    expect(a.choices[0]!.text).toBe(b.choices[0]!.text);
  });

  test("a stop string ends the text before it, finish_reason stop", async () => {
    const full = directGreedy(engine, "Once upon a time", 30).text;
    const stop = full.slice(8, 11);
    expect(stop.length).toBe(3);
    const r = await client.completions.create({ model: "tiny-a", prompt: "Once upon a time", max_tokens: 30, stop: [stop] });
    expect(r.choices[0]!.text).toBe(full.slice(0, full.indexOf(stop)));
    expect(r.choices[0]!.finish_reason).toBe("stop");
  });

  test("same seed, same sampled text; temperature is honoured", async () => {
    const req = { model: "tiny-a", prompt: "Hello", max_tokens: 16, temperature: 1.5, seed: 7 };
    const a = await client.completions.create(req);
    const b = await client.completions.create(req);
    const greedy = await client.completions.create({ ...req, temperature: 0 });
    expect(a.choices[0]!.text).toBe(b.choices[0]!.text);
    expect(a.choices[0]!.text).not.toBe(greedy.choices[0]!.text);
  });
});

describe("chat", () => {
  test("non-streaming: assistant message, reasoning apart, usage, k3 stats", async () => {
    const r = await client.chat.completions.create({ model: "tiny-a", messages, max_tokens: 12 });
    expect(r.object).toBe("chat.completion");
    expect(r.id).toMatch(/^chatcmpl-/);
    const msg = r.choices[0]!.message as any;
    expect(msg.role).toBe("assistant");
    // Random weights never close the think channel in 12 tokens: the text is reasoning.
    expect(typeof msg.reasoning_content).toBe("string");
    expect(r.usage!.completion_tokens).toBeLessThanOrEqual(12);
    expect((r as any).k3.prompt_tokens).toBe(r.usage!.prompt_tokens);
  });

  test("streaming deltas add up to the non-streaming message (greedy)", async () => {
    const whole = await client.chat.completions.create({ model: "tiny-a", messages, max_tokens: 16 });
    const stream = await client.chat.completions.create({ model: "tiny-a", messages, max_tokens: 16, stream: true });
    let reasoning = "";
    let content = "";
    let finish: string | null = null;
    let first = true;
    for await (const c of stream) {
      const d = c.choices[0]!.delta as any;
      if (first) expect(d.role).toBe("assistant");
      first = false;
      reasoning += d.reasoning_content ?? "";
      content += d.content ?? "";
      finish = c.choices[0]!.finish_reason ?? finish;
    }
    const msg = whole.choices[0]!.message as any;
    expect(reasoning).toBe(msg.reasoning_content ?? "");
    expect(content).toBe(msg.content ?? "");
    expect(finish).toBe(whole.choices[0]!.finish_reason);
  });

  test("thinking off: text is the answer, not reasoning", async () => {
    const r = await post(`${server.url}/v1/chat/completions`, { messages, max_tokens: 8, chat_template_kwargs: { thinking: false } });
    const msg = ((await r.json()) as any).choices[0].message;
    expect(msg.reasoning_content).toBeNull();
    expect(msg.content.length).toBeGreaterThan(0);
  });

  test("tools, tool_choice and response_format reach the K3 chat format (longer prompt)", async () => {
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    const base = await client.chat.completions.create({ model: "tiny-a", messages, max_tokens: 1 });
    const withTools = await client.chat.completions.create({ model: "tiny-a", messages, max_tokens: 1, tools: tools as any });
    const required = await client.chat.completions.create({ model: "tiny-a", messages, max_tokens: 1, tools: tools as any, tool_choice: "required" });
    const json = await client.chat.completions.create({ model: "tiny-a", messages, max_tokens: 1, response_format: { type: "json_object" } });
    expect(withTools.usage!.prompt_tokens).toBeGreaterThan(base.usage!.prompt_tokens);
    expect(required.usage!.prompt_tokens).toBeGreaterThan(withTools.usage!.prompt_tokens);
    expect(json.usage!.prompt_tokens).toBeGreaterThan(base.usage!.prompt_tokens);
  });

  test("a continued prompt reuses the session's prefix (cached_tokens) with identical output", async () => {
    const first = [9, 8, 7, 6];
    const a = directGreedy(engine, first, 5);
    await client.completions.create({ model: "tiny-a", prompt: first, max_tokens: 5 });
    const next = [...first, ...a.ids, 33, 44];
    const r = await client.completions.create({ model: "tiny-a", prompt: next, max_tokens: 10 });
    expect((r.usage as any).prompt_tokens_details.cached_tokens).toBe(first.length + a.ids.length);
    expect(r.choices[0]!.text).toBe(directGreedy(engine, next, 10).text);
  });
});

describe("bad input → OpenAI-style 4xx, never a crash", () => {
  const chatUrl = () => `${server.url}/v1/chat/completions`;
  const cmplUrl = () => `${server.url}/v1/completions`;
  const cases: [string, () => Promise<Response>, number, string | null, string | null][] = [
    ["malformed JSON", () => post(chatUrl(), "{not json"), 400, null, "invalid_json"],
    ["body is an array", () => post(chatUrl(), "[1,2]"), 400, null, null],
    ["messages missing", () => post(chatUrl(), { model: "tiny-a" }), 400, "messages", "missing_required_parameter"],
    ["messages not an array", () => post(chatUrl(), { messages: "hi" }), 400, "messages", "invalid_type"],
    ["empty messages", () => post(chatUrl(), { messages: [] }), 400, "messages", "invalid_value"],
    ["message not an object", () => post(chatUrl(), { messages: [3] }), 400, "messages[0]", "invalid_type"],
    ["unknown role", () => post(chatUrl(), { messages: [{ role: "wizard", content: "x" }] }), 400, "messages[0].role", "invalid_value"],
    ["temperature is a string", () => post(chatUrl(), { messages, temperature: "hot" }), 400, "temperature", "invalid_type"],
    ["temperature out of range", () => post(chatUrl(), { messages, temperature: 9 }), 400, "temperature", "invalid_value"],
    ["max_tokens 0", () => post(chatUrl(), { messages, max_tokens: 0 }), 400, "max_tokens", "invalid_value"],
    ["max_tokens fractional", () => post(chatUrl(), { messages, max_tokens: 1.5 }), 400, "max_tokens", "invalid_type"],
    ["stream not boolean", () => post(chatUrl(), { messages, stream: "yes" }), 400, "stream", "invalid_type"],
    ["stop is a number", () => post(chatUrl(), { messages, stop: 5 }), 400, "stop", "invalid_type"],
    ["n = 2", () => post(chatUrl(), { messages, n: 2 }), 400, "n", "invalid_value"],
    ["unsupported thinking effort", () => post(chatUrl(), { messages, reasoning_effort: "medium" }), 400, null, null],
    ["unknown model", () => post(chatUrl(), { model: "gpt-4o", messages }), 404, "model", "model_not_found"],
    ["prompt missing", () => post(cmplUrl(), { max_tokens: 2 }), 400, "prompt", "missing_required_parameter"],
    ["prompt is an object", () => post(cmplUrl(), { prompt: { a: 1 } }), 400, "prompt", "invalid_type"],
    ["two prompts", () => post(cmplUrl(), { prompt: ["a", "b"] }), 400, "prompt", "invalid_value"],
    ["negative token id", () => post(cmplUrl(), { prompt: [1, -2] }), 400, "prompt", "invalid_value"],
    ["token id past the vocabulary", () => post(cmplUrl(), { prompt: [1, 999999] }), 400, "prompt", "invalid_value"],
    ["prompt over the context limit", () => post(cmplUrl(), { prompt: new Array(5000).fill(1), max_tokens: 1 }), 400, "prompt", "context_length_exceeded"],
    ["streamed prompt over the context limit", () => post(cmplUrl(), { prompt: new Array(5000).fill(1), stream: true }), 400, "prompt", "context_length_exceeded"],
    ["unknown route", () => fetch(`${server.url}/v1/embeddings`), 404, null, "unknown_route"],
    ["tool_calls item is null", () => post(chatUrl(), { messages: [{ role: "assistant", content: "x", tool_calls: [null] }, ...messages] }), 400, null, null],
    ["tool message name not a string", () => post(chatUrl(), { messages: [...messages, { role: "tool", content: "x", name: 7 }] }), 400, null, null],
    ["body nested 20,000 deep", () => post(chatUrl(), `{"messages":[{"role":"user","content":"x"}],"tools":${"[".repeat(20000)}${"]".repeat(20000)}}`), 400, "tools[0][0][0][0][0]", "invalid_value"],
    ["GET on a POST route", () => fetch(chatUrl()), 405, null, "method_not_allowed"],
  ];
  for (const [name, send, status, param, code] of cases) {
    test(name, async () => {
      const res = await send();
      expect(res.status).toBe(status);
      const body = (await res.json()) as any;
      expect(Object.keys(body)).toEqual(["error"]);
      expect(typeof body.error.message).toBe("string");
      expect(body.error.message.length).toBeGreaterThan(0);
      expect(typeof body.error.type).toBe("string");
      expect(body.error.param).toBe(param);
      expect(body.error.code).toBe(code);
    });
  }

  test("the context error says so", async () => {
    const res = await post(`${server.url}/v1/completions`, { prompt: new Array(5000).fill(1) });
    expect(((await res.json()) as any).error.message).toContain("context limit");
  });

  test("the openai client raises its usual error classes", async () => {
    expect(await caught(client.chat.completions.create({ model: "nope", messages }))).toBeInstanceOf(OpenAI.NotFoundError);
    expect(await caught(client.chat.completions.create({ model: "tiny-a", messages, temperature: 7 }))).toBeInstanceOf(OpenAI.BadRequestError);
  });

  test("the server still answers after all of that", async () => {
    const r = await client.completions.create({ model: "tiny-a", prompt: "ok", max_tokens: 2 });
    expect(r.usage!.completion_tokens).toBeGreaterThan(0);
  });
});

describe("--api-key", () => {
  let locked: K3Server;
  beforeAll(() => {
    locked = serve(engine, { apiKey: "s3cret-key" });
  });
  afterAll(() => locked.stop());

  test("missing or wrong key → 401 with an OpenAI error body; /health stays open", async () => {
    for (const auth of [undefined, "Bearer wrong", "Bearer s3cret-ke", "Bearer s3cret-key2", "s3cret-key"]) {
      const res = await fetch(`${locked.url}/v1/models`, { headers: auth ? { Authorization: auth } : {} });
      expect(res.status).toBe(401);
      expect(((await res.json()) as any).error.code).toBe("invalid_api_key");
    }
    expect((await fetch(`${locked.url}/health`)).status).toBe(200);
  });

  test("the right key works through the openai client", async () => {
    const ok = new OpenAI({ baseURL: `${locked.url}/v1`, apiKey: "s3cret-key", maxRetries: 0 });
    const bad = new OpenAI({ baseURL: `${locked.url}/v1`, apiKey: "nope", maxRetries: 0 });
    const r = await ok.completions.create({ model: "tiny-a", prompt: "hi", max_tokens: 2 });
    const want = directGreedy(engine, "hi", 2);
    expect(r.choices[0]!.text).toBe(want.text);
    expect(r.usage!.completion_tokens).toBe(want.ids.length);
    expect(await caught(bad.models.list())).toBeInstanceOf(OpenAI.AuthenticationError);
  });
});

test("raw SSE framing: data lines, [DONE] last", async () => {
  const res = await post(`${server.url}/v1/chat/completions`, { messages, max_tokens: 3, stream: true });
  expect(res.headers.get("content-type")).toContain("text/event-stream");
  const events = await readSse(res);
  expect(events.at(-1)!.data).toBe("[DONE]");
  expect(events.slice(0, -1).every((e) => e.data.object === "chat.completion.chunk")).toBe(true);
});

test("tool calls come back in OpenAI's shape with finish_reason tool_calls", () => {
  // Random tiny weights never write a tool call, so the mapping is checked on a parsed result.
  const stats = { promptTokens: 9, generatedTokens: 4, prefillMs: 1, decodeMs: 2, msPerToken: 0.5, stopReason: "stop", peakRssBytes: 1,
    io: { trunkBytesRead: 10, expertBytesRead: 5, reads: 1, expertRequests: 2, expertHits: 1, lookaheadIssued: 0, lookaheadUsed: 0, ioWaitMs: 0, extraReads: 0, extraBytesRead: 0, hedgesIssued: 0, hedgesWon: 0, retries: 0, directIo: true, ioMode: "O_DIRECT", devices: [] },
    ioPerToken: { bytesRead: 3.75, trunkBytes: 2.5, expertBytes: 1.25, reads: 0.25, hits: 0.25 }, speculation: { draftedTokens: 0, acceptedTokens: 0, verifyPasses: 0 }, drafters: {}, decodedTokens: 4 } as const;
  const result = { reasoning: "need weather", reasoningCut: false, content: "", finishReason: "tool_calls" as const, usage: { promptTokens: 9, completionTokens: 4, cachedTokens: 0 }, stats: stats as any,
    toolCalls: [{ index: 1, name: "get_weather", arguments: '{"city":"Paris"}' }] };
  const body = chatCompletionJson({ id: "chatcmpl-abc", created: 1, model: "tiny-a" }, result);
  expect(body.choices[0]!.finish_reason).toBe("tool_calls");
  expect(body.choices[0]!.message).toEqual({
    role: "assistant",
    content: null,
    reasoning_content: "need weather",
    tool_calls: [{ id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
  } as any);
  expect(JSON.parse(body.choices[0]!.message.tool_calls![0]!.function.arguments)).toEqual({ city: "Paris" });
  expect(body.k3.bytes_read).toBe(15);
  const calls = toolCallsJson(result.toolCalls, "chatcmpl-abc");
  const chunk = chatChunkJson({ id: "chatcmpl-abc", created: 1, model: "tiny-a" }, { tool_calls: calls.map((c, index) => ({ index, ...c })) }, null);
  expect(chunk.choices[0]!.delta).toEqual({ tool_calls: [{ index: 0, ...calls[0]! }] });
});
