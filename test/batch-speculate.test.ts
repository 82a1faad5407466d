// Speculation inside batched generation (issue 27, docs/SERVER.md "How a step is filled"): several
// sessions' verify segments share a step beside decode rows and prefill pieces, and every request
// is exactly its solo run with speculation off — ids, the logits each token was picked from, and
// the session it leaves, byte for byte — whatever its drafts did (kept, rejected, none), whatever
// shares its steps and whenever it arrives; greedy and seeded. A session stopped mid-verify (its
// accepted drafts only partly kept) leaves the others exact and itself as plain decoding of what it
// emitted. A generation abandoned while its pass waits for a step keeps its emitted token. The
// demo's trained draft drafts inside batched steps too, each session keeping its drafts from its own
// rollback slot.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type BatchStats, createSampler, Engine, type Drafter, type EngineOptions, type GenerateOptions, type GenerationStats, type Sampler, type Session } from "../src/engine.ts";
import { ensureDemoDraft, ensureDemoModel } from "../src/cli/demo.ts";
import { Tokenizer } from "../src/text/tokenizer.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);

const PROMPTS = [
  [5, 17, 300, 42, 7, 99, 3, 250],
  [9, 8, 7, 6, 5, 4],
  [400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410],
  [77, 78, 79],
];
const GEN = 16;

/** Proposes a known continuation, wrong at draft offset `wrongAt` (so some passes keep every
 *  draft, some keep a few, and with wrongAt 0 none). */
class Oracle implements Drafter {
  readonly name = "oracle";
  constructor(
    private ref: number[],
    private wrongAt = 2,
  ) {}
  draft({ tokens, max }: { tokens: readonly number[]; max: number }) {
    return { tokens: this.ref.slice(tokens.length, tokens.length + max).map((t, j) => (j === this.wrongAt ? (t + 1) % 200 : t)) };
  }
}

let n = 0;
const sessionHex = (e: Engine, s: Session) => {
  const path = join(scratchDir("batch-spec"), `s${n++}.k3session`);
  e.saveSession(s, path);
  return readFileSync(path).toString("hex");
};

/** A sampler that records, per position, the logits it picked from (greedy, or `base`'s draw). */
function recording(base?: Sampler) {
  const seen: Record<number, string> = {};
  const sampler: Sampler = {
    sample(logits, position) {
      seen[position] = Bun.hash(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength)).toString(16);
      if (base) return base.sample(logits, position);
      let best = 0;
      for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
      return best;
    },
  };
  return { sampler, seen };
}

interface Req {
  prompt: number[];
  opts: Partial<GenerateOptions>;
  /** Starts once this many tokens were emitted by all requests together. */
  startAt?: number;
  /** Stops (shouldStop) once it emitted this many. */
  stopAt?: number;
  seed?: number;
}

interface Out {
  ids: number[];
  stats: GenerationStats;
  session: string;
  logits: Record<number, string>;
}

/**
 * Requests driven as the server drives them (a `wait` event awaits the engine's next step), but
 * yielding to the event loop after every token too, so other sessions' steps get every chance to
 * run between the tokens of one verify pass (its accepted drafts are then kept from its slot).
 */
async function together(e: Engine, reqs: Req[]): Promise<Out[]> {
  let emitted = 0;
  const one = async (r: Req): Promise<Out> => {
    while (emitted < (r.startAt ?? 0)) await new Promise((ok) => setImmediate(ok));
    const s = e.createSession();
    const rec = recording(r.seed === undefined ? undefined : createSampler({ temperature: 0.9, seed: r.seed }));
    const ids: number[] = [];
    const g = e.generate(s, r.prompt, { maxTokens: GEN, batched: true, sampler: rec.sampler, shouldStop: () => ids.length >= (r.stopAt ?? Infinity), ...r.opts });
    for (;;) {
      const x = g.next();
      if (x.done) return { ids, stats: x.value, session: sessionHex(e, s), logits: rec.seen };
      if (x.value.wait) await e.turn();
      else {
        ids.push(x.value.id);
        emitted++;
        await new Promise((ok) => setImmediate(ok));
      }
    }
  };
  return Promise.all(reqs.map(one));
}

/** The same requests one at a time on an engine without speculation (plain decoding), stopped the
 *  same way (shouldStop after `stopAt` tokens). */
function solo(dir: string, reqs: Req[]): Out[] {
  const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: "off" });
  try {
    return reqs.map((r) => {
      const s = e.createSession();
      const rec = recording(r.seed === undefined ? undefined : createSampler({ temperature: 0.9, seed: r.seed }));
      const ids: number[] = [];
      const g = e.generate(s, r.prompt, { maxTokens: GEN, sampler: rec.sampler, shouldStop: () => ids.length >= (r.stopAt ?? Infinity) });
      for (;;) {
        const x = g.next();
        if (x.done) return { ids, stats: x.value, session: sessionHex(e, s), logits: rec.seen };
        ids.push(x.value.id);
      }
    });
  } finally {
    e.close();
  }
}

let dir = "";

/** `reqs` together on an engine of `parallel` sessions (speculate 4, `extra`): each one's ids and
 *  session bytes are its solo run's without speculation, and each verified drafts; the batch stats.
 *  On `model` (default the tiny test model). */
async function exactTogether(reqs: Req[], parallel: number, extra: Partial<EngineOptions> = {}, model = dir): Promise<{ got: Out[]; batch: BatchStats }> {
  const e = Engine.open(model, { threads: 2, chunk: 8, speculate: 4, parallel, ...extra });
  try {
    const got = await together(e, reqs);
    const want = solo(model, reqs);
    got.forEach((g, i) => {
      expect(g.ids).toEqual(want[i]!.ids);
      expect(g.session).toBe(want[i]!.session);
      expect(g.stats.speculation.verifyPasses).toBeGreaterThan(0);
    });
    return { got, batch: e.batchStats() };
  } finally {
    e.close();
  }
}

/** Drive a batched generation as the server does until its second `wait` (the pass after its
 *  first token, once the prefill ran), and abandon it there, its ticket not run; the ids it emitted. */
async function abandonAtSecondWait(e: Engine, s: Session, prompt: number[], opts: Partial<GenerateOptions>): Promise<number[]> {
  const g = e.generate(s, prompt, { maxTokens: GEN, batched: true, ...opts });
  const ids: number[] = [];
  for (let waits = 0; ; ) {
    const x = g.next();
    if (x.done) throw new Error("ended early");
    if (!x.value.wait) ids.push(x.value.id);
    else if (++waits === 2) break;
    else await e.turn();
  }
  g.return(undefined as never);
  return ids;
}

/** Each prompt's plain greedy continuation (what the oracles propose). */
const plain: number[][] = [];
beforeAll(async () => {
  dir = await tinyModel("tiny-a");
  for (const o of solo(dir, PROMPTS.map((prompt) => ({ prompt, opts: {} })))) plain.push(o.ids);
});

const oracle = (i: number, wrongAt?: number) => new Oracle([...PROMPTS[i]!, ...plain[i]!], wrongAt);

describe("several sessions' drafts in one pass", () => {
  test("staggered requests, drafts kept, partly kept and rejected, one without speculation, one seeded: each is its solo run (ids, logits, session bytes); steps carried two sessions' verify segments beside a decode row and a prefill piece", async () => {
    const reqs: Req[] = [
      { prompt: PROMPTS[0]!, opts: { drafter: oracle(0, 2), speculate: 3 } },
      { prompt: PROMPTS[1]!, opts: { drafter: oracle(1, 0), speculate: 2 }, startAt: 1 }, // every pass rejects its first draft
      { prompt: PROMPTS[2]!, opts: { speculate: "off" }, startAt: 2 }, // plain decode rows beside them
      { prompt: PROMPTS[3]!, opts: { drafter: oracle(3, 1), speculate: 2 }, startAt: 6, seed: 5 }, // a late short prompt: a 3-row prefill piece
    ];
    const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: 4, parallel: 4 });
    try {
      const got = await together(e, reqs);
      // Seeded: the oracle proposes greedy tokens, which the seeded draw keeps where they agree.
      const want = solo(dir, reqs);
      got.forEach((g, i) => {
        expect({ i, ids: g.ids }).toEqual({ i, ids: want[i]!.ids });
        expect({ i, logits: g.logits }).toEqual({ i, logits: want[i]!.logits });
        expect({ i, session: g.session }).toEqual({ i, session: want[i]!.session });
      });
      const sp = got.map((g) => g.stats.speculation);
      expect(sp[0]!.acceptedTokens).toBeGreaterThan(0);
      expect(sp[0]!.acceptedTokens).toBeLessThan(sp[0]!.draftedTokens); // some rejected
      expect(sp[1]!.verifyPasses).toBeGreaterThan(0);
      expect(sp[1]!.acceptedTokens).toBe(0); // every draft rejected, still exact
      expect(sp[2]!.verifyPasses).toBe(0); // its own speculate: off, honoured
      const b = e.batchStats();
      expect(b.sharedVerifySteps).toBeGreaterThan(0);
      const mixed = b.recent.filter((r) => r.verify.length >= 2 && r.prefillRows > 0 && r.decodeRows > r.verify.length);
      expect(mixed.length).toBeGreaterThan(0);
      // The stats add up: every verify segment's drafts and kept drafts are its generation's.
      expect(b.draftTokens).toBe(sp.reduce((a, s) => a + s.draftedTokens, 0));
      expect(b.acceptedDrafts).toBe(sp.reduce((a, s) => a + s.acceptedTokens, 0));
      expect(b.verifySegments).toBe(sp.reduce((a, s) => a + s.verifyPasses, 0));
      expect(b.holding).toBe(0); // every slot given back
    } finally {
      e.close();
    }
  });

  test("a session stopped mid-verify (its accepted drafts partly kept) leaves the others exact and itself as plain decoding of what it emitted", async () => {
    const reqs: Req[] = [
      // Every draft right: its first verify pass (alone: the others start after its second token)
      // decides 5 tokens; it is stopped after the second of them, 3 accepted drafts not kept.
      { prompt: PROMPTS[0]!, opts: { drafter: oracle(0, 9), speculate: 4 }, stopAt: 3 },
      { prompt: PROMPTS[1]!, opts: { drafter: oracle(1, 2), speculate: 4 }, startAt: 2 },
      { prompt: PROMPTS[2]!, opts: { drafter: oracle(2, 1), speculate: 4 }, startAt: 2 },
    ];
    const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: 4, parallel: 3 });
    try {
      const got = await together(e, reqs);
      const want = solo(dir, reqs);
      expect(got[0]!.stats.stopReason).toBe("cancelled");
      // It stopped with decided tokens not used: accepted drafts its session never kept.
      const st = got[0]!.stats;
      expect(st.decodeSteps + st.speculation.acceptedTokens).toBeGreaterThan(st.decodedTokens);
      expect(got[0]!.ids.length).toBe(3);
      got.forEach((g, i) => {
        expect({ i, ids: g.ids }).toEqual({ i, ids: want[i]!.ids });
        expect({ i, session: g.session }).toEqual({ i, session: want[i]!.session });
      });
      expect(e.batchStats().holding).toBe(0);
    } finally {
      e.close();
    }
  });

  test("a generation abandoned while its verify ticket waits: the pass never runs, the session keeps its pending token and continues exactly", async () => {
    const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: 4, parallel: 2 });
    try {
      const s = e.createSession();
      const ids = await abandonAtSecondWait(e, s, PROMPTS[0]!, { drafter: oracle(0, 9), speculate: 4 });
      expect(ids.length).toBe(1);
      expect(s.pending).toEqual(ids);
      const rest: number[] = [];
      for (const t of e.generate(s, [], { maxTokens: GEN - 1, drafter: oracle(0, 9), speculate: 4 })) rest.push(t.id);
      expect([...ids, ...rest]).toEqual(plain[0]!);
      expect(e.batchStats().holding).toBe(0);
    } finally {
      e.close();
    }
  });

  // Generation.decodeRow's restore: without it the emitted token is lost from the session (the
  // saved session lacks it, the next turn runs as if it had never been said).
  test("a generation abandoned while its decode row waits (no drafts): the saved session holds its emitted token, and the next turn equals a full recompute (ids, logits, session bytes)", async () => {
    const next = [31, 32, 33];
    const e = Engine.open(dir, { threads: 2, chunk: 8, speculate: 4, parallel: 2 });
    try {
      const s = e.createSession();
      const ids = await abandonAtSecondWait(e, s, PROMPTS[0]!, { speculate: "off" });
      expect(ids.length).toBe(1);
      const saved = sessionHex(e, s);
      const rec = recording();
      const rest: number[] = [];
      for (const t of e.generate(s, next, { maxTokens: GEN, sampler: rec.sampler })) rest.push(t.id);
      // Plain runs: the prompt stopped after its first token; the whole conversation at once.
      const [stopped, whole] = solo(dir, [
        { prompt: PROMPTS[0]!, opts: {}, stopAt: 1 },
        { prompt: [...PROMPTS[0]!, ...ids, ...next], opts: {} },
      ]);
      expect(stopped!.ids).toEqual(ids);
      expect(rest).toEqual(whole!.ids);
      expect(rec.seen).toEqual(whole!.logits);
      expect(sessionHex(e, s)).toBe(whole!.session);
      expect(saved).toBe(stopped!.session);
    } finally {
      e.close();
    }
  });

  test("more generations than rollback slots (a library running three on --parallel 2): a session's drafts wait while the slots are held, never take one; every run exact", async () => {
    const reqs: Req[] = [0, 1, 2].map((i) => ({ prompt: PROMPTS[i]!, opts: { drafter: oracle(i, 9), speculate: 4 } }));
    const { got, batch } = await exactTogether(reqs, 2);
    expect(batch.verifySlots).toBe(2);
    expect(got.length).toBe(3);
  });

  test("--parallel 1: two generations at once both speculate; ids and session bytes equal plain runs", async () => {
    const reqs: Req[] = [0, 1].map((i) => ({ prompt: PROMPTS[i]!, opts: { drafter: oracle(i), speculate: 4 } }));
    const { got } = await exactTogether(reqs, 1);
    for (const g of got) expect(g.stats.speculation.acceptedTokens).toBeGreaterThan(0);
  });
});

describe("the draft model drafts inside batched steps", () => {
  // The demo and its trained draft (right about half the time, docs/DRAFT.md "The demo draft"):
  // sessions keep model drafts from steps that verified other sessions' segments too, so each
  // session's keep() must re-apply its own rollback slot's records (a random draft is never kept:
  // there every slot could be the same one and nothing would show it).
  const cache = scratchDir("batch-spec-demo");
  test("three sessions with the demo's trained draft at --parallel 3: model drafts verified in shared steps and kept; ids and session bytes are the plain runs'", async () => {
    const model = ensureDemoModel({ ...process.env, XDG_CACHE_HOME: cache });
    const draft = ensureDemoDraft({ ...process.env, XDG_CACHE_HOME: cache });
    const tok = Tokenizer.load(model);
    const texts = ["The history of the city is", "Once upon a time there was", "The river runs through the"];
    const reqs: Req[] = texts.map((t, i) => ({ prompt: tok.encode(t), opts: { speculate: 3 }, startAt: i }));
    // The recording sampler would also see the draft's logits (the model drafter picks its
    // drafts with the generation's sampler): ids and sessions are compared.
    const { got, batch } = await exactTogether(reqs, 3, { draft }, model);
    for (const g of got) expect(g.stats.drafters.model?.acceptedTokens ?? 0).toBeGreaterThan(0);
    expect(batch.sharedVerifySteps).toBeGreaterThan(0);
    // A step where one session's kept drafts sat beside another session's verify segment.
    expect(batch.recent.some((r) => r.verify.length >= 2 && r.verify.some((v) => (v.accepted ?? 0) > 0))).toBe(true);
  });
});
