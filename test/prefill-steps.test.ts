// A long prefill is cooperative: with yieldDuringPrefill the engine yields between chunks, so an
// async caller's event loop runs (Ctrl-C, client disconnects) and a stop request is honoured
// before the next chunk — without changing a bit of the result.
import { beforeAll, describe, expect, test } from "bun:test";
import { streamCompletion } from "../src/conversation.ts";
import { Engine } from "../src/engine.ts";
import { tinyModel } from "./helpers/models.ts";

const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
let dir = "";
beforeAll(async () => {
  dir = await tinyModel("tiny-a");
});

describe("prefill steps", () => {
  test("yields one event between chunks; ids identical to a plain run", () => {
    const e = Engine.open(dir, { threads: 1, chunk: 3 });
    try {
      const plain: number[] = [];
      for (const t of e.generate(e.createSession(), PROMPT, { maxTokens: 6 })) plain.push(t.id);
      const steps: { done: number; total: number }[] = [];
      const ids: number[] = [];
      for (const t of e.generate(e.createSession(), PROMPT, { maxTokens: 6, yieldDuringPrefill: true })) {
        if (t.prefill) steps.push(t.prefill);
        else ids.push(t.id);
      }
      expect(steps).toEqual([
        { done: 3, total: 8 },
        { done: 6, total: 8 },
      ]);
      expect(ids).toEqual(plain);
    } finally {
      e.close();
    }
  });

  test("a stop request between chunks ends the prefill: no token, the fed chunks stay in the session", () => {
    const e = Engine.open(dir, { threads: 1, chunk: 3 });
    try {
      const s = e.createSession();
      let stop = false;
      const it = e.generate(s, PROMPT, { maxTokens: 6, yieldDuringPrefill: true, shouldStop: () => stop });
      const first = it.next();
      expect(first.done).toBe(false);
      expect(first.value).toMatchObject({ id: -1, prefill: { done: 3, total: 8 } });
      stop = true;
      const end = it.next();
      expect(end.done).toBe(true);
      if (!end.done) throw new Error("unreachable");
      expect(end.value.stopReason).toBe("cancelled");
      expect(end.value.generatedTokens).toBe(0);
      expect(s.position).toBe(3);
      expect(s.tokens).toEqual(PROMPT.slice(0, 3));
    } finally {
      e.close();
    }
  });

  test("a bad id anywhere in the prompt is refused before the first chunk changes the session", () => {
    const e = Engine.open(dir, { threads: 1, chunk: 3 });
    try {
      const s = e.createSession();
      expect(() => e.prefill(s, [...PROMPT, 10 ** 9])).toThrow(/outside the vocabulary/);
      expect(s.position).toBe(0);
    } finally {
      e.close();
    }
  });

  test("streamCompletion passes prefill steps through as empty deltas", () => {
    const e = Engine.open(dir, { threads: 1, chunk: 2 });
    try {
      const deltas: { text: string; ids: number[] }[] = [];
      for (const d of streamCompletion(e, e.createSession(), PROMPT, { maxTokens: 3 })) deltas.push(d);
      const empty = deltas.findIndex((d) => d.ids.length > 0);
      expect(empty).toBe(3); // 8 tokens in chunks of 2: three steps before the first token
      expect(deltas.slice(0, 3).every((d) => d.text === "" && d.ids.length === 0)).toBe(true);
    } finally {
      e.close();
    }
  });
});
