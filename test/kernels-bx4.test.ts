// The exact compact trunk's kernels (issue 25, kernels/k3_bx4*.c): the encoder writes what the
// independent statement of the format (tools/reference/bx4.ts) writes, byte for byte; decoding
// gives back every bf16 word; and k3_matmul_bx4 gives k3_matmul_bf16's bits on the decoded matrix
// on every ISA path, thread count, token count, stride and row slice. A damaged escape table is
// refused (K3_ERR_DATA), never read outside its buffers.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { decodeBx4, encodeBx4, bx4RowBytes } from "../tools/reference/bx4.ts";
import { ISA, K3_STATUS } from "../src/kernels.ts";
import { bitsHash, k, randF32, rng, supported, withIsaThreads, type Rng } from "./kernels.helpers.ts";

// test/arm64.test.ts runs this file under qemu (every instruction emulated): far slower than here.
setDefaultTimeout(120_000);

const paths = [
  { name: "scalar", isa: ISA.scalar, ok: supported.scalar },
  { name: "AVX2", isa: ISA.avx2, ok: supported.avx2 },
  { name: "AVX-512", isa: ISA.avx512, ok: supported.avx512 },
  { name: "NEON", isa: ISA.neon, ok: supported.neon },
];

/** Trained-looking bf16 rows (normal, per-row scale), with edge words and escapes mixed in:
 *  ±0, subnormals, ±inf/NaN patterns, huge and tiny outliers (high bytes outside any table). */
function weights(r: Rng, rows: number, cols: number, escapes = true): Uint16Array {
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  const w = new Uint16Array(rows * cols);
  for (let i = 0; i < rows; i++) {
    const scale = 0.02 * 2 ** r.uniform(-3, 3);
    for (let c = 0; c < cols; c++) {
      const g = Math.sqrt(-2 * Math.log(1 - r.next())) * Math.cos(2 * Math.PI * r.next());
      f[0] = g * scale;
      if (escapes && r.next() < 0.01) f[0] *= 2 ** (r.int(60) - 30);
      w[i * cols + c] = u[0]! >>> 16;
    }
    // more distinct high bytes than a table holds: some of them escape in every row
    if (escapes) for (let e = 0; e < Math.min(cols, 24); e++) w[i * cols + r.int(cols)] = (((2 * e + 20) << 8) | r.int(256)) ^ (r.next() < 0.5 ? 0x8000 : 0);
  }
  if (escapes && w.length > 8) for (const [i, v] of [[0, 0x0000], [1, 0x8000], [2, 0x0001], [3, 0x7f80], [4, 0xff80], [5, 0x7fc1], [6, 0x8081], [7, 0x7f7f]] as const) w[(i * 37) % w.length] = v;
  return w;
}

function encode(w: Uint16Array, rows: number, cols: number) {
  const B = new Uint8Array(rows * bx4RowBytes(cols));
  const eidx = new Uint32Array(rows + 1);
  let ent = new Uint32Array(16);
  let n = Number(k.k3_bx4_encode(w, rows, cols, B, eidx, ent, ent.length, 0));
  if (n > ent.length) {
    ent = new Uint32Array(n);
    n = Number(k.k3_bx4_encode(w, rows, cols, B, eidx, ent, ent.length, 0));
  }
  expect(n).toBeGreaterThanOrEqual(0);
  return { B, eidx, ent: ent.subarray(0, n) };
}

function bf16Product(w: Uint16Array, X: Float32Array, rows: number, cols: number, T: number): Float32Array {
  const Y = new Float32Array(T * rows);
  expect(k.k3_matmul_bf16(w, X, cols, Y, rows, rows, cols, T)).toBe(K3_STATUS.ok);
  return Y;
}

function bx4Product(m: ReturnType<typeof encode>, X: Float32Array, ldx: number, rows: number, cols: number, T: number, ldy = rows): Float32Array {
  const Y = new Float32Array(T * ldy);
  expect(k.k3_matmul_bx4(m.B, m.eidx, m.ent, m.ent.length, X, ldx, Y, ldy, rows, cols, T)).toBe(K3_STATUS.ok);
  return Y;
}

const SIZES: [number, number][] = [[1, 1], [3, 15], [2, 16], [5, 17], [9, 100], [7, 512], [6, 4100], [5, 7168]];

describe("BX4 format", () => {
  test("the encoder writes the reference's bytes; both decoders give back every bf16 word", () => {
    const r = rng(25);
    for (const [rows, cols] of SIZES)
      for (const escapes of [false, true]) {
        const w = weights(r, rows, cols, escapes);
        const m = encode(w, rows, cols);
        const ref = encodeBx4(w, rows, cols);
        expect({ rows, cols, records: bitsHash(m.B), index: [...m.eidx], entries: [...m.ent] }).toEqual({ rows, cols, records: bitsHash(ref.records), index: [...ref.index], entries: [...ref.entries] });
        const back = new Uint16Array(rows * cols);
        expect(k.k3_bx4_decode(m.B, m.eidx, m.ent, m.ent.length, rows, cols, back)).toBe(K3_STATUS.ok);
        expect(bitsHash(back)).toBe(bitsHash(w));
        expect(bitsHash(decodeBx4(ref, rows, cols))).toBe(bitsHash(w));
        if (escapes && cols > 16) expect(m.ent.length).toBeGreaterThan(0); // the escape path is exercised
      }
  });

  test("a row with fewer than 16 distinct high bytes, and the escape numbering base of a row block", () => {
    const w = Uint16Array.from([0x3f80, 0x3f81, 0xbf80, 0x3f80, 0x0000, 0x3f82]);
    const ref = encodeBx4(w, 1, 6);
    expect([...ref.records.subarray(0, 16)]).toEqual([0x3f, 0x00, 0xbf, ...new Array(13).fill(0)]); // counts 4, 1, 1: ties by value
    const m = encode(w, 1, 6);
    expect(bitsHash(m.B)).toBe(bitsHash(ref.records));
    const eidx = new Uint32Array(2);
    expect(Number(k.k3_bx4_encode(weights(rng(1), 1, 64), 1, 64, new Uint8Array(bx4RowBytes(64)), eidx, new Uint32Array(64), 64, 1000))).toBeGreaterThan(0);
    expect(eidx[0]).toBe(1000);
  });
});

describe("k3_matmul_bx4 = k3_matmul_bf16 on the decoded matrix, bit for bit", () => {
  for (const p of paths)
    test.skipIf(!p.ok)(`ISA ${p.name}, threads 1–3, T = 1…9, 17, 33 (the batched loop nest from 8), strided x and y, row slices`, () => {
      const r = rng(7);
      for (const [rows, cols] of [...SIZES, [64, 2048] as [number, number], [33, 1536] as [number, number]]) {
        const w = weights(r, rows, cols);
        const m = encode(w, rows, cols);
        for (const T of [1, 2, 3, 4, 5, 9, 17, 33]) {
          const X = randF32(r, T * cols);
          const want = withIsaThreads(ISA.scalar, 1, () => bitsHash(bf16Product(w, X, rows, cols, T)));
          for (const threads of [1, 2, 3]) {
            const got = withIsaThreads(p.isa, threads, () => bitsHash(bx4Product(m, X, cols, rows, cols, T)));
            expect({ rows, cols, T, threads, got }).toEqual({ rows, cols, T, threads, got: want });
          }
          // x rows inside wider rows (ldx > cols), y rows inside a wider output, and a row slice
          const ldx = cols + 3;
          const Xs = new Float32Array(T * ldx);
          for (let t = 0; t < T; t++) Xs.set(X.subarray(t * cols, (t + 1) * cols), t * ldx);
          const full = withIsaThreads(p.isa, 2, () => bx4Product(m, Xs, ldx, rows, cols, T, rows + 5));
          const packedY = new Float32Array(T * rows);
          for (let t = 0; t < T; t++) packedY.set(full.subarray(t * (rows + 5), t * (rows + 5) + rows), t * rows);
          expect(bitsHash(packedY)).toBe(want);
          if (rows > 2) {
            const r0 = 1;
            const n = rows - 2;
            const Y = new Float32Array(T * rows);
            const rb = bx4RowBytes(cols);
            const st = withIsaThreads(p.isa, 2, () => k.k3_matmul_bx4(m.B.subarray(r0 * rb), m.eidx.subarray(r0), m.ent, m.ent.length, X, cols, Y.subarray(r0), rows, n, cols, T));
            expect(st).toBe(K3_STATUS.ok);
            const ref = bf16Product(w, X, rows, cols, T);
            for (let t = 0; t < T; t++) expect(bitsHash(Y.subarray(t * rows + r0, t * rows + r0 + n))).toBe(bitsHash(ref.subarray(t * rows + r0, t * rows + r0 + n)));
          }
        }
      }
    });
  // One token on long rows (≥ 8 KB records) with more rows per thread than the AVX-512 decode
  // block (k3_bx4_avx512.c BX_DECODE_ROWS = 12, then blocks of 4, then single rows), with
  // escapes in nearly every chunk of some row of a block and with none.
  for (const p of paths)
    test.skipIf(!p.ok)(`ISA ${p.name}, T = 1 on long rows (61×6200), threads 1–3, escapes dense and none`, () => {
      const r = rng(61);
      const [rows, cols] = [61, 6200];
      expect(bx4RowBytes(cols)).toBeGreaterThanOrEqual(8192);
      for (const escapes of [true, false]) {
        const w = weights(r, rows, cols, escapes);
        const m = encode(w, rows, cols);
        const X = randF32(r, cols);
        const want = withIsaThreads(ISA.scalar, 1, () => bitsHash(bf16Product(w, X, rows, cols, 1)));
        for (const threads of [1, 2, 3]) {
          const got = withIsaThreads(p.isa, threads, () => bitsHash(bx4Product(m, X, cols, rows, cols, 1)));
          expect({ escapes, threads, got }).toEqual({ escapes, threads, got: want });
        }
      }
    });
});

describe("a damaged escape table or bad sizes: a status, never a read outside the buffers", () => {
  const rows = 4;
  const cols = 64;
  const w = weights(rng(3), rows, cols);
  const good = encode(w, rows, cols);
  const X = randF32(rng(4), 9 * cols);
  // one token (row-blocked paths) and nine (the batched loop nest) must both refuse
  const call = (m: { B: Uint8Array; eidx: Uint32Array; ent: Uint32Array }, isa: number) =>
    [1, 9].map((T) => withIsaThreads(isa, 1, () => k.k3_matmul_bx4(m.B, m.eidx, m.ent, m.ent.length, X, cols, new Float32Array(T * rows), rows, rows, cols, T)));
  test("index past the entries, columns out of order or ≥ cols: K3_ERR_DATA on every path (and from the decoder)", () => {
    expect(good.ent.length).toBeGreaterThan(2);
    const cases: [string, (m: { eidx: Uint32Array; ent: Uint32Array }) => void][] = [
      ["index past the end", (m) => (m.eidx[2] = m.ent.length + 5)],
      ["index backwards", (m) => ((m.eidx[1] = m.eidx[2]! + 1), (m.eidx[2] = m.eidx[1]! - 1))],
      ["column ≥ cols", (m) => (m.ent[0] = (cols << 8) | 1)],
      ["columns out of order", (m) => (m.ent[1] = m.ent[0]!)],
    ];
    for (const [what, damage] of cases) {
      const m = { B: good.B, eidx: good.eidx.slice(), ent: good.ent.slice() };
      damage(m);
      for (const p of paths.filter((x) => x.ok)) expect({ what, path: p.name, st: call(m, p.isa) }).toEqual({ what, path: p.name, st: [K3_STATUS.data, K3_STATUS.data] });
      expect({ what, st: k.k3_bx4_decode(m.B, m.eidx, m.ent, m.ent.length, rows, cols, new Uint16Array(rows * cols)) }).toEqual({ what, st: K3_STATUS.data });
    }
    for (const p of paths.filter((x) => x.ok)) expect(call(good, p.isa)).toEqual([K3_STATUS.ok, K3_STATUS.ok]);
  });

  test("bad sizes: K3_ERR_ARG, nothing written", () => {
    const Y = new Float32Array(rows).fill(7);
    expect(k.k3_matmul_bx4(good.B, good.eidx, good.ent, good.ent.length, X, cols - 1, Y, rows, rows, cols, 1)).toBe(K3_STATUS.arg); // ldx < cols
    expect(k.k3_matmul_bx4(good.B, good.eidx, good.ent, good.ent.length, X, cols, Y, rows - 1, rows, cols, 1)).toBe(K3_STATUS.arg); // ldy < rows
    expect(k.k3_matmul_bx4(good.B, good.eidx, good.ent, -1, X, cols, Y, rows, rows, cols, 1)).toBe(K3_STATUS.arg);
    expect([...Y]).toEqual(new Array(rows).fill(7));
    expect(Number(k.k3_bx4_encode(w, rows, 0, good.B, good.eidx, good.ent, 0, 0))).toBe(K3_STATUS.arg);
  });
});
