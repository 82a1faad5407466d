// When to speculate, and how far (docs/SPECULATION.md §cost model).
//
// A verify pass over T = 1 + k positions costs more than a one-position pass (more distinct
// experts, more compute) and yields 1 + (accepted drafts) tokens. With a per-draft acceptance
// probability a (drafts are kept in order until the first rejection), the expected yield is
//     E(k) = 1 + a + a² + … + a^k,
// and the step takes the k ≤ the drafter's proposal that maximises E(k) / cost(1 + k); k = 0
// (plain decoding) unless that beats 1 / cost(1) by `margin`, so a wrong cost estimate has to
// be off by the margin before speculation can lose time.
//
//   cost(T) = diskBytes(T) + κ · activeBytes · (1 + μ·(T − 1))
//
// diskBytes(T): what a T-position pass reads, from the engine's byte counters (deterministic):
//   the running mean over passes of that T; for a T not seen yet, the trunk bytes of a
//   one-position pass plus its expert bytes × D(T)/D(1), where D(T) = N·(1 − (1 − K/N)^T) is the
//   expected number of distinct experts T positions route to (N experts, top-K, flat routing:
//   K3's router is trained for flat load). Before any pass is measured, the planner's prior.
// The second term is compute, in bytes-equivalent of disk reads: activeBytes = the weight bytes
//   one position multiplies (every trunk unit + top-K experts per MoE layer), κ = the time to
//   multiply a byte relative to reading it from disk, μ = the cost of each extra position in a
//   batched pass relative to the first. They matter where the disk reads little (weights
//   resident): there a pass is compute-bound and speculation pays only at high acceptance.
// Slow start: the drafts a pass may verify are also capped by what the last pass showed: 2 before
// any verify pass, twice the kept drafts after one (all kept: twice as many as drafted), 1 after a
// pass that kept none. Right drafts reach 8 in three passes (2, 4, 8); wrong ones cost 2, then 1
// position per probe instead of the 4, 2, 1 … a prior-driven first guess would spend.
// Every input is a counter or a constant, so the decision (and the bytes a run reads) is the
// same on every run of the same input; only wall time varies.
//
// Acceptance a: successes / trials over verified drafts (a pass that keeps m of k drafts is m
// successes in m + 1 trials if it rejected one, m in m if not), with a prior and exponential
// forgetting per decode step: after drafts stop paying, the estimate drifts back to the prior
// and one short probe is tried, so a text that starts repeating later is still caught.
// The prior (0.7, worth 2 trials) is optimistic on purpose: the default drafter only proposes
// what earlier occurrences agree on, and without a first verified draft a compute-bound pass
// (where an extra position costs ~μ of a pass) would never gather evidence. Forgetting (0.99
// per step) sets the price of probing when drafts are always wrong: after each failed probe the
// next comes ~26 steps later at a streaming budget (an extra position ≈ 20 % of a pass: < 1 %)
// and ~100 steps later when compute-bound (≈ 50 %: 0.5 %).

export interface PassCostPrior {
  /** Disk bytes of trunk units a one-position pass is expected to read (streamed units). */
  trunkBytes: number;
  /** Disk bytes of routed experts a one-position pass is expected to read (misses). */
  expertBytes: number;
  /** Weight bytes one position multiplies: all trunk units and the head, top-K experts per MoE layer. */
  activeBytes: number;
  /** Routed experts per MoE layer (N) and experts per token (K). */
  numExperts: number;
  topK: number;
}

export interface CostModelOptions {
  /** κ: cost of multiplying one weight byte relative to reading one byte from disk (default 0.1). */
  computeWeight?: number;
  /** μ: compute of each extra position of a batched pass relative to the first (default 0.5). */
  extraPositionCompute?: number;
  /** Predicted gain required before speculating (default 0.05 = 5 %). */
  margin?: number;
  /** Acceptance assumed before any draft was verified (default 0.7), worth `priorTrials` trials (default 2). */
  priorAcceptance?: number;
  priorTrials?: number;
  /** Per-step forgetting factor of the acceptance counts (default 0.99). */
  decay?: number;
}

/** Running per-draft acceptance probability with a prior and exponential forgetting. */
export class AcceptanceRate {
  private successes = 0;
  private trials = 0;
  constructor(
    private readonly prior = 0.7,
    private readonly priorTrials = 2,
    private readonly decay = 0.99,
  ) {}

  get rate(): number {
    return (this.successes + this.prior * this.priorTrials) / (this.trials + this.priorTrials);
  }

  /** A verify pass kept `accepted` of `drafted` drafts. */
  record(drafted: number, accepted: number): void {
    this.successes += accepted;
    this.trials += accepted + (accepted < drafted ? 1 : 0);
  }

  /** One decode step went by (with or without a verify pass): older evidence weighs less. */
  step(): void {
    this.successes *= this.decay;
    this.trials *= this.decay;
  }
}

/** Expected tokens from a pass with k drafts at per-draft acceptance a: 1 + a + … + a^k. */
export function expectedTokens(a: number, k: number): number {
  let e = 0;
  let p = 1;
  for (let j = 0; j <= k; j++) {
    e += p;
    p *= a;
  }
  return e;
}

/**
 * The k in [0, maxK] maximising expectedTokens(a, k) / cost(1 + k); 0 unless the best beats
 * plain decoding (1 / cost(1)) by the factor 1 + margin.
 */
export function bestDraftLength(a: number, maxK: number, cost: (T: number) => number, margin: number): number {
  return bestDraft(a, maxK, cost, margin).k;
}

/** bestDraftLength with the rate it reaches (tokens per bytes-equivalent; k = 0: plain decoding's). */
export function bestDraft(a: number, maxK: number, cost: (T: number) => number, margin: number): { k: number; rate: number } {
  let best = 0;
  let bestRate = (1 + margin) / cost(1);
  for (let k = 1; k <= maxK; k++) {
    const rate = expectedTokens(a, k) / cost(1 + k);
    if (rate > bestRate) {
      best = k;
      bestRate = rate;
    }
  }
  return { k: best, rate: best === 0 ? 1 / cost(1) : bestRate };
}

/** One drafter's evidence in a session (docs/SPECULATION.md §5): its acceptance and slow start. */
export class DrafterLane {
  readonly acceptance: AcceptanceRate;
  /** Slow start: the most drafts the next pass may verify (see the file comment). */
  ramp: number;
  constructor(opts: LaneOptions = {}, defaults: CostModelOptions = {}) {
    this.acceptance = new AcceptanceRate(opts.priorAcceptance ?? defaults.priorAcceptance ?? 0.7, opts.priorTrials ?? defaults.priorTrials ?? 2, defaults.decay ?? 0.99);
    this.ramp = opts.firstDrafts ?? 2;
  }

  /** A verify pass kept `accepted` of `drafted` drafts: acceptance and the slow-start cap. */
  observeVerdict(drafted: number, accepted: number): void {
    this.acceptance.record(drafted, accepted);
    this.ramp = Math.max(1, 2 * accepted);
  }
}

export interface LaneOptions {
  priorAcceptance?: number;
  priorTrials?: number;
  /** Drafts the first verify pass may check (slow start; default 2). */
  firstDrafts?: number;
}

interface Measured {
  trunk: number;
  expert: number;
  passes: number;
}

/** Per-session speculation policy: measured pass bytes per T, each drafter's acceptance, and the decision. */
export class SpeculationCost {
  private readonly measured = new Map<number, Measured>();
  private readonly kappa: number;
  private readonly mu: number;
  private readonly margin: number;
  private readonly lanes = new Map<string, DrafterLane>();

  constructor(
    private readonly prior: PassCostPrior,
    private readonly opts: CostModelOptions = {},
  ) {
    this.kappa = opts.computeWeight ?? 0.1;
    this.mu = opts.extraPositionCompute ?? 0.5;
    this.margin = opts.margin ?? 0.05;
  }

  /** Drafter `name`'s lane (made on first use with `opts`). */
  lane(name: string, opts: LaneOptions = {}): DrafterLane {
    let l = this.lanes.get(name);
    if (!l) this.lanes.set(name, (l = new DrafterLane(opts, this.opts)));
    return l;
  }

  /** The single-drafter view (the lane DEFAULT_LANE): its acceptance. */
  get acceptance(): AcceptanceRate {
    return this.lane(DEFAULT_LANE).acceptance;
  }

  /** Bytes a pass of T positions read (from the engine's counters). Running mean per T. */
  observePass(T: number, trunkBytes: number, expertBytes: number): void {
    const m = this.measured.get(T);
    if (!m) {
      this.measured.set(T, { trunk: trunkBytes, expert: expertBytes, passes: 1 });
      return;
    }
    // Mean of the last ~8 passes: the expert cache warms up, so old passes say less.
    const w = 1 / Math.min(m.passes + 1, 8);
    m.trunk += (trunkBytes - m.trunk) * w;
    m.expert += (expertBytes - m.expert) * w;
    m.passes++;
  }

  /** Expected distinct experts among T positions, relative to one position: D(T) / D(1). */
  private distinctRatio(T: number): number {
    const N = this.prior.numExperts;
    const K = this.prior.topK;
    if (N <= 0 || K <= 0) return T;
    return (N * (1 - Math.pow(1 - K / N, T))) / K;
  }

  /** Predicted disk bytes of a T-position pass: measured, else scaled from the measured pass size
   *  nearest to T (its trunk bytes, its expert bytes × D(T)/D(T')), else the planner's prior. A
   *  prior must never stand next to a measurement: a session that only ever verifies would compare
   *  its measured 2-position passes with an estimate of a 1-position pass it never ran. */
  diskBytes(T: number): number {
    const m = this.measured.get(T);
    if (m) return m.trunk + m.expert;
    let near: [number, Measured] | undefined;
    for (const e of this.measured) if (!near || Math.abs(e[0] - T) < Math.abs(near[0] - T) || (Math.abs(e[0] - T) === Math.abs(near[0] - T) && e[0] < near[0])) near = e;
    if (!near) return this.prior.trunkBytes + this.prior.expertBytes * this.distinctRatio(T);
    return near[1].trunk + (near[1].expert * this.distinctRatio(T)) / this.distinctRatio(near[0]);
  }

  /** Predicted cost of a T-position pass (bytes-equivalent). */
  cost(T: number): number {
    return this.diskBytes(T) + this.kappa * this.prior.activeBytes * (1 + this.mu * (T - 1));
  }

  /** The compute of multiplying `bytes` of weights once, in the same bytes-equivalent (κ·bytes): a
   *  model drafter's price per drafted token. */
  computeCost(bytes: number): number {
    return this.kappa * bytes;
  }

  /**
   * The best draft length for drafter `name` and the rate it reaches: up to `proposed` drafts (a
   * free drafter's proposal length, a model drafter's cap) and its slow-start cap, each costing
   * `stepCost` more (bytes-equivalent; 0 for a drafter that reads and multiplies nothing).
   */
  best(name: string, proposed: number, stepCost = 0): { k: number; rate: number } {
    const lane = this.lane(name);
    const maxK = Math.min(proposed, lane.ramp);
    return bestDraft(lane.acceptance.rate, maxK, (T) => this.cost(T) + stepCost * (T - 1), this.margin);
  }

  /** How many of the `proposed` drafts to verify this step (0 = decode plainly): the single-drafter view. */
  draftLength(proposed: number): number {
    if (proposed < 1) return 0;
    return this.best(DEFAULT_LANE, proposed).k;
  }

  /** A verify pass kept `accepted` of `drafted` drafts (lane `name`, default the single drafter's). */
  observeVerdict(drafted: number, accepted: number, name = DEFAULT_LANE): void {
    this.lane(name).observeVerdict(drafted, accepted);
  }

  /** One decode step went by: every lane's evidence weighs less. */
  step(): void {
    for (const l of this.lanes.values()) l.acceptance.step();
  }
}

/** The lane of a session's drafter when there is one kind (the n-gram drafter, or a caller's). */
export const DEFAULT_LANE = "default";
