// The opt-in rejection rule of speculative sampling (src/speculate/reject.ts, `--accept-rule
// rejection`) keeps the output distribution exact. Proven statistically on small distributions:
// many generations through the rule are compared with the target's exact probabilities by
// Pearson's chi-square at a false-alarm rate of ~1e-6 (fixed seeds: a correct rule never fails by
// chance here). Each test also runs a subtly wrong rule through the same statistic and requires it
// to FAIL (the test has power). The engine's use of it: test/draft-engine.test.ts.
import { describe, expect, test } from "bun:test";
import { acceptGeneral, acceptOneHot, drawDraft, rejectDrafts, type RejectionSampler } from "../src/speculate/reject.ts";
import { createSampler } from "../src/text/sampling.ts";
import { CHAIN, consistent, jointProbs as jointProbsOf } from "./helpers/chi2.ts";

/** A seeded stream of uniforms (mulberry32), so every case is reproducible. */
function uniforms(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A "sampler" over a tiny vocabulary: weights from the row's first element (the context token). */
function chainSampler(table: number[][], next: () => number): RejectionSampler {
  return {
    weights: (l) => Float64Array.from(table[l[0]!]!),
    sample: (l) => draw(table[l[0]!]!, next()),
    uniform: () => next(),
  };
}
const draw = (p: number[], u: number) => {
  let acc = 0;
  for (let i = 0; i < p.length; i++) if ((acc += p[i]!) > u) return i;
  return p.length - 1;
};

const V = 4;
const TARGET = CHAIN;
const DRAFTQ = [
  [0.2, 0.5, 0.2, 0.1],
  [0.4, 0.2, 0.3, 0.1],
  [0.1, 0.1, 0.7, 0.1],
  [0.7, 0.1, 0.1, 0.1],
];
const row = (last: number) => new Float32Array([last]);

const jointProbs = (start: number, L: number) => jointProbsOf(TARGET, start, L);

/** L tokens after `start` by passes of k drafts (a deterministic drafter: last + 1 mod V; or drawn from DRAFTQ), n times. */
function simulate(o: { n: number; L: number; k: number; start: number; sampled: boolean; seed: number; wrong?: boolean }): number[] {
  const next = uniforms(o.seed);
  const s = chainSampler(TARGET, next);
  const counts = new Array(V ** o.L).fill(0);
  for (let run = 0; run < o.n; run++) {
    const seq = [o.start];
    while (seq.length - 1 < o.L) {
      const tokens: number[] = [];
      const q: Float64Array[] = [];
      let last = seq.at(-1)!;
      for (let i = 0; i < o.k; i++) {
        if (o.sampled) {
          q.push(Float64Array.from(DRAFTQ[last]!));
          last = draw(DRAFTQ[last]!, next());
        } else last = (last + 1) % V;
        tokens.push(last);
      }
      const ctx = seq.at(-1)!;
      const rowOf = (i: number) => row(i === 0 ? ctx : tokens[i - 1]!);
      const draft = o.sampled ? { tokens, q } : { tokens };
      const v = o.wrong ? wrongRule(rowOf, tokens, s) : rejectDrafts(rowOf, draft, s, () => 0);
      seq.push(...v.tokens);
    }
    let code = 0;
    for (let j = 1; j <= o.L; j++) code = code * V + seq[j]!;
    counts[code]++;
  }
  return counts;
}

/** A plausible wrong rule: on a rejection draw from the FULL p (the draft not removed). */
function wrongRule(rowOf: (i: number) => Float32Array, tokens: number[], s: RejectionSampler) {
  const out: number[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const w = s.weights(rowOf(i));
    if (s.uniform(0, 2) < w[tokens[i]!]!) {
      out.push(tokens[i]!);
      continue;
    }
    out.push(draw([...w], s.uniform(0, 3)));
    return { tokens: out };
  }
  out.push(s.sample(rowOf(tokens.length), 0));
  return { tokens: out };
}

describe("the rejection rule is distribution-exact", () => {
  const N = 200_000;

  test("one position, deterministic draft: tokens follow p (and the wrong residual is caught)", () => {
    const p = [0.1, 0.45, 0.3, 0.15];
    for (const x of [0, 1, 3]) {
      const next = uniforms(11 + x);
      const counts = [0, 0, 0, 0];
      const wrong = [0, 0, 0, 0];
      for (let i = 0; i < N; i++) {
        const r = acceptOneHot(Float64Array.from(p), x, next(), next());
        counts[r < 0 ? x : r]!++;
        wrong[next() < p[x]! ? x : draw(p, next())]!++;
      }
      expect(consistent(counts, p, N)).toBe(true);
      expect(consistent(wrong, p, N)).toBe(false);
    }
  });

  test("one position, a draft drawn from q: tokens follow p (and the one-hot residual is caught)", () => {
    const p = [0.1, 0.45, 0.3, 0.15];
    const q = Float64Array.from([0.4, 0.1, 0.3, 0.2]);
    const next = uniforms(5);
    const counts = [0, 0, 0, 0];
    const naive = [0, 0, 0, 0];
    for (let i = 0; i < N; i++) {
      const x = draw([...q], next());
      const r = acceptGeneral(Float64Array.from(p), q, x, next(), next());
      counts[r < 0 ? x : r]!++;
      if (next() * q[x]! < p[x]!) naive[x]!++;
      else {
        const w = [...p];
        w[x] = 0;
        const t = w.reduce((a, b) => a + b, 0);
        naive[draw(w.map((v) => v / t), next())]!++;
      }
    }
    expect(consistent(counts, p, N)).toBe(true);
    expect(consistent(naive, p, N)).toBe(false);
  });

  for (const sampled of [false, true])
    test(`three tokens of a Markov chain, ${sampled ? "drawn" : "deterministic"} drafts of 3: the joint distribution is the chain's`, () => {
      for (const start of [0, 2]) {
        const counts = simulate({ n: 60_000, L: 3, k: 3, start, sampled, seed: 100 + start });
        expect(consistent(counts, jointProbs(start, 3), 60_000)).toBe(true);
      }
    });

  test("the joint test has power: a full-p resample after a rejection is caught", () => {
    expect(consistent(simulate({ n: 60_000, L: 3, k: 3, start: 0, sampled: false, seed: 7, wrong: true }), jointProbs(0, 3), 60_000)).toBe(false);
  });

  test("with the real sampler (temperature, top-k): the first emitted token follows the filtered distribution; drafts drawn from q", () => {
    const logits = new Float32Array([0.3, 2.0, 1.1, -0.5, 1.6, 0.9]);
    const draftLogits = new Float32Array([1.0, 0.2, 1.5, 0.0, 0.4, 1.2]);
    const T = 0.8;
    const topK = 4;
    const kept = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]! || a - b).slice(0, topK);
    const w = [...logits].map((l, i) => (kept.includes(i) ? Math.exp((l - 2.0) / T) : 0));
    const tot = w.reduce((a, b) => a + b, 0);
    const p = w.map((x) => x / tot);
    const counts = new Array(6).fill(0);
    const n = 60_000;
    for (let seed = 0; seed < n; seed++) {
      const s = createSampler({ temperature: T, topK, seed }) as Required<ReturnType<typeof createSampler>>;
      const d = drawDraft(s, draftLogits, 10);
      const v = rejectDrafts(() => logits, { tokens: [d.token], q: [d.q] }, s, () => 10);
      counts[v.tokens[0]!]++;
    }
    expect(consistent(counts, p, n)).toBe(true);
    expect(counts[0] + counts[3]).toBe(0); // filtered out by top-k: never emitted
  });
});
