// Batched generation and speculation together (docs/SERVER.md, "Speculation"): with one session
// per pass (--parallel 1) a batched generation speculates — its verify pass runs alone and holds
// the scheduler until its accepted drafts are kept, even when another generation waits for a
// step — with the same ids and the same session bytes as a plain run; with several sessions per
// pass batched generations do not speculate, and give the same ids.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Engine, type Drafter, type GenerationStats, type Session } from "../src/engine.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);

const PROMPTS = [
  [5, 17, 300, 42, 7, 99, 3, 250],
  [9, 8, 7, 6, 5, 4],
];
const GEN = 14;

/** Proposes a known continuation, wrong at draft offset 2 (so verify passes keep some, reject some). */
class Oracle implements Drafter {
  readonly name = "oracle";
  constructor(private ref: number[]) {}
  draft({ tokens, max }: { tokens: readonly number[]; max: number }) {
    return { tokens: this.ref.slice(tokens.length, tokens.length + max).map((t, j) => (j === 2 ? (t + 1) % 1000 : t)) };
  }
}

let n = 0;
const sessionHex = (e: Engine, s: Session) => {
  const path = join(scratchDir("batch-spec"), `s${n++}.k3session`);
  e.saveSession(s, path);
  return readFileSync(path).toString("hex");
};

/** A batched generation driven like the server drives it, but yielding to the event loop after
 *  every token too (so another generation's step gets every chance to run in between). */
async function batched(e: Engine, prompt: number[], drafter?: Drafter) {
  const s = e.createSession();
  const g = e.generate(s, prompt, { maxTokens: GEN, batched: true, drafter, speculate: drafter ? 4 : "off" });
  const ids: number[] = [];
  for (;;) {
    const r = g.next();
    if (r.done) return { ids, stats: r.value as GenerationStats, session: sessionHex(e, s) };
    if (r.value.wait) await e.turn();
    else {
      ids.push(r.value.id);
      await new Promise((ok) => setImmediate(ok));
    }
  }
}

let dir = "";
const plain: { ids: number[]; session: string }[] = [];
beforeAll(async () => {
  dir = await tinyModel("tiny-a");
  const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: "off" });
  try {
    for (const p of PROMPTS) {
      const s = e.createSession();
      const ids: number[] = [];
      for (const t of e.generate(s, p, { maxTokens: GEN })) ids.push(t.id);
      plain.push({ ids, session: sessionHex(e, s) });
    }
  } finally {
    e.close();
  }
});

describe("batched generation with speculation", () => {
  test("--parallel 1: two generations at once both speculate; ids and session bytes equal plain runs", async () => {
    const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: 4, parallel: 1 });
    try {
      const runs = await Promise.all(PROMPTS.map((p, i) => batched(e, p, new Oracle([...p, ...plain[i]!.ids]))));
      runs.forEach((r, i) => {
        expect(r.ids).toEqual(plain[i]!.ids);
        expect(r.session).toBe(plain[i]!.session);
        expect(r.stats.speculation.verifyPasses).toBeGreaterThan(0);
        expect(r.stats.speculation.acceptedTokens).toBeGreaterThan(0);
      });
    } finally {
      e.close();
    }
  });

  test("--parallel 2: batched generations do not speculate (a batch step serves both); same ids", async () => {
    const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: 4, parallel: 2 });
    try {
      const runs = await Promise.all(PROMPTS.map((p, i) => batched(e, p, new Oracle([...p, ...plain[i]!.ids]))));
      runs.forEach((r, i) => {
        expect(r.ids).toEqual(plain[i]!.ids);
        expect(r.stats.speculation.verifyPasses).toBe(0);
      });
      expect(e.batchStats().sessionsPerStep[2]).toBeGreaterThan(0);
    } finally {
      e.close();
    }
  });
});
