// How many drafts each session verifies in one batched step (docs/SERVER.md "How a step is
// filled"): several sessions' verify segments share one pass, so a draft row costs what it adds
// to the step (the trunk is read once per step whatever its rows; each row adds its distinct
// experts and its compute), not what a pass of its own would.
//
// A step's other rows are fixed before drafts are placed: one row per generating session (its
// pending token) and the prefill pieces the step carries (the scheduler's rule); drafts fill the
// rows left. A session verifies drafts only while a rollback slot is free for it (a verify segment
// holds one until its accepted drafts are kept).
//
//   - An offer with a fixed number of drafts per pass (`speculate: N`) takes its drafts first, in
//     arrival order, as far as rows and slots allow: the request asked for them.
//   - The others are placed by the cost model. C(R) is the cost of a step of R rows
//     (SpeculationCost.cost: measured bytes of passes that size, the distinct experts of R rows for
//     unseen sizes, compute per row). A session with per-draft acceptance a expects a^j more
//     tokens from its j-th draft (drafts are kept in order until the first rejection), so for n
//     draft rows the best placement takes the n largest terms a_i^j over all sessions (each
//     session's terms fall with j, so its drafts are taken in order), and the step takes the n
//     maximising expected tokens / C(R0 + n) — or none unless that beats the step without them by
//     `margin` (a wrong estimate must be off by the margin before drafting can lose time). When
//     fewer slots are free than sessions offer drafts, the slots go to the sessions that expect
//     the most from the rows left (Σ a^j), in arrival order on ties.
// With one session this is the single-pass rule of cost.ts (bestDraft) with the step's cost.
// Drafts decide how far a pass looks ahead, never a token: every emitted token is the target's.

/** What one session offers a step. */
export interface DraftOffer {
  /** Drafts it has (the most it may verify this step: its proposal, within its slow-start cap). */
  drafts: number;
  /** Its per-draft acceptance: the cost model places its drafts. Undefined: a fixed number of
   *  drafts per pass, verified as far as rows and slots allow. */
  acceptance?: number;
}

/** The step the drafts are added to. */
export interface StepShape {
  /** Rows it carries already (one per generating session, prefill pieces). */
  rows: number;
  /** Rows left for drafts. */
  free: number;
  /** Verify segments that may still start (free rollback slots). */
  slots: number;
  /** Tokens it yields without drafts (one per session whose last row has logits). */
  tokens: number;
}

/** Drafts each offer verifies this step (same order as `offers`; 0: its pending token alone). */
export function placeDrafts(offers: readonly DraftOffer[], step: StepShape, cost: (rows: number) => number, margin: number): number[] {
  const k = offers.map(() => 0);
  let { free, slots, rows } = step;
  offers.forEach((o, i) => {
    if (o.acceptance !== undefined || slots < 1 || free < 1 || o.drafts < 1) return;
    k[i] = Math.min(o.drafts, free);
    free -= k[i]!;
    rows += k[i]!;
    slots--;
  });
  // Every auto offer's terms a^1, a^2, … (as far as the rows left reach), for the sessions that
  // get a slot; then largest first, ties by arrival, then by draft index (the sort is stable), so
  // the placement is the same on every run of the same step.
  const own = offers.map((o, i) => {
    if (o.acceptance === undefined || free < 1) return { i, gains: [] as number[] };
    const a = Math.min(Math.max(o.acceptance, 0), 1);
    const gains: number[] = [];
    for (let j = 1, g = 1; j <= Math.min(o.drafts, free); j++) gains.push((g *= a));
    return { i, gains };
  });
  const sum = (g: number[]) => g.reduce((x, y) => x + y, 0);
  const candidates = own.filter((o) => o.gains.length > 0).sort((x, y) => sum(y.gains) - sum(x.gains) || x.i - y.i);
  const terms = candidates
    .slice(0, slots)
    .flatMap((o) => o.gains.map((gain) => ({ i: o.i, gain })))
    .sort((x, y) => y.gain - x.gain || x.i - y.i);
  let tokens = step.tokens;
  let best = { n: 0, rate: ((1 + margin) * tokens) / cost(rows) };
  const taken: number[] = [];
  for (const t of terms) {
    if (free < 1) break;
    taken.push(t.i);
    free--;
    rows++;
    tokens += t.gain;
    const rate = tokens / cost(rows);
    if (rate > best.rate) best = { n: taken.length, rate };
  }
  for (const i of taken.slice(0, best.n)) k[i]!++;
  return k;
}
