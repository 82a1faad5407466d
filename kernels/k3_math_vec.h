/* expf, tanhf and the elementwise ops of k3_ew.h on W lanes at once, written once for AVX-512
 * (k3_math_avx512.c, W = 16) and AVX2 (k3_math_avx2.c, W = 8) with clang's vector types; include
 * only from those two files, after they define the types and macros below and open their target.
 *
 * Every lane gets exactly the bits of k3_math.c's scalar functions, for every float input:
 *  - the same operations in the same order on the same formats (expf in double, tanhf/expm1f in
 *    float); every branch of the scalar code is computed for all lanes and the lane's own branch
 *    selected by a mask (branches are chosen from the same integer tests as the scalar code);
 *  - fused multiply-adds (FMA_D) exactly where k3_expf calls fma(), nowhere else: the build's
 *    -ffp-contract=off keeps every other product and sum rounded on its own, as in the scalar code;
 *  - division as division (IEEE-exact in both);
 *  - a lane the vector code does not compute (expf's |x| ≥ 88 range, ±inf and NaN into tanhf) is
 *    flagged and recomputed by the scalar element function (k3_ew_scalar) from its input.
 * tools/libm-vector-check.ts compares all 2^32 inputs (docs/NUMERICS.md §1.1).
 *
 * The including file defines: W; VF/VI/VU (W floats / int32 / uint32), VH (W/2 floats), VD/VUL
 * (W/2 doubles / uint64); FMA_D(a, b, c) = a·b + c rounded once; SET1_D(c); CVTT(VF) → VI
 * (truncating, as C's (int) cast); LOOKUP32(VUL i) → VUL (k3_expf_T32[i], i < 32); LO(VF), HI(VF)
 * → VH; JOIN(VH, VH) → VF; EW_ENTRY (the function's name). */
#include "k3_ew.h"

static inline VF vsel(VI m, VF a, VF b) { return (VF)(((VI)a & m) | ((VI)b & ~m)); }
static inline VI isel(VI m, VI a, VI b) { return (a & m) | (b & ~m); }

/* k3_expf on W/2 lanes, |x| < 88 (k3_expf's fast path). */
static inline VH v_expf_half(VH x) {
  const double N = 32.0;
  const double invln2N = 0x1.71547652b82fep+0 * N;
  VD xd = __builtin_convertvector(x, VD);
  VD kd = FMA_D(SET1_D(invln2N), xd, SET1_D(0x1.8p+52));
  VUL ki = (VUL)kd;
  kd = kd - 0x1.8p+52;
  VD r = FMA_D(SET1_D(invln2N), xd, -kd);
  VD s = (VD)(LOOKUP32(ki & 31) + (ki << 47));
  VD p = FMA_D(SET1_D(0x1.c6af84b912394p-5 / N / N / N), r, SET1_D(0x1.ebfce50fac4f3p-3 / N / N));
  VD r2 = r * r;
  VD y = FMA_D(SET1_D(0x1.62e42ff0c52d6p-1 / N), r, SET1_D(1.0));
  y = FMA_D(p, r2, y);
  y = y * s;
  return __builtin_convertvector(y, VH);
}

/* k3_expf; lanes in its special range (|x| ≥ 88 by the top bits, inf, NaN) are flagged in *sp. */
static inline VF v_expf(VF x, VI* sp) {
  VI abstop = (VI)(((VU)x >> 20) & 0x7ff);
  *sp |= abstop >= 0x42b; /* f2u(88.0f) >> 20 */
  return JOIN(v_expf_half(LO(x)), v_expf_half(HI(x)));
}

static inline VF v_sigmoid(VF x, VI* sp) { return 1.0f / (1.0f + v_expf(-x, sp)); }

/* expm1f_fdlibm for what tanhf passes it: a finite, −2 < a < 44 (so its overflow and −1 branches
 * are never taken), k = round(a/ln2) from the same tests. */
static inline VF v_expm1f(VF a) {
  const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f, invln2 = 1.4426950216e+00f;
  const float Q1 = -3.3333335072e-02f, Q2 = 1.5873016091e-03f, Q3 = -7.9365076090e-05f;
  const float Q4 = 4.0082177293e-06f, Q5 = -2.0109921195e-07f;
  VI neg = (VI)a < 0;
  VI hx = (VI)((VU)a & 0x7fffffff);
  /* |a| > ln2/2: k = ±1 below 1.5·ln2, else (int)(a/ln2 ± 0.5); else k = 0. With t = (float)k the
   * general reduction hi = a − t·ln2_hi, lo = t·ln2_lo gives the scalar branch's hi, lo exactly
   * (t·ln2 is exact for t = ±1; for k = 0 it gives x = a, c = +0 as the scalar code's). */
  VF half = vsel(neg, (VF){0} - 0.5f, (VF){0} + 0.5f);
  VI k = isel(hx < 0x3F851592, isel(neg, (VI){0} - 1, (VI){0} + 1), CVTT(invln2 * a + half));
  k = isel(hx > 0x3eb17218, k, (VI){0});
  VF t = __builtin_convertvector(k, VF);
  VF hi = a - t * ln2_hi;
  VF lo = t * ln2_lo;
  VF x = hi - lo;
  VF c = (hi - x) - lo;
  VF hfx = 0.5f * x;
  VF hxs = x * hfx;
  VF r1 = 1.0f + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
  t = 3.0f - r1 * hfx;
  VF e = hxs * ((r1 - t) / (6.0f - x * t));
  VF y0 = x - (x * e - hxs); /* k = 0 */
  e = (x * (e - c) - c);
  e = e - hxs;
  VF ym1 = 0.5f * (x - e) - 0.5f;                                                   /* k = −1 */
  VF yp1 = vsel(x < -0.25f, -2.0f * (e - (x + 0.5f)), 1.0f + 2.0f * (x - e));       /* k = 1 */
  VU kb = (VU)k << 23;
  VF yA = (VF)((VU)(1.0f - (e - x)) + kb) - 1.0f;                                   /* k ≤ −2, k > 56 */
  VF tB = (VF)((VU){0} + 0x3f800000 - (((VU){0} + 0x1000000) >> ((VU)k & 31)));      /* 1 − 2^-k */
  VF yB = (VF)((VU)(tB - (e - x)) + kb);                                            /* 2 ≤ k < 23 */
  VF tC = (VF)((VU)((VI){0} + 0x7f - k) << 23);                                     /* 2^-k */
  VF yC = (VF)((VU)((x - (e + tC)) + 1.0f) + kb);                                   /* 23 ≤ k ≤ 56 */
  VF y = vsel(k < 23, yB, yC);
  y = vsel((k <= -2) | (k > 56), yA, y);
  y = vsel(k == 1, yp1, y);
  y = vsel(k == -1, ym1, y);
  y = vsel(k == 0, y0, y);
  return vsel(hx < 0x33000000, a, y); /* |a| < 2^-25: a */
}

/* k3_tanhf; ±inf and NaN lanes are flagged in *sp. */
static inline VF v_tanhf(VF x, VI* sp) {
  VI jx = (VI)x, ix = jx & 0x7fffffff;
  *sp |= ix >= 0x7f800000;
  VF ax = (VF)ix;
  VI big = ix >= 0x3f800000; /* |x| ≥ 1: t = expm1(2|x|), z = 1 − 2/(t + 2); else t = expm1(−2|x|), z = −t/(t + 2) */
  VF t = v_expm1f(vsel(big, 2.0f * ax, -2.0f * ax));
  VF q = vsel(big, (VF){0} + 2.0f, -t) / (t + 2.0f);
  VF z = vsel(big, 1.0f - q, q);
  z = vsel(ix >= 0x41b00000, (VF){0} + (1.0f - 1.0e-30f), z); /* |x| ≥ 22 */
  z = vsel(jx < 0, -z, z);
  z = vsel(ix < 0x24000000, x * (1.0f + x), z); /* |x| < 2^-55 */
  return vsel(ix == 0, x, z);
}

/* The element of op, from its inputs (lanes of x, g, u; the ops read only theirs). */
static inline VF v_op(int op, VF x, VF g, VF u, float b1, float b2, VI* sp) {
  switch (op) {
    case K3_EW_SIGMOID: return v_sigmoid(x, sp);
    case K3_EW_MUL_SIGMOID: return x * v_sigmoid(g, sp);
    case K3_EW_SITU_GLU: {
      VF a = b1 * v_tanhf(g / b1, sp);
      a = a * v_sigmoid(g, sp);
      VF v = b2 * v_tanhf(u / b2, sp);
      return a * v;
    }
    case K3_EW_EXPF: return v_expf(x, sp);
    default: return v_tanhf(x, sp);
  }
}

/* W elements from i (m ≤ W of them: a short tail is padded with zeros, which no op flags): the
 * inputs, the vector result and the lanes to redo in scalar. */
typedef struct { VF x, g, u, y; VI sp; } v_blk;

__attribute__((always_inline)) static inline v_blk v_compute(const k3_ew_job* j, int op, int64_t i, int64_t m) {
  v_blk b = { {0}, {0}, {0}, {0}, {0} };
  size_t bytes = (size_t)m * sizeof(float);
  if (op != K3_EW_SITU_GLU) memcpy(&b.x, j->x + i, bytes);
  if (op == K3_EW_MUL_SIGMOID || op == K3_EW_SITU_GLU) memcpy(&b.g, j->g + i, bytes);
  if (op == K3_EW_SITU_GLU) memcpy(&b.u, j->u + i, bytes);
  b.y = v_op(op, b.x, b.g, b.u, j->b1, j->b2, &b.sp);
  return b;
}

/* Stores the block (after both of a pair are computed: out may alias g or u) and redoes its
 * flagged lanes from the inputs kept in registers. */
__attribute__((always_inline)) static inline void v_store(const k3_ew_job* j, int op, int64_t i, int64_t m, const v_blk* b) {
  memcpy(j->x + i, &b->y, (size_t)m * sizeof(float));
  if (__builtin_reduce_or(b->sp) == 0) return;
  for (int64_t l = 0; l < m; l++)
    if (b->sp[l]) j->x[i + l] = k3_ew_scalar(op, b->x[l], b->g[l], b->u[l], j->b1, j->b2);
}

__attribute__((always_inline)) static inline void v_range(const k3_ew_job* j, int op, int64_t lo, int64_t hi) {
  int64_t i = lo;
  for (; i + W <= hi; i += W) { /* constant size: plain vector loads and stores */
    v_blk b = v_compute(j, op, i, W);
    v_store(j, op, i, W, &b);
  }
  if (i < hi) {
    v_blk b = v_compute(j, op, i, hi - i);
    v_store(j, op, i, hi - i, &b);
  }
}

void EW_ENTRY(const k3_ew_job* j, int64_t lo, int64_t hi) {
  switch (j->op) {
    case K3_EW_SIGMOID: v_range(j, K3_EW_SIGMOID, lo, hi); break;
    case K3_EW_MUL_SIGMOID: v_range(j, K3_EW_MUL_SIGMOID, lo, hi); break;
    case K3_EW_SITU_GLU: v_range(j, K3_EW_SITU_GLU, lo, hi); break;
    case K3_EW_EXPF: v_range(j, K3_EW_EXPF, lo, hi); break;
    default: v_range(j, K3_EW_TANHF, lo, hi); break;
  }
}
