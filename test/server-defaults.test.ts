// The defaults a request gets for the fields it leaves out, as OpenAI clients assume them
// (docs/SERVER.md, "Defaults"), over HTTP on a tiny model: a fresh seed per request, returned as
// k3.seed and reproducing the reply; temperature from the model folder's generation_config.json,
// else 1.0; a reasoning budget of half of max_tokens (overridable per request and per server);
// and the k3 progress extension of a stream.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { linkSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Engine } from "../src/engine.ts";
import { startServer, type K3Server } from "../src/server/server.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";
import { directGreedy, post, readSse, serve } from "./server.helpers.ts";

let engine: Engine;
let server: K3Server;
beforeAll(async () => {
  engine = Engine.open(await tinyModel("tiny-a"), { threads: 1, chunk: 4 });
  server = serve(engine, { defaults: true });
});
afterAll(async () => {
  await server.stop();
  engine.close();
});

const complete = async (s: K3Server, body: Record<string, unknown>) => (await (await post(`${s.url}/v1/completions`, { prompt: [5, 6, 7], max_tokens: 24, ...body })).json()) as any;
const chat = async (s: K3Server, body: Record<string, unknown>) =>
  (await (await post(`${s.url}/v1/chat/completions`, { messages: [{ role: "user", content: "Hello there" }], max_tokens: 8, ...body })).json()) as any;

/** A copy of a model folder (hard links: no bytes copied) with `files` added. */
async function folderWith(files: Record<string, string>): Promise<string> {
  const src = await tinyModel("tiny-a");
  const dir = scratchDir("gencfg");
  for (const f of readdirSync(src)) linkSync(join(src, f), join(dir, f));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

describe("seed", () => {
  test("a request without a seed gets a fresh one, returned as k3.seed; sending it back reproduces the reply", async () => {
    const a = await complete(server, { temperature: 1 });
    const b = await complete(server, { temperature: 1 });
    expect(Number.isInteger(a.k3.seed)).toBe(true);
    expect(a.k3.seed).not.toBe(b.k3.seed);
    const again = await complete(server, { temperature: 1, seed: a.k3.seed });
    expect(again.k3.seed).toBe(a.k3.seed);
    expect(again.k3.token_ids).toEqual(a.k3.token_ids);
  });

  test("a chat reply carries its seed too, on the body and on a stream's finish chunk", async () => {
    const body = await chat(server, { seed: 77 });
    expect(body.k3.seed).toBe(77);
    const events = await readSse(await post(`${server.url}/v1/chat/completions`, { messages: [{ role: "user", content: "Hi" }], max_tokens: 4, stream: true }));
    const finish = events.find((e) => e.data !== "[DONE]" && e.data.choices[0]?.finish_reason);
    expect(Number.isInteger(finish!.data.k3.seed)).toBe(true);
  });
});

describe("temperature", () => {
  test("absent = 1.0 when the model folder names none (/v1/models says so)", async () => {
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as any;
    expect(models.data[0].k3.defaults.temperature).toBe(1);
    const unset = await complete(server, { seed: 5 });
    const one = await complete(server, { seed: 5, temperature: 1 });
    expect(unset.k3.token_ids).toEqual(one.k3.token_ids);
    expect(one.k3.token_ids).not.toEqual(directGreedy(engine, [5, 6, 7], 24).ids);
  });

  test("absent = generation_config.json's temperature when the folder has one", async () => {
    const e = Engine.open(await folderWith({ "generation_config.json": JSON.stringify({ temperature: 0, max_length: 4096 }) }), { threads: 1 });
    const s = serve(e, { defaults: true });
    try {
      const unset = await complete(s, { seed: 5 });
      expect(unset.k3.token_ids).toEqual(directGreedy(e, [5, 6, 7], 24).ids);
      // The server's --temperature wins over the folder's.
      const flag = startServer(e, { modelName: "x", port: 0, temperature: 1 });
      expect((await complete(flag, { seed: 5 })).k3.token_ids).toEqual((await complete(server, { seed: 5, temperature: 1 })).k3.token_ids);
      await flag.stop();
    } finally {
      await s.stop();
      e.close();
    }
  });

  test("a generation_config.json that is not JSON, or a temperature that is not a number in [0, 2], is refused at start naming the file", async () => {
    for (const text of ["{not json", JSON.stringify({ temperature: "hot" }), JSON.stringify({ temperature: 9 })]) {
      const e = Engine.open(await folderWith({ "generation_config.json": text }), { threads: 1 });
      try {
        expect(() => startServer(e, { modelName: "x", port: 0 })).toThrow(/generation_config\.json: (not valid JSON|temperature must be a number between 0 and 2)/);
      } finally {
        e.close();
      }
    }
  });
});

describe("reasoning budget", () => {
  test("default: half of max_tokens, so a small max_tokens still reaches the answer (k3.reasoning_cut)", async () => {
    const r = await chat(server, { temperature: 0 });
    expect(r.k3.reasoning_budget).toBe(4);
    expect(r.k3.reasoning_cut).toBe(true);
    expect(r.usage.completion_tokens).toBeLessThanOrEqual(8);
  });

  test("per request: reasoning_budget N, or -1 for no limit; per server: reasoningBudget (k3 serve --reasoning-budget)", async () => {
    const two = await chat(server, { temperature: 0, reasoning_budget: 2 });
    expect([two.k3.reasoning_budget, two.k3.reasoning_cut]).toEqual([2, true]);
    const none = await chat(server, { temperature: 0, reasoning_budget: -1 });
    expect([none.k3.reasoning_budget, none.k3.reasoning_cut]).toEqual([null, false]);
    const bad = await post(`${server.url}/v1/chat/completions`, { messages: [{ role: "user", content: "x" }], reasoning_budget: -2 });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error.param).toBe("reasoning_budget");
    const s = startServer(engine, { modelName: "x", port: 0, reasoningBudget: 3 });
    try {
      expect((await chat(s, { temperature: 0 })).k3.reasoning_budget).toBe(3);
    } finally {
      await s.stop();
    }
  });
});

describe("progress (stream_options.include_progress)", () => {
  const prompt = Array.from({ length: 14 }, (_, i) => 10 + i);

  test("one chunk per prefill step before the first token: the engine's count of prompt tokens fed, and time left", async () => {
    const events = await readSse(await post(`${server.url}/v1/completions`, { prompt, max_tokens: 3, stream: true, temperature: 0, stream_options: { include_progress: true } }));
    const progress = events.filter((e) => e.data !== "[DONE]" && e.data.k3?.progress).map((e) => e.data);
    // 14 tokens in chunks of 4: 4, 8, 12, 14.
    expect(progress.map((p) => [p.k3.progress.done, p.k3.progress.total])).toEqual([[4, 14], [8, 14], [12, 14], [14, 14]]);
    for (const p of progress) {
      expect(p.choices).toEqual([]);
      expect(p.k3.progress.stage).toBe("prefill");
      expect(p.k3.progress.eta_ms).toBeGreaterThanOrEqual(0);
    }
    expect(progress.at(-1)!.k3.progress.eta_ms).toBe(0);
    const firstText = events.findIndex((e) => e.data !== "[DONE]" && e.data.k3?.token_ids);
    expect(firstText).toBeGreaterThan(events.indexOf(events.find((e) => e.data === progress.at(-1))!));
  });

  test("not asked for: no progress chunk (clients that read choices[0] see none without choices)", async () => {
    const events = await readSse(await post(`${server.url}/v1/completions`, { prompt: [...prompt, 1], max_tokens: 3, stream: true, temperature: 0 }));
    expect(events.filter((e) => e.data !== "[DONE]" && e.data.choices.length === 0)).toEqual([]);
  });
});
