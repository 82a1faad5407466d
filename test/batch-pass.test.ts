// One forward pass over several sessions (Model.forwardBatch, the batch scheduler's pass): every
// session's logits and state are bit-identical to running it alone, whatever else shares the
// pass — prefill pieces of other sessions, decode rows, sessions joining and leaving — on every
// tiny preset and every ISA path this CPU has.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { ISA, loadKernels } from "../src/kernels.ts";
import { Model, type Segment } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { captureState } from "../src/model/snapshot.ts";
import { SessionState } from "../src/model/state.ts";
import { TINY_PRESETS, tinyModel } from "./helpers/models.ts";
import { rng } from "./helpers/rng.ts";

setDefaultTimeout(120_000);

const hex = (a: Float32Array | Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("hex");

interface Plan {
  /** The pieces this session feeds, in order (prompt pieces, then one decoded token each). */
  pieces: number[][];
}

const CHUNK = 4;
const PARALLEL = 4;
const CONTEXT = 64;

/** Prompts of different lengths (one shorter than a chunk, one of several chunks). */
const PROMPTS = [[5, 17, 300, 42, 7, 99, 3, 250, 11], [1, 2], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14], [400, 401, 402, 403, 404]];

function setup(dir: string) {
  const k = loadKernels();
  const ck = openCheckpoint(dir);
  const w = new ResidentWeights(k, ck.config, ck.tensors);
  const model = new Model(k, ck.config, w, CHUNK, CONTEXT, 0, PARALLEL);
  const state = () => new SessionState(k, ck.config, CONTEXT);
  return { k, model, w, state, close: () => (model.free(), w.close()) };
}

/**
 * Alone: each prompt in chunk pieces, then `gen` greedy tokens one at a time; the logits bits of
 * every piece and the final state bytes. The pieces (decoded tokens included) are what the batched
 * run then feeds.
 */
function alone(env: ReturnType<typeof setup>, prompt: number[], gen: number) {
  const s = env.state();
  const pieces: number[][] = [];
  const logits: string[] = [];
  let out: Float32Array | null = null;
  const feed = (piece: number[]) => {
    pieces.push(piece);
    out = env.model.forward(s, piece)!;
    logits.push(hex(out));
  };
  for (let i = 0; i < prompt.length; i += CHUNK) feed(prompt.slice(i, i + CHUNK));
  for (let g = 0; g < gen; g++) feed([env.k.k3_argmax(out!, out!.length)]);
  const state = hex(captureState(s).data);
  s.free();
  return { plan: { pieces } as Plan, logits, state };
}

/**
 * Batched: passes over random sets of sessions (each with its next piece, rows within the model's
 * pass), sessions joining at random passes; every piece asks for logits.
 */
function batched(env: ReturnType<typeof setup>, plans: Plan[], seed: number) {
  const r = rng(seed);
  const joinAt = plans.map((_, i) => (i === 0 ? 0 : Math.floor(r() * 6)));
  const states = plans.map(() => env.state());
  const next = plans.map(() => 0);
  const logits: string[][] = plans.map(() => []);
  const sizes: number[] = [];
  for (let pass = 0; next.some((n, i) => n < plans[i]!.pieces.length); pass++) {
    const ready = plans.map((_, i) => i).filter((i) => joinAt[i]! <= pass && next[i]! < plans[i]!.pieces.length);
    const segs: { i: number; seg: Segment }[] = [];
    let rows = 0;
    for (const i of ready) {
      if (r() < 0.25 && segs.length > 0) continue; // sometimes a session sits a pass out
      const ids = plans[i]!.pieces[next[i]!]!;
      if (rows + ids.length > env.model.rows || segs.length >= PARALLEL) continue;
      segs.push({ i, seg: { state: states[i]!, ids, logits: true } });
      rows += ids.length;
    }
    if (segs.length === 0) continue;
    sizes.push(segs.length);
    const out = env.model.forwardBatch(segs.map((s) => s.seg));
    segs.forEach(({ i }, j) => {
      logits[i]!.push(hex(out[j] as Float32Array));
      next[i]!++;
    });
  }
  const finals = states.map((s) => hex(captureState(s).data));
  for (const s of states) s.free();
  return { logits, finals, sizes };
}

describe.each(TINY_PRESETS.map((p) => [p]))("%s: batched passes equal solo runs, bit for bit", (preset) => {
  let dir = "";
  beforeAll(async () => {
    dir = await tinyModel(preset);
  });
  afterAll(() => loadKernels().k3_isa_set(ISA.auto));

  for (const isa of ["scalar", "avx2", "avx512"] as const)
    test.skipIf(loadKernels().k3_isa_supported(ISA[isa]) !== 1)(`ISA ${isa}: 4 sessions, staggered joins, 3 schedules`, () => {
      const k = loadKernels();
      k.k3_isa_set(ISA[isa]);
      const env = setup(dir);
      try {
        const solo = PROMPTS.map((p, i) => alone(env, p, 5 + i));
        for (const seed of [1, 2, 3]) {
          const b = batched(env, solo.map((s) => s.plan), seed);
          // The schedule really mixed sessions (else the test would prove nothing).
          expect(Math.max(...b.sizes)).toBeGreaterThanOrEqual(3);
          solo.forEach((s, i) => {
            expect(b.logits[i]).toEqual(s.logits);
            expect(b.finals[i]).toBe(s.state);
          });
        }
      } finally {
        env.close();
      }
    });
});

describe("forwardBatch refuses what would corrupt a session", () => {
  test("one session twice, too many rows or sessions, an id outside the vocabulary: refused before any state changes", async () => {
    const env = setup(await tinyModel("tiny-a"));
    try {
      const a = env.state();
      const b = env.state();
      expect(() => env.model.forwardBatch([{ state: a, ids: [1] }, { state: a, ids: [2] }])).toThrow(/twice/);
      expect(() => env.model.forwardBatch([{ state: a, ids: Array(env.model.rows + 1).fill(1) }])).toThrow(/rows/);
      expect(() => env.model.forwardBatch(Array.from({ length: PARALLEL + 1 }, () => ({ state: env.state(), ids: [1] })))).toThrow(/sessions/);
      expect(() => env.model.forwardBatch([{ state: a, ids: [1] }, { state: b, ids: [10 ** 9] }])).toThrow(/vocabulary/);
      expect([a.pos, b.pos, a.dirty, b.dirty]).toEqual([0, 0, false, false]);
      a.free();
      b.free();
    } finally {
      env.close();
    }
  });
});
