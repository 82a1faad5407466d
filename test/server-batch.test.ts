// k3 serve with several generations batched in the engine's steps (--parallel): every answer is
// exactly what its request gives alone — staggered arrivals, different lengths, stop strings,
// seeds (also side by side), chat, a client that disconnects mid-batch — the steps really carry
// several sessions; past the slots requests queue, past the queue they get 503; a soak of
// concurrent clients loses, mixes and leaks nothing. The prefix cache: a resent conversation feeds
// only what follows its longest cached prefix, with the same reply, also when several
// conversations interleave on one session or run at once on several.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { streamCompletion } from "../src/conversation.ts";
import { Engine, type ChatMessage } from "../src/engine.ts";
import { liveCBytes } from "../src/model/cmem.ts";
import type { K3Server } from "../src/server/server.ts";
import { tinyModel } from "./helpers/models.ts";
import { directChatGreedy, directGreedy, post, readSse, serve, settledRss, until, watchSessions } from "./server.helpers.ts";

setDefaultTimeout(120_000);

let engine: Engine;
beforeAll(async () => {
  engine = Engine.open(await tinyModel("tiny-a"), { threads: 1, parallel: 3, chunk: 4 });
});
afterAll(() => engine.close());

const promptOf = (k: number) => Array.from({ length: k + 1 }, (_, i) => 10 + 7 * i);
const textOf = (events: { data: any }[]) =>
  events
    .filter((e) => e.data !== "[DONE]")
    .map((e) => e.data.choices[0]?.text ?? e.data.choices[0]?.delta?.content ?? e.data.choices[0]?.delta?.reasoning_content ?? "")
    .join("");
/** What every step carried, as the scheduler recorded it: 1..parallel sessions and at most a pass
 *  of rows (decode rows first, prefill pieces after), each step counted once by its sessions. */
function expectStepsWithin(stats: ReturnType<Engine["batchStats"]>, parallel: number, rows: number): void {
  expect(stats.sessionsPerStep.reduce((a, b) => a + b, 0)).toBe(stats.steps);
  expect(stats.sessionsPerStep.length).toBe(parallel + 1);
  expect(stats.recent.length).toBeGreaterThan(10);
  const bad = stats.recent.filter((st) => st.sessions < 1 || st.sessions > parallel || st.decodeRows + st.prefillRows > rows || st.decodeRows + st.prefillRows < st.sessions);
  expect(bad).toEqual([]);
}
const idsOf = (events: { data: any }[]) => events.filter((e) => e.data !== "[DONE]").flatMap((e) => e.data.k3?.token_ids ?? []);

/** A sampled completion run alone, unbatched, in a fresh session (what the server must match). */
function directSampled(prompt: number[], maxTokens: number, temperature: number, seed: number): number[] {
  const g = streamCompletion(engine, engine.createSession(), prompt, { maxTokens, temperature, seed });
  for (;;) {
    const r = g.next();
    if (r.done) return r.value.ids;
  }
}

describe("batched generations", () => {
  let server: K3Server;
  beforeAll(() => {
    server = serve(engine, { queue: 8 });
  });
  afterAll(() => server.stop());
  const url = () => `${server.url}/v1/completions`;

  test("staggered arrivals, different lengths, a stop string, a seed, a chat, more requests than slots: each answer is its own solo run", async () => {
    const long = directGreedy(engine, promptOf(2), 40);
    const story = directGreedy(engine, "Once upon a time", 30);
    const stop = story.text.slice(12, 14);
    const cut = story.text.slice(0, story.text.indexOf(stop));
    const sampled = directSampled(promptOf(5), 20, 0.9, 11);
    const chatMsgs: ChatMessage[] = [{ role: "user", content: "What is a cat?" }];
    const chat = directChatGreedy(engine, chatMsgs, 14, true);
    const late = directGreedy(engine, promptOf(9), 8);
    expect(stop.length).toBe(2);

    const steps = () => engine.batchStats().steps;
    const s0 = steps();
    const rLong = post(url(), { prompt: promptOf(2), max_tokens: 40, stream: true });
    await until(() => steps() >= s0 + 3, "the first stream running");
    const rStory = post(url(), { prompt: "Once upon a time", max_tokens: 30, stop: [stop], stream: true });
    await until(() => steps() >= s0 + 6, "two streams running");
    const rSampled = post(url(), { prompt: promptOf(5), max_tokens: 20, temperature: 0.9, seed: 11 });
    const rChat = post(`${server.url}/v1/chat/completions`, { messages: chatMsgs, max_tokens: 14 });
    const rLate = post(url(), { prompt: promptOf(9), max_tokens: 8, stream: true });

    const [eLong, eStory, jSampled, jChat, eLate] = await Promise.all([
      rLong.then((r) => readSse(r)),
      rStory.then((r) => readSse(r)),
      rSampled.then((r) => r.json() as Promise<any>),
      rChat.then((r) => r.json() as Promise<any>),
      rLate.then((r) => readSse(r)),
    ]);
    expect(textOf(eLong)).toBe(long.text);
    expect(idsOf(eLong)).toEqual(long.ids);
    expect(textOf(eStory)).toBe(cut);
    expect(jSampled.k3.token_ids).toEqual(sampled);
    expect(jChat.choices[0].message.reasoning_content ?? "").toBe(chat.reasoning);
    expect(jChat.choices[0].message.content ?? "").toBe(chat.content);
    expect(idsOf(eLate)).toEqual(late.ids);
    // The steps really carried several sessions at once.
    const stats = engine.batchStats();
    const per = stats.sessionsPerStep;
    expect(per[2]! + per[3]!).toBeGreaterThan(10);
    expectStepsWithin(stats, 3, engine.prefillChunk + 3 - 1); // a pass: a chunk plus a decode row per other session
  });

  test("a request beyond --parallel waits for a slot, then runs with the others", async () => {
    const want = [0, 1, 2, 3].map((k) => directGreedy(engine, promptOf(k + 10), k === 3 ? 6 : 50));
    const rs = [0, 1, 2].map((k) => post(url(), { prompt: promptOf(k + 10), max_tokens: 50, stream: true }));
    await until(() => server.queue.running === 3, "three running");
    const r3 = post(url(), { prompt: promptOf(13), max_tokens: 6, stream: true });
    await until(() => server.queue.waiting === 1, "the fourth queued");
    const events = await Promise.all([...rs, r3].map(async (r) => readSse(await r)));
    events.forEach((e, k) => expect(idsOf(e)).toEqual(want[k]!.ids));
    // It started only once a slot was free: after the first of the three had finished.
    const firstEnd = Math.min(...events.slice(0, 3).map((e) => e.at(-1)!.at));
    expect(events[3]![0]!.at).toBeGreaterThanOrEqual(firstEnd);
  });

  test("a client that disconnects mid-batch: its generation ends within a step, the others go on unchanged", async () => {
    const a = directGreedy(engine, promptOf(3), 30);
    const b = directGreedy(engine, promptOf(4), 30);
    const gens = server.recent.length;
    const ra = post(url(), { prompt: promptOf(3), max_tokens: 30, stream: true });
    const rb = post(url(), { prompt: promptOf(4), max_tokens: 30, stream: true });
    const rc = await post(url(), { prompt: promptOf(6), max_tokens: 200, stream: true });
    const cEvents = await readSse(rc, 3); // reads 3 events, then cancels the stream
    const [ea, eb] = await Promise.all([ra.then((r) => readSse(r)), rb.then((r) => readSse(r))]);
    expect(cEvents).toHaveLength(3);
    expect(idsOf(ea)).toEqual(a.ids);
    expect(idsOf(eb)).toEqual(b.ids);
    await until(() => server.recent.length === gens + 3, "all three recorded");
    const cancelled = server.recent.slice(gens).find((g) => g.prompt_tokens === 7)!;
    expect(cancelled.finish_reason).toBe("cancelled");
    expect(cancelled.completion_tokens).toBeLessThan(40);
  });

  test("sampled requests side by side: each seed's ids are its solo run's, whatever shares the step", async () => {
    const prompt = promptOf(4);
    const want5 = directSampled(prompt, 24, 1.0, 5);
    const want6 = directSampled(prompt, 24, 1.0, 6);
    expect(want6).not.toEqual(want5); // else the test could not see a seed mix-up
    const s0 = engine.batchStats().steps;
    const per0 = engine.batchStats().sessionsPerStep[3] ?? 0;
    // Same prompt three times (two with seed 5, one with 6): any shared sampler, PRNG or logits
    // buffer between generations shows as a wrong draw.
    const rs = [5, 5, 6].map((seed) => post(url(), { prompt, max_tokens: 24, temperature: 1.0, seed }));
    const got = await Promise.all(rs.map(async (r) => ((await (await r).json()) as any).k3.token_ids as number[]));
    expect(got).toEqual([want5, want5, want6]);
    expect(engine.batchStats().steps).toBeGreaterThan(s0);
    expect((engine.batchStats().sessionsPerStep[3] ?? 0) - per0).toBeGreaterThan(5); // they really shared steps
  });

  test("/k3/stats and /metrics show the batch: steps, sessions per step, recent steps", async () => {
    const s = (await (await fetch(`${server.url}/k3/stats`)).json()) as any;
    expect(s.batch.steps).toBeGreaterThan(0);
    // Every step counted once by the sessions it carried, and what each recent step carried
    // within --parallel and the pass's rows (sessions_per_step alone is sized parallel + 1).
    expect(s.batch.sessions_per_step.reduce((a: number, b: number) => a + b, 0)).toBe(s.batch.steps);
    expect(s.batch.sessions_per_step[0]).toBe(0);
    for (const st of s.batch.recent_steps) expect(st.sessions >= 1 && st.sessions <= 3 && st.decode_rows + st.prefill_rows <= engine.prefillChunk + 2).toBe(true);
    expect(s.batch.recent_steps.at(-1)).toMatchObject({ sessions: expect.any(Number), decode_rows: expect.any(Number), prefill_rows: expect.any(Number) });
    expect(s.server.queue.slots).toBe(3);
    // Per device (issue 26): what it read, its busy fraction of the time since open, its rate.
    const d = s.engine.devices[0];
    expect([typeof d.name, typeof d.bytes_read, typeof d.busy_fraction, typeof d.gb_per_s, d.threads]).toEqual(["string", "number", "number", "number", 4]);
    expect(s.engine.devices.reduce((a: number, x: { bytes_read: number }) => a + x.bytes_read, 0)).toBe(s.engine.bytes_read + s.engine.extra_bytes_read);
    const m = await (await fetch(`${server.url}/metrics`)).text();
    expect(m).toMatch(/k3_batch_step_sessions_total\{sessions="3"\} [1-9]/);
    expect(m).toMatch(/k3_parallel_sessions 3/);
  });
});

describe("bounded queue with several slots", () => {
  let server: K3Server;
  beforeAll(() => {
    server = serve(engine, { queue: 1 });
  });
  afterAll(() => server.stop());

  test("--parallel 3, --queue 1: three run, one waits, the fifth gets 503 with Retry-After; the waiter then runs, exactly", async () => {
    const url = `${server.url}/v1/completions`;
    const want = directGreedy(engine, promptOf(7), 5);
    const aborts = [0, 1, 2].map(() => new AbortController());
    const running = aborts.map((ac, k) => post(url, { prompt: promptOf(k), max_tokens: 4000, stream: true }, { signal: ac.signal }).catch(() => null));
    await until(() => server.queue.running === 3, "three running");
    const waiter = post(url, { prompt: promptOf(7), max_tokens: 5 });
    await until(() => server.queue.waiting === 1, "the fourth waiting");
    const refused = await post(url, { prompt: promptOf(8), max_tokens: 5 });
    expect(refused.status).toBe(503);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(((await refused.json()) as any).error).toMatchObject({ type: "overloaded_error", code: "queue_full" });
    expect(server.queue.running).toBe(3); // the refusal took no slot and no place in the queue
    expect(server.queue.waiting).toBe(1);
    aborts[0]!.abort(); // one slot frees: the waiter runs
    const r = await waiter;
    expect(r.status).toBe(200);
    expect(((await r.json()) as any).k3.token_ids).toEqual(want.ids);
    for (const ac of aborts) ac.abort();
    await Promise.all(running);
    await until(() => server.queue.running === 0, "idle");
  });
});

describe("soak", () => {
  let server: K3Server;
  beforeAll(() => {
    server = serve(engine, { queue: 16 });
  });
  afterAll(() => server.stop());

  test("8 clients × 20 requests (after a warm-up) on 3 slots: every answer its own, nothing lost or mixed, RSS flat", async () => {
    const keys = Array.from({ length: 8 }, (_, k) => k);
    const want = keys.map((k) => directGreedy(engine, promptOf(k), 3 + (k % 4)));
    const one = async (k: number, stream: boolean): Promise<number[]> => {
      const res = await post(`${server.url}/v1/completions`, { prompt: promptOf(k), max_tokens: 3 + (k % 4), stream });
      if (!stream) return ((await res.json()) as any).k3.token_ids;
      return idsOf(await readSse(res));
    };
    const client = async (c: number, n: number) => {
      const got: [number, number[]][] = [];
      for (let i = 0; i < n; i++) {
        const k = (c + 3 * i) % 8;
        got.push([k, await one(k, (c + i) % 2 === 0)]);
      }
      return got;
    };
    for (const [k, ids] of (await Promise.all(keys.map((c) => client(c, 3)))).flat()) expect(ids).toEqual(want[k]!.ids);
    const rss0 = await settledRss();
    const c0 = liveCBytes();
    const watch = watchSessions(engine);
    const results = (await Promise.all(keys.map((c) => client(c, 20)))).flat();
    watch.stop();
    // Nothing in C per request: the server's sessions are reused, no new one is made, and no more
    // C memory is held than before (read before any GC: a finalizer can only lower it).
    expect(watch.sessions).toEqual([]);
    expect(liveCBytes()).toBeLessThanOrEqual(c0);
    const growth = (await settledRss()) - rss0;
    expect(results).toHaveLength(160);
    for (const [k, ids] of results) expect(ids).toEqual(want[k]!.ids);
    expect(server.queue.running).toBe(0);
    expect(server.queue.waiting).toBe(0);
    expect(growth).toBeLessThan(50e6);
    console.error(`batched soak: RSS growth ${(growth / 1e6).toFixed(1)} MB over 160 requests; sessions per step ${JSON.stringify(engine.batchStats().sessionsPerStep)}`);
  });
});

describe("prefix cache", () => {
  let cached: Engine;
  let plain: Engine;
  let withCache: K3Server;
  let without: K3Server;
  beforeAll(async () => {
    const dir = await tinyModel("tiny-a");
    // One session each: every new conversation takes the session from the previous one.
    cached = Engine.open(dir, { threads: 1, parallel: 1, chunk: 4, prefixCache: { ramBytes: 2 ** 26 } });
    plain = Engine.open(dir, { threads: 1, parallel: 1, chunk: 4 });
    withCache = serve(cached, { modelName: "tiny-a" });
    without = serve(plain, { modelName: "tiny-a" });
  });
  afterAll(async () => {
    await withCache.stop();
    await without.stop();
    cached.close();
    plain.close();
  });

  const turn = async (server: K3Server, messages: ChatMessage[]) => {
    const r = (await (await post(`${server.url}/v1/chat/completions`, { messages, max_tokens: 10, chat_template_kwargs: { thinking: false } })).json()) as any;
    return { content: r.choices[0].message.content ?? "", cached: r.usage.prompt_tokens_details.cached_tokens as number, prompt: r.usage.prompt_tokens as number };
  };

  test("three conversations interleaved on one session: each second turn restores its prefix; replies equal the cache-off server's", async () => {
    const firsts = ["Tell me about cats and dogs.", "How do rivers form in mountains?", "Why is the sky blue at noon?"];
    const history = firsts.map((q) => [{ role: "user", content: q }] as ChatMessage[]);
    for (const h of history) {
      const a = await turn(withCache, h);
      const b = await turn(without, h);
      expect(a.content).toBe(b.content);
      h.push({ role: "assistant", content: a.content }, { role: "user", content: "Say more." });
    }
    for (const h of history) {
      const a = await turn(withCache, h);
      const b = await turn(without, h);
      expect(a.content).toBe(b.content);
      // The cache-off server has only its one session, which holds another conversation: 0.
      expect(b.cached).toBe(0);
      // At least the snapshot at the last chunk boundary inside the first turn's prompt.
      expect(a.cached).toBeGreaterThanOrEqual(8);
      expect(a.cached).toBeLessThan(a.prompt);
    }
    const s = (await (await fetch(`${withCache.url}/k3/stats`)).json()) as any;
    expect(s.prefix_cache.hits).toBeGreaterThanOrEqual(3);
    expect(s.prefix_cache.tokens_saved).toBeGreaterThan(0);
    expect(s.prefix_cache.estimated_weight_bytes_saved).toBeGreaterThan(0);
  });

  test("batched too: three conversations at once on two slots: every second turn starts from a cached prefix, replies equal the cache-off server's", async () => {
    const both = Engine.open(await tinyModel("tiny-a"), { threads: 1, parallel: 2, chunk: 4, prefixCache: { ramBytes: 2 ** 26 } });
    const server = serve(both, { modelName: "tiny-a" });
    try {
      const history = ["What do owls eat at night?", "Name a river in Spain.", "How are clouds made?"].map((q) => [{ role: "user", content: q }] as ChatMessage[]);
      const firsts = await Promise.all(history.map((h) => turn(server, h)));
      for (const [i, h] of history.entries()) {
        expect(firsts[i]!.content).toBe((await turn(without, h)).content);
        h.push({ role: "assistant", content: firsts[i]!.content }, { role: "user", content: "Go on." });
      }
      const hits0 = both.prefixStats()!.hits;
      const seconds = await Promise.all(history.map((h) => turn(server, h)));
      for (const [i, h] of history.entries()) {
        expect(seconds[i]!.content).toBe((await turn(without, h)).content);
        expect(seconds[i]!.cached).toBeGreaterThanOrEqual(8);
        expect(seconds[i]!.cached).toBeLessThan(seconds[i]!.prompt);
      }
      // Two sessions, three conversations: at least one second turn came from the cache, not from
      // a session that still held its conversation; and the turns really shared steps.
      expect(both.prefixStats()!.hits - hits0).toBeGreaterThanOrEqual(1);
      expect(both.batchStats().sessionsPerStep[2] ?? 0).toBeGreaterThan(0);
    } finally {
      await server.stop();
      both.close();
    }
  });

  test("a resent identical prompt feeds at most one chunk", async () => {
    const msgs: ChatMessage[] = [{ role: "user", content: "List three colours of autumn leaves, please." }];
    const first = await turn(withCache, msgs);
    await turn(withCache, [{ role: "user", content: "Something else entirely." }]); // takes the session
    const again = await turn(withCache, msgs);
    expect(again.content).toBe(first.content);
    expect(again.prompt - again.cached).toBeLessThanOrEqual(4);
  });
});
