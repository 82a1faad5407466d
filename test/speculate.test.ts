// The prompt-lookup drafter and the cost model (src/speculate/): pure functions of tokens and
// counters, checked exactly.
import { describe, expect, test } from "bun:test";
import { NgramDrafter } from "../src/speculate/ngram.ts";
import { AcceptanceRate, bestDraftLength, expectedTokens, SpeculationCost, type PassCostPrior } from "../src/speculate/cost.ts";

const drafter = new NgramDrafter();
const draft = (tokens: number[], max = 8) => drafter.draft({ tokens, max }).tokens;

describe("n-gram drafter", () => {
  test("a repeating cycle drafts whole periods, past the end of what was seen", () => {
    const cycle = [11, 12, 13, 14, 15];
    const seq = [1, 2, ...cycle, ...cycle, 11, 12, 13, 14]; // two periods seen, the third under way
    expect(draft(seq, 8)).toEqual([15, 11, 12, 13, 14, 15, 11, 12]);
    expect(draft(seq, 3)).toEqual([15, 11, 12]);
  });

  test("one token repeated (period 1) and period 2", () => {
    expect(draft([5, 9, 9, 9, 9, 9, 9, 9], 4)).toEqual([9, 9, 9, 9]);
    expect(draft([5, 9, 9, 9, 9, 9], 4)).toEqual([]); // one earlier 4-gram, 4 tokens of match: too little
    expect(draft([3, 1, 2, 1, 2, 1, 2, 1, 2], 5)).toEqual([1, 2, 1, 2, 1]);
  });

  test("no earlier occurrence of the last 3 tokens: no draft", () => {
    expect(draft([1, 2, 3, 4, 5, 6, 7, 8])).toEqual([]);
    expect(draft([1, 2, 3, 9, 2, 3])).toEqual([]); // a 2-gram repeat is not evidence
  });

  test("one earlier occurrence with a short match is not enough; a long verbatim match is", () => {
    // "7 8 9 10" occurred once, preceded by tokens that differ from ours: no draft.
    expect(draft([1, 7, 8, 9, 10, 20, 21, 2, 7, 8, 9, 10])).toEqual([]);
    // A copy: the last 8 tokens match one earlier occurrence → draft what followed it.
    const text = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51];
    const seq = [1, ...text, 2, 3, ...text.slice(0, 8)];
    expect(draft(seq, 6)).toEqual([48, 49, 50, 51, 2, 3]);
    // One token shorter (7 matching): not yet.
    expect(draft([1, ...text, 2, 3, 99, ...text.slice(1, 8)], 6)).toEqual([]);
  });

  test("occurrences that disagree on what follows: draft only the agreed part", () => {
    // "1 2 3 4" followed by 5 6 and by 5 7: agree on 5 only.
    expect(draft([1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 7, 0, 1, 2, 3, 4])).toEqual([5]);
    // Disagree at once: nothing.
    expect(draft([1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 6, 0, 1, 2, 3, 4])).toEqual([]);
  });

  test("a 4-gram seen once (short match) stops the search: no fallback to 3-grams", () => {
    // 3-gram "2 3 4" occurs twice agreeing on 9, but the 4-gram "1 2 3 4" occurred once.
    expect(draft([5, 2, 3, 4, 9, 6, 2, 3, 4, 9, 7, 1, 2, 3, 4, 8, 1, 2, 3, 4])).toEqual([]);
  });

  test("3-grams with two agreeing occurrences draft when the 4-gram never occurred", () => {
    // "2 3 4" was followed by 9 6 and by 9 8: the agreed part is 9.
    expect(draft([7, 2, 3, 4, 9, 6, 2, 3, 4, 9, 8, 2, 3, 4], 4)).toEqual([9]);
  });

  test("pseudo-random text almost never drafts", () => {
    let x = 12345;
    const seq: number[] = [];
    let drafts = 0;
    for (let i = 0; i < 3000; i++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      seq.push((x >>> 16) % 50); // a small vocabulary: 3-grams do repeat by chance
      if (draft(seq, 4).length > 0) drafts++;
    }
    // 50³ = 125,000 possible 3-grams among 3,000 positions: chance repeats exist, but two that
    // also agree on the next token are rare.
    expect(drafts).toBeLessThan(30);
  });

  test("max is respected; max 0 drafts nothing", () => {
    const seq = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4];
    expect(draft(seq, 1)).toEqual([1]);
    expect(draft(seq, 0)).toEqual([]);
  });
});

describe("cost model", () => {
  const streaming: PassCostPrior = { trunkBytes: 5e9, expertBytes: 1.4e9, activeBytes: 7e9, numExperts: 64, topK: 16 };
  const resident: PassCostPrior = { trunkBytes: 0, expertBytes: 0, activeBytes: 7e9, numExperts: 64, topK: 16 };

  test("expected tokens: 1 + a + … + a^k", () => {
    expect(expectedTokens(0.5, 0)).toBe(1);
    expect(expectedTokens(0.5, 3)).toBe(1.875);
    expect(expectedTokens(1, 4)).toBe(5);
  });

  /** A cost model whose acceptance is pinned near `a` (a heavy prior) and whose slow-start cap
   *  has been lifted by one pass that kept 8 drafts. */
  const settled = (prior: PassCostPrior, a: number) => {
    const c = new SpeculationCost(prior, { priorAcceptance: a, priorTrials: 1e6 });
    c.observeVerdict(8, 8);
    return c;
  };

  test("disk-bound: drafts are verified even at modest acceptance; never when it is ~0", () => {
    expect(settled(streaming, 0.9).draftLength(8)).toBe(8);
    expect(settled(streaming, 0.3).draftLength(8)).toBeGreaterThan(0);
    expect(settled(streaming, 0.02).draftLength(8)).toBe(0);
  });

  test("compute-bound (nothing read from disk): speculation needs high acceptance", () => {
    expect(settled(resident, 0.5).draftLength(8)).toBe(0);
    expect(settled(resident, 0.95).draftLength(8)).toBeGreaterThan(2);
  });

  test("slow start: 2 drafts before any pass, twice the kept ones after, 1 after a pass that kept none", () => {
    const c = new SpeculationCost(streaming, { priorAcceptance: 0.99, priorTrials: 1e6 });
    expect(c.draftLength(8)).toBe(2);
    c.observeVerdict(2, 2);
    expect(c.draftLength(8)).toBe(4);
    c.observeVerdict(4, 3);
    expect(c.draftLength(8)).toBe(6);
    c.observeVerdict(6, 0);
    expect(c.draftLength(8)).toBe(1);
  });

  test("the choice never predicts a loss: any k > 0 beats plain decoding by the margin", () => {
    let x = 99;
    const rnd = () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    for (let i = 0; i < 2000; i++) {
      const a = rnd();
      const fixed = rnd() * 10;
      const per = rnd() * 3;
      const cost = (T: number) => fixed + per * T + 0.01;
      const k = bestDraftLength(a, 8, cost, 0.05);
      if (k > 0) expect(expectedTokens(a, k) / cost(1 + k)).toBeGreaterThan(1.05 / cost(1));
      else for (let j = 1; j <= 8; j++) expect(expectedTokens(a, j) / cost(1 + j)).toBeLessThanOrEqual(1.05 / cost(1) + 1e-12);
    }
  });

  test("measured pass bytes replace the prior; unseen T scale by distinct experts", () => {
    const c = new SpeculationCost(streaming);
    expect(c.diskBytes(1)).toBe(6.4e9);
    c.observePass(1, 4e9, 1e9);
    expect(c.diskBytes(1)).toBe(5e9);
    // 64 experts, top-16: 2 positions touch 64·(1 − 0.75²) = 28 distinct = 1.75× one position's 16.
    expect(c.diskBytes(2)).toBeCloseTo(4e9 + 1.75e9, 0);
    c.observePass(2, 4e9, 2e9);
    expect(c.diskBytes(2)).toBe(6e9);
    c.observePass(2, 4e9, 1e9);
    expect(c.diskBytes(2)).toBe(5.5e9); // running mean
  });

  test("acceptance: successes over trials up to the first rejection, drifting back to the prior", () => {
    const a = new AcceptanceRate(0.5, 2, 0.5);
    expect(a.rate).toBe(0.5);
    a.record(4, 1); // one kept, one rejected: 1 success in 2 trials
    expect(a.rate).toBe((1 + 1) / (2 + 2));
    a.record(3, 3); // all kept: 3 in 3
    expect(a.rate).toBe((4 + 1) / (5 + 2));
    for (let i = 0; i < 60; i++) a.step();
    expect(a.rate).toBeCloseTo(0.5, 9);
  });

  /** Decode `steps` steps where the drafter always proposes 8 and drafts are always right or wrong. */
  function simulate(prior: PassCostPrior, right: boolean, steps: number) {
    const c = new SpeculationCost(prior);
    const ks: number[] = [];
    let extra = 0; // cost of the verify positions beyond the first, in one-position passes
    for (let i = 0; i < steps; i++) {
      const k = c.draftLength(8);
      ks.push(k);
      if (k > 0) {
        c.observeVerdict(k, right ? k : 0);
        extra += c.cost(1 + k) / c.cost(1) - 1;
      }
      c.acceptance.step();
    }
    return { ks, extra };
  }

  test("always-wrong drafts: speculation pauses, keeps probing, and the probes cost under 2 %", () => {
    for (const prior of [streaming, resident]) {
      const { ks, extra } = simulate(prior, false, 1000);
      expect(ks[0]).toBeGreaterThan(0); // the optimistic prior tries at once
      expect(ks[1]!).toBeLessThan(ks[0]!); // then backs off
      expect(ks.slice(5, 20).every((k) => k <= 1)).toBe(true); // to single probes at most
      expect(ks.slice(500).some((k) => k > 0)).toBe(true); // still probing late
      expect(extra / 1000).toBeLessThan(0.02);
    }
  });

  test("always-right drafts: 8 per pass within a few passes, disk-bound or compute-bound", () => {
    for (const prior of [streaming, resident]) {
      const { ks } = simulate(prior, true, 20);
      expect(ks.indexOf(8)).toBeGreaterThanOrEqual(0);
      expect(ks.indexOf(8)).toBeLessThan(8);
      expect(ks.slice(ks.indexOf(8)).every((k) => k === 8)).toBe(true);
    }
  });
});
