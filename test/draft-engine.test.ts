// The draft model inside the engine (--draft): the draft's cache follows what the target committed
// across prefill chunks, verify passes and rejections at every draft position, so its chain after
// any history equals the float64 reference's full recompute (within the tolerance of
// test/draft-model.test.ts) and is the same bits at any chunk size and thread count; and the
// output never depends on it: greedy ids and the session a generation leaves (its saved file, byte
// for byte) are those of plain decoding at every budget, thread count and trunk mode, seeded
// sampling too, and a session saved mid-speculation continues as plain decoding would.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { openDraftCheckpoint } from "../src/checkpoint/draft.ts";
import { createSampler, Engine, packTrunk, type EngineOptions, type GenerateOptions, type GenerationStats, type Session } from "../src/engine.ts";
import { ensureDemoDraft, ensureDemoModel } from "../src/cli/demo.ts";
import { checkDraft } from "../src/engine/draft.ts";
import { loadKernels } from "../src/kernels.ts";
import { releasedDraftSources } from "../src/memory/draft-plan.ts";
import { floorBytes, planInputFromCensus } from "../src/memory/plan.ts";
import { streamSlots } from "../src/memory/slots.ts";
import { DraftModel } from "../src/model/draft.ts";
import { DraftWeights } from "../src/model/draft-weights.ts";
import { Model } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { SessionState } from "../src/model/state.ts";
import { Tokenizer } from "../src/text/tokenizer.ts";
import { draftChain, ReferenceDraft } from "../tools/reference/draft.ts";
import { ReferenceModel } from "../tools/reference/model.ts";
import { bitsHash } from "./kernels.helpers.ts";
import { scratchDir, tinyDraft, tinyModel } from "./helpers/models.ts";
import { draftTolerance } from "./helpers/tolerance.ts";

setDefaultTimeout(240_000);

const k = loadKernels();
const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
const GEN = 16;
const K = 4;

let targetDir = "";
let draftDir = "";
beforeAll(async () => {
  targetDir = await tinyModel("tiny-a");
  draftDir = await tinyDraft("tiny-a", { variant: "eagle3.1", rope: "yarn" });
});

describe("the draft's cache follows the target: its chain equals the reference's after any history", () => {
  /** The target with capture and the draft on it, at the model level (the engine's order of calls). */
  function models(chunk: number, parallel = 1) {
    const ck = openCheckpoint(targetDir);
    const cfg = ck.config;
    const weights = new ResidentWeights(k, cfg, ck.tensors);
    const dck = openDraftCheckpoint(draftDir, cfg);
    const draft = new DraftModel(k, cfg, dck, new DraftWeights(k, releasedDraftSources(dck)), (id, dst) => weights.embedRow(id, dst), 512, K);
    const model = new Model(k, cfg, weights, chunk, 512, K, parallel, dck.config.captureLayers);
    model.tapSink = draft;
    const state = new SessionState(k, cfg, 512);
    state.draft = draft.newState();
    return { cfg, model, draft, state, close: () => (state.free(), model.free(), draft.free(), weights.close()) };
  }

  /**
   * Prefill `prompt` in chunks, then `passes` verify passes whose drafts are the target's own
   * greedy continuation wrong at offset `wrongAt` (kept as far as right, as the engine keeps them),
   * then the draft's chain of K after it: returns the committed tokens, the pending token, the
   * chain's logits.
   */
  function run(chunk: number, prompt: number[], passes: number, wrongAt: number | undefined, threads = 1) {
    k.k3_pool_init(threads);
    const m = models(chunk);
    try {
      let logits = m.model.forward(m.state, prompt)!;
      let pending = k.k3_argmax(logits, logits.length);
      for (let p = 0; p < passes; p++) {
        // The drafts: what greedy decoding continues with (one plain look-ahead per draft), one wrong.
        const drafts = oracleDrafts(m, pending, wrongAt);
        const rows = m.model.verify(m.state, [pending, ...drafts]);
        let a = 0;
        while (a < drafts.length && k.k3_argmax(rows[a]!, rows[a]!.length) === drafts[a]) a++;
        const next = k.k3_argmax(rows[a]!, rows[a]!.length);
        for (let i = 0; i < a; i++) m.model.keep(m.state);
        pending = next;
      }
      const chain = m.draft.propose(m.state, pending, K, { logits: true });
      return { committed: m.state.history.slice(), pending, chain };
    } finally {
      m.close();
      k.k3_pool_init(1);
    }
  }

  /** The greedy continuation after `pending`, from a throwaway session (full recompute of the history). */
  function oracleDrafts(m: ReturnType<typeof models>, pending: number, wrongAt: number | undefined): number[] {
    const s = new SessionState(k, m.cfg, 512);
    try {
      const out: number[] = [];
      let l = m.model.forward(s, [...m.state.history, pending])!;
      for (let i = 0; i < K; i++) {
        const t = k.k3_argmax(l, l.length);
        out.push(i === wrongAt ? (t + 1) % m.cfg.vocab : t);
        l = m.model.forward(s, [t])!;
      }
      return out;
    } finally {
      s.free();
    }
  }

  const target = () => ReferenceModel.open(targetDir);
  function expectChainMatches(r: ReturnType<typeof run>) {
    const ref = draftChain(target(), ReferenceDraft.open(draftDir), r.committed, K);
    expect(ref.next).toBe(r.pending);
    const cfg = openCheckpoint(targetDir).config;
    const tol = draftTolerance(cfg, openDraftCheckpoint(draftDir, cfg).config, K);
    for (let i = 0; i < r.chain.tokens.length; i++) {
      const want = ref.steps[i]!.logits;
      const scale = Math.max(1, ...Array.from(want, Math.abs));
      const err = Math.max(...Array.from(want, (v, j) => Math.abs(v - r.chain.logits[i]![j]!)));
      expect({ step: i, within: err <= tol * scale }).toEqual({ step: i, within: true });
      if (r.chain.tokens[i] !== ref.drafts[i]) break; // the chains part: compare no further
    }
  }

  test("after verify passes that reject at every draft position (and none)", () => {
    for (const wrongAt of [0, 1, 2, 3, undefined]) {
      const r = run(64, PROMPT, 4, wrongAt);
      expect(r.chain.tokens.length).toBe(K);
      expectChainMatches(r);
    }
  });

  test("a prompt longer than the taps ring, fed in chunks of 8 (rows committed as they would leave it)", () => {
    const prompt = Array.from({ length: 150 }, (_, i) => (i * 37 + 11) % 1000);
    const r = run(8, prompt, 3, 2);
    expectChainMatches(r);
  });

  test("batched passes (several sessions' segments in one pass) capture each session's rows: its chain is the one it has alone", () => {
    const m = models(64, 2);
    const other = new SessionState(k, m.cfg, 512);
    other.draft = m.draft.newState();
    try {
      const a = [5, 17, 300, 42, 7, 99];
      const b = [250, 3, 11, 600, 12, 64, 9, 1];
      m.model.forwardBatch([{ state: m.state, ids: a, logits: true }, { state: other, ids: b, logits: true }]);
      const batched = [m.draft.propose(m.state, 77, K, { logits: true }), m.draft.propose(other, 78, K, { logits: true })];
      const alone = [a, b].map((ids, i) => {
        const s = new SessionState(k, m.cfg, 512);
        s.draft = m.draft.newState();
        m.model.forward(s, ids, { logits: false });
        const r = m.draft.propose(s, 77 + i, K, { logits: true });
        s.free();
        return r;
      });
      for (let i = 0; i < 2; i++) expect(batched[i]!.logits.map((l) => bitsHash(l))).toEqual(alone[i]!.logits.map((l) => bitsHash(l)));
    } finally {
      other.free();
      m.close();
    }
  });

  test("the same bits at any chunk size and thread count", () => {
    const hashes = new Set<string>();
    for (const [chunk, threads] of [[5, 1], [8, 2], [64, 1], [64, 3]] as const) {
      const r = run(chunk, PROMPT, 3, 1, threads);
      hashes.add(r.chain.logits.map((l) => bitsHash(l)).join(","));
    }
    expect(hashes.size).toBe(1);
  });
});

// ---- the engine: output never depends on the draft ----

interface Run {
  ids: number[];
  stats: GenerationStats;
  session: string;
}

let fileNo = 0;
function sessionBytes(e: Engine, s: Session): string {
  const path = join(scratchDir("draft-session"), `s${fileNo++}.k3session`);
  e.saveSession(s, path);
  return readFileSync(path).toString("hex");
}

function generate(e: Engine, s: Session, prompt: number[], opts: GenerateOptions, stopAfter = Infinity) {
  const ids: number[] = [];
  const it = e.generate(s, prompt, opts);
  let r = it.next();
  for (; !r.done; r = it.next()) {
    ids.push(r.value.id);
    if (ids.length >= stopAfter) {
      it.return(undefined as never);
      return { ids, stats: undefined };
    }
  }
  return { ids, stats: r.value };
}

function runEngine(open: EngineOptions, gen: Partial<GenerateOptions> = {}, on = { dir: targetDir, prompt: PROMPT, gen: GEN }): Run {
  const e = Engine.open(on.dir, { context: 256, threads: 1, ...open });
  try {
    const s = e.createSession();
    const r = generate(e, s, on.prompt, { maxTokens: on.gen, ...gen });
    return { ids: r.ids, stats: r.stats!, session: sessionBytes(e, s) };
  } finally {
    e.close();
  }
}

/** The floor with the draft held (the plan counts it; verify passes of up to `drafts`), and budgets above it. */
function budgets(drafts = K, target = targetDir, draftFolder = draftDir): number[] {
  const ck = openCheckpoint(target);
  const draft = checkDraft(k, ck, draftFolder, 256, drafts).plan;
  const input = planInputFromCensus(ck.config, ck.layout.census, 0, 256, 1, 32, streamSlots(ck), drafts, { draft });
  const floor = floorBytes(input, 32);
  const c = ck.layout.census;
  return [floor, floor + Math.floor(c.trunkBytes / 2) + 4 * c.expertBytes, 2 ** 30];
}

describe("greedy output never depends on the draft", () => {
  let plain: Run;
  beforeAll(() => {
    plain = runEngine({ speculate: "off", chunk: 32 });
  });

  test("every budget (floor, half the trunk, everything) × 1/2 threads × prefetch on/off: same ids and session bytes; the draft drafted", () => {
    for (const ram of budgets())
      for (const threads of [1, 2])
        for (const prefetch of [true, false]) {
          const r = runEngine({ ram: String(ram), threads, prefetch, chunk: 32, speculate: K, draft: draftDir });
          expect({ ram, threads, prefetch, ids: r.ids }).toEqual({ ram, threads, prefetch, ids: plain.ids });
          expect(r.session).toBe(plain.session);
          expect(r.stats.speculation.verifyPasses).toBeGreaterThan(0);
        }
  });

  test("auto: the cost model may draft or not; same ids either way, and --draft none is the plain engine", () => {
    for (const ram of budgets(8)) { // auto: up to 8 drafts per pass at chunk 32
      const r = runEngine({ ram: String(ram), chunk: 32, draft: draftDir });
      expect(r.ids).toEqual(plain.ids);
      expect(r.session).toBe(plain.session);
    }
    const none = runEngine({ chunk: 32, draft: "none" });
    expect(none.session).toBe(plain.session);
  });

  test("trunk modes int8 and int4: with the draft = without it (each mode its own ids)", () => {
    for (const trunk of ["int8", "int4"] as const) {
      packTrunk(targetDir, trunk);
      const off = runEngine({ ram: "1G", trunk, chunk: 32, speculate: "off" });
      const on = runEngine({ ram: "1G", trunk, chunk: 32, speculate: K, draft: draftDir });
      expect({ trunk, ids: on.ids }).toEqual({ trunk, ids: off.ids });
      expect(on.session).toBe(off.session);
    }
  });

  test("seeded sampling (T 0.8): the same ids with the draft drafting every pass as without it", () => {
    for (const seed of [1, 7, 12345]) {
      const sampler = () => createSampler({ temperature: 0.8, seed });
      const off = runEngine({ chunk: 32, speculate: "off" }, { sampler: sampler() });
      const on = runEngine({ chunk: 32, speculate: K, draft: draftDir }, { sampler: sampler() });
      expect({ seed, ids: on.ids }).toEqual({ seed, ids: off.ids });
      expect(on.session).toBe(off.session);
    }
  });

  test("the opt-in rejection rule: reproducible for a seed, the model drafter draws from q; exact match stays the default", () => {
    const gen = (rule: "exact" | "rejection" | undefined) =>
      runEngine({ chunk: 32, speculate: K, draft: draftDir }, { sampler: createSampler({ temperature: 0.8, seed: 4 }), ...(rule ? { acceptRule: rule } : {}) });
    const a = gen("rejection");
    const b = gen("rejection");
    expect(a.ids).toEqual(b.ids);
    expect(a.stats.drafters.model!.draftedTokens).toBeGreaterThan(0);
    expect(gen(undefined).ids).toEqual(gen("exact").ids);
    expect(() => runEngine({ chunk: 32 }, { acceptRule: "sometimes" as never })).toThrow(/acceptRule must be "exact" or "rejection"/);
  });

  test("a session saved mid-speculation and loaded continues as plain decoding; it drafts again after its first pass", () => {
    const e = Engine.open(targetDir, { context: 256, threads: 1, chunk: 32, speculate: K, draft: draftDir });
    const path = join(scratchDir("draft-mid"), "mid.k3session");
    try {
      const s = e.createSession();
      // Stop inside a verify step's decided tokens (after 7 of them): the session holds what was emitted.
      const first = generate(e, s, PROMPT, { maxTokens: GEN }, 7);
      e.saveSession(s, path);
      const loaded = e.loadSession(path);
      const rest = generate(e, loaded, [], { maxTokens: GEN - 7 });
      expect([...first.ids, ...rest.ids]).toEqual(plain.ids);
      expect(rest.stats!.speculation.draftedTokens).toBeGreaterThan(0);
    } finally {
      e.close();
    }
  });
});

// ---- drafts that are kept: the demo and its trained draft ----
// The random test draft above is (almost) never right, so the engine tests above see rejections
// only. The demo's trained draft is right about half the time (docs/DRAFT.md "The demo draft"):
// here the model drafter's kept drafts go through the verify handle's accepted prefix and the
// rollback's keep(), and the output must still be plain decoding's, bit for bit.
describe("with drafts that are kept (the demo and its trained draft): output never depends on them", () => {
  const env = { ...process.env, XDG_CACHE_HOME: mkdtempSync(join(tmpdir(), "k3-draft-demo-")) };
  const DEMO_GEN = 32;
  let demo = { dir: "", prompt: [] as number[], gen: DEMO_GEN };
  let demoDraft = "";
  let plainDemo: Run;
  beforeAll(() => {
    demo = { ...demo, dir: ensureDemoModel(env) };
    demoDraft = ensureDemoDraft(env);
    demo.prompt = Tokenizer.load(demo.dir).encode("The history of the city is");
    plainDemo = runEngine({ chunk: 32, speculate: "off" }, {}, demo);
  });
  const kept = (r: Run) => r.stats.drafters.model?.acceptedTokens ?? 0;

  test("greedy at the floor, half the trunk and everything × 1/2 threads: same ids and session bytes, model drafts kept", () => {
    for (const ram of budgets(K, demo.dir, demoDraft))
      for (const threads of [1, 2]) {
        const r = runEngine({ ram: String(ram), threads, chunk: 32, speculate: K, draft: demoDraft }, {}, demo);
        expect({ ram, threads, ids: r.ids }).toEqual({ ram, threads, ids: plainDemo.ids });
        expect(r.session).toBe(plainDemo.session);
        expect({ ram, threads, kept: kept(r) > 0 }).toEqual({ ram, threads, kept: true });
      }
  });

  test("auto at the floor: the cost model drafts with the model and keeps drafts; same ids and session", () => {
    const [floor] = budgets(8, demo.dir, demoDraft);
    const r = runEngine({ ram: String(floor), chunk: 32, draft: demoDraft }, {}, demo);
    expect(r.ids).toEqual(plainDemo.ids);
    expect(r.session).toBe(plainDemo.session);
    expect(kept(r)).toBeGreaterThan(0);
  });

  test("trunk modes int8 and int4: with the draft = without it, model drafts kept", () => {
    for (const trunk of ["int8", "int4"] as const) {
      packTrunk(demo.dir, trunk);
      const off = runEngine({ trunk, chunk: 32, speculate: "off" }, {}, demo);
      const on = runEngine({ trunk, chunk: 32, speculate: K, draft: demoDraft }, {}, demo);
      expect({ trunk, ids: on.ids }).toEqual({ trunk, ids: off.ids });
      expect(on.session).toBe(off.session);
      expect({ trunk, kept: kept(on) > 0 }).toEqual({ trunk, kept: true });
    }
  });

  test("seeded sampling (T 0.8) at the floor and resident: the same ids and session as without the draft, model drafts kept", () => {
    const [floor] = budgets(K, demo.dir, demoDraft);
    for (const seed of [1, 7, 12345])
      for (const ram of [floor, 2 ** 30]) {
        const sampler = () => createSampler({ temperature: 0.8, seed });
        const off = runEngine({ chunk: 32, speculate: "off" }, { sampler: sampler() }, demo);
        const on = runEngine({ ram: String(ram), chunk: 32, speculate: K, draft: demoDraft }, { sampler: sampler() }, demo);
        expect({ seed, ram, ids: on.ids }).toEqual({ seed, ram, ids: off.ids });
        expect(on.session).toBe(off.session);
        expect({ seed, ram, kept: kept(on) > 0 }).toEqual({ seed, ram, kept: true });
      }
  });

  test("stopped after every token (inside verify steps whose drafts were kept): the session is plain decoding's, byte for byte, and continues as it", () => {
    const plain = Engine.open(demo.dir, { context: 256, threads: 1, chunk: 32, speculate: "off" });
    const spec = Engine.open(demo.dir, { context: 256, threads: 1, chunk: 32, speculate: K, draft: demoDraft });
    const path = join(scratchDir("draft-demo-mid"), "mid.k3session");
    try {
      for (let stop = 1; stop < DEMO_GEN; stop++) {
        const a = plain.createSession();
        generate(plain, a, demo.prompt, { maxTokens: DEMO_GEN }, stop);
        const s = spec.createSession();
        const first = generate(spec, s, demo.prompt, { maxTokens: DEMO_GEN }, stop);
        expect({ stop, session: sessionBytes(spec, s) === sessionBytes(plain, a) }).toEqual({ stop, session: true });
        spec.saveSession(s, path);
        const rest = generate(spec, spec.loadSession(path), [], { maxTokens: DEMO_GEN - stop });
        expect({ stop, ids: [...first.ids, ...rest.ids] }).toEqual({ stop, ids: plainDemo.ids });
      }
      // Some of those stops fell inside a step that had kept drafts: the whole run kept some.
      expect(kept(runEngine({ chunk: 32, speculate: K, draft: demoDraft }, {}, demo))).toBeGreaterThan(0);
    } finally {
      plain.close();
      spec.close();
    }
  });
});
