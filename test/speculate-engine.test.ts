// Speculative decoding through the engine (docs/SPECULATION.md): greedy output and the session a
// generation leaves are bit-identical with speculation on and off — at every budget, thread count
// and prefetch setting, with rejections at every draft position, drafts crossing the context
// limit or a stop token, and a session saved mid-speculation. The session is compared through
// its saved file (position, history, pending token, KDA state, conv history, MLA rows): byte for
// byte. Drafts come from an oracle that knows the plain run's continuation and errs where told,
// so every case is reached deterministically (random test weights rarely repeat themselves).
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { createSampler, Engine, parseSpeculate, type Drafter, type EngineOptions, type GenerateOptions, type GenerationStats, type Session } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { NgramDrafter } from "../src/speculate/ngram.ts";
import { SpeculationCost } from "../src/speculate/cost.ts";
import { floorBytes, planInputFromCensus } from "../src/memory/plan.ts";
import { streamSlots } from "../src/memory/slots.ts";
import { loadKernels } from "../src/kernels.ts";
import { Model } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { SessionState } from "../src/model/state.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);

const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
const GEN = 14;

/** Proposes the reference continuation, wrong at draft offset `wrongAt` (never, if undefined). */
class Oracle implements Drafter {
  readonly name = "oracle";
  constructor(
    private ref: number[],
    private vocab: number,
    private wrongAt?: number,
  ) {}
  draft({ tokens, max }: { tokens: readonly number[]; max: number }) {
    const n = tokens.length;
    for (let i = 0; i < n; i++) if (tokens[i] !== this.ref[i]) throw new Error(`the sequence left the reference at ${i}`);
    return { tokens: this.ref.slice(n, n + max).map((t, j) => (j === this.wrongAt ? (t + 1) % this.vocab : t)) };
  }
}

interface Run {
  ids: number[];
  stats: GenerationStats;
  session: string; // hex of the saved session file
}

let fileNo = 0;
function sessionBytes(engine: Engine, s: Session): string {
  const path = join(scratchDir("spec-session"), `s${fileNo++}.k3session`);
  engine.saveSession(s, path);
  return readFileSync(path).toString("hex");
}

function generate(engine: Engine, s: Session, prompt: number[], opts: GenerateOptions): { ids: number[]; stats: GenerationStats } {
  const ids: number[] = [];
  const it = engine.generate(s, prompt, opts);
  let r = it.next();
  for (; !r.done; r = it.next()) ids.push(r.value.id);
  return { ids, stats: r.value };
}

function run(dir: string, open: EngineOptions, gen: Omit<GenerateOptions, "maxTokens"> & { maxTokens?: number }): Run {
  const engine = Engine.open(dir, open);
  try {
    const s = engine.createSession();
    const r = generate(engine, s, PROMPT, { maxTokens: GEN, ...gen });
    return { ...r, session: sessionBytes(engine, s) };
  } finally {
    engine.close();
  }
}

let dir = "";
let vocab = 0;
let plain: Run;
let ref: number[] = []; // prompt + plain continuation
beforeAll(async () => {
  dir = await tinyModel("tiny-a");
  vocab = openCheckpoint(dir).config.vocab;
  plain = run(dir, { resident: true, threads: 1, speculate: "off" }, {});
  // One more token of reference than generated, so drafts can run past the end.
  const longer = run(dir, { resident: true, threads: 1, speculate: "off" }, { maxTokens: GEN + 8 });
  ref = [...PROMPT, ...longer.ids];
  expect(longer.ids.slice(0, GEN)).toEqual(plain.ids);
});

describe("greedy: identical with speculation on and off", () => {
  test("rejections at every draft position (and none): same ids, same session bytes, counters as drafted", () => {
    for (const wrongAt of [0, 1, 2, 3, undefined]) {
      const r = run(dir, { resident: true, threads: 1, speculate: 4 }, { drafter: new Oracle(ref, vocab, wrongAt) });
      expect(r.ids).toEqual(plain.ids);
      expect(r.session).toBe(plain.session);
      const sp = r.stats.speculation;
      expect(sp.verifyPasses).toBeGreaterThan(0);
      // Each pass drafts up to 4 and keeps exactly the ones before the wrong offset.
      if (wrongAt !== undefined) expect(sp.acceptedTokens).toBe(wrongAt * sp.verifyPasses);
      else expect(sp.acceptedTokens).toBe(sp.draftedTokens);
      // One pass per token when the first draft is always wrong; fewer whenever drafts are kept.
      if (wrongAt === 0) expect(r.stats.decodeSteps).toBe(GEN - 1);
      else expect(r.stats.decodeSteps).toBeLessThan(GEN - 1);
    }
  });

  test("every budget (floor, half the trunk, everything) × 1/2 threads × prefetch on/off", () => {
    const ck = openCheckpoint(dir);
    const input = planInputFromCensus(ck.config, ck.layout.census, 0, 4096, 2, 32, streamSlots(ck));
    const floor = floorBytes(input, 32);
    const c = ck.layout.census;
    const budgets = [floor, floor + Math.floor(c.trunkBytes / 2) + 2 * c.expertBytes, floor + c.trunkBytes + c.headBytes + c.expertBytes * c.expertCount + 64 * 4096 * (c.expertCount + 20)];
    let streamedReads = 0;
    for (const ram of budgets)
      for (const threads of [1, 2])
        for (const prefetch of [true, false]) {
          const r = run(dir, { ram: String(ram), threads, prefetch, speculate: 4 }, { drafter: new Oracle(ref, vocab, 2) });
          expect(r.ids).toEqual(plain.ids);
          expect(r.session).toBe(plain.session);
          expect(r.stats.speculation.acceptedTokens).toBeGreaterThan(0);
          streamedReads += r.stats.io.trunkBytesRead;
        }
    expect(streamedReads).toBeGreaterThan(0); // the small budgets really streamed
  });

  test("the n-gram drafter (loose settings: it drafts often and is mostly wrong): same ids and session", () => {
    // Random test weights never repeat themselves, so the strict default rarely drafts here; a
    // loose drafter (any earlier occurrence of the last token) exercises the same engine path
    // with many rejections and the occasional hit.
    const loose = () => new NgramDrafter({ maxN: 1, minN: 1, minAgree: 1, maxOccurrences: 1, singleMatch: 1 });
    const prompt = [11, 12, 13, 14, 15, 11, 12, 13, 14, 15, 11, 12];
    const a = Engine.open(dir, { resident: true, threads: 1, speculate: "off" });
    const b = Engine.open(dir, { resident: true, threads: 1, speculate: 4 });
    try {
      const sa = a.createSession();
      const sb = b.createSession();
      const ra = generate(a, sa, prompt, { maxTokens: 40 });
      const rb = generate(b, sb, prompt, { maxTokens: 40, drafter: loose() });
      expect(rb.ids).toEqual(ra.ids);
      expect(sessionBytes(b, sb)).toBe(sessionBytes(a, sa));
      expect(rb.stats.speculation.draftedTokens).toBeGreaterThan(0);
    } finally {
      a.close();
      b.close();
    }
  });

  test("drafts crossing the context limit: same ids, stop reason and session", () => {
    const context = PROMPT.length + 7;
    const off = run(dir, { resident: true, threads: 1, speculate: "off", context }, { maxTokens: 30 });
    expect(off.stats.stopReason).toBe("context");
    for (const wrongAt of [1, undefined]) {
      const on = run(dir, { resident: true, threads: 1, speculate: 6, context }, { maxTokens: 30, drafter: new Oracle(ref, vocab, wrongAt) });
      expect(on.ids).toEqual(off.ids);
      expect(on.stats.stopReason).toBe("context");
      expect(on.session).toBe(off.session);
      expect(on.stats.speculation.draftedTokens).toBeGreaterThan(0);
    }
  });

  test("drafts crossing a stop token: same ids, stop reason and session", () => {
    // Stop at the 6th generated token (the first id that does not occur earlier in the output).
    const gen = ref.slice(PROMPT.length);
    const at = gen.findIndex((t, i) => i >= 5 && !gen.slice(0, i).includes(t));
    const stopIds = [gen[at]!];
    const off = run(dir, { resident: true, threads: 1, speculate: "off" }, { stopIds });
    expect(off.stats.stopReason).toBe("stop");
    expect(off.ids).toEqual(gen.slice(0, at));
    const on = run(dir, { resident: true, threads: 1, speculate: 6 }, { stopIds, drafter: new Oracle(ref, vocab) });
    expect(on.ids).toEqual(off.ids);
    expect(on.stats.stopReason).toBe("stop");
    expect(on.session).toBe(off.session);
  });

  test("a session saved mid-speculation is the plain session, loads and continues exactly", () => {
    // Drafts of 4, all right: the first pass decides tokens 2–6; stopping at 4 leaves drafts unused.
    for (const maxTokens of [4, 5]) {
      const off = run(dir, { resident: true, threads: 1, speculate: "off" }, { maxTokens });
      const engine = Engine.open(dir, { resident: true, threads: 1, speculate: 4 });
      try {
        const s = engine.createSession();
        const first = generate(engine, s, PROMPT, { maxTokens, drafter: new Oracle(ref, vocab) });
        expect(first.ids).toEqual(off.ids);
        expect(first.stats.speculation.acceptedTokens).toBeGreaterThan(0);
        const path = join(scratchDir("spec-mid"), "mid.k3session");
        engine.saveSession(s, path);
        expect(readFileSync(path).toString("hex")).toBe(off.session);
        const loaded = engine.loadSession(path);
        const rest = generate(engine, loaded, [], { maxTokens: GEN - maxTokens, drafter: new Oracle(ref, vocab, 1) });
        expect([...first.ids, ...rest.ids]).toEqual(plain.ids);
        expect(sessionBytes(engine, loaded)).toBe(plain.session);
      } finally {
        engine.close();
      }
    }
  });

  test("--trace records the same routing with speculation on and off (only kept positions)", () => {
    const traces = ["off", 4].map((speculate) => {
      const path = join(scratchDir("spec-trace"), "t.jsonl");
      const engine = Engine.open(dir, { resident: true, threads: 1, speculate: speculate as "off" | 4, trace: path });
      try {
        generate(engine, engine.createSession(), PROMPT, { maxTokens: GEN, drafter: new Oracle(ref, vocab, 2) });
      } finally {
        engine.close();
      }
      return readFileSync(path, "utf8");
    });
    expect(traces[1]).toBe(traces[0]);
    expect(traces[0]!.split("\n").length).toBeGreaterThan(GEN);
  });
});

describe("stats", () => {
  test("bytes read per generated token: a verify pass's bytes are shared by every token it decided", () => {
    // At the floor budget (the trunk streams), without prefetch (nothing read ahead of a step).
    const ck = openCheckpoint(dir);
    const ram = String(floorBytes(planInputFromCensus(ck.config, ck.layout.census, 0, 4096, 2, 32, streamSlots(ck)), 32));
    const go = (speculate: "off" | 4) => {
      const engine = Engine.open(dir, { ram, threads: 1, prefetch: false, speculate });
      try {
        const read = () => engine.stats().trunkBytesRead + engine.stats().expertBytesRead;
        const ids: number[] = [];
        let afterPrefill = 0; // the first token is out before any decode pass
        const it = engine.generate(engine.createSession(), PROMPT, { maxTokens: GEN, drafter: speculate === "off" ? undefined : new Oracle(ref, vocab) });
        let r = it.next();
        for (; !r.done; r = it.next()) {
          if (!ids.length) afterPrefill = read();
          ids.push(r.value.id);
        }
        return { ids, stats: r.value, decodeBytes: read() - afterPrefill };
      } finally {
        engine.close();
      }
    };
    const off = go("off");
    const on = go(4);
    expect(on.ids).toEqual(off.ids);
    for (const r of [off, on]) {
      expect(r.decodeBytes).toBeGreaterThan(0);
      expect(r.stats.decodedTokens).toBe(GEN - 1);
      expect(r.stats.ioPerToken.bytesRead * (GEN - 1)).toBeCloseTo(r.decodeBytes, 3);
    }
    expect(on.stats.decodeSteps).toBeLessThan(GEN - 1); // fewer passes …
    expect(on.stats.ioPerToken.bytesRead).toBeLessThan(off.stats.ioPerToken.bytesRead / 1.5); // … so fewer bytes per token
  });
});

describe("the verify pass itself (src/model/forward.ts)", () => {
  test("every row's logits and the state after keep() are plain decoding's, bit for bit (tiny-a, b, c)", async () => {
    const k = loadKernels();
    for (const preset of ["tiny-a", "tiny-b", "tiny-c"]) {
      const ck = openCheckpoint(await tinyModel(preset));
      const cfg = ck.config;
      const w = new ResidentWeights(k, cfg, ck.tensors);
      const model = new Model(k, cfg, w, 16, 256, 6);
      const hex = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("hex");
      const stateHex = (st: SessionState) =>
        st.buffers().map(({ name, buf }) => Buffer.from(buf.f32().buffer, 0, name.startsWith("mla") ? st.pos * (cfg.kvLoraRank + cfg.qkRope) * 4 : buf.bytes).toString("hex")).join("|");
      const argmax = (l: Float32Array) => k.k3_argmax(l, l.length);
      try {
        // Plain greedy: ids, the logits before each, the state after each.
        const A = new SessionState(k, cfg, 256);
        let logits = model.forward(A, PROMPT)!;
        const ids: number[] = [];
        const rows: string[] = [];
        const states: string[] = [];
        for (let i = 0; i < 12; i++) {
          rows.push(hex(logits));
          ids.push(argmax(logits));
          logits = model.forward(A, [ids[i]!])!;
          states.push(stateHex(A));
        }
        A.free();
        // Verify passes with the true continuation, wrong at offset e; keep what greedy accepts.
        for (const e of [0, 2, 5, 99]) {
          const B = new SessionState(k, cfg, 256);
          let n = 0; // tokens decided
          let id = argmax(model.forward(B, PROMPT)!);
          n = 1;
          while (n < 12) {
            const drafts = ids.slice(n, n + Math.min(6, 12 - n)).map((t, j) => (j === e ? (t + 1) % cfg.vocab : t));
            const out = model.verify(B, [id, ...drafts]);
            let i = 0;
            for (; ; i++) {
              if (n + i < rows.length) expect(hex(out[i]!)).toBe(rows[n + i]!); // (a last bonus row has no reference)
              if (i === drafts.length || argmax(out[i]!) !== drafts[i]) break;
              model.keep(B);
            }
            expect(stateHex(B)).toBe(states[n + i - 1]!);
            id = argmax(out[i]!);
            n += i + 1;
          }
          // Rejected drafts stay keepable only until the next pass.
          model.forward(B, [id]);
          expect(model.keepable(B)).toBe(0);
          expect(() => model.keep(B)).toThrow(K3Error);
          B.free();
        }
      } finally {
        model.free();
        w.close();
      }
    }
  });
});

describe("seeded sampling with speculation: the ids of plain sampling (the sampling contract)", () => {
  // A sampled run's own continuation, as drafts: right where told, so verify passes keep drafts.
  const sampler = createSampler({ temperature: 0.9, topK: 40, seed: 11 });
  let sampled: Run;
  let sref: number[] = [];
  beforeAll(() => {
    sampled = run(dir, { resident: true, threads: 1, speculate: "off" }, { sampler });
    const longer = run(dir, { resident: true, threads: 1, speculate: "off" }, { sampler, maxTokens: GEN + 8 });
    expect(longer.ids.slice(0, GEN)).toEqual(sampled.ids);
    sref = [...PROMPT, ...longer.ids];
    expect(sampled.ids).not.toEqual(plain.ids); // else sampling could not be told from greedy
  });

  test("drafts wrong at every offset (and never), 4 and auto, the loose n-gram drafter: same ids and session bytes", () => {
    const loose = new NgramDrafter({ maxN: 1, minN: 1, minAgree: 1, maxOccurrences: 1, singleMatch: 1 });
    let kept = 0;
    for (const speculate of [4, "auto"] as const)
      for (const drafter of [...[0, 1, 2, undefined].map((w) => new Oracle(sref, vocab, w)), loose]) {
        const r = run(dir, { resident: true, threads: 1, speculate }, { sampler, drafter });
        expect(r.ids).toEqual(sampled.ids);
        expect(r.session).toBe(sampled.session);
        kept += r.stats.speculation.acceptedTokens;
      }
    expect(kept).toBeGreaterThan(20); // verify passes really kept sampled drafts
  });

  test("every budget (floor, everything) × 1/2 threads: same ids", () => {
    const ck = openCheckpoint(dir);
    const floor = floorBytes(planInputFromCensus(ck.config, ck.layout.census, 0, 4096, 2, 32, streamSlots(ck)), 32);
    for (const ram of [String(floor), "1G"])
      for (const threads of [1, 2]) {
        const r = run(dir, { ram, threads, speculate: 4 }, { sampler, drafter: new Oracle(sref, vocab, 2) });
        expect(r.ids).toEqual(sampled.ids);
        expect(r.stats.speculation.acceptedTokens).toBeGreaterThan(0);
      }
  });

  test("the session's cost model decides only how far to draft: from any state it is in, the same ids", () => {
    const engine = Engine.open(dir, { resident: true, threads: 1, speculate: "auto" });
    try {
      const prior = { trunkBytes: 1e9, expertBytes: 1e9, activeBytes: 1e6, numExperts: 64, topK: 8 };
      const counts: number[] = [];
      // Never worth drafting; always worth it; and the state another conversation left behind.
      for (const cost of [new SpeculationCost(prior, { priorAcceptance: 0.01, margin: 10 }), new SpeculationCost(prior, { priorAcceptance: 0.99, margin: -0.9 }), undefined]) {
        const s = engine.createSession();
        if (cost) s.speculationCost = cost;
        else {
          // Another conversation's drafts (always wrong) shaped this cost model; it is kept.
          generate(engine, s, [9, 9, 9], { maxTokens: 6, drafter: { name: "wrong", draft: ({ max }) => ({ tokens: new Array(max).fill(1) }) } });
          const left = s.speculationCost;
          s.reset();
          s.speculationCost = left;
        }
        const r = generate(engine, s, PROMPT, { maxTokens: GEN, sampler, drafter: new Oracle(sref, vocab, 3) });
        expect(r.ids).toEqual(sampled.ids);
        counts.push(r.stats.speculation.draftedTokens);
        s.close();
      }
      expect(counts[0]).toBe(0); // the first never drafted, the second did: the ids could not tell
      expect(counts[1]).toBeGreaterThan(0);
    } finally {
      engine.close();
    }
  });

  test("a generation stopped and continued later (a saved session loaded) draws what one run would: draws follow positions", () => {
    const engine = Engine.open(dir, { resident: true, threads: 1, speculate: 4 });
    try {
      const a = engine.createSession();
      const first = generate(engine, a, PROMPT, { maxTokens: 6, sampler, drafter: new Oracle(sref, vocab, 2) });
      const path = join(scratchDir("spec-split"), "half.k3session");
      engine.saveSession(a, path);
      a.close();
      const b = engine.loadSession(path);
      const rest = generate(engine, b, [], { maxTokens: GEN - 6, sampler, drafter: new Oracle(sref, vocab, 1) });
      b.close();
      expect([...first.ids, ...rest.ids]).toEqual(sampled.ids);
    } finally {
      engine.close();
    }
  });

  test("the cost model stays with its conversation: kept across its turns, dropped by reset() and by another conversation's prefix", () => {
    const engine = Engine.open(dir, { resident: true, threads: 1, speculate: 4, prefixCache: { ramBytes: 1 << 26 } });
    try {
      const s = engine.createSession();
      generate(engine, s, PROMPT, { maxTokens: 4, drafter: new Oracle(ref, vocab, 1) });
      const cost = s.speculationCost;
      expect(cost).toBeDefined();
      expect(engine.reusePrefix(s, [...s.tokens, 5])).toBe(s.tokens.length); // its next turn
      expect(s.speculationCost).toBe(cost);
      const held = s.state.history.slice();
      expect(engine.reusePrefix(s, [99, 98, 97])).toBe(0); // another conversation: s starts over
      expect(s.speculationCost).toBeUndefined();
      // A session given another conversation's cached prefix (s's, stored as it started over).
      const t = engine.createSession();
      generate(engine, t, [3, 4, 5], { maxTokens: 3, drafter: { name: "ones", draft: ({ max }) => ({ tokens: new Array(max).fill(1) }) } });
      expect(t.speculationCost).toBeDefined();
      t.reset();
      expect(t.speculationCost).toBeUndefined();
      t.speculationCost = cost;
      expect(engine.reusePrefix(t, [...held, 5])).toBe(held.length);
      expect(t.speculationCost).toBeUndefined();
      s.close();
      t.close();
    } finally {
      engine.close();
    }
  });

  test("any pure sampler speculates (not only createSampler's), with the same ids as without", () => {
    const own = { sample: (l: Float32Array, pos: number) => sampler.sample(l, pos) };
    const r = run(dir, { resident: true, threads: 1, speculate: 4 }, { sampler: own, drafter: new Oracle(sref, vocab) });
    expect(r.ids).toEqual(sampled.ids);
    expect(r.stats.speculation.acceptedTokens).toBe(r.stats.speculation.draftedTokens);
    expect(r.stats.speculation.draftedTokens).toBeGreaterThan(0);
  });
});

describe("a drafter's answer is checked where it enters the engine", () => {
  test("an id outside the vocabulary, negative, not an integer, not a number, too many, no list: refused naming it; the next turn is a full recompute", () => {
    const engine = Engine.open(dir, { resident: true, threads: 1, speculate: 4 });
    try {
      const bad: [string, (max: number) => unknown, RegExp][] = [
        ["id = vocab", () => ({ tokens: [ref[PROMPT.length + 1]!, vocab] }), new RegExp(`token ${vocab} at offset 1 is not a token id of this model \\(0\\.\\.${vocab - 1}\\)`)],
        ["negative", () => ({ tokens: [-1] }), /token -1 at offset 0/],
        ["fraction", () => ({ tokens: [1.5] }), /token 1\.5 at offset 0/],
        ["NaN", () => ({ tokens: [NaN] }), /token NaN at offset 0/],
        ["string", () => ({ tokens: ["5"] }), /token "5" at offset 0/],
        ["too many", (max) => ({ tokens: new Array(max + 1).fill(3) }), /5 tokens, more than the 4 asked for/],
        ["no list", () => ({ ids: [3] }), /expected \{ tokens: number\[\] \}/],
        ["nothing", () => undefined, /expected \{ tokens: number\[\] \}/],
      ];
      for (const [what, answer, message] of bad) {
        const s = engine.createSession();
        const drafter = { name: "broken", draft: ({ max }: { max: number }) => answer(max) as { tokens: number[] } };
        const emitted: number[] = [];
        let err: unknown;
        try {
          for (const ev of engine.generate(s, PROMPT, { maxTokens: GEN, drafter })) emitted.push(ev.id);
        } catch (e) {
          err = e;
        }
        expect({ what, code: (err as K3Error)?.code }).toEqual({ what, code: "USAGE" });
        expect((err as Error).message).toMatch(/the drafter "broken" proposed an invalid draft/);
        expect((err as Error).message).toMatch(message);
        expect(emitted).toEqual(plain.ids.slice(0, emitted.length));
        // The session kept what it emitted: the next turn equals feeding everything afresh.
        const next = generate(engine, s, [7, 8], { maxTokens: 5, speculate: "off" });
        const fresh = engine.createSession();
        const full = generate(engine, fresh, [...PROMPT, ...emitted, 7, 8], { maxTokens: 5, speculate: "off" });
        expect({ what, ids: next.ids }).toEqual({ what, ids: full.ids });
        expect(sessionBytes(engine, s)).toBe(sessionBytes(engine, fresh));
        s.close();
        fresh.close();
      }
    } finally {
      engine.close();
    }
  });
});

describe("settings", () => {
  test("parseSpeculate: auto, off, N (0 = off); anything else is a usage error", () => {
    expect(parseSpeculate("auto")).toBe("auto");
    expect(parseSpeculate("off")).toBe("off");
    expect(parseSpeculate("0")).toBe("off");
    expect(parseSpeculate("6")).toBe(6);
    expect(parseSpeculate(3)).toBe(3);
    for (const bad of ["on", "-1", "1.5", "", 2.5, null, "1e3"]) expect(() => parseSpeculate(bad)).toThrow(K3Error);
  });

  test("more drafts than the chunk can verify, or than the engine has room for, are refused", () => {
    expect(() => Engine.open(dir, { resident: true, threads: 1, speculate: 8, chunk: 8 })).toThrow(/--chunk 9/);
    const engine = Engine.open(dir, { resident: true, threads: 1, speculate: 2 });
    try {
      expect(() => generate(engine, engine.createSession(), PROMPT, { maxTokens: 3, speculate: 3 })).toThrow(/room for 2 drafts/);
      // "auto" on an engine opened with "off" is simply off.
      const off = Engine.open(dir, { resident: true, threads: 1, speculate: "off" });
      try {
        const r = generate(off, off.createSession(), PROMPT, { maxTokens: 6, speculate: "auto", drafter: new Oracle(ref, vocab) });
        expect(r.stats.speculation.draftedTokens).toBe(0);
        expect(r.ids).toEqual(plain.ids.slice(0, 6));
      } finally {
        off.close();
      }
    } finally {
      engine.close();
    }
  });
});
