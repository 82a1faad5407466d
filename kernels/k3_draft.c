/* Kernels the EAGLE-3 draft model needs and the target has none of (k3.h "draft model";
 * docs/DRAFT.md): rotary position embedding on interleaved pairs with the library's own sine and
 * cosine, and the SiLU-gated MLP's activation. The draft's attention is the target's absorbed
 * MLA kernel (k3_mla_attend) over rows whose rope parts were rotated here before they were cached.
 *
 * FP contract: -ffp-contract=off, no fast-math; one scalar implementation each (no reductions:
 * every output element is a fixed sequence of roundings), so every ISA path and thread count
 * gives the same bits. */
#include "k3_internal.h"

/* sin and cos of x, |x| < K3_ROPE_MAX_ANGLE, in double, the same bits on every machine (libm's
 * differ between platforms: k3_math.c). Reduction x = n·π/2 + r with fdlibm's two-part π/2
 * (the first part has 33 significant bits, so n·pio2_1 is exact for |n| < 2^20, and x − n·pio2_1
 * is exact by Sterbenz's lemma); then Taylor polynomials on |r| ≤ π/4 (sin to r^17, cos to r^18:
 * truncation < 1e-19), Horner in double, no fusion. Accuracy ~2 ulp of double, far below the f32
 * the angles are rounded to. */
static const double PIO2_1 = 0x1.921fb544p+0;          /* fdlibm pio2_1  0x3FF921FB54400000 */
static const double PIO2_1T = 0x1.0b4611a626331p-34;   /* fdlibm pio2_1t 0x3DD0B4611A626331 */
static const double INV_PIO2 = 0x1.45f306dc9c883p-1;   /* fdlibm invpio2 0x3FE45F306DC9C883 */

static double sin_poly(double r) {
  double z = r * r;
  double p = 1.0 / 355687428096000.0;
  p = p * z - 1.0 / 1307674368000.0;
  p = p * z + 1.0 / 6227020800.0;
  p = p * z - 1.0 / 39916800.0;
  p = p * z + 1.0 / 362880.0;
  p = p * z - 1.0 / 5040.0;
  p = p * z + 1.0 / 120.0;
  p = p * z - 1.0 / 6.0;
  return r + r * (z * p);
}

static double cos_poly(double r) {
  double z = r * r;
  double p = -1.0 / 6402373705728000.0;
  p = p * z + 1.0 / 20922789888000.0;
  p = p * z - 1.0 / 87178291200.0;
  p = p * z + 1.0 / 479001600.0;
  p = p * z - 1.0 / 3628800.0;
  p = p * z + 1.0 / 40320.0;
  p = p * z - 1.0 / 720.0;
  p = p * z + 1.0 / 24.0;
  p = p * z - 0.5;
  return 1.0 + z * p;
}

static void sincos_own(double x, double* s, double* c) {
  double fn = nearbyint(x * INV_PIO2);
  double r = (x - fn * PIO2_1) - fn * PIO2_1T;
  double sr = sin_poly(r), cr = cos_poly(r);
  switch (((int64_t)fn) & 3) {
    case 0: *s = sr; *c = cr; break;
    case 1: *s = cr; *c = -sr; break;
    case 2: *s = -sr; *c = -cr; break;
    default: *s = -cr; *c = sr; break;
  }
}

K3_API int32_t k3_sincos(double x, double* out) {
  if (!(fabs(x) < (double)K3_ROPE_MAX_ANGLE)) return K3_ERR_ARG;
  sincos_own(x, &out[0], &out[1]);
  return K3_OK;
}

K3_API int32_t k3_rope_interleaved(float* x, int32_t ldx, int32_t heads, int32_t hstride, int32_t dr,
                                   const double* freq, int32_t pos0, int32_t T, float mscale) {
  if (T < 0 || heads < 1 || pos0 < 0 || dr < 2 || dr % 2 || dr / 2 > K3_MAX_ROPE_PAIRS) return K3_ERR_ARG;
  if (T == 0) return K3_OK;
  int32_t pairs = dr / 2;
  double last = (double)pos0 + (double)(T - 1);
  for (int32_t i = 0; i < pairs; i++)
    if (!(freq[i] >= 0.0) || !(last * freq[i] < (double)K3_ROPE_MAX_ANGLE)) return K3_ERR_ARG;
  float cs[K3_MAX_ROPE_PAIRS], sn[K3_MAX_ROPE_PAIRS];
  for (int32_t t = 0; t < T; t++) {
    double pos = (double)pos0 + (double)t;
    for (int32_t i = 0; i < pairs; i++) {
      double s, c;
      sincos_own(pos * freq[i], &s, &c);
      cs[i] = (float)(c * (double)mscale);
      sn[i] = (float)(s * (double)mscale);
    }
    float* row = x + (int64_t)t * ldx;
    for (int32_t h = 0; h < heads; h++) {
      float* v = row + (int64_t)h * hstride;
      for (int32_t i = 0; i < pairs; i++) {
        float a = v[2 * i], b = v[2 * i + 1];
        float ac = a * cs[i], bs = b * sn[i], bc = b * cs[i], as = a * sn[i];
        v[2 * i] = ac - bs;
        v[2 * i + 1] = bc + as;
      }
    }
  }
  return K3_OK;
}

/* out = (g · sigmoid(g)) · u, left to right; both inputs read before out is written. */
K3_API int32_t k3_silu_glu(const float* g, const float* u, float* out, int64_t n) {
  if (n < 0) return K3_ERR_ARG;
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i], ui = u[i];
    float a = gi * k3_sigmoidf(gi);
    out[i] = a * ui;
  }
  return K3_OK;
}
