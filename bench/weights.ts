// Weight sets for the matmul benchmarks: enough distinct matrices that one timed pass reads
// `setBytes` from memory, not cache. Deterministic (an LCG per matrix), sane bf16 exponents,
// MXFP4 with scale 2^-7 everywhere.

export function fillBytes(n: number, seed: number): Uint8Array {
  const a = new Uint8Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i += 4) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    a[i] = x;
    a[i + 1] = x >>> 8;
    a[i + 2] = x >>> 16;
    a[i + 3] = x >>> 24;
  }
  return a;
}

/** `count` bf16 [rows][cols] matrices (count ≥ 2, covering setBytes), values of magnitude ~1. */
export function bf16Set(rows: number, cols: number, setBytes: number): { bytes: number; count: number; Ws: Uint16Array[] } {
  const bytes = rows * cols * 2;
  const count = Math.max(2, Math.ceil(setBytes / bytes));
  const Ws = Array.from({ length: count }, (_, i) => {
    const w = new Uint16Array(fillBytes(bytes, i + 1).buffer);
    for (let j = 0; j < w.length; j++) w[j] = (w[j]! & 0x80ff) | 0x3c00; // top byte 0x3c/0xbc: sane exponents
    return w;
  });
  return { bytes, count, Ws };
}

/** `count` MXFP4 [rows][cols] matrices: random nibbles, E8M0 scale 120 (2^-7). */
export function mxfp4Set(rows: number, cols: number, setBytes: number): { bytes: number; count: number; Ps: Uint8Array[]; Ss: Uint8Array[] } {
  const bytes = (rows * cols) / 2 + (rows * cols) / 32;
  const count = Math.max(2, Math.ceil(setBytes / bytes));
  const Ps = Array.from({ length: count }, (_, i) => fillBytes((rows * cols) / 2, i + 7));
  const Ss = Array.from({ length: count }, () => new Uint8Array((rows * cols) / 32).fill(120));
  return { bytes, count, Ps, Ss };
}

/** `count` int4 [rows][cols] matrices (the compact trunk's Q4: random nibbles, f32 group scales 2^-7). */
export function q4Set(rows: number, cols: number, setBytes: number): { bytes: number; count: number; Qs: Uint8Array[]; Ss: Float32Array[] } {
  const bytes = (rows * cols) / 2 + (rows * cols * 4) / 32;
  const count = Math.max(2, Math.ceil(setBytes / bytes));
  const Qs = Array.from({ length: count }, (_, i) => fillBytes((rows * cols) / 2, i + 11));
  const Ss = Array.from({ length: count }, () => new Float32Array((rows * cols) / 32).fill(2 ** -7));
  return { bytes, count, Qs, Ss };
}
