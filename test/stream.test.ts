// Streaming within a RAM budget (issue 4): same ids and bit-identical logits at every budget from
// the floor to everything resident, with prefetch and lookahead on and off, at 1 and 2 threads;
// and faults that must stop generation with an error naming the tensor.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";

// These tests open many engines; bun's 5 s default is too tight on a busy 2-core machine.
setDefaultTimeout(120_000);
import { copyFileSync, cpSync, openSync, readdirSync, readFileSync, statSync, truncateSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { Engine } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import type { PieceOptions } from "../src/memory/pieces.ts";
import { SPLIT_PIECES, streamingBudget } from "./helpers/budgets.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
const GEN = 10;

function run(dir: string, opts: Parameters<typeof Engine.open>[1]) {
  const engine = Engine.open(dir, opts);
  try {
    const s = engine.createSession();
    const ids: number[] = [];
    const it = engine.generate(s, PROMPT, { maxTokens: GEN });
    let r = it.next();
    for (; !r.done; r = it.next()) ids.push(r.value.id);
    const logits = Buffer.from(Float32Array.from(engine.prefill(engine.createSession(), PROMPT)).buffer).toString("hex");
    return { ids, logits, stats: r.value, plan: engine.plan };
  } finally {
    engine.close();
  }
}

/** Budgets from the floor (everything streamed, 2 slots per ring, top-k expert slots) to all resident. */
function budgets(dir: string, pieces?: PieceOptions): { name: string; bytes: number }[] {
  const floor = streamingBudget(dir, { pieces });
  const c = openCheckpoint(dir).layout.census;
  const everything = c.trunkBytes + c.headBytes + c.expertBytes * c.expertCount + 64 * 4096 * (c.expertCount + c.trunkBytesPerLayer.length + 2);
  return [
    { name: "floor", bytes: floor },
    { name: "half the trunk", bytes: floor + Math.floor(c.trunkBytes / 2) + 2 * c.expertBytes },
    { name: "everything", bytes: floor + everything },
  ];
}

let dir = "";
let broken = "";
let baseline: { ids: number[]; logits: string };
beforeAll(async () => {
  dir = await tinyModel("tiny-a");
  broken = await tinyModel("tiny-a", { breakLayout: true });
  baseline = run(dir, { resident: true, threads: 1 });
});

describe("bit-identical at every budget", () => {
  for (const [name, pieces] of [["one piece per unit's matrices", undefined], ["split pieces (matrices cut into row slices)", SPLIT_PIECES]] as const)
  test(`${name}: floor, half, everything × prefetch on/off × lookahead on/off × 1/2 threads`, () => {
    const plans = new Set<string>();
    const [floor, half, all] = budgets(dir, pieces);
    for (const b of [floor!, half!, all!])
      for (const prefetch of [true, false])
        for (const lookahead of [true, false])
          for (const threads of [1, 2]) {
            const r = run(dir, { ram: String(b.bytes), prefetch, lookahead, threads, trunkPieces: pieces });
            expect(r.ids).toEqual(baseline.ids);
            expect(r.logits).toBe(baseline.logits);
            const p = r.plan!;
            plans.add(`pinned ${p.pinnedPieces.length}, head ${p.head}, ring ${p.ringSlots}, expert slots ${p.expertSlots}`);
            const io = r.stats.io;
            const where = `${b.name}, prefetch ${prefetch}, lookahead ${lookahead}, ${threads} threads`;
            if (b === floor) {
              // Everything streams, and still through TWO slots per ring: the next piece is read
              // while one computes, and the lookahead finds the next layer's core (router) in memory.
              expect({ where, pinned: p.pinnedPieces.length, ring: p.ringSlots, cores: p.coreSlots, runAhead: p.readerMayRunAhead, lookahead: io.lookaheadIssued > 0 }).toEqual({
                where, pinned: 0, ring: 2, cores: 2, runAhead: true, lookahead: lookahead && prefetch,
              });
              expect(io.trunkBytesRead).toBeGreaterThan(0); // the trunk streams every token
              if (pieces) expect(p.pieces.length).toBeGreaterThan(4 * (p.streamedLayers.length + 1)); // really split
            } else if (b === half) {
              // Two ring slots and some layers streamed: prefetch runs ahead, the lookahead reads.
              expect({ where, ring: p.ringSlots, runAhead: p.readerMayRunAhead, streamed: p.streamedLayers.length > 0 }).toEqual({ where, ring: 2, runAhead: true, streamed: true });
              expect({ where, lookaheadReads: io.lookaheadIssued > 0 }).toEqual({ where, lookaheadReads: lookahead });
            } else {
              expect({ where, streamed: p.streamedLayers.length, head: p.head, ring: p.ringSlots }).toEqual({ where, streamed: 0, head: "resident", ring: 0 });
            }
          }
    // The three budgets really differ in what they keep resident.
    expect(plans.size).toBe(3);
  });

  test("a checkpoint whose layout breaks adjacency streams through several reads, same bits", () => {
    const ck = openCheckpoint(broken);
    expect(ck.layout.contiguousLayers).toBeLessThan(ck.config.numLayers);
    for (const b of budgets(broken)) {
      const r = run(broken, { ram: String(b.bytes), threads: 1 });
      expect(r.ids).toEqual(baseline.ids);
      expect(r.logits).toBe(baseline.logits);
    }
  });

  test("counters: at the floor every token reads its trunk; a hit is only a request served without a read", () => {
    const floor = budgets(dir)[0]!.bytes;
    const r = run(dir, { ram: String(floor), threads: 1, lookahead: false });
    const io = r.stats.io;
    expect(io.expertRequests).toBeGreaterThan(0);
    expect(io.expertHits).toBeLessThanOrEqual(io.expertRequests);
    // misses = requests − hits, and each miss read exactly one expert's bytes
    const ck = openCheckpoint(dir);
    expect(io.expertBytesRead).toBe((io.expertRequests - io.expertHits) * ck.layout.census.expertBytes);
    expect(io.lookaheadIssued).toBe(0);
  });
});

describe("chunked prefill", () => {
  test("the trunk is read once per chunk and each distinct expert once per chunk", () => {
    const ck = openCheckpoint(dir);
    const N = ck.config.numLayers;
    const streamedTrunk = (e: Engine) => e.plan!.pieces.filter((p) => !p.pinned && p.unit < N).reduce((a, p) => a + p.bytes, 0);
    const prefill = (chunk: number, prefetch = false) => {
      // the floor for this chunk size: nothing pinned, two slots per ring, top-k expert slots
      const floor = String(streamingBudget(dir, { chunk }));
      const e = Engine.open(dir, { ram: floor, threads: 2, chunk, lookahead: false, prefetch });
      try {
        const before = e.stats();
        e.prefill(e.createSession(), PROMPT);
        const after = e.stats();
        return { trunk: after.trunkBytesRead - before.trunkBytesRead, experts: after.expertBytesRead - before.expertBytesRead, perLayer: streamedTrunk(e), ring: e.plan!.ringSlots, head: e.plan!.head };
      } finally {
        e.close();
      }
    };
    const one = prefill(PROMPT.length); // one chunk
    const each = prefill(1); // a chunk per token
    expect(one.perLayer).toBeGreaterThan(0);
    expect(each.perLayer).toBe(one.perLayer);
    // Both read the embedding rows and (once, after the last chunk) the head; the streamed
    // layers are read once per chunk: 1 time vs 8 times.
    expect(each.trunk - one.trunk).toBe((PROMPT.length - 1) * one.perLayer);
    // With prefetch, a non-final chunk must not prefetch the head it will not use.
    const oneP = prefill(PROMPT.length, true);
    const eachP = prefill(1, true);
    expect([oneP.ring, eachP.ring, oneP.head]).toEqual([2, 2, "streamed"]);
    expect(eachP.perLayer).toBe(oneP.perLayer);
    expect(eachP.trunk - oneP.trunk).toBe((PROMPT.length - 1) * oneP.perLayer);
    // one chunk reads each distinct expert once: never more than one token-at-a-time prefill
    expect(one.experts).toBeLessThan(each.experts);
    expect(one.experts % ck.layout.census.expertBytes).toBe(0);
  });
});

describe("faults stop generation with an error naming what failed", () => {
  test("a shard truncated after the model was opened: short read names the tensor's file", async () => {
    const d = scratchDir("trunc");
    cpSync(dir, d, { recursive: true });
    const engine = Engine.open(d, { ram: String(budgets(d)[0]!.bytes), threads: 1 });
    try {
      const shard = readdirSync(d).filter((f) => f.startsWith("model-0000") && f.endsWith(".safetensors")).sort()[3]!;
      truncateSync(join(d, shard), Math.floor(statSync(join(d, shard)).size / 2));
      const s = engine.createSession();
      const got: number[] = [];
      expect(() => {
        for (const t of engine.generate(s, PROMPT, { maxTokens: 4 })) got.push(t.id);
      }).toThrow(new RegExp(`short read .*${shard.replace(/\./g, "\\.")}`));
      expect(got).toEqual([]); // no token came out first
    } finally {
      engine.close();
    }
    // Reopening sees the size mismatch before any read.
    expect(() => Engine.open(d, { ram: String(budgets(dir)[0]!.bytes), threads: 1 })).toThrow(/truncated|size|ends|header/i);
  });

  test("an injected read failure (EIO) is an error naming the expert or layer, never data", () => {
    const engine = Engine.open(dir, { ram: String(budgets(dir)[0]!.bytes), threads: 1 });
    const k = loadKernels();
    try {
      k.k3_io_fail_nth(3);
      const s = engine.createSession();
      expect(() => {
        for (const _ of engine.generate(s, PROMPT, { maxTokens: 4 }));
      }).toThrow(/read of (expert \d+ of layer \d+|(layer \d+|the head)'s (core|matrix piece) .*) failed: .* \(errno 5\)/);
    } finally {
      k.k3_io_fail_nth(0);
      engine.close();
    }
  });
});

describe("two engines in one process", () => {
  test("both stream correctly while open at the same time (each with its own device queues)", () => {
    // Two ring slots, so engine A has a prefetch read in flight when engine B opens.
    const ram = String(streamingBudget(dir, { ringSlots: 2 }));
    const a = Engine.open(dir, { ram, threads: 2 });
    expect(a.plan!.ringSlots).toBe(2);
    const ga = a.generate(a.createSession(), PROMPT, { maxTokens: GEN });
    const first = ga.next();
    if (first.done) throw new Error("generation ended before its first token");
    const ia: number[] = [first.value.id];
    const b = Engine.open(dir, { ram, threads: 2 });
    try {
      const gb = b.generate(b.createSession(), PROMPT, { maxTokens: GEN });
      const ib: number[] = [];
      for (;;) {
        const ra = ga.next();
        const rb = gb.next();
        if (!ra.done) ia.push(ra.value.id);
        if (!rb.done) ib.push(rb.value.id);
        if (ra.done && rb.done) break;
      }
      expect(ia).toEqual(baseline.ids);
      expect(ib).toEqual(baseline.ids);
    } finally {
      a.close();
      b.close();
    }
  });
});
