// Which drafts a verify pass keeps (src/speculate/accept.ts): exact match against the token the
// target picks at each position (greedy's argmax, or the seeded sampler's draw for that position).
// Proven two ways on a small "target model" (a 4-token Markov chain) with the real sampler:
//   - identity: for every seed, speculative passes of any draft length with any drafter emit
//     exactly the tokens plain decoding emits (the sampling contract: seeded output does not
//     depend on speculation);
//   - distribution: over many seeds the emitted sequences follow the chain's joint distribution,
//     by Pearson's chi-square at a false-alarm rate of ~1e-6 (so a correct rule never fails by
//     chance with these seeds), and a subtly wrong sampler (one draw reused at every position) is
//     caught by the same statistic: the test has power.
// And the acceptance rate of a deterministic draft d is p(d), what the accept/resample rule of
// Leviathan et al. gives a one-hot draft: exact match costs nothing in expectation.
import { describe, expect, test } from "bun:test";
import { verifyDrafts } from "../src/speculate/accept.ts";
import { argmax, createSampler, uniformAt, type Sampler } from "../src/text/sampling.ts";
import { CHAIN, consistent, jointProbs as jointProbsOf } from "./helpers/chi2.ts";

// A 4-token Markov chain as the "target model": the logits of a context are log TARGET[last]
// (softmax at temperature 1 gives TARGET[last] back).
const V = 4;
const TARGET = CHAIN;
const rowFor = (last: number) => new Float32Array(TARGET[last]!.map(Math.log));
/** Position of the start token: the first generated token is at START_POS + 1. */
const START_POS = 7;

const jointProbs = (start: number, L: number) => jointProbsOf(TARGET, start, L);

/** Plain decoding: L tokens after `start`, one pick per position. */
function plain(sampler: Sampler, start: number, L: number): number[] {
  const seq = [start];
  while (seq.length - 1 < L) seq.push(sampler.sample(rowFor(seq.at(-1)!), START_POS + seq.length));
  return seq.slice(1);
}

type Drafting = "next" | "random" | "oracle";

/**
 * Speculative decoding of L tokens after `start`: passes of k drafts from `drafting` (next: always
 * (last + 1) mod V; random: any tokens, from their own PRNG; oracle: plain decoding's own tokens,
 * wrong at offset 1), each verified by exact match. Counts drafts and acceptances in `acc`.
 */
function speculative(sampler: Sampler, start: number, L: number, k: number, drafting: Drafting, draftSeed: number, acc = { drafted: 0, accepted: 0 }): number[] {
  const seq = [start];
  const truth = drafting === "oracle" ? [start, ...plain(sampler, start, L + k)] : [];
  let r = draftSeed;
  while (seq.length - 1 < L) {
    const tokens: number[] = [];
    let last = seq.at(-1)!;
    for (let i = 0; i < k; i++) {
      if (drafting === "next") last = (last + 1) % V;
      else if (drafting === "random") last = Math.floor(uniformAt(draftSeed, r++) * V);
      else last = i === 1 ? (truth[seq.length + i]! + 1) % V : truth[seq.length + i]!;
      tokens.push(last);
    }
    const pos0 = START_POS + seq.length - 1; // the pending token's position
    const ctx = seq.at(-1)!;
    const verdict = verifyDrafts((i) => sampler.sample(rowFor(i === 0 ? ctx : tokens[i - 1]!), pos0 + 1 + i), { tokens });
    acc.drafted += tokens.length;
    acc.accepted += verdict.accepted;
    seq.push(...verdict.tokens);
  }
  return seq.slice(1, L + 1);
}

describe("greedy verification", () => {
  // Rows whose argmax is known: row i's largest logit is at want[i].
  const want = [3, 1, 4, 1, 5];
  const rows = want.map((t) => {
    const r = new Float32Array(8).fill(-1);
    r[t] = 2;
    r[(t + 1) % 8] = 2; // a tie with a HIGHER id: the lowest id must win
    return r;
  });
  const greedy = (i: number) => argmax(rows[i]!);
  test("all drafts right: k accepted plus the bonus token", () => {
    const v = verifyDrafts(greedy, { tokens: [3, 1, 4, 1] });
    expect(v).toEqual({ tokens: [3, 1, 4, 1, 5], accepted: 4 });
  });
  test("a rejection at every draft position yields the argmax there and stops", () => {
    for (let at = 0; at < 4; at++) {
      const d = [3, 1, 4, 1];
      d[at] = 7;
      const asked: number[] = [];
      const v = verifyDrafts((i) => (asked.push(i), greedy(i)), { tokens: d });
      expect(v.accepted).toBe(at);
      expect(v.tokens).toEqual(want.slice(0, at + 1));
      expect(asked).toEqual([...Array(at + 1).keys()]); // rows after the rejection are never read
    }
  });
  test("no drafts: one token, the argmax of row 0", () => {
    expect(verifyDrafts(greedy, { tokens: [] })).toEqual({ tokens: [3], accepted: 0 });
  });
});

describe("seeded sampling: speculation never changes an id", () => {
  test("every seed, draft length and drafter: the tokens of plain decoding, position by position", () => {
    let kept = 0;
    for (let seed = 0; seed < 300; seed++) {
      const sampler = createSampler({ temperature: 1, seed });
      const want = plain(sampler, seed % V, 12);
      for (const drafting of ["next", "random", "oracle"] as Drafting[])
        for (const k of [1, 2, 4]) {
          const acc = { drafted: 0, accepted: 0 };
          expect(speculative(sampler, seed % V, 12, k, drafting, seed + 99, acc)).toEqual(want);
          kept += acc.accepted;
        }
    }
    expect(kept).toBeGreaterThan(1000); // drafts were kept, not only corrected
  });

  test("with filters (temperature, top-k, top-p, min-p) and a vocabulary of 500: the same", () => {
    const logitsAt = (ctx: number) => {
      const l = new Float32Array(500);
      for (let i = 0; i < 500; i++) l[i] = Math.sin(ctx * 7.1 + i * 0.37) * 3 + (i === ctx % 500 ? 2 : 0);
      return l;
    };
    for (const opts of [{ temperature: 0.7 }, { temperature: 1.2, topK: 20 }, { temperature: 1, topP: 0.8, minP: 0.02 }])
      for (let seed = 0; seed < 20; seed++) {
        const s = createSampler({ ...opts, seed });
        const want: number[] = [s.sample(logitsAt(0), 1)];
        while (want.length < 16) want.push(s.sample(logitsAt(want.at(-1)!), want.length + 1));
        // Drafts: the plain tokens themselves, so every pass keeps all 3 and earns the bonus.
        const got: number[] = [want[0]!];
        while (got.length < 16) {
          const drafts = want.slice(got.length, got.length + 3);
          const v = verifyDrafts((i) => s.sample(logitsAt(i === 0 ? got.at(-1)! : drafts[i - 1]!), got.length + 1 + i), { tokens: drafts });
          got.push(...v.tokens);
        }
        expect(got.slice(0, 16)).toEqual(want);
      }
  });
});

describe("seeded sampling across seeds follows the target distribution", () => {
  const n = 60_000;
  for (const drafting of ["next", "random"] as Drafting[]) {
    test(`three tokens from the chain, ${drafting} drafts of 3, one seed per sequence: the chain's joint distribution`, () => {
      for (const start of [0, 2]) {
        const counts = new Array(V ** 3).fill(0);
        for (let seed = 0; seed < n; seed++) {
          const [a, b, c] = speculative(createSampler({ temperature: 1, seed: seed * 4 + start }), start, 3, 3, drafting, seed);
          counts[(a! * V + b!) * V + c!]++;
        }
        expect(consistent(counts, jointProbs(start, 3), n)).toBe(true);
      }
    });
  }

  test("the joint test has power: a sampler that reuses one draw at every position is caught", () => {
    const counts = new Array(V ** 3).fill(0);
    for (let seed = 0; seed < n; seed++) {
      const one = createSampler({ temperature: 1, seed });
      const reused: Sampler = { sample: (l) => one.sample(l, 0) };
      const [a, b, c] = speculative(reused, 0, 3, 3, "next", seed);
      counts[(a! * V + b!) * V + c!]++;
    }
    expect(consistent(counts, jointProbs(0, 3), n)).toBe(false);
  });

  test("a deterministic draft is kept with probability p(draft), as under the accept/resample rule", () => {
    // One position, draft x: exact match keeps it when the sampler picks x, i.e. with p(x); the
    // one-hot accept/resample rule keeps it with min(1, p(x)/1) = p(x) too.
    const p = TARGET[0]!;
    for (const x of [0, 1, 3]) {
      let kept = 0;
      for (let seed = 0; seed < n; seed++) kept += verifyDrafts((i) => createSampler({ temperature: 1, seed }).sample(rowFor(0), 1 + i), { tokens: [x] }).accepted;
      expect(consistent([kept, n - kept], [p[x]!, 1 - p[x]!], n)).toBe(true);
    }
  });
});

describe("uniformAt: the random number of (seed, position)", () => {
  test("pinned values (part of the sampling contract: changing them changes every seeded output)", () => {
    expect([uniformAt(0, 0), uniformAt(0, 1), uniformAt(1, 0), uniformAt(42, 1000)].map((u) => Math.floor(u * 2 ** 32))).toEqual(PINNED);
  });
  test("uniform over positions and over seeds; consecutive positions look independent", () => {
    const N = 64_000;
    const bins = (f: (i: number) => number) => {
      const c = new Array(64).fill(0);
      for (let i = 0; i < N; i++) c[Math.floor(f(i) * 64)]++;
      return c;
    };
    const flat = new Array(64).fill(1 / 64);
    expect(consistent(bins((i) => uniformAt(5, i)), flat, N)).toBe(true);
    expect(consistent(bins((i) => uniformAt(i, 9)), flat, N)).toBe(true);
    expect(consistent(bins((i) => uniformAt(-i, 2 ** 40)), flat, N)).toBe(true);
    const pairs = new Array(64).fill(0);
    for (let i = 0; i < N; i++) pairs[Math.floor(uniformAt(3, i) * 8) * 8 + Math.floor(uniformAt(3, i + 1) * 8)]++;
    expect(consistent(pairs, flat, N)).toBe(true);
    // The pair statistic has power: a generator whose position i + 1 is position i's draw moved
    // by a little (a weak mix of the position) is caught.
    const weak = new Array(64).fill(0);
    for (let i = 0; i < N; i++) {
      const u = uniformAt(3, i);
      weak[Math.floor(u * 8) * 8 + Math.floor(((u + 0.01) % 1) * 8)]++;
    }
    expect(consistent(weak, flat, N)).toBe(false);
  });
  test("seeds above 2^32 and negative seeds are distinct from their low bits", () => {
    expect(uniformAt(5, 3)).not.toBe(uniformAt(5 + 2 ** 32, 3));
    expect(uniformAt(-5, 3)).not.toBe(uniformAt(2 ** 32 - 5, 3));
    expect(uniformAt(7, 2 ** 33)).not.toBe(uniformAt(7, 0));
  });
});

const PINNED = [3793791033, 1853398634, 3220144176, 3624974483];
