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
import { k, rng, randF32, randMXFP4, withIsaThreads, allIsas } from "./kernels.helpers.ts";

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
