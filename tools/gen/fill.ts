// Turns a TensorPlan's init into bytes, streamed in chunks of whole rows (dim 0) so a multi-GB
// tensor never sits in memory. Each tensor draws from its own PRNG stream (seed, name), and each
// row consumes a fixed number of random words, so the bytes do not depend on the chunk size nor
// on where the tensor sits in the file.
import { normalBf16Table, invNormalCdf } from "./bf16.ts";
import { Xoshiro128 } from "./prng.ts";
import { DTYPE_BYTES } from "./safetensors-writer.ts";
import type { TensorPlan } from "./tensor-plan.ts";

/** bf16 lookup tables per (mean, std), built once per generation (65,536 entries, 128 KB each). */
export class TableCache {
  private tables = new Map<string, Uint16Array>();
  get(mean: number, std: number): Uint16Array {
    const key = `${mean}/${std}`;
    let t = this.tables.get(key);
    if (!t) {
      t = normalBf16Table(mean, std);
      this.tables.set(key, t);
    }
    return t;
  }
}

/** E8M0 byte table: random byte b → 120 + b mod 11 for b < 253, else 255 (NaN; ~1.2%). */
const E8M0_NAN_FROM = 253;

export function* tensorChunks(t: TensorPlan, seed: number, tables: TableCache, maxChunkBytes = 16 << 20): Generator<Uint8Array> {
  const rng = Xoshiro128.forTensor(seed, t.name);
  const rows = t.shape.length > 1 ? t.shape[0]! : 1;
  const rowLen = t.shape.length > 1 ? t.shape.slice(1).reduce((a, b) => a * b, 1) : (t.shape[0] ?? 1);
  const rowBytes = rowLen * DTYPE_BYTES[t.dtype];
  const rowsPerChunk = Math.max(1, Math.floor(maxChunkBytes / rowBytes));
  for (let r0 = 0; r0 < rows; r0 += rowsPerChunk) {
    const nr = Math.min(rowsPerChunk, rows - r0);
    const out = new Uint8Array(nr * rowBytes);
    for (let i = 0; i < nr; i++) fillRow(t, rng, tables, r0 + i, rowLen, out.subarray(i * rowBytes, (i + 1) * rowBytes));
    yield out;
  }
}

/** All bytes of a tensor at once (small tensors / small presets). */
export function tensorData(t: TensorPlan, seed: number, tables: TableCache): Uint8Array {
  const parts = [...tensorChunks(t, seed, tables, 1 << 30)];
  if (parts.length === 1) return parts[0]!;
  const total = parts.reduce((a, p) => a + p.length, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) (out.set(p, at), (at += p.length));
  return out;
}

function fillRow(t: TensorPlan, rng: Xoshiro128, tables: TableCache, row: number, n: number, dst: Uint8Array): void {
  const init = t.init;
  switch (init.kind) {
    case "normal": {
      const std = init.rowStd ? init.rowStd(row) : init.std;
      if (t.dtype === "BF16") {
        const words = new Uint32Array((n + 1) >> 1); // 16 random bits per element
        rng.fillU32(words);
        const table = tables.get(init.mean, std);
        const out = new Uint16Array(dst.buffer, dst.byteOffset, n);
        const pairs = n >> 1;
        for (let i = 0; i < pairs; i++) {
          const w = words[i]!;
          out[2 * i] = table[w & 0xffff]!;
          out[2 * i + 1] = table[w >>> 16]!;
        }
        if (n & 1) out[n - 1] = table[words[pairs]! & 0xffff]!;
        if (init.colStd) {
          // Same random bits, another table: the column's quantile is kept, only its scale changes.
          for (let c = 0; c < n; c++) {
            const cs = init.colStd(c);
            if (cs === undefined) continue;
            const w = words[c >> 1]!;
            out[c] = tables.get(init.mean, cs)[c & 1 ? w >>> 16 : w & 0xffff]!;
          }
        }
      } else if (t.dtype === "F32") {
        const out = new Float32Array(dst.buffer, dst.byteOffset, n);
        for (let i = 0; i < n; i++) out[i] = init.mean + std * invNormalCdf(rng.nextOpen01());
      } else throw new Error(`${t.name}: normal init needs BF16 or F32, got ${t.dtype}`);
      return;
    }
    case "conv": {
      // [P, 1, 4] has rows of 4 taps; tap 3 multiplies the current token (MODEL.md §4 KDA step 2).
      const out = new Float32Array(dst.buffer, dst.byteOffset, n);
      for (let i = 0; i < n; i++) {
        const z = invNormalCdf(rng.nextOpen01());
        out[i] = i % 4 === 3 ? 0.8 + 0.3 * z : 0.5 * z;
      }
      return;
    }
    case "alog": {
      const out = new Float32Array(dst.buffer, dst.byteOffset, n);
      for (let i = 0; i < n; i++) {
        const a = Math.log(1 + 15 * rng.nextOpen01()); // log U(1, 16): decay rates exp(A) in [1, 16]
        out[i] = i < init.heads || init.tail === "random" ? a : 0;
      }
      return;
    }
    case "mxfp4-packed": {
      const words = new Uint32Array((n + 3) >> 2);
      rng.fillU32(words);
      dst.set(new Uint8Array(words.buffer, 0, n));
      if (init.plant !== undefined && row === 0) dst[0] = init.plant;
      return;
    }
    case "e8m0": {
      const words = new Uint32Array((n + 3) >> 2);
      rng.fillU32(words);
      const bytes = new Uint8Array(words.buffer, 0, n);
      for (let i = 0; i < n; i++) {
        const b = bytes[i]!;
        dst[i] = b >= E8M0_NAN_FROM ? 255 : 120 + (b % 11);
      }
      if (init.plant !== undefined && row === 0) dst[0] = init.plant;
      return;
    }
  }
}
