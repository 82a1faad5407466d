/* AVX2 micro-kernels of the batched matmuls (the loop nest and why it is exact:
 * k3_matmul_batch.c). Each output's 16 k3.h lanes are two ymm, lanes 0–7 (columns ≡ 0..7 mod 16)
 * and 8–15; the two are independent until the halving tree, so a micro-kernel runs the halves
 * one after the other and the second reuses the registers of the first (16 ymm in all).
 *  - dense: 2 rows × 3 tokens = 12 accumulators (one half at a time) + 2 weights + x; per 16
 *    columns 10 loads for 12 multiply-add pairs.
 *  - MXFP4: 2 rows × 2 tokens; per group, half and output p = wa·xa + wb·xb, acc += p·s; with the
 *    scale fold (k3_matmul_internal.h) 2 rows × 4 tokens on a tile of w·s, acc += wa·xa + wb·xb. */
#include "k3_matmul_x86.h"

enum { RBMAX = 2, TBD = 3, TBM = 2, RBF = 2, TBF = 4 };

TAVX2 static void widen_bf16(const uint16_t* W, int64_t ldw, float* tile, int rows, int32_t n) {
  for (int i = 0; i < rows; i++)
    for (int32_t c = 0; c < n; c += 8) {
      __m128i h = _mm_loadu_si128((const __m128i*)(W + i * ldw + c));
      _mm256_store_ps(tile + i * KC + c, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
}

/* 8 columns from 4 bytes: lane m = word >> 4m holds nibble m in bits 0–3; vpermps picks its
 * magnitude from bits 0–2, the sign is bit 3 moved to bit 31. */
TAVX2 static void decode_mxfp4(const uint8_t* P, int64_t ldp, float* tile, int rows, int32_t groups) {
  const __m256 mag = _mm256_loadu_ps(k3_e2m1);
  const __m256i shr = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (int i = 0; i < rows; i++)
    for (int32_t q = 0; q < groups * 4; q++) {
      int32_t word;
      memcpy(&word, P + i * ldp + 4 * q, 4);
      __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(word), shr);
      __m256 w = _mm256_permutevar8x32_ps(mag, v);
      _mm256_store_ps(tile + i * KC + 8 * q, _mm256_or_ps(w, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v, 3), 31))));
    }
}

/* The same tile with the fold (K3_FOLD_*): each row·group's magnitude table is multiplied by its
 * scale first (exact: every E2M1 magnitude times 2^(E−127) inside the guard is a normal f32, or
 * 0; a skipped group's table is 0, k3_fold_scale), then the sign bit is set as above (−0 stays
 * −0 = −0·s). */
TAVX2 static void decode_mxfp4_fold(const uint8_t* P, int64_t ldp, const uint8_t* S, int64_t lds, float* tile, int rows,
                                    int32_t groups) {
  const __m256 mag = _mm256_loadu_ps(k3_e2m1);
  const __m256i shr = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (int i = 0; i < rows; i++)
    for (int32_t g = 0; g < groups; g++) {
      const __m256 mags = _mm256_mul_ps(mag, _mm256_set1_ps(k3_fold_scale(S[i * lds + g])));
      UNROLL for (int q = 0; q < 4; q++) {
        int32_t word;
        memcpy(&word, P + i * ldp + 16 * g + 4 * q, 4);
        __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(word), shr);
        __m256 w = _mm256_permutevar8x32_ps(mags, v);
        _mm256_store_ps(tile + i * KC + 32 * g + 8 * q, _mm256_or_ps(w, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v, 3), 31))));
      }
    }
}

/* int8 / int4 integers → f32 (exact), column order. Q4: byte i of a group holds column i (low
 * nibble) and 16 + i (high), each as q + 8 (k3.h). */
TAVX2 static void decode_q8(const int8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups) {
  for (int i = 0; i < rows; i++)
    for (int32_t q = 0; q < groups * 4; q++)
      _mm256_store_ps(tile + i * KC + 8 * q, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(Q + i * ldq + 8 * q)))));
}

TAVX2 static void decode_q4(const uint8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups) {
  const __m256i low = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
  for (int i = 0; i < rows; i++)
    for (int32_t g = 0; g < groups; g++)
      for (int h = 0; h < 2; h++) { /* bytes 8h..8h+7: columns 8h.. (low) and 16+8h.. (high) */
        __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(Q + i * ldq + 16 * g + 8 * h)));
        _mm256_store_ps(tile + i * KC + 32 * g + 8 * h, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u, low), eight)));
        _mm256_store_ps(tile + i * KC + 32 * g + 16 + 8 * h, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u, 4), eight)));
      }
}

TAVX2 INLINE void dense_micro(const float* Wt, int64_t ldw, const float* X, int64_t ldx, float* A,
                              int first, int32_t n, const int R, const int TB) {
  __m256 acc[RBMAX][TBD][2];
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int h = 0; h < 2; h++)
    acc[i][t][h] = first ? _mm256_setzero_ps() : _mm256_load_ps(A + (i * TC + t) * 16 + 8 * h);
  for (int32_t c = 0; c < n; c += 16) {
    UNROLL for (int h = 0; h < 2; h++) {
      __m256 w[RBMAX];
      UNROLL for (int i = 0; i < R; i++) w[i] = _mm256_loadu_ps(Wt + i * ldw + c + 8 * h);
      UNROLL for (int t = 0; t < TB; t++) {
        __m256 x = _mm256_loadu_ps(X + t * ldx + c + 8 * h);
        UNROLL for (int i = 0; i < R; i++) acc[i][t][h] = _mm256_add_ps(acc[i][t][h], _mm256_mul_ps(w[i], x));
      }
    }
  }
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int h = 0; h < 2; h++)
    _mm256_store_ps(A + (i * TC + t) * 16 + 8 * h, acc[i][t][h]);
}

TAVX2 static void dense(const float* Wt, int64_t ldw, const float* X, int64_t ldx, float* A, int first,
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

/* Half h of group g: columns c0+8h..c0+8h+7 (a) and c0+16+8h.. (b) feed lanes 8h..8h+7. A row
 * whose group is skipped (scale 255) gets q AND 0 = +0 instead of q, and acc + (+0) = acc exactly:
 * acc starts at +0 and is never −0 under round-to-nearest (x + y = −0 needs both −0). */
TAVX2 INLINE void mx_group(__m256 acc[RBMAX][TBM][2], const float* Wt, const float* St, int32_t g,
                           const float* X, int64_t ldx, uint32_t skip, const int R, const int TB, const int MASKED) {
  UNROLL for (int h = 0; h < 2; h++) {
    __m256 wa[RBMAX], wb[RBMAX], s[RBMAX];
    UNROLL for (int i = 0; i < R; i++) {
      wa[i] = _mm256_load_ps(Wt + i * KC + g * 32 + 8 * h);
      wb[i] = _mm256_load_ps(Wt + i * KC + g * 32 + 16 + 8 * h);
      s[i] = _mm256_broadcast_ss(St + i * KG + g);
    }
    UNROLL for (int t = 0; t < TB; t++) {
      __m256 xa = _mm256_loadu_ps(X + t * ldx + g * 32 + 8 * h), xb = _mm256_loadu_ps(X + t * ldx + g * 32 + 16 + 8 * h);
      UNROLL for (int i = 0; i < R; i++) {
        __m256 p = _mm256_add_ps(_mm256_mul_ps(wa[i], xa), _mm256_mul_ps(wb[i], xb));
        __m256 q = _mm256_mul_ps(p, s[i]);
        if (MASKED) q = _mm256_and_ps(q, _mm256_castsi256_ps(_mm256_set1_epi32((skip >> i) & 1 ? 0 : -1)));
        acc[i][t][h] = _mm256_add_ps(acc[i][t][h], q);
      }
    }
  }
}

TAVX2 INLINE void mx_micro(const float* Wt, const float* St, const uint32_t* nan, int row0, const float* X,
                           int64_t ldx, float* A, int first, int32_t groups, const int R, const int TB) {
  __m256 acc[RBMAX][TBM][2];
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int h = 0; h < 2; h++)
    acc[i][t][h] = first ? _mm256_setzero_ps() : _mm256_load_ps(A + (i * TC + t) * 16 + 8 * h);
  /* one loop without any skip test when no group of the tile is skipped for these rows (the
   * usual case; a test per group made the compiler merge both paths and spill) */
  uint32_t any = 0;
  for (int32_t g = 0; g < groups; g++) any |= nan[g];
  if (__builtin_expect(!((any >> row0) & ((1u << R) - 1)), 1))
    for (int32_t g = 0; g < groups; g++) mx_group(acc, Wt, St, g, X, ldx, 0, R, TB, 0);
  else
    for (int32_t g = 0; g < groups; g++) mx_group(acc, Wt, St, g, X, ldx, (nan[g] >> row0) & ((1u << R) - 1), R, TB, 1);
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) UNROLL for (int h = 0; h < 2; h++)
    _mm256_store_ps(A + (i * TC + t) * 16 + 8 * h, acc[i][t][h]);
}

TAVX2 static void mxfp4(const float* Wt, const float* St, const uint32_t* nan, int row0, const float* X,
                        int64_t ldx, float* A, int first, int32_t groups, int R, int TB) {
  if (R == 2) {
    if (TB == 2) mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 2, 2);
    else mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 2, 1);
  } else {
    if (TB == 2) mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 1, 2);
    else mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, 1, 1);
  }
}

/* The fold's micro-kernel: on a tile of w·s (decode_mxfp4_fold), acc += wa·xa + wb·xb per group
 * and half (2 multiplies and 2 adds per 16 weight·token products); one half at a time, R × TB ≤
 * RBF × TBF accumulators + 2·R weights + 2 x per half (2 × 4: 14 of 16 ymm). Measured (AMD Zen 4,
 * bench/kernels.ts --isa avx2, 1 thread, T = 32 and 256): 2 × 2 0.90–0.91× and 2 × 3 0.97–0.98× of
 * 2 × 4. */
TAVX2 INLINE void mxf_micro(const float* Wt, const float* X, int64_t ldx, float* A, int first, int32_t groups,
                            const int R, const int TB) {
  UNROLL for (int h = 0; h < 2; h++) {
    __m256 acc[RBF][TBF];
    UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++)
      acc[i][t] = first ? _mm256_setzero_ps() : _mm256_load_ps(A + (i * TC + t) * 16 + 8 * h);
    for (int32_t g = 0; g < groups; g++) {
      __m256 wa[RBF], wb[RBF];
      UNROLL for (int i = 0; i < R; i++) {
        wa[i] = _mm256_load_ps(Wt + i * KC + g * 32 + 8 * h);
        wb[i] = _mm256_load_ps(Wt + i * KC + g * 32 + 16 + 8 * h);
      }
      UNROLL for (int t = 0; t < TB; t++) {
        __m256 xa = _mm256_loadu_ps(X + t * ldx + g * 32 + 8 * h), xb = _mm256_loadu_ps(X + t * ldx + g * 32 + 16 + 8 * h);
        UNROLL for (int i = 0; i < R; i++)
          acc[i][t] = _mm256_add_ps(acc[i][t], _mm256_add_ps(_mm256_mul_ps(wa[i], xa), _mm256_mul_ps(wb[i], xb)));
      }
    }
    UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) _mm256_store_ps(A + (i * TC + t) * 16 + 8 * h, acc[i][t]);
  }
}

TAVX2 static void mxfold(const float* Wt, const float* X, int64_t ldx, float* A, int first, int32_t groups, int R, int TB) {
  switch (R * 8 + TB) {
    case 2 * 8 + 4: mxf_micro(Wt, X, ldx, A, first, groups, 2, 4); break;
    case 2 * 8 + 3: mxf_micro(Wt, X, ldx, A, first, groups, 2, 3); break;
    case 2 * 8 + 2: mxf_micro(Wt, X, ldx, A, first, groups, 2, 2); break;
    case 2 * 8 + 1: mxf_micro(Wt, X, ldx, A, first, groups, 2, 1); break;
    case 1 * 8 + 4: mxf_micro(Wt, X, ldx, A, first, groups, 1, 4); break;
    case 1 * 8 + 3: mxf_micro(Wt, X, ldx, A, first, groups, 1, 3); break;
    case 1 * 8 + 2: mxf_micro(Wt, X, ldx, A, first, groups, 1, 2); break;
    default: mxf_micro(Wt, X, ldx, A, first, groups, 1, 1); break;
  }
}

/* lanes 0–7 at A[0..7], 8–15 at A[8..15] */
TAVX2 static void reduce(const float* A, int32_t n, float* y) {
  for (int32_t t = 0; t < n; t++) y[t] = tree_avx2(_mm256_load_ps(A + t * 16), _mm256_load_ps(A + t * 16 + 8));
}

static const mm_batch_isa dense_isa = { RBMAX, TBD, widen_bf16, decode_mxfp4, decode_q8, decode_q4, dense, mxfp4, reduce };
static const mm_batch_isa mx_isa = { RBMAX, TBM, widen_bf16, decode_mxfp4, decode_q8, decode_q4, dense, mxfp4, reduce, RBF, TBF, decode_mxfp4_fold, mxfold };
TAVX2 void k3_mm_bf16_batch_avx2(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_bf16(j, r0, r1, &dense_isa); }
TAVX2 void k3_mm_f32_batch_avx2(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_f32(j, r0, r1, &dense_isa); }
TAVX2 void k3_mm_mxfp4_batch_avx2(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_mxfp4(j, r0, r1, &mx_isa); }
TAVX2 void k3_mm_q8_batch_avx2(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_q8(j, r0, r1, &mx_isa); }
TAVX2 void k3_mm_q4_batch_avx2(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_q4(j, r0, r1, &mx_isa); }
