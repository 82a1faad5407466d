// Bit-identity: the same output bits on every ISA path and at pool sizes 1, 2, 3; a row of a
// T-token batch equals that token computed alone; KDA/MLA incremental equals batched.
// Sizes are above the "small" cut (rows·cols ≥ 64K) so the pool really splits the work.
import { describe, expect, test } from "bun:test";
import { ISA } from "../src/kernels.ts";
import { k, rng, randF32, randBF16, randMXFP4, withIsaThreads, allIsas, supported, bitsHash } from "./kernels.helpers.ts";

const threadCounts = [1, 2, 3];

describe("matmul bits across ISA paths and thread counts", () => {
  const r = rng(51);
  const rows = 301, cols = 1000, T = 3, mcols = 512;
  const Wb = randBF16(r, rows * cols), Wf = randF32(r, rows * cols, -2, 2), X = randF32(r, T * cols);
  const { packed, scales } = randMXFP4(r, rows, mcols);
  const Xm = randF32(r, T * mcols, -(2 ** -8), 2 ** -8);

  function runAll(isa: number, threads: number) {
    const Yb = new Float32Array(T * rows), Yf = new Float32Array(T * rows), Ym = new Float32Array(T * rows);
    withIsaThreads(isa, threads, () => {
      k.k3_matmul_bf16(Wb, X, cols, Yb, rows, rows, cols, T);
      k.k3_matmul_f32(Wf, X, cols, Yf, rows, rows, cols, T);
      k.k3_matmul_mxfp4(packed, scales, Xm, mcols, Ym, rows, rows, mcols, T);
    });
    return { Yb, Yf, Ym };
  }

  test(`all supported paths (${allIsas.join(",")}) × threads 1, 2, 3 give one hash per kernel`, () => {
    const base = runAll(ISA.scalar, 1);
    const want = { bf16: bitsHash(base.Yb), f32: bitsHash(base.Yf), mxfp4: bitsHash(base.Ym) };
    for (const isa of allIsas)
      for (const n of threadCounts) {
        const got = runAll(isa, n);
        expect({ isa, n, bf16: bitsHash(got.Yb), f32: bitsHash(got.Yf), mxfp4: bitsHash(got.Ym) })
          .toEqual({ isa, n, ...want });
      }
  });

  test.skipIf(!supported.avx2)("AVX2 path present on this CPU (named skip otherwise)", () => {
    expect(k.k3_isa_set(ISA.avx2)).toBe(ISA.avx2);
    k.k3_isa_set(ISA.auto);
  });
  test.skipIf(!supported.avx512)("AVX-512 path present on this CPU (named skip otherwise)", () => {
    expect(k.k3_isa_set(ISA.avx512)).toBe(ISA.avx512);
    k.k3_isa_set(ISA.auto);
  });
  test.skipIf(!supported.neon)("NEON path present on this CPU (aarch64; named skip otherwise)", () => {
    expect(k.k3_isa_set(ISA.neon)).toBe(ISA.neon);
    k.k3_isa_set(ISA.auto);
  });
  test("the other architecture's paths are refused; scalar is always there", () => {
    const foreign = process.arch === "arm64" ? [ISA.avx2, ISA.avx512] : [ISA.neon];
    for (const isa of foreign) expect(k.k3_isa_set(isa)).toBe(-1);
    expect(k.k3_isa_set(ISA.scalar)).toBe(ISA.scalar);
    k.k3_isa_set(ISA.auto);
  });

  test("a row of a T-token batch equals the token computed alone (every path)", () => {
    for (const isa of allIsas) {
      const all = runAll(isa, 2);
      withIsaThreads(isa, 2, () => {
        for (let t = 0; t < T; t++) {
          const y = new Float32Array(rows), ym = new Float32Array(rows);
          k.k3_matmul_bf16(Wb, X.subarray(t * cols), cols, y, rows, rows, cols, 1);
          k.k3_matmul_mxfp4(packed, scales, Xm.subarray(t * mcols), mcols, ym, rows, rows, mcols, 1);
          expect(bitsHash(y)).toBe(bitsHash(all.Yb.subarray(t * rows, (t + 1) * rows)));
          expect(bitsHash(ym)).toBe(bitsHash(all.Ym.subarray(t * rows, (t + 1) * rows)));
        }
      });
    }
  });

  test("forcing an unsupported ISA is refused, auto picks the best", () => {
    expect(k.k3_isa_set(7)).toBe(-1);
    expect(k.k3_isa_set(ISA.auto)).toBe(allIsas[allIsas.length - 1]);
  });
});

describe("KDA and MLA bits across thread counts and batching", () => {
  const r = rng(61);
  const H = 5, D = 16, T = 7;
  const q = randF32(r, T * H * D, -0.3, 0.3), kk = randF32(r, T * H * D, -0.3, 0.3);
  const v = randF32(r, T * H * D, -1, 1), g = randF32(r, T * H * D, -5, 0), beta = randF32(r, T * H, 0, 1);

  function kdaBatched(threads: number) {
    const S = new Float32Array(H * D * D), o = new Float32Array(T * H * D);
    withIsaThreads(ISA.auto, threads, () => k.k3_kda_recurrent(q, kk, v, g, beta, S, o, H, D, T));
    return { S, o };
  }

  test("KDA recurrence: threads 1, 2, 3 and token-by-token all identical", () => {
    const base = kdaBatched(1);
    for (const n of threadCounts) {
      const got = kdaBatched(n);
      expect([bitsHash(got.S), bitsHash(got.o)]).toEqual([bitsHash(base.S), bitsHash(base.o)]);
    }
    const S = new Float32Array(H * D * D), o = new Float32Array(T * H * D);
    const w = H * D;
    for (let t = 0; t < T; t++)
      k.k3_kda_recurrent(q.subarray(t * w), kk.subarray(t * w), v.subarray(t * w), g.subarray(t * w),
        beta.subarray(t * H), S, o.subarray(t * w), H, D, 1);
    expect([bitsHash(S), bitsHash(o)]).toEqual([bitsHash(base.S), bitsHash(base.o)]);
  });

  test("MLA: threads 1, 2, 3 and incremental decode (pos0 = t, T = 1) all identical", () => {
    const Hm = 5, dn = 16, dr = 8, dv = 16, R = 48, scale = (dn + dr) ** -0.5, Tm = 6;
    const kvb = randBF16(r, Hm * (dn + dv) * R), qm = randF32(r, Tm * Hm * (dn + dr), -1, 1);
    const cache = randF32(r, Tm * (R + dr), -1, 1);
    const scratch = new Float32Array(Number(k.k3_mla_scratch_floats(R, Tm)));
    const run = (threads: number) => {
      const out = new Float32Array(Tm * Hm * dv);
      withIsaThreads(ISA.auto, threads, () =>
        expect(k.k3_mla_attend(qm, kvb, cache, out, scratch, Hm, dn, dr, dv, R, 0, Tm, scale, Tm, scratch.length)).toBe(0));
      return bitsHash(out);
    };
    const want = run(1);
    for (const n of threadCounts) expect(run(n)).toBe(want);
    const inc = new Float32Array(Tm * Hm * dv);
    for (let t = 0; t < Tm; t++)
      k.k3_mla_attend(qm.subarray(t * Hm * (dn + dr)), kvb, cache, inc.subarray(t * Hm * dv), scratch,
        Hm, dn, dr, dv, R, t, 1, scale, Tm, scratch.length);
    expect(bitsHash(inc)).toBe(want);
  });
});

describe("elementwise ops split across the pool", () => {
  test("sigmoid, mul_sigmoid and SiTU-GLU: threads 1, 2, 3 give the same bits (n above and below the split)", () => {
    const r = rng(71);
    for (const n of [4095, 4096, 100_003]) {
      const g = randF32(r, n, -30, 30), u = randF32(r, n, -60, 60);
      const run = (threads: number) =>
        withIsaThreads(ISA.auto, threads, () => {
          const s = g.slice(), m = u.slice(), o = new Float32Array(n), alias = g.slice();
          k.k3_sigmoid(s, n);
          k.k3_mul_sigmoid(m, g, n);
          k.k3_situ_glu(g, u, o, n, 4, 25);
          k.k3_situ_glu(alias, u, alias, n, 4, 25); // out aliases g
          return [bitsHash(s), bitsHash(m), bitsHash(o), bitsHash(alias)];
        });
      const one = run(1);
      expect(one[3]).toBe(one[2]);
      for (const threads of [2, 3]) expect({ n, threads, h: run(threads) }).toEqual({ n, threads, h: one });
    }
  });
});

describe("pool and memory", () => {
  test("pool resizes within 1..64, refuses sizes outside (unchanged), and the read probe sums bytes exactly", () => {
    expect(k.k3_pool_init(3)).toBe(3);
    expect(k.k3_pool_size()).toBe(3);
    expect(k.k3_pool_init(0)).toBe(-1);
    expect(k.k3_pool_init(65)).toBe(-1);
    expect(k.k3_pool_size()).toBe(3);
    expect(k.k3_pool_init(64)).toBe(64);
    expect(k.k3_pool_init(2)).toBe(2);
    const bytes = new Uint8Array(1_000_003);
    let want = 0n;
    for (let i = 0; i < bytes.length; i++) { bytes[i] = (i * 2654435761) >>> 24; want += BigInt(bytes[i]); }
    for (const isa of allIsas) withIsaThreads(isa, 3, () => expect(k.k3_mem_read_sum(bytes, bytes.length)).toBe(want));
    k.k3_pool_init(1);
  });

  test("the read probe's sum is exact for sizes off its 2 MiB blocks, at any start and 1–3 threads", () => {
    // The pool's parts take 2 MiB blocks (SUM_BLOCK, kernels/k3_mem.c) from a shared counter, so the
    // sizes sit on and beside 1, 2 and 4 MiB and between whole blocks; starts 1 and 33 bytes past a
    // line reach the vector loops' byte tails at both ends. Want = a prefix sum of the same bytes.
    const MiB = 2 ** 20;
    const sizes = [1, 63, 4097, MiB - 1, MiB + 1, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 4 * MiB - 1, 4 * MiB + 1, 3 * 2 * MiB + 5];
    const bytes = new Uint8Array(Math.max(...sizes) + 64);
    const prefix = new Float64Array(bytes.length + 1); // exact: < 2^53
    for (let i = 0; i < bytes.length; i++) {
      bytes[i] = Math.imul(i + 1, 2654435761) >>> 24;
      prefix[i + 1] = prefix[i]! + bytes[i]!;
    }
    const bad: string[] = [];
    for (const isa of allIsas)
      for (const threads of [1, 2, 3])
        withIsaThreads(isa, threads, () => {
          for (const n of sizes)
            for (const at of [0, 1, 33]) {
              const got = k.k3_mem_read_sum(bytes.subarray(at, at + n), n), want = BigInt(prefix[at + n]! - prefix[at]!);
              if (got !== want) bad.push(`isa ${isa}, ${threads} threads, ${n} bytes at +${at}: ${got}, want ${want}`);
            }
        });
    expect(bad).toEqual([]);
  });

  test("mem_alloc is zeroed and aligned; copy copies", () => {
    const p = k.k3_mem_alloc(4096, 64);
    expect(p).not.toBeNull();
    expect(Number(p) % 64).toBe(0);
    expect(k.k3_mem_read_sum(p, 4096)).toBe(0n);
    const src = new Uint8Array(4096).fill(3);
    k.k3_mem_copy(p, src, 4096);
    expect(k.k3_mem_read_sum(p, 4096)).toBe(3n * 4096n);
    k.k3_mem_free(p);
    expect(k.k3_mem_alloc(16, 3)).toBeNull(); // alignment must be a power of two
  });
});
