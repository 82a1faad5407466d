// The compact trunk's formats (issue 16, `k3 pack --trunk int8|int4`), written from their
// definition in kernels/k3.h alone: group-quantised matrices, integers q in groups of 32 columns
// with one f32 scale per group, w ≈ q·s. Decoded exactly to float64; the quantiser emulates the
// f32 arithmetic it specifies with Math.fround (an f32 division rounded once: exact emulation,
// since a double holds the quotient of two f32 to more than 2·24 + 2 bits).
// Imports nothing from src/: an independent statement of the format.

export type QBits = 8 | 4;

/**
 * Q8: q int8 [rows][cols]; Q4: [rows][cols/2] bytes, in group g byte i holds column 32g+i in its
 * low nibble and column 32g+16+i in its high nibble, each stored as q+8. scales: f32 [rows][cols/32].
 * Returns W [rows][cols] with W[r][c] = q(r,c)·s(r, c/32), exactly.
 */
export function decodeQ(bits: QBits, q: Uint8Array, scales: Float32Array, rows: number, cols: number): Float64Array {
  if (cols % 32) throw new Error(`decodeQ: cols ${cols} is not a multiple of 32`);
  const rowBytes = bits === 8 ? cols : cols / 2;
  if (q.length !== rows * rowBytes) throw new Error(`decodeQ: ${q.length} bytes of weights, want ${rows}×${rowBytes}`);
  if (scales.length !== (rows * cols) / 32) throw new Error(`decodeQ: ${scales.length} scales, want ${rows}×${cols / 32}`);
  const W = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      const g = c >> 5;
      const i = c & 31;
      let v: number;
      if (bits === 8) {
        const b = q[r * rowBytes + c]!;
        v = b >= 128 ? b - 256 : b;
      } else {
        const b = q[r * rowBytes + g * 16 + (i & 15)]!;
        v = (i < 16 ? b & 15 : b >> 4) - 8;
      }
      W[r * cols + c] = v * scales[r * (cols / 32) + g]!;
    }
  return W;
}

/** Round half to even (C's rintf in the default rounding mode). */
function rintEven(x: number): number {
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/**
 * The quantiser: per group s = fl32(amax / qmax) (qmax 127 or 7), q = rint(fl32(w / s)) clamped
 * to ±qmax; s = 0 (all q = 0) for an all-zero group. `w` holds the bf16 weights as float64.
 */
export function quantize(bits: QBits, w: Float64Array, rows: number, cols: number): { q: Uint8Array; scales: Float32Array } {
  const qmax = bits === 8 ? 127 : 7;
  const G = cols / 32;
  const rowBytes = bits === 8 ? cols : cols / 2;
  const q = new Uint8Array(rows * rowBytes);
  const scales = new Float32Array(rows * G);
  for (let r = 0; r < rows; r++)
    for (let g = 0; g < G; g++) {
      let amax = 0;
      for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(w[r * cols + g * 32 + i]!));
      const s = Math.fround(amax / qmax);
      scales[r * G + g] = s;
      const v: number[] = [];
      for (let i = 0; i < 32; i++) {
        const x = s > 0 ? rintEven(Math.fround(w[r * cols + g * 32 + i]! / s)) : 0;
        v.push(Math.max(-qmax, Math.min(qmax, x)));
      }
      if (bits === 8) for (let i = 0; i < 32; i++) q[r * rowBytes + g * 32 + i] = v[i]! & 255;
      else for (let i = 0; i < 16; i++) q[r * rowBytes + g * 16 + i] = (v[i]! + 8) | ((v[16 + i]! + 8) << 4);
    }
  return { q, scales };
}
