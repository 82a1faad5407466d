// Token sampling: greedy, or temperature → top-k → top-p → min-p with a seeded PRNG.
//
// Contract: for the same logits and the same options (seed included) the same ids come out, on any
// machine — no Math.random, float64 softmax, every ordering broken by id.
//   - temperature 0 or absent: greedy argmax, lowest id on ties. This is `run`'s default and the
//     engine's correctness contract (identical output at every memory budget / thread count).
//   - otherwise, in this order (see docs/CHAT.md):
//       1. z_i = logit_i / temperature (float64); w_i = exp(z_i - max z)
//       2. top-k: keep the k largest z, ties to the lower id (k = 0 or ≥ vocab: off)
//       3. top-p: keep the shortest prefix, in (w desc, id asc) order, whose mass ≥ topP × kept mass
//       4. min-p: keep w_i ≥ minP × max w (= minP, since the max has w = 1 and is never dropped)
//       5. draw u ∈ [0,1) × kept mass; walk kept ids in ascending id order; first id whose
//          running sum exceeds u wins.
//   NaN logits never win; -Infinity logits have zero weight; if some logits are +Infinity the
//   lowest such id is returned.

import { K3Error } from "../errors.ts";

export interface SamplerOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  /** Any integer; absent means seed 0 (reproducible by default, never time-based). */
  seed?: number;
}

export interface Sampler {
  sample(logits: Float32Array): number;
  /**
   * What `sample` draws from, for exact speculative sampling (src/speculate/accept.ts); absent
   * for greedy. `weights` returns the unnormalised filtered weights (0 = never drawn; a view
   * reused by the next call) and `uniform` the next draw of the same seeded PRNG in [0, 1).
   */
  readonly distribution?: SamplerDistribution;
}

export interface SamplerDistribution {
  weights(logits: Float32Array): Float64Array;
  uniform(): number;
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

  if (temperature === 0) return { sample: argmax };
  const rng = new Xoshiro128ss(opts.seed ?? 0);
  // Per-sampler buffers (vocab-sized, float64), reused every token: no allocation per token.
  const buf = { w: new Float64Array(0), scratch: new Float64Array(0) };
  /** Fill buf.w; returns the id to emit without a draw when the logits force one (±∞ max), else −1. */
  const fill = (logits: Float32Array): number => {
    if (buf.w.length !== logits.length) buf.w = new Float64Array(logits.length);
    if ((topK > 0 || topP < 1) && buf.scratch.length !== logits.length) buf.scratch = new Float64Array(logits.length);
    return filteredWeights(logits, temperature, topK, topP, minP, buf.w, buf.scratch);
  };
  return {
    sample: (logits) => {
      const forced = fill(logits);
      return forced >= 0 ? forced : drawFrom(buf.w, rng.nextFloat());
    },
    distribution: {
      weights: (logits) => {
        const forced = fill(logits);
        if (forced >= 0) {
          buf.w.fill(0);
          buf.w[forced] = 1;
        }
        return buf.w;
      },
      uniform: () => rng.nextFloat(),
    },
  };
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

/** xoshiro128** (Blackman & Vigna), seeded through splitmix32 so nearby seeds give unrelated
 *  streams. State lives in the sampler object, never in module scope. */
export class Xoshiro128ss {
  private s = new Uint32Array(4);

  constructor(seed: number) {
    // Mix both 32-bit halves of a safe integer so seeds above 2^32 are distinct.
    let x = (seed >>> 0) ^ Math.imul(Math.floor(seed / 4294967296) >>> 0, 0x9e3779b1);
    for (let i = 0; i < 4; i++) {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      this.s[i] = (z ^ (z >>> 16)) >>> 0;
    }
    if ((this.s[0]! | this.s[1]! | this.s[2]! | this.s[3]!) === 0) this.s[0] = 1; // all-zero state is a fixed point
  }

  nextU32(): number {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1]!, 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1]! << 9) >>> 0;
    s[2] ^= s[0]!;
    s[3] ^= s[1]!;
    s[1] ^= s[2]!;
    s[0] ^= s[3]!;
    s[2] ^= t;
    s[3] = rotl(s[3]!, 11);
    return result;
  }

  /** Uniform double in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const hi = this.nextU32() >>> 5; // 27 bits
    const lo = this.nextU32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
