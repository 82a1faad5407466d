// The MXFP4 scale fold (docs/NUMERICS.md, "The scale fold"; kernels/k3_matmul_internal.h): the
// batched MXFP4 paths (T ≥ 8) compute a group as acc += (w·s)·xa + (w·s)·xb instead of
// acc += (w·xa + w·xb)·s, which gives the same bits only inside a guard (every scale of the group
// with E − 127 ∈ [−30, 30] or E = 255, which folds as a skipped group; every x of the call or token
// chunk ±0 or 2^-60 ≤ |x| ≤ 2^60). Here
// every ISA path this host has, at 1 and 2 threads, for T on both sides of the batched kernels'
// threshold (8: below it nothing folds) and of a token chunk (32), gives the bits of the scalar path
// (which never folds):
//  - inside the guard (the fold runs): random weights, x with ±0 and ±2^-60, ±2^60 mixed in, scales
//    up to the guard's edges E = 97 and 157;
//  - at and past the guard's edges, mixed in one call: scale bytes 0, 1, 96, 97, 157, 158, 254, 255
//    in some row panels and clean ones in others (tiles and groups fold or not one by one); one token
//    with 2^-61, 2^61, subnormals, ±inf and NaN (its token chunk falls back, the others fold);
//  - x far outside the guard (every x tiny, or every x huge) where folding would change bits.
// Widening the guard in the kernels makes these fail (tried: every E; E down to 1 or up to 254; E =
// 255 folded with its +inf scale; every finite x; x down to subnormals or 2^-126; every x): they are
// what proves the guard is needed, not only sufficient. (Widening it a little, E 96..158 with x
// 2^-61..2^65, changes no bit: the guard is sufficient with room, docs/NUMERICS.md.)
import { describe, expect, test } from "bun:test";
import { ISA } from "../src/kernels.ts";
import { allIsas, k, rng, withIsaThreads, type Rng } from "./kernels.helpers.ts";

const Ts = [2, 3, 4, 5, 8, 31, 32, 33, 64, 100];
/** 78 × 1056 = 82,368 weights (≥ 64K: the pool splits the rows at 2 threads); 33 groups per row =
 *  two 512-column tiles and a 32-column one; 78 rows = 9 panels of 8 and one of 6. */
const ROWS = 78;
const COLS = 1056;
const G = COLS / 32;
const EDGE_E = [0, 1, 96, 97, 157, 158, 254, 255];

const f32 = (v: number) => Math.fround(v);
const SUBNORMAL = new Float32Array(new Uint32Array([0x00000001, 0x00012345, 0x003fffff, 0x007fffff]).buffer);

/** Random packed nibbles (every E2M1 value, ±0 included). */
const packedOf = (r: Rng) => new Uint8Array((ROWS * COLS) / 2).map(() => r.int(256));

type Scales = "clean" | "edges" | "small";
/** Scale bytes. clean: 100..150, with the guard's inner edges 97 / 157 in ~30 % of the groups of
 *  panels (8 rows) ≡ 2 mod 3. edges: panel 0 clean, panel p = 1..8 every group EDGE_E[p − 1] (a
 *  panel of one edge byte: its tiles and groups fold or not on that byte alone, and its outputs are
 *  made of that byte's groups only, so a wrong fold shows), the last panel random edge bytes mixed
 *  with clean ones. small: 97..127 (s ≤ 1). */
function scalesOf(r: Rng, kind: Scales): Uint8Array {
  const s = new Uint8Array(ROWS * G);
  for (let row = 0; row < ROWS; row++)
    for (let g = 0; g < G; g++) {
      const panel = row >> 3;
      let e = kind === "small" ? 97 + r.int(31) : 100 + r.int(51);
      if (kind === "clean" && panel % 3 === 2 && r.next() < 0.3) e = r.next() < 0.5 ? 97 : 157;
      if (kind === "edges" && panel >= 1 && panel <= 8) e = EDGE_E[panel - 1]!;
      if (kind === "edges" && panel === 9 && r.next() < 0.5) e = EDGE_E[r.int(EDGE_E.length)]!;
      s[row * G + g] = e;
    }
  return s;
}

/** x uniform in ±1 with ~6 % of entries ±0 or ±2^-60 and ~1 % ±2^60 (all inside the guard). */
function xInside(r: Rng, T: number): Float32Array {
  const x = new Float32Array(T * COLS);
  for (let i = 0; i < x.length; i++) {
    const u = r.next(), sign = r.next() < 0.5 ? -1 : 1;
    x[i] = u < 0.03 ? sign * 0 : u < 0.06 ? sign * 2 ** -60 : u < 0.07 ? sign * 2 ** 60 : f32(r.uniform(-1, 1));
  }
  return x;
}

/** xInside, but one token (of the first chunk when T > 32, so later chunks still fold) also holds
 *  2^-61, 2^61, subnormals, ±inf and one NaN. */
function xWithOutliers(r: Rng, T: number): Float32Array {
  const x = xInside(r, T);
  const t = r.int(Math.min(T, 32));
  const bad = [2 ** -61, -(2 ** -61), 2 ** 61, -(2 ** 61), ...SUBNORMAL, -SUBNORMAL[1]!, Infinity, -Infinity, NaN];
  for (const v of bad) x[t * COLS + r.int(COLS)] = v;
  return x;
}

/** Random f32 bits with a biased exponent from `exp` and a full random mantissa, random sign. */
function xBits(r: Rng, T: number, exp: () => number): Float32Array {
  const x = new Float32Array(T * COLS);
  const u32 = new Uint32Array(x.buffer);
  for (let i = 0; i < x.length; i++) u32[i] = (((r.next() < 0.5 ? 1 : 0) << 31) | (exp() << 23) | r.int(1 << 23)) >>> 0;
  return x;
}
/** Every x subnormal: w·x rounds to the subnormal grid before a scale > 1 lifts it. */
const xSubnormal = (r: Rng, T: number) => xBits(r, T, () => 0);
/** Every x a tiny normal, 2^-126..2^-123: w·x·s rounds once for a scale < 1, the fold's (w·s)·x
 *  twice. (No bigger x in the same call: a row's sum would drown these terms' last bits.) */
const xTinyNormal = (r: Rng, T: number) => xBits(r, T, () => 1 + r.int(4));
/** Every x huge: 2^61..2^127 (w·x overflows before a scale ≤ 1 brings it back). */
const xHuge = (r: Rng, T: number) => xBits(r, T, () => 188 + r.int(66));

function run(isa: number, threads: number, packed: Uint8Array, scales: Uint8Array, X: Float32Array, T: number) {
  return withIsaThreads(isa, threads, () => {
    const Y = new Float32Array(ROWS * T).fill(7);
    const st = k.k3_matmul_mxfp4(packed, scales, X, COLS, Y, ROWS, ROWS, COLS, T);
    if (st !== 0) throw new Error(`k3_matmul_mxfp4 returned ${st}`);
    return new Uint32Array(Y.buffer);
  });
}

const isNaNBits = (b: number) => (b & 0x7fffffff) > 0x7f800000;
/** The first output whose bits differ from the scalar path's, or "" when none does. Two NaNs count
 *  as equal: which NaN an inf − inf meeting a NaN x leaves (sign bit 0x7fc00000 vs 0xffc00000)
 *  differs between the scalar and vector paths of main already (operand order of the compiler's
 *  choice); such outputs come only from calls the guard keeps unfolded (x = ±inf or NaN). */
function firstDiff(got: Uint32Array, want: Uint32Array, T: number): string {
  for (let i = 0; i < want.length; i++)
    if (got[i] !== want[i] && !(isNaNBits(got[i]!) && isNaNBits(want[i]!))) {
      const f = (b: number) => new Float32Array(new Uint32Array([b]).buffer)[0];
      return `token ${Math.floor(i / ROWS)} row ${i % ROWS} of T ${T}: ${f(got[i]!)} (0x${got[i]!.toString(16)}) vs scalar ${f(want[i]!)} (0x${want[i]!.toString(16)})`;
    }
  return "";
}

const CASES: { name: string; scales: Scales; x: (r: Rng, T: number) => Float32Array }[] = [
  { name: "inside the guard (x with ±0, ±2^-60, ±2^60; scales up to E = 97 and 157)", scales: "clean", x: xInside },
  { name: "scale bytes 0, 1, 96, 97, 157, 158, 254, 255, a panel each and mixed", scales: "edges", x: xInside },
  { name: "one token with 2^-61, 2^61, subnormals, ±inf, NaN; edge scales", scales: "edges", x: xWithOutliers },
  { name: "every x subnormal", scales: "clean", x: xSubnormal },
  { name: "every x a tiny normal (2^-126..2^-123)", scales: "clean", x: xTinyNormal },
  { name: "every x huge (2^61..2^127), scales ≤ 1", scales: "small", x: xHuge },
];

describe("MXFP4 scale fold: the same bits as the scalar path on every ISA, threads 1 and 2", () => {
  const vector = allIsas.filter((i) => i !== ISA.scalar);
  for (const [ci, c] of CASES.entries())
    test(`${c.name}: T ${Ts.join(", ")}`, () => {
      const r = rng(0xf01d + ci);
      const packed = packedOf(r);
      const scales = scalesOf(r, c.scales);
      const diffs: string[] = [];
      for (const T of Ts) {
        const X = c.x(r, T);
        const want = run(ISA.scalar, 1, packed, scales, X, T);
        for (const isa of vector)
          for (const threads of [1, 2]) {
            const d = firstDiff(run(isa, threads, packed, scales, X, T), want, T);
            if (d) diffs.push(`isa ${isa} threads ${threads}: ${d}`);
          }
      }
      expect(diffs).toEqual([]);
    });

});
