// Shared fixtures for the kernel tests: a seeded PRNG, random f32/bf16/MXFP4 data with edge
// values, f64 views and the error bounds derived in docs/NUMERICS.md. Not a test file itself.
import { describe, expect, test } from "bun:test";
import { loadKernels, ISA } from "../src/kernels.ts";

export const k = loadKernels();
/** Unit roundoff of f32 (round to nearest). */
export const U = 2 ** -24;
/** Half the spacing of f32 subnormals: the absolute error of one rounding into that range. */
export const SUB = 2 ** -150;
/** γ_n = n·u/(1 − n·u): the classic bound on n successive f32 roundings (Higham, Thm 3.1). */
export const gamma = (n: number) => (n * U) / (1 - n * U);

/** mulberry32: tiny seeded PRNG so every run sees the same "random" inputs. */
export function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    uniform: (lo: number, hi: number) => lo + (hi - lo) * next(),
    int: (n: number) => Math.floor(next() * n),
  };
}
export type Rng = ReturnType<typeof rng>;

export function randF32(r: Rng, n: number, lo = -1, hi = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = r.uniform(lo, hi);
  return a;
}
/** bf16 bit patterns of random values in ±[2^-8, 2) (finite, normal). */
export function randBF16(r: Rng, n: number): Uint16Array {
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  const a = new Uint16Array(n);
  for (let i = 0; i < n; i++) {
    f[0] = (r.next() < 0.5 ? -1 : 1) * 2 ** r.uniform(-8, 1);
    a[i] = u[0] >>> 16;
  }
  return a;
}
export const bf16ToF32 = (b: Uint16Array) => new Float32Array(new Uint32Array(Array.from(b, (x) => x << 16)).buffer);

/** Random MXFP4 weights: every nibble (incl. −0) and scales with the edge cases 0, 1, 254, 255. */
export function randMXFP4(r: Rng, rows: number, cols: number) {
  const packed = new Uint8Array((rows * cols) / 2);
  for (let i = 0; i < packed.length; i++) packed[i] = r.int(256);
  const scales = new Uint8Array((rows * cols) / 32);
  const edges = [0, 1, 254, 255];
  for (let i = 0; i < scales.length; i++) scales[i] = r.next() < 0.15 ? edges[r.int(4)] : 100 + r.int(50);
  return { packed, scales };
}

/** Random weights of all five matmul formats for `rows` rows: bf16 and f32 of `dense` columns,
 *  MXFP4, int8 and int4 (with their f32 group scales) of `grouped` columns (a multiple of 32). */
export function randFormats(r: Rng, rows: number, dense: number, grouped: number) {
  const Wb = randBF16(r, rows * dense);
  const Wf = randF32(r, rows * dense, -2, 2);
  const mx = randMXFP4(r, rows, grouped);
  const q8 = new Int8Array(rows * grouped).map(() => r.int(255) - 127);
  const q4 = new Uint8Array((rows * grouped) / 2).map(() => r.int(256));
  const qs = randF32(r, (rows * grouped) / 32, 0.001, 0.1);
  return { Wb, Wf, mx, q8, q4, qs };
}

export const f64 = (a: ArrayLike<number>) => Float64Array.from(a);

/** Forces an ISA and a pool size for the duration of fn (restored after). */
export function withIsaThreads<T>(isa: number, threads: number, fn: () => T): T {
  const prevIsa = k.k3_isa_get();
  const prevThreads = k.k3_pool_size();
  const got = k.k3_isa_set(isa);
  if (got < 0 || (isa !== -1 && got !== isa)) throw new Error(`ISA ${isa} not supported`);
  k.k3_pool_init(threads);
  try {
    return fn();
  } finally {
    k.k3_isa_set(prevIsa);
    k.k3_pool_init(prevThreads);
  }
}

/** ISA paths this CPU supports (a test for an unsupported path is skipped by name). */
export const supported = {
  scalar: k.k3_isa_supported(ISA.scalar) === 1,
  avx2: k.k3_isa_supported(ISA.avx2) === 1,
  avx512: k.k3_isa_supported(ISA.avx512) === 1,
  neon: k.k3_isa_supported(ISA.neon) === 1, // aarch64 (test/arm64.test.ts runs these tests there under qemu)
};
export const allIsas = [ISA.scalar, ISA.avx2, ISA.avx512, ISA.neon].filter((i) => k.k3_isa_supported(i) === 1);

/** Hash of the exact bits of a typed array. */
export const bitsHash = (a: ArrayBufferView) =>
  Bun.hash(new Uint8Array(a.buffer, a.byteOffset, a.byteLength)).toString(16);

/** Asserts |got − want| ≤ bound elementwise; reports the worst index on failure. */
export function expectWithin(got: ArrayLike<number>, want: ArrayLike<number>, bound: ArrayLike<number> | number, what: string) {
  if (got.length !== want.length) throw new Error(`${what}: length ${got.length} != ${want.length}`);
  for (let i = 0; i < got.length; i++) {
    const b = typeof bound === "number" ? bound : bound[i];
    const err = Math.abs(got[i] - want[i]);
    if (!(err <= b)) throw new Error(`${what}[${i}]: got ${got[i]}, want ${want[i]}, |err| ${err} > bound ${b}`);
  }
}

/** A case whose outputs are pinned: `hash` runs it and hashes the exact bits of what it wrote. */
export type PinnedCase = { name: string; hash: () => string };

/** One test per ISA path and thread count 1, 2: every case hashes to its GOLDEN entry (bits
 *  computed once with an older library, so a drift on every path at once still fails), plus a
 *  test that every case has an entry. With $K3_PRINT_GOLDEN set it prints the hashes of the
 *  first path instead (how GOLDEN is made, against that library via $K3_KERNELS). */
export function describePinnedBits(title: string, all: PinnedCase[], golden: Record<string, string>) {
  describe(title, () => {
    if (process.env.K3_PRINT_GOLDEN) {
      test("print", () => {
        const g: Record<string, string> = {};
        for (const c of all) g[c.name] = withIsaThreads(allIsas[0], 1, c.hash);
        console.log(JSON.stringify(g, null, 2));
      });
      return;
    }
    for (const isa of allIsas)
      for (const threads of [1, 2])
        test(`ISA ${isa}, ${threads} thread(s): ${all.length} cases equal the pinned bits`, () => {
          const bad: string[] = [];
          withIsaThreads(isa, threads, () => {
            for (const c of all) if (c.hash() !== golden[c.name]) bad.push(c.name);
          });
          expect(bad).toEqual([]);
        });
    test("every case has a pinned hash", () => {
      expect(all.map((c) => c.name).filter((n) => !(n in golden))).toEqual([]);
    });
  });
}
