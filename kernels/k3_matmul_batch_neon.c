/* NEON micro-kernels of the batched matmuls (the loop nest and why it is exact:
 * k3_matmul_batch.c), aarch64 builds only. Each output's 16 k3.h lanes are four float32x4
 * (q holds lanes 4q..4q+3), products vmulq then vaddq (never fused; -ffp-contract=off).
 *  - dense: 2 rows × 3 tokens = 24 accumulators + 2 weights + x (27 of 32 vector registers);
 *  - grouped (MXFP4, int8, int4): 2 rows × 2 tokens; per group and output p = wa·xa + wb·xb,
 *    acc += p·s. A row whose MXFP4 group is skipped (scale 255) gets q AND 0 = +0, and
 *    acc + (+0) = acc exactly (acc starts at +0 and is never −0 under round-to-nearest).
 * Bits are tested under qemu (test/arm64.test.ts); the speed was not measured on ARM hardware. */
#include "k3_matmul_internal.h"
#if defined(__aarch64__)
#include <arm_neon.h>

#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("clang loop unroll(full)")
enum { RBMAX = 2, TBD = 3, TBM = 2 };

INLINE float tree_neon(const float32x4_t a[4]) {
  float32x4_t s8lo = vaddq_f32(a[0], a[2]), s8hi = vaddq_f32(a[1], a[3]);
  float32x4_t s4 = vaddq_f32(s8lo, s8hi);
  float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

static void widen_bf16(const uint16_t* W, int64_t ldw, float* tile, int rows, int32_t n) {
  for (int i = 0; i < rows; i++)
    for (int32_t c = 0; c < n; c += 8) {
      uint16x8_t h = vld1q_u16(W + i * ldw + c);
      vst1q_f32(tile + i * KC + c, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
      vst1q_f32(tile + i * KC + c + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
    }
}

/* 16 int8 lanes → 16 f32 at out (exact). */
INLINE void store_s8x16(float* out, int8x16_t v) {
  int16x8_t l = vmovl_s8(vget_low_s8(v)), h = vmovl_high_s8(v);
  vst1q_f32(out, vcvtq_f32_s32(vmovl_s16(vget_low_s16(l))));
  vst1q_f32(out + 4, vcvtq_f32_s32(vmovl_high_s16(l)));
  vst1q_f32(out + 8, vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))));
  vst1q_f32(out + 12, vcvtq_f32_s32(vmovl_high_s16(h)));
}

/* E2M1 values by nibble (k3_e2m1) as the f32 bits' top two bytes: every value is exact in bf16. */
static const uint8_t E2M1_HI[16] = { 0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0 };
static const uint8_t E2M1_LO[16] = { 0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0, 0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0 };

/* 16 nibble indices in column order → 16 f32 weights at out. */
INLINE void store_e2m1x16(float* out, uint8x16_t n, uint8x16_t thi, uint8x16_t tlo) {
  uint8x16_t hi = vqtbl1q_u8(thi, n), lo = vqtbl1q_u8(tlo, n);
  uint16x8_t a = vreinterpretq_u16_u8(vzip1q_u8(lo, hi)), b = vreinterpretq_u16_u8(vzip2q_u8(lo, hi));
  vst1q_f32(out, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16)));
  vst1q_f32(out + 4, vreinterpretq_f32_u32(vshll_high_n_u16(a, 16)));
  vst1q_f32(out + 8, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16)));
  vst1q_f32(out + 12, vreinterpretq_f32_u32(vshll_high_n_u16(b, 16)));
}

/* Byte k of a group holds column 2k (low nibble) and 2k + 1 (high): zips put them in order. */
static void decode_mxfp4(const uint8_t* P, int64_t ldp, float* tile, int rows, int32_t groups) {
  const uint8x16_t thi = vld1q_u8(E2M1_HI), tlo = vld1q_u8(E2M1_LO);
  for (int i = 0; i < rows; i++)
    for (int32_t g = 0; g < groups; g++) {
      uint8x16_t b = vld1q_u8(P + i * ldp + 16 * g);
      uint8x16_t nlo = vandq_u8(b, vdupq_n_u8(15)), nhi = vshrq_n_u8(b, 4);
      store_e2m1x16(tile + i * KC + 32 * g, vzip1q_u8(nlo, nhi), thi, tlo);
      store_e2m1x16(tile + i * KC + 32 * g + 16, vzip2q_u8(nlo, nhi), thi, tlo);
    }
}

static void decode_q8(const int8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups) {
  for (int i = 0; i < rows; i++)
    for (int32_t h = 0; h < groups * 2; h++) store_s8x16(tile + i * KC + 16 * h, vld1q_s8(Q + i * ldq + 16 * h));
}

/* Q4: byte i of a group holds column i (low nibble) and 16 + i (high), each as q + 8 (k3.h). */
static void decode_q4(const uint8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups) {
  const int8x16_t eight = vdupq_n_s8(8);
  for (int i = 0; i < rows; i++)
    for (int32_t g = 0; g < groups; g++) {
      uint8x16_t v = vld1q_u8(Q + i * ldq + 16 * g);
      store_s8x16(tile + i * KC + 32 * g, vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), eight));
      store_s8x16(tile + i * KC + 32 * g + 16, vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight));
    }
}

INLINE void dense_micro(const float* Wt, int64_t ldw, const float* X, int64_t ldx, float* A,
                        int first, int32_t n, const int R, const int TB) {
  float32x4_t acc[RBMAX][TBD][4];
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++)
    acc[i][t][q] = first ? vdupq_n_f32(0.0f) : vld1q_f32(A + (i * TC + t) * 16 + 4 * q);
  for (int32_t c = 0; c < n; c += 16)
    UNROLL for (int q = 0; q < 4; q++) {
      float32x4_t w[RBMAX];
      UNROLL for (int i = 0; i < R; i++) w[i] = vld1q_f32(Wt + i * ldw + c + 4 * q);
      UNROLL for (int t = 0; t < TB; t++) {
        float32x4_t x = vld1q_f32(X + t * ldx + c + 4 * q);
        UNROLL for (int i = 0; i < R; i++) acc[i][t][q] = vaddq_f32(acc[i][t][q], vmulq_f32(w[i], x));
      }
    }
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++)
    vst1q_f32(A + (i * TC + t) * 16 + 4 * q, acc[i][t][q]);
}

static void dense(const float* Wt, int64_t ldw, const float* X, int64_t ldx, float* A, int first,
                  int32_t n, int R, int TB) {
  if (R == 2) {
    if (TB == 3) dense_micro(Wt, ldw, X, ldx, A, first, n, 2, 3);
    else if (TB == 2) dense_micro(Wt, ldw, X, ldx, A, first, n, 2, 2);
    else dense_micro(Wt, ldw, X, ldx, A, first, n, 2, 1);
  } else {
    if (TB == 3) dense_micro(Wt, ldw, X, ldx, A, first, n, 1, 3);
    else if (TB == 2) dense_micro(Wt, ldw, X, ldx, A, first, n, 1, 2);
    else dense_micro(Wt, ldw, X, ldx, A, first, n, 1, 1);
  }
}

/* Group g: quarter q of lanes takes columns c0+4q.. (a) and c0+16+4q.. (b). */
INLINE void gr_group(float32x4_t acc[RBMAX][TBM][4], const float* Wt, const float* St, int32_t g,
                     const float* X, int64_t ldx, uint32_t skip, const int R, const int TB, const int MASKED) {
  UNROLL for (int q = 0; q < 4; q++) {
    float32x4_t wa[RBMAX], wb[RBMAX], s[RBMAX];
    uint32x4_t keep[RBMAX];
    UNROLL for (int i = 0; i < R; i++) {
      wa[i] = vld1q_f32(Wt + i * KC + g * 32 + 4 * q);
      wb[i] = vld1q_f32(Wt + i * KC + g * 32 + 16 + 4 * q);
      s[i] = vdupq_n_f32(St[i * KG + g]);
      keep[i] = vdupq_n_u32((skip >> i) & 1 ? 0u : ~0u);
    }
    UNROLL for (int t = 0; t < TB; t++) {
      float32x4_t xa = vld1q_f32(X + t * ldx + g * 32 + 4 * q), xb = vld1q_f32(X + t * ldx + g * 32 + 16 + 4 * q);
      UNROLL for (int i = 0; i < R; i++) {
        float32x4_t p = vaddq_f32(vmulq_f32(wa[i], xa), vmulq_f32(wb[i], xb));
        float32x4_t qv = vmulq_f32(p, s[i]);
        if (MASKED) qv = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(qv), keep[i]));
        acc[i][t][q] = vaddq_f32(acc[i][t][q], qv);
      }
    }
  }
}

INLINE void gr_micro(const float* Wt, const float* St, const uint32_t* nan, int row0, const float* X,
                     int64_t ldx, float* A, int first, int32_t groups, const int R, const int TB) {
  float32x4_t acc[RBMAX][TBM][4];
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++)
    acc[i][t][q] = first ? vdupq_n_f32(0.0f) : vld1q_f32(A + (i * TC + t) * 16 + 4 * q);
  uint32_t any = 0;
  for (int32_t g = 0; g < groups; g++) any |= nan[g];
  if (__builtin_expect(!((any >> row0) & ((1u << R) - 1)), 1))
    for (int32_t g = 0; g < groups; g++) gr_group(acc, Wt, St, g, X, ldx, 0, R, TB, 0);
  else
    for (int32_t g = 0; g < groups; g++) gr_group(acc, Wt, St, g, X, ldx, (nan[g] >> row0) & ((1u << R) - 1), R, TB, 1);
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++)
    vst1q_f32(A + (i * TC + t) * 16 + 4 * q, acc[i][t][q]);
}

static void grouped(const float* Wt, const float* St, const uint32_t* nan, int row0, const float* X,
                    int64_t ldx, float* A, int first, int32_t groups, int R, int TB) {
  if (R == 2) {
    if (TB == 2) gr_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 2, 2);
    else gr_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 2, 1);
  } else {
    if (TB == 2) gr_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 1, 2);
    else gr_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 1, 1);
  }
}

static void reduce(const float* A, int32_t n, float* y) {
  for (int32_t t = 0; t < n; t++) {
    float32x4_t a[4] = { vld1q_f32(A + t * 16), vld1q_f32(A + t * 16 + 4), vld1q_f32(A + t * 16 + 8), vld1q_f32(A + t * 16 + 12) };
    y[t] = tree_neon(a);
  }
}

static const mm_batch_isa dense_isa = { RBMAX, TBD, widen_bf16, decode_mxfp4, decode_q8, decode_q4, dense, grouped, reduce };
static const mm_batch_isa gr_isa = { RBMAX, TBM, widen_bf16, decode_mxfp4, decode_q8, decode_q4, dense, grouped, reduce };
void k3_mm_bf16_batch_neon(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_bf16(j, r0, r1, &dense_isa); }
void k3_mm_f32_batch_neon(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_f32(j, r0, r1, &dense_isa); }
void k3_mm_mxfp4_batch_neon(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_mxfp4(j, r0, r1, &gr_isa); }
void k3_mm_q8_batch_neon(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_q8(j, r0, r1, &gr_isa); }
void k3_mm_q4_batch_neon(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_q4(j, r0, r1, &gr_isa); }
#endif
