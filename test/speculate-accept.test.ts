// The accept/resample rule of speculative sampling (src/speculate/accept.ts) keeps the output
// distribution exact. Proven statistically on small distributions: with a fixed seed, many
// generations through the speculative rule are compared with the target's exact probabilities
// by a chi-square test at a false-alarm rate of ~1e-6 (so a correct rule never fails by chance
// with these seeds, and bounds follow from the sample size, not from tuning). Each test also runs
// a subtly wrong rule through the same statistic and requires it to FAIL: the test has power.
import { describe, expect, test } from "bun:test";
import { acceptGeneral, acceptOneHot, verifyDrafts, type TargetRule } from "../src/speculate/accept.ts";
import type { Draft } from "../src/speculate/drafter.ts";
import { argmax, createSampler, drawFrom, Xoshiro128ss, type SamplerDistribution } from "../src/text/sampling.ts";

/** Upper 1e-6 quantile of chi-square with df degrees of freedom (Wilson–Hilferty; z = 4.753). */
function chi2Critical(df: number): number {
  const z = 4.753;
  const c = 2 / (9 * df);
  return df * Math.pow(1 - c + z * Math.sqrt(c), 3);
}

/** Pearson's statistic of observed counts against exact probabilities (cells with p > 0). */
function chi2(counts: number[], probs: number[], n: number): { stat: number; df: number; impossible: number } {
  let stat = 0;
  let df = -1;
  let impossible = 0;
  for (let i = 0; i < probs.length; i++) {
    const e = probs[i]! * n;
    if (e === 0) {
      impossible += counts[i] ?? 0;
      continue;
    }
    const d = (counts[i] ?? 0) - e;
    stat += (d * d) / e;
    df++;
  }
  return { stat, df, impossible };
}

/** Passes iff the counts are consistent with the probabilities (and no impossible outcome occurred). */
function consistent(counts: number[], probs: number[], n: number): boolean {
  const r = chi2(counts, probs, n);
  return r.impossible === 0 && r.stat < chi2Critical(r.df);
}

/** A target distribution over a tiny vocabulary with its own seeded PRNG. */
function fixedDistribution(rng: Xoshiro128ss, probsOf: (logits: Float32Array) => number[]): SamplerDistribution {
  let w = new Float64Array(0);
  return {
    weights: (logits) => {
      const p = probsOf(logits);
      if (w.length !== p.length) w = new Float64Array(p.length);
      w.set(p);
      return w;
    },
    uniform: () => rng.nextFloat(),
  };
}

// A 4-token Markov chain as the "target model": the logits row carries the context's last token
// in element 0 (rows are built by the simulator below), probabilities are TARGET[last].
const V = 4;
const TARGET = [
  [0.5, 0.25, 0.15, 0.1],
  [0.1, 0.6, 0.2, 0.1],
  [0.3, 0.1, 0.1, 0.5],
  [0.25, 0.25, 0.25, 0.25],
];
// A different chain as the drafter's (for the sampled-draft rule), and a deterministic drafter.
const DRAFTQ = [
  [0.2, 0.5, 0.2, 0.1],
  [0.4, 0.2, 0.3, 0.1],
  [0.1, 0.1, 0.7, 0.1],
  [0.7, 0.1, 0.1, 0.1],
];
const rowFor = (last: number) => new Float32Array([last]);
const targetProbs = (logits: Float32Array) => TARGET[logits[0]!]!;

/** Exact joint probabilities of the first L tokens after `start` under the target chain. */
function jointProbs(start: number, L: number): number[] {
  const out: number[] = [];
  for (let code = 0; code < V ** L; code++) {
    let p = 1;
    let last = start;
    for (let j = L - 1; j >= 0; j--) {
      const t = Math.floor(code / V ** j) % V;
      p *= TARGET[last]![t]!;
      last = t;
    }
    out.push(p);
  }
  return out;
}

type Drafting = "deterministic" | "sampled";

/**
 * Generate the first L tokens after `start` by speculative passes of k drafts, `n` times; count
 * each L-token outcome. `accept` may be replaced by a wrong rule (the power check).
 */
function simulate(opts: { n: number; L: number; k: number; start: number; drafting: Drafting; seed: number; wrong?: boolean }): number[] {
  const rng = new Xoshiro128ss(opts.seed);
  const draftRng = new Xoshiro128ss(opts.seed + 1000);
  const dist = fixedDistribution(rng, targetProbs);
  const rule: TargetRule = { kind: "sample", distribution: dist };
  const counts = new Array(V ** opts.L).fill(0);
  for (let s = 0; s < opts.n; s++) {
    const seq: number[] = [opts.start];
    while (seq.length - 1 < opts.L) {
      const draft: Draft = { tokens: [] };
      let last = seq[seq.length - 1]!;
      for (let i = 0; i < opts.k; i++) {
        if (opts.drafting === "deterministic") {
          // A deterministic drafter: always proposes (last + 1) mod V.
          last = (last + 1) % V;
          draft.tokens.push(last);
        } else {
          const q = Float64Array.from(DRAFTQ[last]!);
          last = drawFrom(q, draftRng.nextFloat());
          draft.tokens.push(last);
          (draft.q ??= []).push(q);
        }
      }
      const ctx = seq[seq.length - 1]!;
      const rowOf = (i: number) => rowFor(i === 0 ? ctx : draft.tokens[i - 1]!);
      const verdict = opts.wrong ? wrongVerify(rowOf, draft, dist) : verifyDrafts(rowOf, draft, rule);
      seq.push(...verdict.tokens);
    }
    let code = 0;
    for (let j = 1; j <= opts.L; j++) code = code * V + seq[j]!;
    counts[code]++;
  }
  return counts;
}

/** A plausible-looking wrong rule, to show the statistic catches it: on a rejection, draw from
 *  the FULL p (x not removed), which over-weights x. */
function wrongVerify(row: (i: number) => Float32Array, draft: Draft, dist: SamplerDistribution): { tokens: number[] } {
  const out: number[] = [];
  for (let i = 0; i < draft.tokens.length; i++) {
    const w = dist.weights(row(i));
    const x = draft.tokens[i]!;
    let total = 0;
    for (const v of w) total += v;
    if (dist.uniform() * total < w[x]!) {
      out.push(x);
      continue;
    }
    out.push(drawFrom(w, dist.uniform()));
    return { tokens: out };
  }
  out.push(drawFrom(dist.weights(row(draft.tokens.length)), dist.uniform()));
  return { tokens: out };
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
  const greedy: TargetRule = { kind: "greedy", argmax };
  test("all drafts right: k accepted plus the bonus token", () => {
    const v = verifyDrafts((i) => rows[i]!, { tokens: [3, 1, 4, 1] }, greedy);
    expect(v).toEqual({ tokens: [3, 1, 4, 1, 5], accepted: 4 });
  });
  test("a rejection at every draft position yields the argmax there and stops", () => {
    for (let at = 0; at < 4; at++) {
      const d = [3, 1, 4, 1];
      d[at] = 7;
      const asked: number[] = [];
      const v = verifyDrafts((i) => (asked.push(i), rows[i]!), { tokens: d }, greedy);
      expect(v.accepted).toBe(at);
      expect(v.tokens).toEqual(want.slice(0, at + 1));
      expect(asked).toEqual([...Array(at + 1).keys()]); // rows after the rejection are never read
    }
  });
  test("no drafts: one token, the argmax of row 0", () => {
    expect(verifyDrafts((i) => rows[i]!, { tokens: [] }, greedy)).toEqual({ tokens: [3], accepted: 0 });
  });
});

describe("speculative sampling is distribution-exact", () => {
  const N = 200_000;

  test("one position, deterministic draft: tokens follow p exactly (and a wrong rule is caught)", () => {
    const p = [0.1, 0.45, 0.3, 0.15];
    for (const x of [0, 1, 3]) {
      const rng = new Xoshiro128ss(11 + x);
      const dist = fixedDistribution(rng, () => p);
      const counts = [0, 0, 0, 0];
      const wrongCounts = [0, 0, 0, 0];
      for (let s = 0; s < N; s++) {
        const w = dist.weights(new Float32Array(1));
        const r = acceptOneHot(w, x, dist);
        counts[r < 0 ? x : r]!++;
        // Wrong: accept x with probability p(x), else draw from the whole p (x not removed).
        const w2 = dist.weights(new Float32Array(1));
        wrongCounts[dist.uniform() < p[x]! ? x : drawFrom(w2, dist.uniform())]!++;
      }
      expect(consistent(counts, p, N)).toBe(true);
      expect(consistent(wrongCounts, p, N)).toBe(false);
    }
  });

  test("one position, sampled draft with its q: tokens follow p exactly", () => {
    const p = [0.1, 0.45, 0.3, 0.15];
    const q = Float64Array.from([0.4, 0.1, 0.3, 0.2]);
    const rng = new Xoshiro128ss(5);
    const draftRng = new Xoshiro128ss(6);
    const dist = fixedDistribution(rng, () => p);
    const counts = [0, 0, 0, 0];
    const naive = [0, 0, 0, 0];
    for (let s = 0; s < N; s++) {
      const x = drawFrom(q, draftRng.nextFloat());
      const r = acceptGeneral(dist.weights(new Float32Array(1)), q, x, dist);
      counts[r < 0 ? x : r]!++;
      // Wrong: accept with min(1, p/q) but on a rejection draw from p without x (the one-hot
      // residual) instead of max(0, p − q). (Ignoring q altogether — the one-hot rule for any
      // independently drawn x — would be exact, only less often accepted: q(y)p(y) + p(y)(1 − q(y)) = p(y).)
      const w2 = dist.weights(new Float32Array(1));
      if (dist.uniform() * q[x]! < p[x]!) naive[x]!++;
      else {
        w2[x] = 0;
        naive[drawFrom(w2, dist.uniform())]!++;
      }
    }
    expect(consistent(counts, p, N)).toBe(true);
    expect(consistent(naive, p, N)).toBe(false);
  });

  for (const drafting of ["deterministic", "sampled"] as Drafting[]) {
    test(`three tokens from a Markov chain, ${drafting} drafts of 3: the joint distribution is the chain's`, () => {
      const n = 60_000;
      for (const start of [0, 2]) {
        const counts = simulate({ n, L: 3, k: 3, start, drafting, seed: 100 + start });
        expect(consistent(counts, jointProbs(start, 3), n)).toBe(true);
      }
    });
  }

  test("the joint test has power: resampling from the full p after a rejection is caught", () => {
    const n = 60_000;
    const counts = simulate({ n, L: 3, k: 3, start: 0, drafting: "deterministic", seed: 7, wrong: true });
    expect(consistent(counts, jointProbs(0, 3), n)).toBe(false);
  });

  test("with the real sampler (temperature, top-k): emitted tokens follow the filtered distribution", () => {
    const logits = new Float32Array([0.3, 2.0, 1.1, -0.5, 1.6, 0.9]);
    const T = 0.8;
    const topK = 4;
    // Exact filtered distribution: top-4 logits, softmax at temperature T.
    const kept = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]! || a - b).slice(0, topK);
    const w = [...logits].map((l, i) => (kept.includes(i) ? Math.exp((l - 2.0) / T) : 0));
    const tot = w.reduce((a, b) => a + b, 0);
    const p = w.map((x) => x / tot);
    const sampler = createSampler({ temperature: T, topK, seed: 3 });
    const rule: TargetRule = { kind: "sample", distribution: sampler.distribution! };
    const counts = new Array(6).fill(0);
    for (let s = 0; s < N; s++) {
      // Draft 2 tokens (id 4, then id 0: outside the top-k, p = 0: always rejected); keep the first emitted.
      const v = verifyDrafts(() => logits, { tokens: [4, 0] }, rule);
      counts[v.tokens[0]!]++;
    }
    expect(consistent(counts, p, N)).toBe(true);
    expect(counts[0] + counts[3]).toBe(0); // filtered out: never emitted
  });
});
