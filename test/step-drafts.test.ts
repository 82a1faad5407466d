// How a batched step places drafts (src/speculate/step-drafts.ts): with one session it is the
// single-pass rule of cost.ts (bestDraftLength) on the step's cost; with several, the placement's
// expected tokens per cost is the best any placement of the same offers reaches (brute force over
// every allocation), within the rows and slots the step has; fixed offers first.
import { describe, expect, test } from "bun:test";
import { bestDraftLength, expectedTokens } from "../src/speculate/cost.ts";
import { placeDrafts, type DraftOffer, type StepShape } from "../src/speculate/step-drafts.ts";

/** A small deterministic generator (tests must not depend on Math.random). */
function lcg(seed: number) {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** Step costs of the shapes the engine sees: trunk-dominated (streaming), a distinct-experts
 *  curve, compute-bound (every row as costly as the first). */
const COSTS: [string, (r: number) => number][] = [
  ["streaming", (r) => 100 + 3 * r],
  ["experts", (r) => 60 + 40 * (1 - Math.pow(1 - 16 / 64, r)) * 4 + 2 * r],
  ["compute", (r) => 1 + 0.5 * (r - 1)],
];

describe("placeDrafts", () => {
  test("one session: the single-pass rule (bestDraftLength) on the step's cost", () => {
    const rnd = lcg(7);
    for (const [, cost] of COSTS)
      for (let n = 0; n < 300; n++) {
        const a = rnd();
        const drafts = Math.floor(rnd() * 9);
        const free = Math.floor(rnd() * 9);
        const k = placeDrafts([{ drafts, acceptance: a }], { rows: 1, free, slots: 1, tokens: 1 }, cost, 0.05)[0];
        expect(k).toBe(bestDraftLength(a, Math.min(drafts, free), cost, 0.05));
      }
  });

  test("several sessions: the best expected tokens per cost of any placement (brute force), within rows", () => {
    const rnd = lcg(11);
    for (const [name, cost] of COSTS)
      for (let n = 0; n < 150; n++) {
        const sessions = 1 + Math.floor(rnd() * 3);
        const offers: DraftOffer[] = Array.from({ length: sessions }, () => ({ drafts: Math.floor(rnd() * 5), acceptance: rnd() }));
        const step: StepShape = { rows: sessions + Math.floor(rnd() * 3), free: Math.floor(rnd() * 8), slots: sessions, tokens: sessions };
        const rate = (k: number[]) => (step.tokens + k.reduce((s, ki, i) => s + expectedTokens(offers[i]!.acceptance!, ki) - 1, 0)) / cost(step.rows + k.reduce((a, b) => a + b, 0));
        let best = (1.05 * step.tokens) / cost(step.rows);
        const walk = (i: number, k: number[], left: number): void => {
          if (i === sessions) {
            best = Math.max(best, rate(k));
            return;
          }
          for (let ki = 0; ki <= Math.min(offers[i]!.drafts, left); ki++) walk(i + 1, [...k, ki], left - ki);
        };
        walk(0, [], step.free);
        const k = placeDrafts(offers, step, cost, 0.05);
        expect(k.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(step.free);
        k.forEach((ki, i) => expect(ki).toBeLessThanOrEqual(offers[i]!.drafts));
        const got = k.every((x) => x === 0) ? (1.05 * step.tokens) / cost(step.rows) : rate(k);
        if (Math.abs(got - best) > 1e-12 * best) throw new Error(`${name}: ${JSON.stringify({ offers, step, k })} reaches ${got}, the best placement ${best}`);
      }
  });

  test("fixed offers take their drafts first, in arrival order; then auto offers, within the slots left", () => {
    const cost = (r: number) => 100 + r;
    expect(placeDrafts([{ drafts: 4 }, { drafts: 4 }], { rows: 2, free: 6, slots: 2, tokens: 2 }, cost, 0.05)).toEqual([4, 2]);
    expect(placeDrafts([{ drafts: 4, acceptance: 0.99 }, { drafts: 4 }], { rows: 2, free: 6, slots: 2, tokens: 2 }, cost, 0.05)).toEqual([2, 4]);
    // One slot: the fixed offer has it; the auto one verifies nothing.
    expect(placeDrafts([{ drafts: 4, acceptance: 0.99 }, { drafts: 2 }], { rows: 2, free: 6, slots: 1, tokens: 2 }, cost, 0.05)).toEqual([0, 2]);
    // No slot at all: nobody verifies.
    expect(placeDrafts([{ drafts: 4, acceptance: 0.99 }, { drafts: 2 }], { rows: 2, free: 6, slots: 0, tokens: 2 }, cost, 0.05)).toEqual([0, 0]);
  });

  test("fewer slots than sessions: the slots go to the sessions that expect the most from the rows left", () => {
    const cost = (r: number) => 100 + r;
    // One draft at 0.9 against five at 0.85: the second session expects 0.85 + … + 0.85^5 = 2.9.
    expect(placeDrafts([{ drafts: 1, acceptance: 0.9 }, { drafts: 5, acceptance: 0.85 }], { rows: 2, free: 6, slots: 1, tokens: 2 }, cost, 0.05)).toEqual([0, 5]);
    // Equal offers: arrival order.
    expect(placeDrafts([{ drafts: 3, acceptance: 0.8 }, { drafts: 3, acceptance: 0.8 }], { rows: 2, free: 6, slots: 1, tokens: 2 }, cost, 0.05)).toEqual([3, 0]);
  });
});
