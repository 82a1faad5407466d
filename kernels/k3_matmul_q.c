/* The compact trunk (issue 16, opt-in: `k3 pack --trunk int8|int4`): group-quantised matrices and
 * their products. Weights are integers q in groups of 32 columns with one f32 scale per group:
 * w ≈ q·s. Formats (k3.h):
 *   Q8: data [rows][cols] int8 (natural column order), scales [rows][cols/32] f32.
 *   Q4: data [rows][cols/2]; in group g, byte i (0..15) holds column 32g+i in its low nibble and
 *       column 32g+16+i in its high nibble, each as q+8 (q ∈ [−8, 7]). This layout puts the two
 *       columns of one lane pair in one byte, so vector paths decode a group with one widening
 *       load, an AND and a shift.
 * Order (all paths, the MXFP4 order of k3.h with integer weights): per group g in increasing g,
 * p[j] = q(c0+j)·x(c0+j) + q(c0+16+j)·x(c0+16+j) for lanes j = 0..15 (each product rounded to f32,
 * then the pair add), acc[j] += p[j]·s_g (product rounded, then the add); halving tree. q is an
 * integer, exact in f32. No FMA (-ffp-contract=off). Scalar, AVX2 (lanes 0–7 / 8–15 in two ymm),
 * AVX-512 (one zmm) and NEON (four float32x4, aarch64 builds) do the same operations in the same
 * order: bit-identical. Each vector path is compiled on its architecture only.
 * Threads split rows (one row per thread, any T gives the same bits), like the other matmuls.
 * These are the row-blocked paths (below 8 tokens per call); from 8 tokens on the products run
 * GEMM-blocked in k3_matmul_batch.c (the integers widened to f32 in a tile, the MXFP4 micro-
 * kernel), with the same bits. The dispatch and the argument check are k3_matmul.c's (k3_mm_run).
 *
 * The quantisers are here too, so packing a 100 GB trunk runs at C speed on every core and
 * gives the same bytes on every machine: s = amax/127 (Q8) or amax/7 (Q4) in f32, q = the
 * nearest integer to w/s (ties to even), clamped; an all-zero group has s = 0 and q = 0. */
#include "k3_matmul_internal.h"
#if defined(__aarch64__)
#include <arm_neon.h>
#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("clang loop unroll(full)")
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#define T512 __attribute__((target("avx512f,avx512bw")))
#define TAVX2 __attribute__((target("avx2")))
#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("clang loop unroll(full)")
#endif
#define SMALL_WEIGHTS 65536 /* below this many weights a product runs on the calling thread */

/* Jobs are mm_job (k3_matmul_internal.h): W the integers (Q8: int8 [rows][cols]; Q4:
 * [rows][cols/2]), Sf the scales [rows][cols/32]. */
typedef mm_job q_job;

/* ---------------------------------------------------------------- scalar (reference order) */
static float q_row_scalar(const q_job* j, int64_t r, int32_t t, const int q4) {
  const int32_t cols = j->cols, G = cols / 32;
  const int64_t rb = q4 ? cols / 2 : cols;
  const uint8_t* b = (const uint8_t*)j->W + r * rb;
  const float* s = j->Sf + r * G;
  const float* x = j->X + (int64_t)t * j->ldx;
  float acc[16] = {0};
  for (int32_t g = 0; g < G; g++) {
    const float* xg = x + g * 32;
    for (int l = 0; l < 16; l++) {
      float qa, qb;
      if (q4) {
        qa = (float)((b[g * 16 + l] & 15) - 8);
        qb = (float)((b[g * 16 + l] >> 4) - 8);
      } else {
        qa = (float)(int8_t)b[g * 32 + l];
        qb = (float)(int8_t)b[g * 32 + 16 + l];
      }
      float pa = qa * xg[l];
      float pb = qb * xg[16 + l];
      float p = pa + pb;
      float ps = p * s[g];
      acc[l] += ps;
    }
  }
  return k3_tree16(acc);
}

static void q_rows_scalar(const q_job* j, int64_t r0, int64_t r1, const int q4) {
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++) j->Y[(int64_t)t * j->ldy + r] = q_row_scalar(j, r, t, q4);
}
static void q8_scalar(const q_job* j, int64_t r0, int64_t r1) { q_rows_scalar(j, r0, r1, 0); }
static void q4_scalar(const q_job* j, int64_t r0, int64_t r1) { q_rows_scalar(j, r0, r1, 1); }

#if defined(__x86_64__)
/* ---------------------------------------------------------------- AVX2 (x86-64 builds only) */
TAVX2 INLINE float tree_avx2(__m256 a, __m256 b) {
  __m256 s8 = _mm256_add_ps(a, b);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

/* Group g of a row as four vectors of 8 weights: a0 = columns c0..c0+7, a1 = c0+8..15,
 * b0 = c0+16..23, b1 = c0+24..31. */
TAVX2 INLINE void q_group_avx2(const uint8_t* row, int32_t g, const int q4, __m256* a0, __m256* a1, __m256* b0, __m256* b1) {
  if (q4) {
    const __m256i eight = _mm256_set1_epi32(8), low = _mm256_set1_epi32(15);
    __m128i v = _mm_loadu_si128((const __m128i*)(row + g * 16));
    __m256i u0 = _mm256_cvtepu8_epi32(v), u1 = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
    *a0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u0, low), eight));
    *a1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u1, low), eight));
    *b0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u0, 4), eight));
    *b1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u1, 4), eight));
  } else {
    __m128i v = _mm_loadu_si128((const __m128i*)(row + g * 32)), w = _mm_loadu_si128((const __m128i*)(row + g * 32 + 16));
    *a0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    *a1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
    *b0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(w));
    *b1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(w, 8)));
  }
}

/* Rows r..r+RB−1 × tokens t0..t0+TB−1 (RB·TB ≤ 4): each (row, token) keeps its own two
 * accumulators (lanes 0–7, 8–15); one decode serves TB tokens. */
TAVX2 INLINE void q_block_avx2(const q_job* j, int64_t r, int32_t t0, const int RB, const int TB, const int q4) {
  const int32_t cols = j->cols, G = cols / 32;
  const int64_t rb = q4 ? cols / 2 : cols;
  __m256 lo[4][4], hi[4][4];
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) lo[i][t] = hi[i][t] = _mm256_setzero_ps();
  for (int32_t g = 0; g < G; g++) {
    UNROLL for (int i = 0; i < RB; i++) {
      __m256 a0, a1, b0, b1;
      q_group_avx2((const uint8_t*)j->W + (r + i) * rb, g, q4, &a0, &a1, &b0, &b1);
      __m256 s = _mm256_broadcast_ss(j->Sf + (r + i) * G + g);
      UNROLL for (int t = 0; t < TB; t++) {
        const float* x = j->X + (int64_t)(t0 + t) * j->ldx + g * 32;
        __m256 p0 = _mm256_add_ps(_mm256_mul_ps(a0, _mm256_loadu_ps(x)), _mm256_mul_ps(b0, _mm256_loadu_ps(x + 16)));
        __m256 p1 = _mm256_add_ps(_mm256_mul_ps(a1, _mm256_loadu_ps(x + 8)), _mm256_mul_ps(b1, _mm256_loadu_ps(x + 24)));
        lo[i][t] = _mm256_add_ps(lo[i][t], _mm256_mul_ps(p0, s));
        hi[i][t] = _mm256_add_ps(hi[i][t], _mm256_mul_ps(p1, s));
      }
    }
  }
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++)
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = tree_avx2(lo[i][t], hi[i][t]);
}

/* One token: 4 rows at a time (4 independent add chains, one x load per 4 rows); several: 2 rows
 * × 2 tokens. Leftovers one at a time. */
TAVX2 INLINE void q_rows_avx2_x(const q_job* j, int64_t r0, int64_t r1, const int q4) {
  const int32_t T = j->T;
  int64_t r = r0;
  if (T == 1) {
    for (; r + 4 <= r1; r += 4) q_block_avx2(j, r, 0, 4, 1, q4);
    for (; r < r1; r++) q_block_avx2(j, r, 0, 1, 1, q4);
    return;
  }
  for (; r + 2 <= r1; r += 2) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) q_block_avx2(j, r, t, 2, 2, q4);
    if (t < T) q_block_avx2(j, r, t, 2, 1, q4);
  }
  for (; r < r1; r++)
    for (int32_t t = 0; t < T; t++) q_block_avx2(j, r, t, 1, 1, q4);
}
TAVX2 void k3_mm_q8_avx2(const q_job* j, int64_t r0, int64_t r1) { q_rows_avx2_x(j, r0, r1, 0); }
TAVX2 void k3_mm_q4_avx2(const q_job* j, int64_t r0, int64_t r1) { q_rows_avx2_x(j, r0, r1, 1); }

/* ---------------------------------------------------------------- AVX-512 */
T512 INLINE float tree_avx512(__m512 v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

/* Group g of a row: wa = columns c0..c0+15, wb = c0+16..c0+31 (lane j = logical lane j). */
T512 INLINE void q_group_avx512(const uint8_t* row, int32_t g, const int q4, __m512* wa, __m512* wb) {
  if (q4) {
    __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(row + g * 16)));
    const __m512i eight = _mm512_set1_epi32(8);
    *wa = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(u, _mm512_set1_epi32(15)), eight));
    *wb = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(u, 4), eight));
  } else {
    *wa = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(row + g * 32))));
    *wb = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(row + g * 32 + 16))));
  }
}

/* Rows r..r+RB−1 × tokens t0..t0+TB−1 (RB, TB ≤ 4): one decode per TB tokens, one x load per RB
 * rows, RB·TB independent add chains. */
T512 INLINE void q_block_avx512(const q_job* j, int64_t r, int32_t t0, const int RB, const int TB, const int q4) {
  const int32_t cols = j->cols, G = cols / 32;
  const int64_t rb = q4 ? cols / 2 : cols;
  __m512 acc[4][4];
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) acc[i][t] = _mm512_setzero_ps();
  for (int32_t g = 0; g < G; g++) {
    __m512 wa[4], wb[4], s[4];
    UNROLL for (int i = 0; i < RB; i++) {
      q_group_avx512((const uint8_t*)j->W + (r + i) * rb, g, q4, &wa[i], &wb[i]);
      s[i] = _mm512_set1_ps(j->Sf[(r + i) * G + g]);
    }
    UNROLL for (int t = 0; t < TB; t++) {
      const float* x = j->X + (int64_t)(t0 + t) * j->ldx + g * 32;
      __m512 xa = _mm512_loadu_ps(x), xb = _mm512_loadu_ps(x + 16);
      UNROLL for (int i = 0; i < RB; i++) {
        __m512 p = _mm512_add_ps(_mm512_mul_ps(wa[i], xa), _mm512_mul_ps(wb[i], xb));
        acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(p, s[i]));
      }
    }
  }
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++)
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = tree_avx512(acc[i][t]);
}

T512 INLINE void q_rows_avx512_x(const q_job* j, int64_t r0, int64_t r1, const int q4) {
  const int32_t T = j->T;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) q_block_avx512(j, r, t, 4, 4, q4);
    switch (T - t) {
      case 3: q_block_avx512(j, r, t, 4, 3, q4); break;
      case 2: q_block_avx512(j, r, t, 4, 2, q4); break;
      case 1: q_block_avx512(j, r, t, 4, 1, q4); break;
    }
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) q_block_avx512(j, r, t, 1, 4, q4);
    for (; t < T; t++) q_block_avx512(j, r, t, 1, 1, q4);
  }
}
T512 void k3_mm_q8_avx512(const q_job* j, int64_t r0, int64_t r1) { q_rows_avx512_x(j, r0, r1, 0); }
T512 void k3_mm_q4_avx512(const q_job* j, int64_t r0, int64_t r1) { q_rows_avx512_x(j, r0, r1, 1); }
#endif

#if defined(__aarch64__)
/* ---------------------------------------------------------------- NEON (aarch64 builds only) */
/* Lanes 0–15 in four float32x4 (q holds lanes 4q..4q+3), products vmulq then vaddq (never fused;
 * -ffp-contract=off), the k3_tree16 halving tree: the scalar order, bit for bit. */
INLINE float q_tree_neon(const float32x4_t a[4]) {
  float32x4_t s8lo = vaddq_f32(a[0], a[2]), s8hi = vaddq_f32(a[1], a[3]);
  float32x4_t s4 = vaddq_f32(s8lo, s8hi);
  float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

/* Group g of a row: wa[q] = columns c0+4q..c0+4q+3, wb[q] = c0+16+4q..+3. */
INLINE void q_group_neon(const uint8_t* row, int32_t g, const int q4, float32x4_t wa[4], float32x4_t wb[4]) {
  int8x16_t lo, hi; /* columns c0..c0+15 and c0+16..c0+31 as int8 */
  if (q4) {
    uint8x16_t v = vld1q_u8(row + g * 16);
    const int8x16_t eight = vdupq_n_s8(8);
    lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), eight);
    hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
  } else {
    lo = vld1q_s8((const int8_t*)row + g * 32);
    hi = vld1q_s8((const int8_t*)row + g * 32 + 16);
  }
  int16x8_t l0 = vmovl_s8(vget_low_s8(lo)), l1 = vmovl_high_s8(lo), h0 = vmovl_s8(vget_low_s8(hi)), h1 = vmovl_high_s8(hi);
  wa[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(l0)));
  wa[1] = vcvtq_f32_s32(vmovl_high_s16(l0));
  wa[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(l1)));
  wa[3] = vcvtq_f32_s32(vmovl_high_s16(l1));
  wb[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(h0)));
  wb[1] = vcvtq_f32_s32(vmovl_high_s16(h0));
  wb[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(h1)));
  wb[3] = vcvtq_f32_s32(vmovl_high_s16(h1));
}

/* One row × tokens t0..t0+TB−1 (TB ≤ 4): one decode serves TB tokens. */
INLINE void q_block_neon(const q_job* j, int64_t r, int32_t t0, const int TB, const int q4) {
  const int32_t cols = j->cols, G = cols / 32;
  const uint8_t* row = (const uint8_t*)j->W + r * (q4 ? cols / 2 : cols);
  float32x4_t acc[4][4];
  UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++) acc[t][q] = vdupq_n_f32(0.0f);
  for (int32_t g = 0; g < G; g++) {
    float32x4_t wa[4], wb[4];
    q_group_neon(row, g, q4, wa, wb);
    float32x4_t s = vdupq_n_f32(j->Sf[r * G + g]);
    UNROLL for (int t = 0; t < TB; t++) {
      const float* x = j->X + (int64_t)(t0 + t) * j->ldx + g * 32;
      UNROLL for (int q = 0; q < 4; q++) {
        float32x4_t p = vaddq_f32(vmulq_f32(wa[q], vld1q_f32(x + 4 * q)), vmulq_f32(wb[q], vld1q_f32(x + 16 + 4 * q)));
        acc[t][q] = vaddq_f32(acc[t][q], vmulq_f32(p, s));
      }
    }
  }
  UNROLL for (int t = 0; t < TB; t++) j->Y[(int64_t)(t0 + t) * j->ldy + r] = q_tree_neon(acc[t]);
}

INLINE void q_rows_neon_x(const q_job* j, int64_t r0, int64_t r1, const int q4) {
  for (int64_t r = r0; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= j->T; t += 4) q_block_neon(j, r, t, 4, q4);
    for (; t < j->T; t++) q_block_neon(j, r, t, 1, q4);
  }
}
void k3_mm_q8_neon(const q_job* j, int64_t r0, int64_t r1) { q_rows_neon_x(j, r0, r1, 0); }
void k3_mm_q4_neon(const q_job* j, int64_t r0, int64_t r1) { q_rows_neon_x(j, r0, r1, 1); }
#endif

/* ---------------------------------------------------------------- entry points */
K3_API int32_t k3_matmul_q8(const int8_t* q, const float* scales, const float* X, int32_t ldx, float* Y,
                            int32_t ldy, int32_t rows, int32_t cols, int32_t T) {
  return k3_mm_run((mm_job){ q, NULL, X, Y, rows, cols, T, k3_isa_current(), ldx, ldy, scales }, 32, 1, K3_MM_PATHS(q8_scalar, q8));
}

K3_API int32_t k3_matmul_q4(const uint8_t* q, const float* scales, const float* X, int32_t ldx, float* Y,
                            int32_t ldy, int32_t rows, int32_t cols, int32_t T) {
  return k3_mm_run((mm_job){ q, NULL, X, Y, rows, cols, T, k3_isa_current(), ldx, ldy, scales }, 32, 1, K3_MM_PATHS(q4_scalar, q4));
}

/* ---------------------------------------------------------------- quantisers */
typedef struct { const uint16_t* W; uint8_t* Q; float* S; int32_t rows, cols, q4; } quant_job;

static void quant_part(void* ctx, int32_t i, int32_t n) {
  const quant_job* j = ctx;
  const int32_t cols = j->cols, G = cols / 32;
  const float qmax = j->q4 ? 7.0f : 127.0f;
  int64_t lo, hi;
  k3_chunk(j->rows, i, n, &lo, &hi);
  for (int64_t r = lo; r < hi; r++)
    for (int32_t g = 0; g < G; g++) {
      const uint16_t* w = j->W + r * cols + g * 32;
      float amax = 0.0f;
      for (int c = 0; c < 32; c++) {
        float a = fabsf(k3_bf16(w[c]));
        if (a > amax) amax = a;
      }
      float s = amax / qmax;
      j->S[r * G + g] = s;
      int q[32];
      for (int c = 0; c < 32; c++) {
        float v = s > 0.0f ? rintf(k3_bf16(w[c]) / s) : 0.0f;
        q[c] = (int)(v > qmax ? qmax : v < -qmax ? -qmax : v);
      }
      if (j->q4) {
        uint8_t* out = j->Q + r * (cols / 2) + g * 16;
        for (int l = 0; l < 16; l++) out[l] = (uint8_t)((q[l] + 8) | ((q[16 + l] + 8) << 4));
      } else {
        int8_t* out = (int8_t*)j->Q + r * cols + g * 32;
        for (int c = 0; c < 32; c++) out[c] = (int8_t)q[c];
      }
    }
}

K3_API int32_t k3_quantize_bf16(const uint16_t* W, int32_t rows, int32_t cols, int32_t bits, uint8_t* Q, float* scales) {
  if (rows <= 0 || cols <= 0 || cols % 32 != 0 || (bits != 8 && bits != 4)) return K3_ERR_ARG;
  for (int64_t i = 0; i < (int64_t)rows * cols; i++) /* a NaN or inf weight has no integer form */
    if (!isfinite(k3_bf16(W[i]))) return K3_ERR_NONFINITE;
  quant_job j = { W, Q, scales, rows, cols, bits == 4 };
  k3_pool_run_if(quant_part, &j, (int64_t)rows * cols < SMALL_WEIGHTS);
  return K3_OK;
}

/* How far a quantised matrix is from its bf16 source (for `k3 pack`'s report, not the model):
 * out[0] += Σ (w − q·s)², out[1] += Σ w², out[2] = max(out[2], the largest row's Σ(w − q·s)² / Σ w²),
 * in double, rows and columns in increasing order on the calling thread (one result anywhere). */
K3_API void k3_quant_error(const uint16_t* W, int32_t rows, int32_t cols, int32_t bits, const uint8_t* Q, const float* scales, double* out) {
  if (rows <= 0 || cols <= 0 || cols % 32 != 0 || (bits != 8 && bits != 4)) return;
  const int32_t G = cols / 32;
  for (int64_t r = 0; r < rows; r++) {
    double e2 = 0, w2 = 0;
    for (int32_t c = 0; c < cols; c++) {
      int32_t g = c / 32, i = c % 32;
      int q;
      if (bits == 8) q = ((const int8_t*)Q)[r * cols + c];
      else {
        uint8_t b = Q[r * (cols / 2) + g * 16 + (i & 15)];
        q = (i < 16 ? (b & 15) : (b >> 4)) - 8;
      }
      double w = k3_bf16(W[r * cols + c]);
      double d = w - (double)q * (double)scales[r * G + g];
      e2 += d * d;
      w2 += w * w;
    }
    out[0] += e2;
    out[1] += w2;
    if (w2 > 0 && e2 / w2 > out[2]) out[2] = e2 / w2;
  }
}
