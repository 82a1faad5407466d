// Pearson's chi-square against exact probabilities, for the tests that prove a speculative rule
// distribution-exact (test/speculate-accept.test.ts, test/speculate-reject.test.ts): a false-alarm
// rate of ~1e-6 (so a correct rule never fails by chance with fixed seeds), and the joint
// probabilities of a small Markov chain as the "target model".

/** Upper 1e-6 quantile of chi-square with df degrees of freedom (Wilson–Hilferty; z = 4.753). */
export function chi2Critical(df: number): number {
  const z = 4.753;
  const c = 2 / (9 * df);
  return df * Math.pow(1 - c + z * Math.sqrt(c), 3);
}

/** Pearson's statistic of observed counts against exact probabilities (cells with p > 0). */
export function chi2(counts: number[], probs: number[], n: number): { stat: number; df: number; impossible: number } {
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
export function consistent(counts: number[], probs: number[], n: number): boolean {
  const r = chi2(counts, probs, n);
  return r.impossible === 0 && r.stat < chi2Critical(r.df);
}

/** A 4-token Markov chain the speculation tests use as the "target model": row = the last token. */
export const CHAIN = [
  [0.5, 0.25, 0.15, 0.1],
  [0.1, 0.6, 0.2, 0.1],
  [0.3, 0.1, 0.1, 0.5],
  [0.25, 0.25, 0.25, 0.25],
];

/** Exact joint probabilities of the first L tokens after `start` under the chain `target` (rows: the last token). */
export function jointProbs(target: number[][], start: number, L: number): number[] {
  const V = target.length;
  const out: number[] = [];
  for (let code = 0; code < V ** L; code++) {
    let p = 1;
    let last = start;
    for (let j = L - 1; j >= 0; j--) {
      const t = Math.floor(code / V ** j) % V;
      p *= target[last]![t]!;
      last = t;
    }
    out.push(p);
  }
  return out;
}
