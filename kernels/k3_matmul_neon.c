/* NEON (aarch64 Advanced SIMD) matmuls: the k3.h order with the 16 lanes in four float32x4
 * registers (q = 0..3 holds lanes 4q..4q+3), blocked over rows and tokens like the x86 paths
 * (k3_matmul_internal.h). Bit-identical to the scalar functions in k3_matmul.c: every product is
 * vmulq_f32 (rounded), then vaddq_f32 — never vfmaq/vmlaq (fused), and -ffp-contract=off keeps
 * the compiler from fusing them. Built for aarch64 only (build.zig picks *_neon.c by arch).
 *
 * Blocks (32 vector registers; each (row, token) keeps its own 4 accumulators):
 *  - one token: 4 rows side by side (16 accumulators, 16 independent add chains, one x load per
 *    4 rows); leftover rows one at a time;
 *  - several tokens: 2 rows × 2 tokens (one weight load / decode per 2 tokens), a last odd token
 *    as a 4 × 1 block; leftover rows 1 × 4, then 1 × 1.
 * MXFP4 decode, per 32 weights of a row (one group, 16 bytes): and/shift split the nibbles, two
 * zips put them in column order, then per 16 columns two byte-table lookups (vqtbl1q_u8) give the
 * high and low byte of the weight's bf16 pattern (every E2M1 value is exact in bf16, −0 included),
 * a zip pairs them into u16 lanes and widening shifts by 16 (vshll) make the f32 bits.
 * The speed of these blocks was not measured on ARM hardware (docs/PORTS.md); only their bits. */
#include "k3_matmul_internal.h"
#if defined(__aarch64__)
#include <arm_neon.h>

#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("clang loop unroll(full)")

/* Lanes 0–15 in a[0..3] → halving tree → v[0]. Matches k3_tree16: v[j] += v[j+8] (j < 8) is
 * a0+a2 (lanes 0–3) and a1+a3 (lanes 4–7); v[j] += v[j+4]; v[j] += v[j+2]; v[0] += v[1]. */
INLINE float tree_neon(const float32x4_t a[4]) {
  float32x4_t s8lo = vaddq_f32(a[0], a[2]), s8hi = vaddq_f32(a[1], a[3]);
  float32x4_t s4 = vaddq_f32(s8lo, s8hi);
  float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

/* ---------------------------------------------------------------- bf16 / f32 */
/* 16 weights from W + i as four f32x4 (bf16: widen the u16 by a left shift of 16). */
INLINE void load_w16(float32x4_t w[4], const void* W, int64_t i, const int bf16) {
  if (!bf16) {
    const float* f = (const float*)W + i;
    UNROLL for (int q = 0; q < 4; q++) w[q] = vld1q_f32(f + 4 * q);
    return;
  }
  const uint16_t* h = (const uint16_t*)W + i;
  uint16x8_t a = vld1q_u16(h), b = vld1q_u16(h + 8);
  w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
  w[1] = vreinterpretq_f32_u32(vshll_high_n_u16(a, 16));
  w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
  w[3] = vreinterpretq_f32_u32(vshll_high_n_u16(b, 16));
}
INLINE float w_at(const void* W, int64_t i, const int bf16) {
  return bf16 ? k3_bf16(((const uint16_t*)W)[i]) : ((const float*)W)[i];
}

/* Rows r..r+RB−1, tokens t0..t0+TB−1 (RB·TB ≤ 4, compile-time after inlining). */
INLINE void dense_block(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB, const int bf16) {
  const int32_t cols = j->cols, n16 = cols - cols % 16;
  const float* X = j->X + (int64_t)t0 * j->ldx; /* [TB][cols] */
  float32x4_t acc[4][4][4];                   /* [row][token][quarter] */
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++)
    acc[i][t][q] = vdupq_n_f32(0.0f);
  for (int32_t c = 0; c < n16; c += 16) {
    UNROLL for (int i = 0; i < RB; i++) {
      float32x4_t w[4];
      load_w16(w, j->W, (r + i) * cols + c, bf16);
      UNROLL for (int t = 0; t < TB; t++) {
        const float* x = X + (int64_t)t * j->ldx + c;
        UNROLL for (int q = 0; q < 4; q++)
          acc[i][t][q] = vaddq_f32(acc[i][t][q], vmulq_f32(w[q], vld1q_f32(x + 4 * q)));
      }
    }
  }
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) {
    float s = tree_neon(acc[i][t]);
    for (int32_t c = n16; c < cols; c++) { float p = w_at(j->W, (r + i) * cols + c, bf16) * X[(int64_t)t * j->ldx + c]; s += p; }
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = s;
  }
}

INLINE void dense_rows(const mm_job* j, int64_t r0, int64_t r1, const int bf16) {
  const int32_t T = j->T;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) { dense_block(j, r, t, 2, 2, bf16); dense_block(j, r + 2, t, 2, 2, bf16); }
    if (t < T) dense_block(j, r, t, 4, 1, bf16);
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) dense_block(j, r, t, 1, 4, bf16);
    for (; t < T; t++) dense_block(j, r, t, 1, 1, bf16);
  }
}

void k3_mm_bf16_neon(const mm_job* j, int64_t r0, int64_t r1) { dense_rows(j, r0, r1, 1); }
void k3_mm_f32_neon(const mm_job* j, int64_t r0, int64_t r1) { dense_rows(j, r0, r1, 0); }

/* ---------------------------------------------------------------- MXFP4 */
/* High and low byte of the bf16 pattern of E2M1[n] (n = 0..15): 0, .5, 1, 1.5, 2, 3, 4, 6 are
 * 0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0; bit 3 sets the sign (8 = −0). */
static const uint8_t E2M1_HI[16] = { 0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,
                                     0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0 };
static const uint8_t E2M1_LO[16] = { 0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0,
                                     0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0 };

/* 16 nibble indices (one per lane, column order) → 16 f32 weights in w[0..3]. */
INLINE void e2m1x16_neon(float32x4_t w[4], uint8x16_t n, uint8x16_t thi, uint8x16_t tlo) {
  uint8x16_t hi = vqtbl1q_u8(thi, n), lo = vqtbl1q_u8(tlo, n);
  uint16x8_t a = vreinterpretq_u16_u8(vzip1q_u8(lo, hi)); /* lanes 0–7: (hi << 8) | lo */
  uint16x8_t b = vreinterpretq_u16_u8(vzip2q_u8(lo, hi)); /* lanes 8–15 */
  w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
  w[1] = vreinterpretq_f32_u32(vshll_high_n_u16(a, 16));
  w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
  w[3] = vreinterpretq_f32_u32(vshll_high_n_u16(b, 16));
}

/* One group g of rows r..r+RB−1 for tokens t0..t0+TB−1: per row decode the 32 weights (columns
 * c0..c0+15 from bytes 0–7, c0+16..c0+31 from bytes 8–15; byte k holds column 2k in its low
 * nibble), then p = wa·x + wb·x', q = p·2^(s−127), acc += q — lane for lane the scalar order.
 * MASKED: some row of the block has scale 255 here; its q is AND-ed to +0, and acc + (+0) = acc
 * exactly because acc (started at +0) is never −0 under round-to-nearest — i.e. skipped. */
INLINE void mx_group(float32x4_t acc[4][4][4], const uint8_t* P, int64_t rb, const uint8_t* S, int32_t G,
                     const float* X, int64_t ldx, int32_t g, uint8x16_t thi, uint8x16_t tlo,
                     const int RB, const int TB, const int MASKED) {
  UNROLL for (int i = 0; i < RB; i++) {
    uint8x16_t bytes = vld1q_u8(P + i * rb + g * 16);
    uint8x16_t nlo = vandq_u8(bytes, vdupq_n_u8(15)), nhi = vshrq_n_u8(bytes, 4);
    float32x4_t wa[4], wb[4];
    e2m1x16_neon(wa, vzip1q_u8(nlo, nhi), thi, tlo); /* columns c0 .. c0+15 */
    e2m1x16_neon(wb, vzip2q_u8(nlo, nhi), thi, tlo); /* columns c0+16 .. c0+31 */
    uint8_t sc = S[i * G + g];
    float32x4_t s = vdupq_n_f32(k3_e8m0(sc));
    uint32x4_t keep = vdupq_n_u32(sc == 255 ? 0u : ~0u);
    UNROLL for (int t = 0; t < TB; t++) {
      const float* xg = X + t * ldx + g * 32;
      UNROLL for (int q = 0; q < 4; q++) {
        float32x4_t pa = vmulq_f32(wa[q], vld1q_f32(xg + 4 * q));
        float32x4_t pb = vmulq_f32(wb[q], vld1q_f32(xg + 16 + 4 * q));
        float32x4_t qv = vmulq_f32(vaddq_f32(pa, pb), s);
        if (MASKED) qv = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(qv), keep));
        acc[i][t][q] = vaddq_f32(acc[i][t][q], qv);
      }
    }
  }
}

/* Rows r..r+RB−1, tokens t0..t0+TB−1 (RB·TB ≤ 4). */
INLINE void mx_block(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB) {
  const int32_t cols = j->cols, G = cols / 32;
  const int64_t rb = cols / 2;
  const uint8_t* P = (const uint8_t*)j->W + r * rb; /* [RB][cols/2] */
  const uint8_t* S = j->S + r * G;                  /* [RB][G] */
  const float* X = j->X + (int64_t)t0 * j->ldx;       /* [TB][cols] */
  const uint8x16_t thi = vld1q_u8(E2M1_HI), tlo = vld1q_u8(E2M1_LO);
  float32x4_t acc[4][4][4];                         /* [row][token][quarter] */
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++)
    acc[i][t][q] = vdupq_n_f32(0.0f);
  for (int32_t g = 0; g < G; g++) {
    int nan_any = 0;
    UNROLL for (int i = 0; i < RB; i++) nan_any |= S[i * G + g] == 255;
    if (__builtin_expect(!nan_any, 1)) mx_group(acc, P, rb, S, G, X, j->ldx, g, thi, tlo, RB, TB, 0);
    else if (RB > 1) mx_group(acc, P, rb, S, G, X, j->ldx, g, thi, tlo, RB, TB, 1);
    /* RB == 1 and a NaN scale: the whole group is skipped */
  }
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++)
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = tree_neon(acc[i][t]);
}

/* Rows in blocks of 4: token pairs as two 2×2 blocks (one decode per 2 tokens), a last single
 * token row by row (one row already gives 4 independent chains and ~40 ops per group);
 * leftover rows: token pairs, then single tokens. */
void k3_mm_mxfp4_neon(const mm_job* j, int64_t r0, int64_t r1) {
  const int32_t T = j->T;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) { mx_block(j, r, t, 2, 2); mx_block(j, r + 2, t, 2, 2); }
    if (t < T) for (int i = 0; i < 4; i++) mx_block(j, r + i, t, 1, 1);
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) mx_block(j, r, t, 1, 2);
    for (; t < T; t++) mx_block(j, r, t, 1, 1);
  }
}
#endif
