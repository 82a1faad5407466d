// f32 → bf16 with round-to-nearest-even, and the lookup tables that turn random bits into
// normally distributed bf16 weights.
//
// Why tables: the `slice` preset writes several GB of bf16. A 65,536-entry table maps 16 random
// bits to the bf16 bits of N(mean, std) at the quantile (i + 0.5) / 65536, so each weight costs
// one table lookup instead of per-element float math. The table entries themselves are computed
// in float64, rounded to f32, then to bf16 with round-to-nearest-even (MODEL.md §5: weights are
// stored bf16; the generator rounds exactly like torch's `.to(torch.bfloat16)`).

/** Rounds each f32 of `src` to bf16 (round-to-nearest-even; NaN stays a quiet NaN). */
export function f32ToBf16(src: Float32Array): Uint16Array {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) {
    const u = bits[i]!;
    if ((u & 0x7fffffff) > 0x7f800000) {
      out[i] = ((u >>> 16) | 0x40) & 0xffff; // quiet NaN, sign kept
      continue;
    }
    // Adding 0x7fff plus the lowest kept bit rounds half to even; overflow into the exponent is
    // the correct carry (and rounds the largest finite values to infinity, like torch).
    out[i] = ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
  }
  return out;
}

/** bf16 bits → number (exact). */
export function bf16ToNumber(b: number): number {
  const f = new Float32Array(new Uint32Array([(b & 0xffff) << 16]).buffer);
  return f[0]!;
}

/** Inverse of the standard normal CDF (Acklam's rational approximation, |rel err| < 1.2e-9). */
export function invNormalCdf(p: number): number {
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const lo = 0.02425;
  if (p < lo) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  }
  if (p > 1 - lo) return -invNormalCdf(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) / (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
}

/** table[i] = bf16(mean + std · Φ⁻¹((i + 0.5) / 65536)), i in [0, 65536). Indexed by 16 uniform
 *  random bits it yields N(mean, std) samples quantised to 2^16 levels, then to bf16. */
export function normalBf16Table(mean: number, std: number): Uint16Array {
  const f = new Float32Array(65536);
  for (let i = 0; i < 65536; i++) f[i] = mean + std * invNormalCdf((i + 0.5) / 65536);
  return f32ToBf16(f);
}
