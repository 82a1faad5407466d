// Token sampling: greedy, or temperature → top-k → top-p → min-p with a seeded draw per position.
//
// Contract (docs/CHAT.md "The sampling contract"): `sample(logits, position)` is a pure function —
// the same logits, options (seed included) and position give the same id, on any machine, however
// often and in whatever order it is called (no Math.random, no state carried between calls,
// float64 softmax, every ordering broken by id). `position` is the absolute position of the token
// being picked in its session: the number of tokens before it (history, pending and the prompt).
// The random number of that position is uniformAt(seed, position). Speculative decoding relies on
// it (src/speculate/accept.ts): a draft is kept exactly when it equals what the sampler picks at
// its position, so seeded output is the non-speculative output at every budget, batch and drafter.
//   - temperature 0 or absent: greedy argmax, lowest id on ties. This is `run`'s default and the
//     engine's correctness contract (identical output at every memory budget / thread count).
//   - otherwise, in this order (see docs/CHAT.md):
//       1. z_i = logit_i / temperature (float64); w_i = exp(z_i - max z)
//       2. top-k: keep the k largest z, ties to the lower id (k = 0 or ≥ vocab: off)
//       3. top-p: keep the shortest prefix, in (w desc, id asc) order, whose mass ≥ topP × kept mass
//       4. min-p: keep w_i ≥ minP × max w (= minP, since the max has w = 1 and is never dropped)
//       5. draw u = uniformAt(seed, position) × kept mass; walk kept ids in ascending id order;
//          the first id whose running sum exceeds u wins.
//   NaN logits never win; -Infinity logits have zero weight; if some logits are +Infinity the
//   lowest such id is returned.

import { K3Error } from "../errors.ts";

export interface SamplerOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  /** Any safe integer; absent means seed 0 (reproducible by default, never time-based). */
  seed?: number;
}

export interface Sampler {
  /**
   * The token at absolute `position` of the session (the number of tokens before it) from the
   * logits that predict it. Must be a pure function of (logits, position): the engine may call it
   * on a verify pass's rows (speculation) and relies on the same answer as plain decoding.
   */
  sample(logits: Float32Array, position: number): number;
  /**
   * What `sample` draws from: the filtered weights (unnormalised, 0 for a dropped token), a copy,
   * or one-hot on the token it returns without a draw (an infinite logit). Absent for greedy. For
   * the opt-in rejection rule of speculative sampling (src/speculate/reject.ts).
   */
  weights?(logits: Float32Array): Float64Array;
  /** A random number for `position` from the sampler's seed in another stream than `sample`'s
   *  (stream > 0): the rejection rule's draws, reproducible, never `sample`'s own. */
  uniform?(position: number, stream: number): number;
}

export function createSampler(opts: SamplerOptions = {}): Sampler {
  const temperature = opts.temperature ?? 0;
  const topK = opts.topK ?? 0;
  const topP = opts.topP ?? 1;
  const minP = opts.minP ?? 0;
  const problems: string[] = [];
  if (!(temperature >= 0) || !Number.isFinite(temperature)) problems.push(`temperature must be ≥ 0 (got ${temperature})`);
  if (!Number.isInteger(topK) || topK < 0) problems.push(`topK must be an integer ≥ 0 (got ${topK})`);
  if (!(topP > 0 && topP <= 1)) problems.push(`topP must be in (0, 1] (got ${topP})`);
  if (!(minP >= 0 && minP <= 1)) problems.push(`minP must be in [0, 1] (got ${minP})`);
  if (opts.seed !== undefined && !Number.isSafeInteger(opts.seed)) problems.push(`seed must be an integer (got ${opts.seed})`);
  if (problems.length) throw new K3Error("USAGE", "invalid sampling options", problems);

  if (temperature === 0) return { sample: (logits) => argmax(logits) };
  const seed = opts.seed ?? 0;
  // Per-sampler buffers (vocab-sized, float64), reused every token: no allocation per token. The
  // draw depends on nothing they keep: each call fills them anew.
  const buf = { w: new Float64Array(0), scratch: new Float64Array(0) };
  const fill = (logits: Float32Array) => {
    if (buf.w.length !== logits.length) buf.w = new Float64Array(logits.length);
    if ((topK > 0 || topP < 1) && buf.scratch.length !== logits.length) buf.scratch = new Float64Array(logits.length);
    return filteredWeights(logits, temperature, topK, topP, minP, buf.w, buf.scratch);
  };
  return {
    sample: (logits, position) => {
      const forced = fill(logits);
      return forced >= 0 ? forced : drawFrom(buf.w, uniformAt(seed, position));
    },
    weights: (logits) => {
      const forced = fill(logits);
      if (forced < 0) return buf.w.slice();
      const one = new Float64Array(logits.length);
      one[forced] = 1;
      return one;
    },
    uniform: (position, stream) => {
      if (!Number.isSafeInteger(stream) || stream < 1) throw new K3Error("INTERNAL", `sampler stream must be an integer ≥ 1, got ${stream}`);
      return uniformAt(Number(BigInt.asIntN(53, mix64(BigInt.asUintN(64, BigInt(seed)) ^ BigInt(stream)))), position);
    },
  };
}

/**
 * The random number of `position` under `seed`, in [0, 1) with 53 random bits: output number
 * position + 1 of SplitMix64 (Steele, Lea & Flood 2014) started from mix64(seed), i.e.
 *   u = (mix64(mix64(seed mod 2^64) + (position + 1) · 0x9e3779b97f4a7c15 mod 2^64) >> 11) / 2^53
 * with mix64 SplitMix64's finaliser (a bijection on 64-bit words). A seed's draws are one
 * SplitMix64 stream read by position, so different positions of a seed are as independent as that
 * generator's outputs (it passes BigCrush), whatever order they are asked in.
 * Part of the sampling contract (docs/CHAT.md): changing it changes every seeded output.
 */
export function uniformAt(seed: number, position: number): number {
  if (!Number.isSafeInteger(position) || position < 0) throw new K3Error("INTERNAL", `sampling position must be an integer ≥ 0, got ${position}`);
  const start = mix64(BigInt.asUintN(64, BigInt(seed)));
  return Number(mix64(BigInt.asUintN(64, start + BigInt(position + 1) * GOLDEN64)) >> 11n) / 2 ** 53;
}

const GOLDEN64 = 0x9e3779b97f4a7c15n;
const MASK64 = (1n << 64n) - 1n;

/** SplitMix64's finaliser (mod 2^64). */
function mix64(x: bigint): bigint {
  let z = x;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

/** Greedy: index of the largest logit, lowest id on ties; NaN never wins. */
export function argmax(logits: Float32Array): number {
  let best = -1;
  let bestV = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i]!;
    if (v > bestV || (best < 0 && v === -Infinity)) {
      best = i;
      bestV = v;
    }
  }
  if (best < 0) throw new K3Error("INTERNAL", "cannot sample: every logit is NaN");
  return best;
}

/**
 * w (n): the unnormalised float64 weights `sample` draws from, 0 for a dropped or impossible
 * token. Returns the id to emit WITHOUT a draw when the largest logit is ±∞ (then w is not
 * filled), else −1.
 */
function filteredWeights(logits: Float32Array, temperature: number, topK: number, topP: number, minP: number, w: Float64Array, scratch: Float64Array): number {
  const n = logits.length;
  const top = argmax(logits);
  const maxLogit = logits[top]!;
  if (maxLogit === Infinity || maxLogit === -Infinity) return top;
  // (l − max) / T, never l/T − max/T: with a tiny T the latter overflows to ∞ − ∞ = NaN.
  for (let i = 0; i < n; i++) {
    const l = logits[i]!;
    w[i] = l === l ? Math.exp((l - maxLogit) / temperature) : 0; // NaN → 0
  }
  if (topK > 0 && topK < n) keepTopK(w, topK, scratch);
  if (topP < 1) keepTopP(w, topP, scratch);
  if (minP > 0) {
    for (let i = 0; i < n; i++) if (w[i]! < minP) w[i] = 0; // max w is exactly 1 and survives
  }
  return -1;
}

/**
 * Draw from unnormalised weights with u ∈ [0, 1): walk ids in ascending order, the first whose
 * running sum exceeds u × total wins (float rounding that leaves u × total ≥ the sum picks the
 * last kept id). At least one weight must be > 0.
 */
export function drawFrom(w: Float64Array, u01: number): number {
  const n = w.length;
  let total = 0;
  for (let i = 0; i < n; i++) total += w[i]!;
  const u = u01 * total;
  let acc = 0;
  let last = -1;
  for (let i = 0; i < n; i++) {
    const wi = w[i]!;
    if (wi === 0) continue;
    acc += wi;
    last = i;
    if (acc > u) return i;
  }
  if (last < 0) throw new K3Error("INTERNAL", "cannot sample: every weight is zero");
  return last;
}

/** Zero all but the k largest weights. w = exp(z - max) is monotonic in the logit, so this is
 *  top-k by logit, except that logits whose weights round to the same float64 (or underflow to 0)
 *  count as ties; among equal weights at the cut, the lower ids stay. */
function keepTopK(w: Float64Array, k: number, scratch: Float64Array) {
  scratch.set(w);
  const sorted = scratch.sort(); // ascending
  const cut = sorted[sorted.length - k]!; // k-th largest weight
  let above = 0;
  for (let i = 0; i < w.length; i++) if (w[i]! > cut) above++;
  let tiesLeft = k - above;
  for (let i = 0; i < w.length; i++) {
    const wi = w[i]!;
    if (wi > cut) continue;
    if (wi === cut && tiesLeft > 0) tiesLeft--;
    else w[i] = 0;
  }
}

/** Keep the shortest (w desc, id asc) prefix holding ≥ p of the mass. Summation runs in that
 *  order, so the cut does not depend on anything but the weights. */
function keepTopP(w: Float64Array, p: number, scratch: Float64Array) {
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  scratch.set(w);
  const desc = scratch.sort().reverse();
  const target = p * total;
  let acc = 0;
  let taken = 0;
  let cut = 0;
  for (let j = 0; j < desc.length && desc[j]! > 0; j++) {
    acc += desc[j]!;
    taken = j + 1;
    cut = desc[j]!;
    if (acc >= target) break;
  }
  let above = 0;
  for (let j = 0; j < taken; j++) if (desc[j]! > cut) above++;
  let tiesLeft = taken - above;
  for (let i = 0; i < w.length; i++) {
    const wi = w[i]!;
    if (wi > cut) continue;
    if (wi === cut && tiesLeft > 0) tiesLeft--;
    else w[i] = 0;
  }
}
