// One-token MXFP4 (decode's experts, kernels/k3_matmul_avx512.c / _avx2.c "one token"): rows one
// at a time with x pre-permuted, the E = 255 test once per row (a row with one takes the masked
// loop, the others none) and a vector scan of the row's scales (64 at a time, then a masked tail).
// Every ISA path at 1 and 2 threads must give the scalar path's bits for: rows that are not a
// multiple of anything (1, 2, 3, 5, 7, 9, 13, 67, 131), group counts 1, 64, 65 and 112 (the scan's
// full blocks and tails), E = 255 only in the first group of one row, the last group of another,
// several groups of two neighbouring rows, and no row at all; x with NaN, ±inf, ±0 and
// subnormals; −0 weights and scales 0 / 254.
import { describe, expect, test } from "bun:test";
import { ISA } from "../src/kernels.ts";
import { k, rng, randF32, randMXFP4, withIsaThreads, allIsas, type Rng } from "./kernels.helpers.ts";

const NAN_BITS = 0x7fc00000;
/** The output's bits, every NaN as one canonical NaN: paths may legitimately keep a different NaN
 *  payload or sign when two NaNs meet (operand order of a commutative add); everything else,
 *  −0 and subnormals included, must match bit for bit. */
function bits(y: Float32Array): number[] {
  return Array.from(new Uint32Array(y.buffer, y.byteOffset, y.length), (b, i) => (Number.isNaN(y[i]) ? NAN_BITS : b));
}

type Case = { name: string; rows: number; cols: number; packed: Uint8Array; scales: Uint8Array; X: Float32Array };

function cases(): Case[] {
  const r = rng(0x23a4);
  const out: Case[] = [];
  for (const cols of [32, 2048, 2080, 3584])
    for (const rows of [1, 2, 3, 5, 7, 9, 13, 67, 131]) {
      if (rows * cols > 131 * 2080 && rows > 67) continue; // keep it seconds
      const G = cols / 32;
      const { packed, scales } = randMXFP4(r, rows, cols);
      for (let i = 0; i < scales.length; i++) if (scales[i] === 255) scales[i] = 120; // 255 only where placed below
      scales[0] = 255; // row 0: first group only
      if (rows > 2) scales[2 * G + G - 1] = 255; // row 2: last group only
      if (rows > 4) for (const row of [3, 4]) for (let g = row - 3; g < G; g += 3) scales[row * G + g] = 255; // several groups, two neighbours
      if (rows > 5) packed.fill(0x88, 5 * (cols / 2), 6 * (cols / 2)); // row 5: all −0 weights
      const X = randF32(r, cols, -(2 ** -6), 2 ** -6);
      for (let i = 0; i < cols; i += 7) X[i] *= 2 ** -130; // subnormal x (and products below)
      X[1] = -0;
      out.push({ name: `${rows}x${cols} finite`, rows, cols, packed, scales, X });
      // NaN in group 0: every row's output is NaN except row 0, whose group 0 is skipped (E = 255)
      // — a row that forgot its mask, or took another row's, shows.
      const Xn = X.slice();
      Xn[3] = NaN;
      out.push({ name: `${rows}x${cols} NaN in group 0`, rows, cols, packed, scales, X: Xn });
      // ±inf in the last group: skipped for row 2 only.
      const Xi = X.slice();
      Xi[cols - 2] = Infinity;
      if (cols >= 64) Xi[cols - 20] = -Infinity;
      out.push({ name: `${rows}x${cols} inf in the last group`, rows, cols, packed, scales, X: Xi });
    }
  return out;
}

function run(c: Case): Float32Array {
  const Y = new Float32Array(c.rows).fill(12345); // a stale value shows an unwritten row
  const st = k.k3_matmul_mxfp4(c.packed, c.scales, c.X, c.cols, Y, c.rows, c.rows, c.cols, 1);
  if (st !== 0) throw new Error(`status ${st}`);
  return Y;
}

describe("one-token MXFP4 equals the scalar path bit for bit", () => {
  const all = cases();
  const want = all.map((c) => bits(withIsaThreads(ISA.scalar, 1, () => run(c))));
  test("the cases can fail: the scalar outputs carry the skips and the specials", () => {
    const i = all.findIndex((c) => c.name === "13x3584 NaN in group 0");
    const y = withIsaThreads(ISA.scalar, 1, () => run(all[i]!));
    const G = 3584 / 32, skips0 = (row: number) => all[i]!.scales[row * G] === 255; // rows 0 and 3
    expect([...y].map((v, row) => Number.isNaN(v) !== skips0(row))).toEqual(new Array(13).fill(true));
    expect(skips0(0) && skips0(3)).toBe(true);
    const j = all.findIndex((c) => c.name === "13x3584 inf in the last group");
    const yi = withIsaThreads(ISA.scalar, 1, () => run(all[j]!));
    expect(Number.isFinite(yi[2]!)).toBe(true); // row 2 skipped its last group (the infs)
    expect(Object.is(withIsaThreads(ISA.scalar, 1, () => run(all[all.findIndex((c) => c.name === "13x3584 finite")]!))[5], 0)).toBe(true); // −0 weights: +0 sum
  });
  for (const isa of allIsas.filter((i) => i !== ISA.scalar))
    for (const threads of [1, 2])
      test(`ISA ${isa}, ${threads} thread(s): ${all.length} cases`, () => {
        const bad: string[] = [];
        withIsaThreads(isa, threads, () => {
          all.forEach((c, i) => {
            const got = bits(run(c));
            const row = got.findIndex((b, r) => b !== want[i]![r]);
            if (row >= 0) bad.push(`${c.name}: row ${row} ${got[row]!.toString(16)} vs scalar ${want[i]![row]!.toString(16)}`);
          });
        });
        expect(bad).toEqual([]);
      });
});

// One-token MXFP4 at the scale fold's guard (docs/NUMERICS.md, "The scale fold"): the one-token
// paths do not fold (a fold through a per-scale-byte table was built, pinned by these cases and
// measured no faster on Zen 4: docs/BENCH-KERNELS.md, "Issue 23, item 4: the one-token scale
// fold"), and these cases are what any one-token fold must pass. Every ISA path at 1–3 threads
// gives the scalar path's bits on: x inside the guard (±0, ±2^-60 and ±2^60 mixed in); that x plus
// one outlier (2^-61, 2^61, a subnormal, ±inf, NaN: a fold must not run for the call); every x
// subnormal / a tiny normal / huge (where a fold changes bits). Rows (65 groups: the AVX-512 scale
// scan's full block and its tail): clean; every group one of the edge bytes 0, 1, 96, 97, 157, 158,
// 254, 255; one scale outside the guard (254 / 0 / 96 / 158) in the first, 64th, middle or last
// group; E = 255 in the first, last or every third group; E = 255 mixed with an outside scale —
// and the same rows again at the end of the matrix (another thread's part). With that fold in the
// kernels (docs/BENCH-KERNELS.md, same section), widening its guard to every finite x, to every E, or
// folding E = 255 with its +inf scale made these fail on AVX2 and AVX-512 at every thread count.
describe("one-token MXFP4 at the scale fold's guard: the scalar path's bits on every ISA, threads 1–3", () => {
  const COLS = 2080, G = COLS / 32, EDGE_E = [0, 1, 96, 97, 157, 158, 254, 255];
  const f32 = (v: number) => Math.fround(v);
  const SUBNORMAL = new Float32Array(new Uint32Array([0x00000001, 0x00012345, 0x007fffff]).buffer);
  /** [name, groups set to E] of the special rows (the others clean). */
  const special: [string, [number[] | "all", number][]][] = [
    ...EDGE_E.map((e): [string, [number[] | "all", number][]] => [`every group E = ${e}`, [["all", e]]]),
    ["254 in group 0", [[[0], 254]]], ["254 in group 63", [[[63], 254]]], ["254 in the last group", [[[G - 1], 254]]],
    ["254 in the middle", [[[40], 254]]], ["0 in group 0", [[[0], 0]]], ["96 in the last group", [[[G - 1], 96]]],
    ["158 in the middle", [[[33], 158]]],
    ["255 in group 0", [[[0], 255]]], ["255 in the last group", [[[G - 1], 255]]],
    ["255 every third group", [[Array.from({ length: 22 }, (_, i) => 3 * i + 1), 255]]],
    ["255 first, 254 last", [[[0], 255], [[G - 1], 254]]], ["255 last, 0 first", [[[G - 1], 255], [[0], 0]]],
    ["255 middle, 158 first", [[[30], 255], [[0], 158]]], ["255 first, 96 at 63", [[[0], 255], [[63], 96]]],
  ];
  const ROWS = 2 * special.length + 8; // ≥ 64K weights: the pool splits the rows at 2 and 3 threads
  /** Row index → special case (the list at the start and again at the end), else clean. */
  const specialOf = (row: number) => (row < special.length ? special[row] : row >= ROWS - special.length ? special[row - (ROWS - special.length)] : undefined);

  function scalesOf(seed: number, lo: number, hi: number): Uint8Array {
    const r = rng(seed), s = new Uint8Array(ROWS * G);
    for (let row = 0; row < ROWS; row++) {
      for (let g = 0; g < G; g++) s[row * G + g] = lo + r.int(hi - lo + 1);
      if (row === special.length) for (let g = 0; g < G; g += 5) s[row * G + g] = g % 2 ? 97 : 157; // the inner edges
      for (const [groups, e] of specialOf(row)?.[1] ?? [])
        for (const g of groups === "all" ? Array.from({ length: G }, (_, i) => i) : groups) s[row * G + g] = e;
    }
    return s;
  }
  function xInside(r: Rng): Float32Array {
    const x = new Float32Array(COLS);
    for (let i = 0; i < COLS; i++) {
      const u = r.next(), sign = r.next() < 0.5 ? -1 : 1;
      // ±2^60 only in groups ≡ 2 mod 4, away from the single outside scales; the rest in ±1/16, so
      // a group with E = 254 stays finite unfolded (|p| < 1) and overflows folded (w·2^127, |w| ≥ 2)
      const huge = u < 0.07 && (i >> 5) % 4 === 2;
      x[i] = u < 0.03 ? sign * 0 : u < 0.06 ? sign * 2 ** -60 : huge ? sign * 2 ** 60 : f32(r.uniform(-1, 1) / 16);
    }
    return x;
  }
  const xBits = (r: Rng, exp: () => number) =>
    new Float32Array(new Uint32Array(COLS).map(() => (((r.next() < 0.5 ? 1 : 0) << 31) | (exp() << 23) | r.int(1 << 23)) >>> 0).buffer);
  const r = rng(0x23f1);
  const packed = new Uint8Array((ROWS * COLS) / 2).map(() => r.int(256));
  const clean = scalesOf(0x5ca1, 100, 150), small = scalesOf(0x5ca2, 97, 127);
  const inside = xInside(r);
  const outlier = (v: number) => { const x = inside.slice(); x[1 + r.int(COLS - 1)] = v; return x; };
  const xs: { name: string; X: Float32Array; S: Uint8Array }[] = [
    { name: "x inside the guard (±0, ±2^-60, ±2^60 mixed in)", X: inside, S: clean },
    ...[2 ** -61, -(2 ** 61), SUBNORMAL[1]!, -SUBNORMAL[0]!, Infinity, -Infinity, NaN].map((v) => ({ name: `x inside plus one ${v}`, X: outlier(v), S: clean })),
    { name: "every x subnormal", X: xBits(r, () => 0), S: clean },
    { name: "every x a tiny normal (2^-126..2^-123)", X: xBits(r, () => 1 + r.int(4)), S: clean },
    { name: "every x huge (2^61..2^127), scales ≤ 1", X: xBits(r, () => 188 + r.int(66)), S: small },
  ];
  const runT1 = (X: Float32Array, S: Uint8Array) => {
    const Y = new Float32Array(ROWS).fill(12345);
    const st = k.k3_matmul_mxfp4(packed, S, X, COLS, Y, ROWS, ROWS, COLS, 1);
    if (st !== 0) throw new Error(`status ${st}`);
    return Y;
  };
  const rowName = (row: number) => specialOf(row)?.[0] ?? "clean";
  const want = xs.map((c) => bits(withIsaThreads(ISA.scalar, 1, () => runT1(c.X, c.S))));

  test("the cases can fail: a fold outside the guard would show in the scalar outputs", () => {
    const y = withIsaThreads(ISA.scalar, 1, () => runT1(inside, clean));
    const at = (name: string) => y[special.findIndex(([n]) => n === name)]!;
    // E = 255 groups are skipped: finite (folded with its +inf scale they would be ±inf or NaN);
    // every group 255: +0.
    for (const n of ["255 in group 0", "255 in the last group", "255 every third group", "255 first, 254 last"]) expect(Number.isFinite(at(n))).toBe(true);
    expect(Object.is(at("every group E = 255"), 0)).toBe(true);
    // E = 254 unfolded stays finite (folded, w·2^127 overflows for |w| ≥ 2).
    for (const n of ["254 in group 0", "254 in group 63", "254 in the last group", "254 in the middle"]) expect(Number.isFinite(at(n))).toBe(true);
  });
  for (const isa of allIsas.filter((i) => i !== ISA.scalar))
    for (const threads of [1, 2, 3])
      test(`ISA ${isa}, ${threads} thread(s): ${xs.length} x sets × ${ROWS} rows`, () => {
        const bad: string[] = [];
        withIsaThreads(isa, threads, () => {
          xs.forEach((c, i) => {
            const got = bits(runT1(c.X, c.S));
            const row = got.findIndex((b, rr) => b !== want[i]![rr]);
            if (row >= 0) bad.push(`${c.name}, row ${row} (${rowName(row)}): ${got[row]!.toString(16)} vs scalar ${want[i]![row]!.toString(16)}`);
          });
        });
        expect(bad).toEqual([]);
      });
});
