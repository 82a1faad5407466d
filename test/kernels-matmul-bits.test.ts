// The matmul speed-ups (row blocks, token blocks, new MXFP4 decode; docs/BENCH-KERNELS.md) must
// not change one output bit. GOLDEN holds the bit hashes produced by the implementation before
// those changes (commit e0832dd, scalar path — every path equalled it then), so this test fails
// if any path, thread count or batch size drifts from the old bits, even if the scalar path
// itself were edited. Shapes are chosen to hit every remainder of the blocked loops: rows not a
// multiple of the row block, T from 1 to 9 (token blocks of 4 plus tails), column tails of
// 0..15 for bf16/f32, short and long (≥ 12 KB: read 4 rows at a time) rows at T = 1, NaN-scale
// groups, scales 0/1/254 (subnormal and huge), −0 weights.
import { describe, expect, setDefaultTimeout, test } from "bun:test";

// Every path × 3 thread counts × every case, scalar included: seconds natively, ~10× that under
// qemu-aarch64 (test/arm64.test.ts runs this file with bun's default 5 s limit). No timing is
// asserted; the limit only has to outlast a slow machine.
setDefaultTimeout(300_000);
import { ISA } from "../src/kernels.ts";
import { k, rng, randF32, randBF16, randMXFP4, randFormats, withIsaThreads, bitsHash, supported } from "./kernels.helpers.ts";

/** Every ISA path; one this CPU lacks is a named skip, so an AVX2-only run says AVX-512 was not tested. */
const PATHS = (["scalar", "avx2", "avx512", "neon"] as const).map((name) => ({ name, isa: ISA[name], here: supported[name] }));

type Case = { name: string; run: () => Float32Array };

function cases(): Case[] {
  const out: Case[] = [];
  const r = rng(0x6b33);
  const dense: [number, number, number][] = [
    [1, 7, 1], [5, 16, 2], [3, 31, 4], [37, 100, 9], [9, 513, 5], [300, 1000, 5], [67, 4099, 3], [260, 257, 8],
  ];
  for (const [rows, cols, T] of dense) {
    const Wb = randBF16(r, rows * cols), Wf = randF32(r, rows * cols, -2, 2);
    const X = randF32(r, T * cols, -3, 3);
    X[0] = -0; // a signed zero input
    out.push({ name: `bf16 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_bf16(Wb, X, cols, Y, rows, rows, cols, T); return Y; } });
    out.push({ name: `f32 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_f32(Wf, X, cols, Y, rows, rows, cols, T); return Y; } });
  }
  const mx: [number, number, number][] = [
    [1, 32, 1], [7, 64, 9], [301, 512, 6], [130, 1056, 4], [5, 3072, 2], [33, 96, 7], [256, 288, 3],
  ];
  for (const [rows, cols, T] of mx) {
    const { packed, scales } = randMXFP4(r, rows, cols);
    // Row 0: every group NaN-scaled (output must be exactly +0); row 1 (if any) all −0 weights.
    scales.fill(255, 0, cols / 32);
    if (rows > 1) packed.fill(0x88, cols / 2, cols);
    // Mix magnitudes so some products land in the subnormal range, others near 2^127.
    const X = randF32(r, T * cols, -(2 ** -8), 2 ** -8);
    for (let i = 0; i < X.length; i += 5) X[i] *= 2 ** -120;
    X[1] = -0;
    out.push({ name: `mxfp4 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_mxfp4(packed, scales, X, cols, Y, rows, rows, cols, T); return Y; } });
  }
  // Appended later (after the MXFP4 cases, so the cases above keep their random inputs): long
  // bf16 rows (≥ 12 KB) at T = 1 and T = 5, read 4 rows at a time.
  dense.length = 0;
  dense.push([9, 6200, 1], [6, 6200, 5]);
  for (const [rows, cols, T] of dense) {
    const Wb = randBF16(r, rows * cols), X = randF32(r, T * cols, -3, 3);
    out.push({ name: `bf16 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_bf16(Wb, X, cols, Y, rows, rows, cols, T); return Y; } });
  }
  // MXFP4 at T = 1 on both one-token paths: x pre-permuted (cols ≤ 8192) and the fallback.
  for (const [rows, cols] of [[40, 512], [6, 8224]]) {
    const { packed, scales } = randMXFP4(r, rows, cols);
    const X = randF32(r, cols, -(2 ** -8), 2 ** -8);
    out.push({ name: `mxfp4 ${rows}x${cols} T1`, run: () => { const Y = new Float32Array(rows); k.k3_matmul_mxfp4(packed, scales, X, cols, Y, rows, rows, cols, 1); return Y; } });
  }
  // Appended with the batched kernels (k3_matmul_batch*.c, T ≥ 8): shapes that hit every edge
  // of their loop nest — rows not a multiple of the panel (16) or register blocks, T beyond one
  // token chunk (32) and not a multiple of the token blocks, column tiles of 256 with a partial
  // last tile, column tails (dense), no full 16 columns at all (3×7), one MXFP4 group, NaN-scale
  // rows inside a block.
  dense.length = 0;
  dense.push([37, 300, 33], [70, 1030, 64], [20, 520, 8], [5, 16, 100], [3, 7, 12], [130, 257, 40]);
  for (const [rows, cols, T] of dense) {
    const Wb = randBF16(r, rows * cols), Wf = randF32(r, rows * cols, -2, 2), X = randF32(r, T * cols, -3, 3);
    X[0] = -0;
    out.push({ name: `bf16 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_bf16(Wb, X, cols, Y, rows, rows, cols, T); return Y; } });
    out.push({ name: `f32 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_f32(Wf, X, cols, Y, rows, rows, cols, T); return Y; } });
  }
  for (const [rows, cols, T] of [[37, 320, 33], [70, 1056, 64], [18, 96, 8], [3, 32, 100]] as const) {
    const { packed, scales } = randMXFP4(r, rows, cols);
    scales.fill(255, cols / 32, (2 * cols) / 32); // row 1: every group NaN-scaled
    packed.fill(0x88, 2 * (cols / 2), 3 * (cols / 2)); // row 2: all −0 weights
    const X = randF32(r, T * cols, -(2 ** -8), 2 ** -8);
    for (let i = 0; i < X.length; i += 5) X[i] *= 2 ** -120;
    out.push({ name: `mxfp4 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_mxfp4(packed, scales, X, cols, Y, rows, rows, cols, T); return Y; } });
  }
  out.push(...qCases(), ...decodeRowCases());
  return out;
}

/** One-token products of long rows with more rows per thread than the AVX-512 decode block
 *  (k3_matmul_avx512.c DENSE_DECODE_ROWS = 12, then blocks of 4, then single rows), bf16 and f32,
 *  at 1–3 threads, rows on both sides of DENSE_BLOCK_MIN_ROW_BYTES: their own random stream,
 *  hashed with the library before that block (the later shapes: before the threshold moved). */
function decodeRowCases(): Case[] {
  const r = rng(0x12d0);
  const out: Case[] = [];
  // 29×3591 (appended with the 6 KB threshold, issue 23): 7 KB bf16 rows, now read 12 at a
  // time, and 13×3071: 6142-byte bf16 rows, just under it (one at a time); f32 rows twice as long.
  for (const [rows, cols] of [[61, 6200], [45, 3090], [29, 3591], [13, 3071]] as const) {
    const Wb = randBF16(r, rows * cols), Wf = randF32(r, rows * cols, -2, 2), X = randF32(r, cols, -3, 3);
    X[0] = -0;
    out.push({ name: `bf16 ${rows}x${cols} T1`, run: () => { const Y = new Float32Array(rows); k.k3_matmul_bf16(Wb, X, cols, Y, rows, rows, cols, 1); return Y; } });
    out.push({ name: `f32 ${rows}x${cols} T1`, run: () => { const Y = new Float32Array(rows); k.k3_matmul_f32(Wf, X, cols, Y, rows, rows, cols, 1); return Y; } });
  }
  return out;
}

/** The compact trunk's int8 / int4 products (issue 23: batched from T = 8 on), with their own
 *  random stream: every integer (int8 −128 included), scales of both signs, 0 and subnormal, at
 *  T = 1–9 (the row-blocked paths) and 8 … 100 (the batched ones) on shapes that hit every edge of
 *  the loop nest (rows not a multiple of 16 or 4, one group, a partial last column tile). */
function qCases(): Case[] {
  const r = rng(0x5138);
  const out: Case[] = [];
  for (const [rows, cols, T] of [[5, 64, 3], [9, 96, 9], [18, 96, 8], [37, 320, 33], [70, 1056, 64], [3, 32, 100], [300, 512, 5]] as const) {
    const q8 = new Int8Array(rows * cols).map(() => r.int(256) - 128);
    const q4 = new Uint8Array((rows * cols) / 2).map(() => r.int(256));
    const S = randF32(r, (rows * cols) / 32, -0.05, 0.05);
    S[0] = 0, S[S.length - 1] = 2 ** -140; // a zero scale and a subnormal one
    const X = randF32(r, T * cols, -2, 2);
    X[0] = -0;
    out.push({ name: `q8 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_q8(q8, S, X, cols, Y, rows, rows, cols, T); return Y; } });
    out.push({ name: `q4 ${rows}x${cols} T${T}`, run: () => { const Y = new Float32Array(rows * T); k.k3_matmul_q4(q4, S, X, cols, Y, rows, rows, cols, T); return Y; } });
  }
  return out;
}

/** Bits of the pre-optimisation implementation (scalar path at e0832dd) for every case above
 * (the 6200-column and the last two MXFP4 cases were added later, hashed with the library built
 * from e0832dd; the int8 / int4 cases with the one from e0e6808). */
const GOLDEN: Record<string, string> = {
  "bf16 1x7 T1": "6bc3bba07fed326f",
  "f32 1x7 T1": "7ecb1dcf4e4b6942",
  "bf16 5x16 T2": "4505b4e9bf653f6f",
  "f32 5x16 T2": "1e9f3f174e550596",
  "bf16 3x31 T4": "be15aa6e5a2267fa",
  "f32 3x31 T4": "e15a068fad034f9c",
  "bf16 37x100 T9": "51ec790660c1510d",
  "f32 37x100 T9": "d88bbdd2f36b1ef4",
  "bf16 9x513 T5": "a21c562255f9d9f1",
  "f32 9x513 T5": "cb2597b30c18d9ff",
  "bf16 300x1000 T5": "a3b1b59d4f5c7a33",
  "f32 300x1000 T5": "346c927f14a83c7c",
  "bf16 67x4099 T3": "2d3e4cb6118a2d64",
  "f32 67x4099 T3": "e78460ae9f4701a3",
  "bf16 260x257 T8": "d04a249f5afe1d62",
  "f32 260x257 T8": "effae688b39cbb7e",
  "mxfp4 1x32 T1": "14b83016dc460955",
  "mxfp4 7x64 T9": "63f1b872ef4cb622",
  "mxfp4 301x512 T6": "1928417309b3c9e3",
  "mxfp4 130x1056 T4": "3a7081bbc1f3bb08",
  "mxfp4 5x3072 T2": "a7f8ccdbd36ce832",
  "mxfp4 33x96 T7": "d0ffdbcfdbabdf01",
  "mxfp4 256x288 T3": "b11ace88e778bc37",
  "bf16 9x6200 T1": "e4dc8fa921c86cc4",
  "bf16 6x6200 T5": "fd9a6979d9a6e1be",
  "mxfp4 40x512 T1": "4483ad62de3c5ebf",
  "mxfp4 6x8224 T1": "f8de5f698bf40b2e",
  // the batched-kernel cases, hashed with the library built from 4cb3cb6 (before those kernels)
  "bf16 130x257 T40": "3b20d0bd770e3abc",
  "bf16 20x520 T8": "b4e193a8fb973e72",
  "bf16 37x300 T33": "acd4ae0abaafd4c0",
  "bf16 3x7 T12": "812c9026d7c39be4",
  "bf16 5x16 T100": "1efafef141236f73",
  "bf16 70x1030 T64": "f3d3899aebc6b7ff",
  "f32 130x257 T40": "b5e80d7021c99c64",
  "f32 20x520 T8": "ced2b42d8a540741",
  "f32 37x300 T33": "3316401f0be2b20b",
  "f32 3x7 T12": "1ea38ce286a98d1d",
  "f32 5x16 T100": "a80557a7671aabb0",
  "f32 70x1030 T64": "d0c8e9a23c658b38",
  "mxfp4 18x96 T8": "b1f087f9605fb07e",
  "mxfp4 37x320 T33": "9a066bdb89e54f05",
  "mxfp4 3x32 T100": "73f28be48e2c4f43",
  "mxfp4 70x1056 T64": "b5d26f92d8b2b666",
  // the int8 / int4 cases (qCases), hashed with the library built from e0e6808 (scalar path),
  // before the batched int8/int4 kernels (issue 23)
  "q8 5x64 T3": "63b51ed081941f41",
  "q4 5x64 T3": "da321c6098969636",
  "q8 9x96 T9": "5c824400d19bd52",
  "q4 9x96 T9": "17183397ca283366",
  "q8 18x96 T8": "a5c468451ac7f660",
  "q4 18x96 T8": "99bd212225db7b3a",
  "q8 37x320 T33": "25d0138de4ee06e2",
  "q4 37x320 T33": "5c9b512750032e68",
  "q8 70x1056 T64": "45ed60f8987f54f8",
  "q4 70x1056 T64": "2272f11188b8c2aa",
  "q8 3x32 T100": "4db4009b784b61e7",
  "q4 3x32 T100": "d4eeae4c00b7ff94",
  "q8 300x512 T5": "f063e77e20f78f5",
  "q4 300x512 T5": "d92717249ddffc22",
  // decodeRowCases, hashed with the library built from 9e91560 (before the 12-row decode block)
  "bf16 61x6200 T1": "703649cd54825ee5",
  "f32 61x6200 T1": "c2b8004dd3adbdcf",
  "bf16 45x3090 T1": "ba41cae2658a6379",
  "f32 45x3090 T1": "7e8022b3b4db6bc8",
  // hashed with the library built from main 760de93 (before the 6 KB one-token threshold)
  "bf16 29x3591 T1": "1235bc03f7af6c6a",
  "f32 29x3591 T1": "6e990fcae025d84f",
  "bf16 13x3071 T1": "52193a205e5edb89",
  "f32 13x3071 T1": "691b6150e43e3904"
};

describe("matmul bits equal the pre-optimisation implementation", () => {
  const all = cases();
  test("GOLDEN covers every case", () => {
    expect(Object.keys(GOLDEN).sort()).toEqual(all.map((c) => c.name).sort());
  });
  for (const { name, isa, here } of PATHS)
    test.skipIf(!here)(`ISA ${name}, threads 1, 2, 3: every case hashes to the saved bits`, () => {
      for (const threads of [1, 2, 3]) {
        const got: Record<string, string> = {};
        withIsaThreads(isa, threads, () => { for (const c of all) got[c.name] = bitsHash(c.run()); });
        expect({ isa, threads, ...got }).toEqual({ isa, threads, ...GOLDEN });
      }
    });

  for (const { name, isa, here } of PATHS)
    test.skipIf(!here)(`ISA ${name}: the −0 weight row and the all-NaN-scale row give +0 exactly`, () => {
      const c = all.find((x) => x.name === "mxfp4 7x64 T9")!;
      const Y = withIsaThreads(isa, 1, c.run);
      for (let t = 0; t < 9; t++) {
        expect(Object.is(Y[t * 7], 0)).toBe(true); // row 0: all groups skipped
        expect(Object.is(Y[t * 7 + 1], 0)).toBe(true); // row 1: −0 weights sum to +0
      }
    });
});


// The batched loop nest's chunk of 64 tokens and its sweeps of 48 rows (kernels/k3_matmul_batch.c,
// issue 23 round six): T on both sides of one and two chunks, rows that end a sweep on a partial
// panel and leave a partial last sweep, a partial last column tile; MXFP4 with one row whose scale
// 0 keeps its tiles out of the fold while the rest of the sweep folds. Every ISA path at 1–3
// threads must give the bits of the same product one token at a time on the scalar path (the
// reference order, no batched code at all).
describe("batched chunks and row sweeps: the bits of one token at a time", () => {
  const r = rng(0x64c4);
  const rows = 101, dense = 1046, grouped = 1056; // 101 = 2 sweeps of 48 + 5; 1046 = 2 tiles + 22 (a 6-column tail)
  const { Wb, Wf, mx, q8, q4, qs } = randFormats(r, rows, dense, grouped);
  // scales inside the fold's guard (some 255: skipped groups), except row 50: E = 0, outside it
  for (let i = 0; i < mx.scales.length; i++) mx.scales[i] = r.next() < 0.05 ? 255 : 100 + r.int(50);
  mx.scales.fill(0, 50 * (grouped / 32), 51 * (grouped / 32));
  const Ts = [63, 64, 65, 127, 128, 129];
  const kinds: { name: string; cols: number; call: (X: Float32Array, Y: Float32Array, T: number) => number }[] = [
    { name: "bf16", cols: dense, call: (X, Y, T) => k.k3_matmul_bf16(Wb, X, dense, Y, rows, rows, dense, T) },
    { name: "f32", cols: dense, call: (X, Y, T) => k.k3_matmul_f32(Wf, X, dense, Y, rows, rows, dense, T) },
    { name: "mxfp4", cols: grouped, call: (X, Y, T) => k.k3_matmul_mxfp4(mx.packed, mx.scales, X, grouped, Y, rows, rows, grouped, T) },
    { name: "q8", cols: grouped, call: (X, Y, T) => k.k3_matmul_q8(q8, qs, X, grouped, Y, rows, rows, grouped, T) },
    { name: "q4", cols: grouped, call: (X, Y, T) => k.k3_matmul_q4(q4, qs, X, grouped, Y, rows, rows, grouped, T) },
  ];
  for (const kn of kinds)
    test(`${kn.name} ${rows}x${kn.cols}, T ${Ts.join(", ")}: every ISA and 1–3 threads = one token at a time on the scalar path`, () => {
      for (const T of Ts) {
        const X = randF32(r, T * kn.cols, -1, 1);
        X[0] = -0;
        const single = new Float32Array(T * rows);
        withIsaThreads(ISA.scalar, 1, () => {
          for (let t = 0; t < T; t++) kn.call(X.subarray(t * kn.cols), single.subarray(t * rows), 1);
        });
        for (const { isa, here } of PATHS)
          if (here)
            for (const threads of [1, 2, 3]) {
              const Y = new Float32Array(T * rows);
              const st = withIsaThreads(isa, threads, () => kn.call(X, Y, T));
              expect({ isa, threads, T, st, bits: bitsHash(Y) }).toEqual({ isa, threads, T, st: 0, bits: bitsHash(single) });
            }
      }
    });
});
