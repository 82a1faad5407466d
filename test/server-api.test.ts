// k3 serve's API beyond the generation routes' happy paths, over HTTP with exact answers: the
// model's names and aliases, what a chat may contain (no images; JSON nesting bounded even inside
// strings), a model without a tokenizer, /tokenize and /detokenize, /metrics, and an engine that
// refuses to answer (non-finite logits) answered with an error, never with token 0.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, openSync, rmSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { chatPromptIds } from "../src/conversation.ts";
import { Engine } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { toApiError } from "../src/server/errors.ts";
import type { K3Server } from "../src/server/server.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";
import { capturedLog, directGreedy, openTinyEngine, post, readSse, serve } from "./server.helpers.ts";

let engine: Engine;
let server: K3Server;
beforeAll(async () => {
  engine = await openTinyEngine();
  server = serve(engine, { aliases: ["kimi-k3", "moonshotai/Kimi-K3"] });
});
afterAll(async () => {
  await server.stop();
  engine.close();
});

const errorOf = async (res: Response) => ((await res.json()) as any).error;
const user = (content: unknown) => [{ role: "user", content }];

describe("model names", () => {
  test("the id in any case and every alias are accepted; answers name the id", async () => {
    for (const name of ["tiny-a", "TINY-A", "kimi-k3", "Kimi-K3", "moonshotai/Kimi-K3", "MOONSHOTAI/kimi-k3"]) {
      const res = await post(`${server.url}/v1/completions`, { model: name, prompt: [1, 2], max_tokens: 1 });
      expect(res.status).toBe(200);
      expect(((await res.json()) as any).model).toBe("tiny-a");
    }
  });

  test("GET /v1/models/{id}: the id or an alias in any case → the model; unknown or with a space → model_not_found", async () => {
    for (const path of ["tiny-a", "Kimi-K3", "moonshotai/Kimi-K3", "moonshotai%2Fkimi-k3"]) {
      const res = await fetch(`${server.url}/v1/models/${path}`);
      expect(res.status).toBe(200);
      expect(((await res.json()) as any).id).toBe("tiny-a");
    }
    for (const path of ["gpt-4o", "kimi%20k3", "tiny-a%20", "%E0%A4%A"]) {
      const res = await fetch(`${server.url}/v1/models/${path}`);
      expect(res.status).toBe(404);
      const e = await errorOf(res);
      expect(e).toMatchObject({ type: "not_found_error", param: "model", code: "model_not_found" });
      expect(e.message).toContain("this server serves 'tiny-a' (or 'kimi-k3', 'moonshotai/Kimi-K3')");
    }
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    expect((await client.models.retrieve("Kimi-K3")).id).toBe("tiny-a");
    let err: unknown;
    try {
      await client.models.retrieve("kimi k3");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
  });

  test("an unknown model in a request is 404 model_not_found", async () => {
    const res = await post(`${server.url}/v1/chat/completions`, { model: "gpt-4o", messages: user("hi") });
    expect(res.status).toBe(404);
    expect(await errorOf(res)).toMatchObject({ param: "model", code: "model_not_found" });
  });
});

describe("chat content", () => {
  test("an image part → 400 'images are not supported', naming the part", async () => {
    for (const part of [
      { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
      { type: "image", image: "x" },
      { type: "input_image", image_url: "https://example.com/cat.png" },
    ]) {
      const res = await post(`${server.url}/v1/chat/completions`, { messages: user([{ type: "text", text: "what is this?" }, part]), max_tokens: 1 });
      expect(res.status).toBe(400);
      const e = await errorOf(res);
      expect(e).toMatchObject({ type: "invalid_request_error", param: "messages[0].content[1]", code: "invalid_value" });
      expect(e.message).toBe(`images are not supported: messages[0].content[1] is an '${part.type}' part (this server reads text only)`);
    }
  });

  test("other non-text parts are refused; text parts are read", async () => {
    const audio = await post(`${server.url}/v1/chat/completions`, { messages: user([{ type: "input_audio", input_audio: { data: "", format: "wav" } }]) });
    expect(audio.status).toBe(400);
    expect((await errorOf(audio)).message).toBe("content parts of type 'input_audio' are not supported (messages[0].content[0]); only 'text' is");
    const messages = user([{ type: "text", text: "Say " }, { type: "text", text: "hello." }]);
    const parts = await post(`${server.url}/v1/chat/completions`, { messages, max_tokens: 4 });
    expect(parts.status).toBe(200);
    expect(((await parts.json()) as any).usage.prompt_tokens).toBe(chatPromptIds(engine.tokenizer(), messages as any, {}).length);
  });

  test("tool-call arguments nested 50,000 deep → 400 naming the field (as a JSON string, and as an object)", async () => {
    const deep = "[".repeat(50_000) + "]".repeat(50_000);
    const call = (args: string) => `{"id":"c1","type":"function","function":{"name":"f","arguments":${args}}}`;
    const body = (args: string) =>
      `{"max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[${call(args)}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`;
    const inString = await post(`${server.url}/v1/chat/completions`, body(JSON.stringify(`{"a":${deep}}`)));
    expect(inString.status).toBe(400);
    expect((await errorOf(inString)).message).toBe("messages[1].tool_calls[0].function.arguments: JSON nests deeper than 128 levels (at offset 132)");
    const asObject = await post(`${server.url}/v1/chat/completions`, body(`{"a":${deep}}`));
    expect(asObject.status).toBe(400);
    const e = await errorOf(asObject);
    expect(e.param).toBe("messages[1].tool_calls[0].function.arguments");
    expect(e.message).toBe("'messages[1].tool_calls[0].function.arguments…' nests deeper than 128 levels");
    // Depth that real requests use still works.
    expect((await post(`${server.url}/v1/chat/completions`, body(JSON.stringify('{"a":[[[1]]]}')))).status).toBe(200);
  });
});

/** A server on a changed copy of tiny-a, with its engine. */
async function serveAltered(tag: string, alter: (dir: string) => void): Promise<{ engine: Engine; server: K3Server }> {
  const dir = join(scratchDir(tag), "m");
  cpSync(await tinyModel("tiny-a"), dir, { recursive: true });
  alter(dir);
  // Chunk 32 (not the planner's choice, which takes a chat prompt in one pass): the 38-token chat
  // prompt then takes two prefill steps, so a stream has started when an error comes (an error
  // before the first step is a plain HTTP error, not an SSE event).
  const e = Engine.open(dir, { threads: 2, chunk: 32 });
  return { engine: e, server: serve(e) };
}

describe("a model without a tokenizer", () => {
  let bare: Engine;
  let s: K3Server;
  beforeAll(async () => {
    ({ engine: bare, server: s } = await serveAltered("no-tokenizer", (dir) => rmSync(join(dir, "tiktoken.model"))));
  });
  afterAll(async () => {
    await s.stop();
    bare.close();
  });

  /** The engine's own greedy ids (no tokenizer: no end token, the length decides). */
  const direct = (prompt: number[], n: number) => [...bare.generate(bare.createSession(), prompt, { maxTokens: n })].map((e) => e.id);

  test("chat, a text prompt, /tokenize and /detokenize → 400 saying there is no tokenizer", async () => {
    for (const [path, body] of [
      ["/v1/chat/completions", { messages: user("hi") }],
      ["/v1/completions", { prompt: "hi" }],
      ["/tokenize", { content: "hi" }],
      ["/detokenize", { tokens: [1] }],
    ] as const) {
      const res = await post(`${s.url}${path}`, body);
      expect(res.status).toBe(400);
      const e = await errorOf(res);
      expect(e.code).toBe("no_tokenizer");
      expect(e.message).toContain("no tiktoken.model");
    }
  });

  test("a token-id completion returns the generated ids in k3.token_ids (equal to the engine's), streamed too", async () => {
    const prompt = [5, 17, 300, 42, 7];
    const want = direct(prompt, 12);
    const res = await post(`${s.url}/v1/completions`, { prompt, max_tokens: 12 });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expect(body.k3.token_ids).toEqual(want);
    expect(body.choices[0].text).toBe("");
    expect(body.usage.completion_tokens).toBe(12);
    const events = await readSse(await post(`${s.url}/v1/completions`, { prompt, max_tokens: 12, stream: true }));
    expect(events.at(-1)!.data).toBe("[DONE]");
    expect(events.flatMap((e) => e.data.k3?.token_ids ?? [])).toEqual(want);
  });
});

describe("/tokenize and /detokenize (llama-server's shapes)", () => {
  test("tokens equal the tokenizer's; with_pieces gives each token's text, or its bytes when they are not UTF-8 alone", async () => {
    const tok = engine.tokenizer();
    const content = "Hello world, 😀 é!";
    const plain = (await (await post(`${server.url}/tokenize`, { content })).json()) as any;
    expect(plain).toEqual({ tokens: tok.encode(content) });
    const pieces = (await (await post(`${server.url}/tokenize`, { content, with_pieces: true, add_special: false })).json()) as any;
    expect(pieces.tokens.map((t: any) => t.id)).toEqual(plain.tokens);
    const bytes = pieces.tokens.flatMap((t: any) => (typeof t.piece === "string" ? [...Buffer.from(t.piece, "utf8")] : t.piece));
    expect(Buffer.from(bytes).toString("utf8")).toBe(content);
    // The emoji's 4 bytes are not one token of the tiny tokenizer: some piece is a byte list.
    expect(pieces.tokens.some((t: any) => Array.isArray(t.piece))).toBe(true);
    const back = (await (await post(`${server.url}/detokenize`, { tokens: plain.tokens })).json()) as any;
    expect(back).toEqual({ content });
  });

  test("bad requests name the field", async () => {
    const cases: [string, unknown, string, string][] = [
      ["/tokenize", {}, "content", "missing_required_parameter"],
      ["/tokenize", { content: 5 }, "content", "invalid_type"],
      ["/tokenize", { content: "x", with_pieces: "yes" }, "with_pieces", "invalid_type"],
      ["/tokenize", { content: "x".repeat(4096 * engine.tokenizer().maxTokenBytes + 1) }, "content", "invalid_value"],
      ["/detokenize", {}, "tokens", "missing_required_parameter"],
      ["/detokenize", { tokens: "1 2" }, "tokens", "invalid_type"],
      ["/detokenize", { tokens: [1, -2] }, "tokens[1]", "invalid_value"],
      ["/detokenize", { tokens: [1, 999999] }, "tokens[1]", "invalid_value"],
    ];
    for (const [path, body, param, code] of cases) {
      const res = await post(`${server.url}${path}`, body);
      expect(res.status).toBe(400);
      expect(await errorOf(res)).toMatchObject({ param, code });
    }
    expect((await fetch(`${server.url}/tokenize`)).status).toBe(405);
  });
});

describe("/metrics", () => {
  test("Prometheus text with exact counts of requests, tokens, bytes read, hits and the queue", async () => {
    const s = serve(engine, { queue: 5, apiKey: "m" });
    const auth = { headers: { Authorization: "Bearer m" } };
    try {
      expect((await fetch(`${s.url}/metrics`)).status).toBe(401);
      await post(`${s.url}/v1/completions`, { prompt: [3, 4, 5], max_tokens: 5 }, auth);
      await post(`${s.url}/v1/chat/completions`, { messages: user("hi"), max_tokens: 3 }, auth);
      await fetch(`${s.url}/v1/nothing`, auth);
      const res = await fetch(`${s.url}/metrics`, auth);
      const io = engine.stats();
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
      const text = await res.text();
      // Format: every sample belongs to a family declared just before it with HELP and TYPE.
      let family = "";
      for (const line of text.trimEnd().split("\n")) {
        const decl = /^# (HELP|TYPE) (k3_[a-z_]+) (.+)$/.exec(line);
        if (decl) {
          family = decl[2]!;
          if (decl[1] === "TYPE") expect(["counter", "gauge"]).toContain(decl[3]);
          continue;
        }
        const sample = /^(k3_[a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (\d+(\.\d+)?(e[+-]\d+)?)$/.exec(line);
        expect(sample?.[1]).toBe(family);
      }
      const value = (series: string) => Number(new RegExp(`^${series.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1]);
      const gens = s.recent;
      expect(gens.length).toBe(2);
      expect(value("k3_generated_tokens_total")).toBe(gens[0]!.completion_tokens + gens[1]!.completion_tokens);
      expect(value("k3_prompt_tokens_total")).toBe(3 + gens[1]!.prompt_tokens);
      expect(value('k3_requests_total{route="/v1/completions",code="200"}')).toBe(1);
      expect(value('k3_requests_total{route="/v1/chat/completions",code="200"}')).toBe(1);
      expect(value('k3_requests_total{route="other",code="404"}')).toBe(1);
      expect(value('k3_requests_total{route="/metrics",code="401"}')).toBe(1);
      expect(value('k3_bytes_read_total{kind="trunk"}')).toBe(io.trunkBytesRead);
      expect(value('k3_bytes_read_total{kind="expert"}')).toBe(io.expertBytesRead);
      expect(value("k3_expert_hits_total")).toBe(io.expertHits);
      expect(value("k3_expert_requests_total")).toBe(io.expertRequests);
      expect(value("k3_reads_total")).toBe(io.reads);
      // Per device (issue 26): each device's bytes and reads, which add up to the engine's.
      expect(io.devices.length).toBeGreaterThan(0);
      for (const d of io.devices) {
        expect(value(`k3_device_bytes_read_total{device="${d.name}"}`)).toBe(d.bytesRead);
        expect(value(`k3_device_reads_total{device="${d.name}"}`)).toBe(d.reads);
        expect(value(`k3_device_hedges_total{device="${d.name}",outcome="won"}`)).toBe(0);
        expect(value(`k3_device_busy_seconds_total{device="${d.name}"}`)).toBeGreaterThan(0);
      }
      expect(io.devices.reduce((a, d) => a + d.bytesRead, 0)).toBe(io.trunkBytesRead + io.expertBytesRead);
      expect(value("k3_queue_running")).toBe(0);
      expect(value("k3_queue_waiting")).toBe(0);
      expect(value("k3_queue_capacity")).toBe(5);
      expect(value("k3_context_tokens")).toBe(4096);
    } finally {
      await s.stop();
    }
  });
});

describe("an engine that refuses to answer (all logits NaN)", () => {
  let nan: Engine;
  let s: K3Server;
  beforeAll(async () => {
    // One NaN in the final norm makes every logit NaN.
    ({ engine: nan, server: s } = await serveAltered("nan-logits", (dir) => {
      const t = openCheckpoint(dir).tensors.get("language_model.model.norm.weight")!;
      const fd = openSync(t.file, "r+");
      writeSync(fd, Buffer.from([0xc0, 0x7f]), 0, 2, t.offset); // bf16 0x7fc0, little-endian
      closeSync(fd);
    }));
  });
  afterAll(async () => {
    await s.stop();
    nan.close();
  });

  async function refusesToAnswer(temperature: number) {
    const res = await post(`${s.url}/v1/completions`, { prompt: [5, 6, 7], max_tokens: 6, temperature });
    expect(res.status).toBe(500);
    const e = await errorOf(res);
    expect(e).toMatchObject({ type: "server_error", code: "checkpoint" });
    expect(e.message).toStartWith("the model's logits after the prompt (position 3) are not finite: 1024 NaN");
    const events = await readSse(await post(`${s.url}/v1/chat/completions`, { messages: user("hi"), max_tokens: 6, temperature, stream: true }));
    expect(events.at(-1)!.data.error).toMatchObject({ type: "server_error", code: "checkpoint" });
    expect(events.at(-1)!.data.error.message).toMatch(/^the model's logits after the prompt \(position \d+\) are not finite/);
    expect(events.some((ev) => ev.data === "[DONE]")).toBe(false);
    expect(events.some((ev) => ev.data.choices?.[0]?.delta?.content || ev.data.choices?.[0]?.delta?.reasoning_content)).toBe(false);
    expect((await fetch(`${s.url}/health`)).status).toBe(200);
  }

  /** Each failure is logged for the operator, once, at error level (captured, not printed). */
  async function logged(temperature: number) {
    const { lines } = await capturedLog(() => refusesToAnswer(temperature));
    expect(lines.map((l) => [l.level, l.text.split("\n")[0]])).toEqual([
      [0, expect.stringMatching(/^POST \/v1\/completions: the model's logits after the prompt \(position 3\) are not finite/)],
      [0, expect.stringMatching(/^generation failed mid-stream: the model's logits after the prompt \(position \d+\) are not finite/)],
    ]);
  }

  test("greedy: a 500 error naming the step, never token 0; streamed: an error event, no [DONE]", () => logged(0));
  test("sampled: the same", () => logged(1));
});

test("greedy completions through the server equal the engine's direct greedy output (k3.token_ids too)", async () => {
  const want = directGreedy(engine, [9, 8, 7], 10);
  const body = (await (await post(`${server.url}/v1/completions`, { prompt: [9, 8, 7], max_tokens: 10 })).json()) as any;
  expect(body.k3.token_ids).toEqual(want.ids);
  expect(body.choices[0].text).toBe(want.text);
});

test("errors are classified by K3Error code, not by their message text", () => {
  const context = toApiError(new K3Error("CONTEXT", "the prompt (5000 tokens) exceeds the limit"), "prompt");
  expect([context.status, context.param, context.code]).toEqual([400, "prompt", "context_length_exceeded"]);
  const usage = toApiError(new K3Error("USAGE", "unsupported thinking_effort in this context"));
  expect([usage.status, usage.param, usage.code]).toEqual([400, null, null]);
  const io = toApiError(new K3Error("IO", "read failed: context of the shard"));
  expect([io.status, io.code]).toEqual([500, "io"]);
});
