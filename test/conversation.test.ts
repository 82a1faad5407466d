// src/conversation.ts: completions and chat turns on a real tiny model (prefix reuse, stop strings,
// seeds, context check), and chat parsing/stopping on a scripted engine (random weights never
// write a well-formed assistant message, so the end-of-message path needs a model we control).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Engine, Tokenizer, type ChatMessage, type GenerationStats } from "../src/engine.ts";
import { chatPromptIds, reusablePrefix, streamChat, streamCompletion, type ChatResult, type CompletionResult } from "../src/conversation.ts";
import { K3Error } from "../src/errors.ts";
import { tinyModel } from "./helpers/models.ts";

function drain<T, R>(g: Generator<T, R>): { items: T[]; result: R } {
  const items: T[] = [];
  for (;;) {
    const r = g.next();
    if (r.done) return { items, result: r.value };
    items.push(r.value);
  }
}

let engine: Engine;
beforeAll(async () => {
  engine = Engine.open(await tinyModel("tiny-a"), { threads: 1, context: 256 });
});
afterAll(() => engine?.close());

describe("streamCompletion", () => {
  test("greedy deltas carry every generated id and their decoded text; same as engine.generate", () => {
    const tok = engine.tokenizer();
    const prompt = "The capital of France is";
    const { items, result } = drain(streamCompletion(engine, engine.createSession(), prompt, { maxTokens: 12 }));
    const direct = drain(engine.generate(engine.createSession(), tok.encode(prompt), { maxTokens: 12 }));
    const directIds = direct.items.map((e) => e.id);
    // The completion stops early only at [EOS]; otherwise it is exactly the engine's greedy run.
    expect(result.ids).toEqual(directIds.slice(0, result.ids.length));
    expect(items.flatMap((d) => d.ids)).toEqual(result.ids);
    expect(items.map((d) => d.text).join("")).toBe(result.text);
    expect(result.text).toBe(tok.decode(result.ids));
    expect(result.usage.promptTokens).toBe(tok.encode(prompt).length);
  });

  test("a stop string that spans tokens ends the text before it and is never emitted", () => {
    const tok = engine.tokenizer();
    const full = drain(streamCompletion(engine, engine.createSession(), "Once upon a time", { maxTokens: 24 })).result;
    // Pick a stop string that crosses a token boundary: the end of one token's text and the start of the next.
    let stop = "";
    let at = 0;
    for (let i = 1; i < full.ids.length && !stop; i++) {
      const before = tok.decode(full.ids.slice(0, i));
      const next = tok.decode(full.ids.slice(0, i + 1));
      if (before.length >= 1 && next.length > before.length && full.text.startsWith(next)) {
        const s = full.text.slice(before.length - 1, before.length + 1);
        if (s.length === 2 && full.text.indexOf(s) === before.length - 1) {
          stop = s;
          at = before.length - 1;
        }
      }
    }
    expect(stop.length).toBe(2);
    const { items, result } = drain(streamCompletion(engine, engine.createSession(), "Once upon a time", { maxTokens: 24, stop: [stop] }));
    expect(result.text).toBe(full.text.slice(0, at));
    expect(items.map((d) => d.text).join("")).toBe(result.text);
    expect(result.text).not.toContain(stop);
    expect(result.finishReason).toBe("stop");
  });

  test("the same seed gives the same ids; another seed gives other ids", () => {
    const run = (seed: number) =>
      drain(streamCompletion(engine, engine.createSession(), "Hello", { maxTokens: 16, temperature: 1.5, seed })).result.ids;
    const a = run(7);
    expect(run(7)).toEqual(a);
    expect(run(8)).not.toEqual(a);
  });

  test("a prompt longer than the context is refused before any work", () => {
    const session = engine.createSession();
    const ids = Array.from({ length: 300 }, (_, i) => i % 200);
    let err: unknown;
    try {
      streamCompletion(engine, session, ids, { maxTokens: 4 }).next();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(K3Error);
    expect((err as K3Error).code).toBe("CONTEXT");
    expect((err as K3Error).message).toContain("exceeds the context limit");
    expect(session.tokens).toEqual([]);
  });

  test("bad sampling options are refused without touching the session", () => {
    const session = engine.createSession();
    drain(streamCompletion(engine, session, "Hi", { maxTokens: 2 }));
    const before = session.tokens;
    expect(() => streamCompletion(engine, session, "Hi there", { maxTokens: 2, temperature: 1, topP: 2 }).next()).toThrow(K3Error);
    expect(session.tokens).toEqual(before);
  });
});

describe("streamChat on the tiny model", () => {
  const convo: ChatMessage[] = [{ role: "user", content: "What is 2+2?" }];

  test("a follow-up turn reuses the whole first turn and matches a fresh session exactly", () => {
    // Random weights never end a reply, so the first turn is one that did end: its prompt and a
    // complete reply (closed, <|end_of_msg|>) run through the model as the session's state.
    const tok = engine.tokenizer();
    const reply = "<|close|>think<|sep|><|open|>response<|sep|>four<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
    const session = engine.createSession();
    engine.prefill(session, [...chatPromptIds(tok, convo, {}), ...tok.encodeWithSpecials(reply)]);
    const held = session.tokens;
    const follow: ChatMessage[] = [...convo, { role: "assistant", content: "four" }, { role: "user", content: "And 3+3?" }];
    const ids = chatPromptIds(tok, follow, {});
    expect(ids.slice(0, held.length)).toEqual(held); // the renderer reproduces the first turn
    const reused = drain(streamChat(engine, session, follow, { maxTokens: 8 })).result;
    expect(reused.usage.cachedTokens).toBe(held.length);
    expect(held.length).toBeGreaterThan(20);
    const fresh = drain(streamChat(engine, engine.createSession(), follow, { maxTokens: 8 })).result;
    expect(fresh.usage.cachedTokens).toBe(0);
    expect(reused.reasoning).toBe(fresh.reasoning);
    expect(reused.content).toBe(fresh.content);
    expect(reused.usage.completionTokens).toBe(fresh.usage.completionTokens);
    expect(session.tokens.slice(0, ids.length)).toEqual(ids); // the session was extended, not reset
  });

  test("a session that already holds part of the prompt feeds only the rest, with the same reply", () => {
    const longer: ChatMessage[] = [...convo, { role: "assistant", content: "4" }, { role: "user", content: "Thanks" }];
    const ids = chatPromptIds(engine.tokenizer(), longer, {});
    const s2 = engine.createSession();
    engine.prefill(s2, ids.slice(0, 10));
    const b = drain(streamChat(engine, s2, longer, { maxTokens: 6 })).result;
    const c = drain(streamChat(engine, engine.createSession(), longer, { maxTokens: 6 })).result;
    expect(b.usage.cachedTokens).toBe(10);
    expect(c.usage.cachedTokens).toBe(0);
    expect([b.reasoning, b.content]).toEqual([c.reasoning, c.content]);
    expect(b.usage.promptTokens).toBe(ids.length);
  });

  test("reasoning and content deltas add up to the result", () => {
    const { items, result } = drain(streamChat(engine, engine.createSession(), convo, { maxTokens: 16 }));
    expect(items.map((d) => d.reasoning ?? "").join("")).toBe(result.reasoning);
    expect(items.map((d) => d.content ?? "").join("")).toBe(result.content);
    expect(["stop", "length", "tool_calls"]).toContain(result.finishReason);
  });
});

describe("reusablePrefix", () => {
  test("only a proper prefix is reusable", () => {
    expect(reusablePrefix([], [1, 2])).toBe(0);
    expect(reusablePrefix([1], [1, 2])).toBe(1);
    expect(reusablePrefix([1, 2], [1, 2])).toBe(0);
    expect(reusablePrefix([1, 3], [1, 2, 3])).toBe(0);
    expect(reusablePrefix([1, 2, 3], [1, 2])).toBe(0);
  });
});

// ---------------------------------------------------------------------------------------------
// A scripted engine: emits the ids of a given text, honouring stopIds and shouldStop like the
// real engine.generate (same session contract: emitted ids stay pending).

class FakeSession {
  history: number[] = [];
  pending: number[] = [];
  get tokens() {
    return [...this.history, ...this.pending];
  }
  reset() {
    this.history = [];
    this.pending = [];
  }
}

function scriptedEngine(tok: Tokenizer, dir: string, script: number[]) {
  const fed: number[][] = [];
  return {
    fed,
    dir,
    context: 4096,
    tokenizerDir: dir,
    tokenizer: () => tok,
    // Engine.reusePrefix's own-session cases (no prefix cache here).
    reusePrefix(session: FakeSession, ids: number[]) {
      const t = session.tokens;
      if (session.pending.length > 0 && t.length === ids.length && t.every((x, i) => x === ids[i])) return ids.length;
      const n = reusablePrefix(t, ids);
      if (n === 0 && t.length > 0) session.reset();
      return n;
    },
    *generate(session: FakeSession, prompt: number[], opts: { maxTokens: number; stopIds?: number[]; shouldStop?: () => boolean }) {
      fed.push([...session.pending, ...prompt]);
      session.history.push(...session.pending, ...prompt);
      session.pending = [];
      let n = 0;
      let stopReason: GenerationStats["stopReason"] = "length";
      for (const id of script) {
        if (n >= opts.maxTokens) break;
        if (opts.shouldStop?.()) {
          stopReason = "cancelled";
          break;
        }
        if (opts.stopIds?.includes(id)) {
          session.pending.push(id);
          stopReason = "stop";
          break;
        }
        session.history.push(...session.pending);
        session.pending = [id];
        yield { id, index: n++, ms: 0 };
      }
      return { promptTokens: 0, generatedTokens: n, stopReason } as unknown as GenerationStats;
    },
  };
}

describe("streamChat on a scripted engine", () => {
  let tok: Tokenizer;
  let dir: string;
  beforeAll(async () => {
    dir = await tinyModel("tiny-a");
    tok = Tokenizer.load(dir);
  });
  const script = (text: string) => tok.encodeWithSpecials(text);
  const chat = (eng: ReturnType<typeof scriptedEngine>, session: FakeSession, msgs: ChatMessage[], opts = {}) =>
    drain(streamChat(eng as unknown as Engine, session as never, msgs, { maxTokens: 200, ...opts }));

  test("reasoning and answer come apart; generation ends at <|end_of_msg|>, which stays in the session", () => {
    const eng = scriptedEngine(tok, dir, script("Let me add.<|close|>think<|sep|><|open|>response<|sep|>It is 4.<|close|>response<|sep|><|end_of_msg|>MORE TEXT"));
    const session = new FakeSession();
    const { items, result } = chat(eng, session, [{ role: "user", content: "2+2?" }]);
    expect(result.reasoning).toBe("Let me add.");
    expect(result.content).toBe("It is 4.");
    expect(result.finishReason).toBe("stop");
    expect(items.some((d) => d.reasoning && d.content)).toBe(false);
    expect(session.tokens.at(-1)).toBe(tok.specialId("<|end_of_msg|>"));
    expect(tok.decode(session.tokens)).not.toContain("MORE TEXT");
  });

  test("[EOS] also ends the turn", () => {
    const eng = scriptedEngine(tok, dir, script("hmm<|close|>think<|sep|><|open|>response<|sep|>ok[EOS]never"));
    const { result } = chat(eng, new FakeSession(), [{ role: "user", content: "x" }]);
    expect(result.content).toBe("ok");
    expect(result.finishReason).toBe("stop");
  });

  test("a closed message without <|end_of_msg|> stops and the end token is appended", () => {
    const eng = scriptedEngine(tok, dir, script("<|close|>think<|sep|><|open|>response<|sep|>hi<|close|>response<|sep|><|close|>message<|sep|>junk junk junk"));
    const session = new FakeSession();
    const { result } = chat(eng, session, [{ role: "user", content: "x" }]);
    expect(result.content).toBe("hi");
    expect(result.finishReason).toBe("stop");
    expect(session.tokens.at(-1)).toBe(tok.specialId("<|end_of_msg|>"));
    expect(tok.decode(session.tokens)).not.toContain("junk");
  });

  test("tool calls are parsed and finish with tool_calls", () => {
    const eng = scriptedEngine(
      tok,
      dir,
      script(
        '<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>',
      ),
    );
    const { result } = chat(eng, new FakeSession(), [{ role: "user", content: "weather?" }]);
    expect(result.toolCalls).toEqual([{ index: 1, name: "get_weather", arguments: '{"city":"Paris"}' }]);
    expect(result.finishReason).toBe("tool_calls");
  });

  test("thinking off: everything before the close is the answer; a stop string cuts it", () => {
    const eng = scriptedEngine(tok, dir, script("Paris is nice. STOP here<|close|>response<|sep|><|end_of_msg|>"));
    const { items, result } = chat(eng, new FakeSession(), [{ role: "user", content: "x" }], { thinking: false, stop: ["STOP"] });
    expect(result.reasoning).toBe("");
    expect(result.content).toBe("Paris is nice. ");
    expect(items.map((d) => d.content ?? "").join("")).toBe("Paris is nice. ");
    expect(result.finishReason).toBe("stop");
  });

  test("shouldStop cancels; maxTokens gives length", () => {
    let n = 0;
    const eng = scriptedEngine(tok, dir, script("a b c d e f g h i j k l m n o p"));
    const cancelled = chat(eng, new FakeSession(), [{ role: "user", content: "x" }], { shouldStop: () => ++n > 3 }).result;
    expect(cancelled.finishReason).toBe("cancelled");
    const cut = chat(scriptedEngine(tok, dir, script("a b c d e f g h")), new FakeSession(), [{ role: "user", content: "x" }], { maxTokens: 3 }).result;
    expect(cut.finishReason).toBe("length");
    expect(cut.reasoning).toBe(tok.decode(script("a b c")));
  });

  test("the second turn feeds only the new suffix when the session holds the rendered prefix", () => {
    const reply = "<|close|>think<|sep|><|open|>response<|sep|>four<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
    const eng = scriptedEngine(tok, dir, script(reply));
    const session = new FakeSession();
    const turn1: ChatMessage[] = [{ role: "user", content: "2+2?" }];
    chat(eng, session, turn1);
    const turn2: ChatMessage[] = [...turn1, { role: "assistant", content: "four" }, { role: "user", content: "3+3?" }];
    const ids2 = chatPromptIds(tok, turn2, {});
    const held = session.tokens;
    const r = chat(eng, session, turn2).result as ChatResult;
    // Reuse depends on BPE re-encoding the reply as generated; the test tokenizer does here.
    expect(held.at(-1)).toBe(tok.specialId("<|end_of_msg|>"));
    expect(r.usage.cachedTokens).toBe(held.length);
    expect(ids2.slice(0, held.length)).toEqual(held);
    expect(eng.fed[1]!.slice(-(ids2.length - held.length))).toEqual(ids2.slice(held.length));
  });
});

// Silence unused-type lint in strict builds.
export type _unused = CompletionResult;
