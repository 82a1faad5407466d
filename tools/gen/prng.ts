// Seeded PRNG for the test-model generator: xoshiro128** (Blackman & Vigna), seeded through
// splitmix32. Never Math.random: the same preset + seed must give byte-identical files.
//
// Each tensor gets its own stream, derived from (seed, tensor name), so a tensor's bytes do not
// depend on the order tensors are written in: `breakLayout` reorders tensors but keeps every
// tensor's content, which lets tests compare bytes across layouts.

/** splitmix32 step: returns [next state, output]; used only to expand a seed into a state. */
function splitmix32(state: number): [number, number] {
  state = (state + 0x9e3779b9) >>> 0;
  let z = state;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return [state, (z ^ (z >>> 16)) >>> 0];
}

/** FNV-1a over the UTF-16 code units of `s` (names are ASCII): a stable 32-bit stream id. */
export function hashName(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

export class Xoshiro128 {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  /** `seed` and `stream` are any 32-bit integers; different (seed, stream) pairs give independent sequences. */
  constructor(seed: number, stream = 0) {
    let st = (seed ^ Math.imul(stream >>> 0, 0x27d4eb2d)) >>> 0;
    let o: number;
    [st, o] = splitmix32(st);
    this.s0 = o;
    [st, o] = splitmix32(st ^ stream);
    this.s1 = o;
    [st, o] = splitmix32(st);
    this.s2 = o;
    [st, o] = splitmix32(st);
    this.s3 = o;
    // xoshiro's only bad state is all zeros.
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** Stream for one tensor of one model. */
  static forTensor(seed: number, name: string): Xoshiro128 {
    return new Xoshiro128(seed >>> 0, hashName(name));
  }

  nextU32(): number {
    const s1 = this.s1;
    const m = Math.imul(s1, 5);
    const result = Math.imul((m << 7) | (m >>> 25), 9) >>> 0;
    const t = s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = (this.s3 << 11) | (this.s3 >>> 21);
    return result;
  }

  /** Uniform in (0, 1), never 0 or 1 (safe for inverse CDFs). */
  nextOpen01(): number {
    return (this.nextU32() + 0.5) / 4294967296;
  }

  /** Uniform integer in [0, n). Modulo bias is irrelevant for test weights. */
  nextInt(n: number): number {
    return this.nextU32() % n;
  }

  /** Fills `out` with raw 32-bit outputs. The hot loop of the multi-GB `slice` preset, so the
   *  state lives in locals for the duration of the loop. Same sequence as repeated nextU32(). */
  fillU32(out: Uint32Array): void {
    let s0 = this.s0, s1 = this.s1, s2 = this.s2, s3 = this.s3;
    for (let i = 0; i < out.length; i++) {
      const m = Math.imul(s1, 5);
      out[i] = Math.imul((m << 7) | (m >>> 25), 9);
      const t = s1 << 9;
      s2 ^= s0;
      s3 ^= s1;
      s1 ^= s2;
      s0 ^= s3;
      s2 ^= t;
      s3 = (s3 << 11) | (s3 >>> 21);
    }
    this.s0 = s0; this.s1 = s1; this.s2 = s2; this.s3 = s3;
  }
}
