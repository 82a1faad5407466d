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

  test("batched: a turn starting at a position that is not a chunk multiple feeds pieces ending at chunk multiples; the prefix snapshot sits on one", async () => {
    const e = Engine.open(dir, { threads: 1, chunk: 4, parallel: 1, speculate: "off", prefixCache: { ramBytes: 2 ** 26 } });
    try {
      /** A batched generation run to its end; the prefill pieces its steps carried. */
      const batched = async (s: ReturnType<Engine["createSession"]>, prompt: number[], maxTokens: number) => {
        const steps0 = e.batchStats().steps;
        const ids: number[] = [];
        const g = e.generate(s, prompt, { maxTokens, batched: true });
        for (let r = g.next(); !r.done; r = g.next()) {
          if (r.value.wait) await e.turn();
          else ids.push(r.value.id);
        }
        const recent = e.batchStats().recent;
        return { ids, pieces: recent.slice(recent.length - (e.batchStats().steps - steps0)).map((st) => st.prefillRows).filter((n) => n > 0) };
      };
      const s = e.createSession();
      const turn1 = await batched(s, PROMPT.slice(0, 5), 2); // feeds 5 (pieces 4, 1), then 1 decode: position 6, 1 pending
      expect(turn1.pieces).toEqual([4, 1]);
      expect(s.position).toBe(6);
      const more = [21, 22, 23, 24, 25, 26, 27, 28, 29];
      const turn2 = await batched(s, more, 2); // 10 tokens from position 6: pieces end at 8, 12, 16
      expect(turn2.pieces).toEqual([2, 4, 4]);
      // The snapshot at the last chunk boundary inside that prompt (12) is what a resend restores.
      const history = s.state.history.slice(0, 12);
      const fresh = e.createSession();
      expect(e.reusePrefix(fresh, [...history, 1, 2])).toBe(12);
      // And the ids are those of one unbatched run over the same tokens.
      const plain = e.createSession();
      const a = [...e.generate(plain, PROMPT.slice(0, 5), { maxTokens: 2 })].map((t) => t.id);
      const b = [...e.generate(plain, more, { maxTokens: 2 })].map((t) => t.id);
      expect([a, b]).toEqual([turn1.ids, turn2.ids]);
    } finally {
      e.close();
    }
  });
});
