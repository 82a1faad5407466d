// Expert-cache policies and the trace simulator on hand-built traces with known answers.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { K3Error } from "../src/errors.ts";
import { ALL_POLICIES, makePolicy } from "../src/memory/policy/index.ts";
import { parseSlotList, simulateCache } from "../src/memory/simulate.ts";
import { formatTraceLine, parseTrace, type Trace } from "../src/memory/trace.ts";

/** tokens[t][layer] = expert ids, through the real text format. */
const traceOf = (tokens: number[][][]): Trace => parseTrace(tokens.map((l, t) => formatTraceLine(t, l)).join(""));
const hits = (tr: Trace, slots: number, p: string) => simulateCache(tr, slots, p).hits;

describe("trace", () => {
  test("flattens token → layer → listed order into keys layer·experts + id", () => {
    const tr = traceOf([
      [[3, 1], [0, 2]],
      [[1, 0], [3, 2]],
    ]);
    expect([tr.tokens, tr.layers, tr.k, tr.experts]).toEqual([2, 2, 2, 4]);
    expect(Array.from(tr.requests)).toEqual([3, 1, 4, 6, 1, 0, 7, 6]);
  });
  test("malformed lines are all reported with line numbers", () => {
    const text = ['{"tok":0,"layers":[[1,2]]}', "nope", '{"tok":2,"layers":[[1,1]]}', '{"tok":3,"layers":[[1,2,3]]}'].join("\n");
    try {
      parseTrace(text, "t.jsonl");
      throw new Error("accepted");
    } catch (e) {
      expect(e).toBeInstanceOf(K3Error);
      const msg = (e as K3Error).message;
      expect(msg).toContain("line 2: not JSON");
      expect(msg).toContain("line 3: layer 0 must list distinct");
      expect(msg).toContain("token 1: a layer does not list k=2");
    }
  });
});

describe("simulator", () => {
  test("a cyclic walk one key larger than the cache: LRU and FIFO hit 0, Belady hits exactly", () => {
    // 5 keys cycled 20 times through 4 slots (k = 1).
    const tr = traceOf(Array.from({ length: 100 }, (_, t) => [[t % 5]]));
    expect(hits(tr, 4, "lru")).toBe(0);
    expect(hits(tr, 4, "fifo")).toBe(0);
    // MIN on a cycle of n+1 keys in n slots misses once per n requests after the n cold misses:
    // 96 warm requests → 24 misses, so 100 − 4 − 24 = 72 hits.
    expect(hits(tr, 4, "belady")).toBe(72);
    for (const p of ALL_POLICIES) expect(hits(tr, 5, p)).toBe(95); // fits: only the cold misses
  });

  test("exact counts on a small two-expert trace", () => {
    // Requests 0 1 2 3 0 1 2 3 (k = 2) through 3 slots; worked by hand in docs/CACHE.md.
    const tr = traceOf([[[0, 1]], [[2, 3]], [[0, 1]], [[2, 3]]]);
    expect(hits(tr, 3, "lru")).toBe(0);
    expect(hits(tr, 3, "belady")).toBe(2);
    expect(hits(tr, 2, "belady")).toBe(0);
  });

  test("a layer's k experts are in use together: none evicts another of its layer", () => {
    // Token 1 hits key 1, then needs key 2. Belady would drop key 1 (never used again) but it is
    // in use, so key 0 goes, and token 2's key 0 misses: 1 hit. Without the rule: 2 hits.
    const tr = traceOf([[[0, 1]], [[1, 2]], [[0, 3]]]);
    expect(hits(tr, 2, "belady")).toBe(1);
  });

  test("a frequency-aware policy keeps a hot set that LRU thrashes", () => {
    // Each round: hot key (0..4 in turn) then 3 never-repeated keys; reuse distance 19 > 10 slots.
    const tokens: number[][][] = [];
    let fresh = 100;
    for (let r = 0; r < 200; r++) tokens.push([[r % 5]], [[fresh++]], [[fresh++]], [[fresh++]]);
    const tr = traceOf(tokens);
    expect(hits(tr, 10, "lru")).toBe(0);
    const lfru = simulateCache(tr, 10, "lfru");
    expect(lfru.hits).toBeGreaterThan(0.9 * 195); // nearly every hot request after the first round
    expect(lfru.hits).toBeLessThanOrEqual(simulateCache(tr, 10, "belady").hits);
  });

  test("S3-FIFO and LFRU keep a twice-used hot set through a one-hit scan (the optimum); LRU does not", () => {
    // Each round: hot keys 0..3 each requested twice in a row, then 12 never-repeated keys; 10 slots.
    // LRU only gets the immediate repeats (400); the optimum keeps the 4 hot keys: 800 − 4 cold.
    const tokens: number[][][] = [];
    let fresh = 100;
    for (let r = 0; r < 100; r++) {
      for (let h = 0; h < 4; h++) tokens.push([[h]], [[h]]);
      for (let u = 0; u < 12; u++) tokens.push([[fresh++]]);
    }
    const tr = traceOf(tokens);
    expect(hits(tr, 10, "lru")).toBe(400);
    expect(hits(tr, 10, "belady")).toBe(796);
    expect(hits(tr, 10, "s3fifo")).toBe(796);
    expect(hits(tr, 10, "lfru")).toBe(796);
  });

  test("every policy hits the same with a cache holding every key; counts add up", () => {
    const tr = traceOf(Array.from({ length: 40 }, (_, t) => [[(t * 3) % 7, (t * 3 + 1) % 7], [t % 4, (t + 2) % 4]]));
    for (const p of ALL_POLICIES) {
      const r = simulateCache(tr, 14, p);
      expect(r.hits + r.misses).toBe(160);
      expect(r.misses).toBe(7 + 4);
    }
  });

  test("fewer slots than k is refused; unknown policy is refused", () => {
    const tr = traceOf([[[0, 1, 2]]]);
    expect(() => simulateCache(tr, 2, "lru")).toThrow(/cannot hold one layer's 3 experts/);
    expect(() => simulateCache(tr, 3, "clock")).toThrow(/unknown cache policy/);
    expect(() => makePolicy("belady", { slots: 3, keys: 3 })).toThrow(/future/);
  });

  test("--slots accepts counts and multiples of the working set", () => {
    expect(parseSlotList("10, 0.5x,2x", 208)).toEqual([10, 104, 416]);
    expect(() => parseSlotList("3y", 8)).toThrow(/not a slot count/);
    expect(() => parseSlotList("0", 8)).toThrow(/not a slot count/);
  });
});

describe("k3 simulate-cache", () => {
  test("--json gives exact hit counts per policy and size", () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-policy-"));
    const file = join(dir, "t.routing.jsonl");
    writeFileSync(file, [[[0, 1]], [[2, 3]], [[0, 1]], [[2, 3]]].map((l, t) => formatTraceLine(t, l)).join(""));
    const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", "simulate-cache", file, "--slots", "3,2x", "--policy", "lru,belady", "--json"]);
    expect(p.exitCode).toBe(0);
    const out = JSON.parse(p.stdout.toString());
    expect(out.working_set).toBe(2);
    const got = out.results.map((r: { policy: string; slots: number; hits: number }) => `${r.policy}@${r.slots}=${r.hits}`);
    expect(got).toEqual(["lru@3=0", "belady@3=2", "lru@4=4", "belady@4=4"]);
  });
  test("slots below k exit 2 with the reason on stderr", () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-policy-"));
    const file = join(dir, "t.jsonl");
    writeFileSync(file, formatTraceLine(0, [[0, 1, 2]]));
    const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", "simulate-cache", file, "--slots", "2"]);
    expect(p.exitCode).toBe(2);
    expect(p.stdout.toString()).toBe("");
    expect(p.stderr.toString()).toContain("k = 3");
  });
});
