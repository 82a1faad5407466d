/* AVX-512 micro-kernels of the batched matmuls (the loop nest and why it is exact:
 * k3_matmul_batch.c). One zmm accumulator per output holds the 16 k3.h lanes in order.
 *  - dense: 4 rows × 6 tokens = 24 accumulators + 4 weight vectors + x (30 of 32 zmm); per 16
 *    columns 10 loads for 24 multiply-add pairs.
 *  - MXFP4: 4 rows × 4 tokens; per group and output p = wa·xa + wb·xb, acc += p·s (5 vector ops
 *    per 32 weight·token products, the k3.h order). A group with scale 255 in some row of the
 *    block takes a merge-masked add for that row (skipped exactly).
 *  - MXFP4 with the scale fold (k3_matmul_internal.h): the same 4 × 4 on a tile of w·s,
 *    acc += wa·xa + wb·xb (4 vector ops per 32 weight·token products). */
#include "k3_matmul_x86.h"

enum { RBMAX = 4, TBD = 6, TBM = 4 };

T512 static void widen_bf16(const uint16_t* W, int64_t ldw, float* tile, int rows, int32_t n) {
  for (int i = 0; i < rows; i++)
    for (int32_t c = 0; c < n; c += 16) {
      __m256i h = _mm256_loadu_si256((const __m256i*)(W + i * ldw + c));
      _mm512_store_ps(tile + i * KC + c, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
}

/* 16 nibbles of 8 bytes: dword lane 2q = low word >> 4q (nibble q), lane 2q+1 = high word >> 4q
 * (nibble 8+q); vpermps picks the E2M1 value (index bits 0–3), a second one restores column order. */
T512 static void decode_mxfp4(const uint8_t* P, int64_t ldp, float* tile, int rows, int32_t groups) {
  const __m512 tab = _mm512_loadu_ps(k3_e2m1);
  const __m512i cnt = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  const __m512i unpi = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int i = 0; i < rows; i++)
    for (int32_t h = 0; h < groups * 2; h++) {
      int64_t q;
      memcpy(&q, P + i * ldp + 8 * h, 8);
      __m512 w = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(q), cnt), tab);
      _mm512_store_ps(tile + i * KC + 16 * h, _mm512_permutexvar_ps(unpi, w));
    }
}

/* The same tile with the fold (K3_FOLD_*): each row·group's 16-entry table is multiplied by its
 * scale first (one vmulps; exact, every E2M1 value times 2^(E−127) inside the guard is a normal
 * f32 or ±0), so the tile holds w·s (±0 for a skipped group, k3_fold_scale). */
T512 static void decode_mxfp4_fold(const uint8_t* P, int64_t ldp, const uint8_t* S, int64_t lds, float* tile, int rows,
                                   int32_t groups) {
  const __m512 tab = _mm512_loadu_ps(k3_e2m1);
  const __m512i cnt = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  const __m512i unpi = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int i = 0; i < rows; i++)
    for (int32_t g = 0; g < groups; g++) {
      const __m512 tabs = _mm512_mul_ps(tab, _mm512_set1_ps(k3_fold_scale(S[i * lds + g])));
      UNROLL for (int h = 0; h < 2; h++) {
        int64_t q;
        memcpy(&q, P + i * ldp + 16 * g + 8 * h, 8);
        __m512 w = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(q), cnt), tabs);
        _mm512_store_ps(tile + i * KC + 32 * g + 16 * h, _mm512_permutexvar_ps(unpi, w));
      }
    }
}

/* int8 / int4 integers → f32 (exact), column order. Q4: byte i of a group holds column i (low
 * nibble) and 16 + i (high), each as q + 8 (k3.h). */
T512 static void decode_q8(const int8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups) {
  for (int i = 0; i < rows; i++)
    for (int32_t h = 0; h < groups * 2; h++)
      _mm512_store_ps(tile + i * KC + 16 * h, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(Q + i * ldq + 16 * h)))));
}

T512 static void decode_q4(const uint8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups) {
  const __m512i low = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
  for (int i = 0; i < rows; i++)
    for (int32_t g = 0; g < groups; g++) {
      __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(Q + i * ldq + 16 * g)));
      _mm512_store_ps(tile + i * KC + 32 * g, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(u, low), eight)));
      _mm512_store_ps(tile + i * KC + 32 * g + 16, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(u, 4), eight)));
    }
}

T512 INLINE void dense_micro(const float* Wt, int64_t ldw, const float* X, int64_t ldx, float* A,
                             int first, int32_t n, const int R, const int TB) {
  __m512 acc[RBMAX][TBD];
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++)
    acc[i][t] = first ? _mm512_setzero_ps() : _mm512_load_ps(A + (i * TC + t) * 16);
  for (int32_t c = 0; c < n; c += 16) {
    __m512 w[RBMAX];
    UNROLL for (int i = 0; i < R; i++) w[i] = _mm512_loadu_ps(Wt + i * ldw + c);
    UNROLL for (int t = 0; t < TB; t++) {
      __m512 x = _mm512_loadu_ps(X + t * ldx + c);
      UNROLL for (int i = 0; i < R; i++) acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(w[i], x));
    }
  }
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) _mm512_store_ps(A + (i * TC + t) * 16, acc[i][t]);
}

#define DENSE_R(R)                                                                                  \
  switch (TB) {                                                                                     \
    case 6: dense_micro(Wt, ldw, X, ldx, A, first, n, R, 6); break;                                 \
    case 5: dense_micro(Wt, ldw, X, ldx, A, first, n, R, 5); break;                                 \
    case 4: dense_micro(Wt, ldw, X, ldx, A, first, n, R, 4); break;                                 \
    case 3: dense_micro(Wt, ldw, X, ldx, A, first, n, R, 3); break;                                 \
    case 2: dense_micro(Wt, ldw, X, ldx, A, first, n, R, 2); break;                                 \
    default: dense_micro(Wt, ldw, X, ldx, A, first, n, R, 1); break;                                \
  }
T512 static void dense(const float* Wt, int64_t ldw, const float* X, int64_t ldx, float* A, int first,
                       int32_t n, int R, int TB) {
  switch (R) {
    case 4: DENSE_R(4) break;
    case 3: DENSE_R(3) break;
    case 2: DENSE_R(2) break;
    default: DENSE_R(1) break;
  }
}

/* FOLD (the scale fold, k3_matmul_internal.h): Wt holds w·s (decode_mxfp4_fold) and the group
 * adds wa·xa + wb·xb — 2 multiplies and 2 adds per 32 weight·token products instead of 3 and 2. */
T512 INLINE void mx_group(__m512 acc[RBMAX][TBM], const float* Wt, const float* St, int32_t g,
                          const float* X, int64_t ldx, uint32_t skip, const int R, const int TB, const int MASKED,
                          const int FOLD) {
  __m512 wa[RBMAX], wb[RBMAX];
  UNROLL for (int i = 0; i < R; i++) {
    wa[i] = _mm512_load_ps(Wt + i * KC + g * 32);
    wb[i] = _mm512_load_ps(Wt + i * KC + g * 32 + 16);
  }
  UNROLL for (int t = 0; t < TB; t++) {
    __m512 xa = _mm512_loadu_ps(X + t * ldx + g * 32), xb = _mm512_loadu_ps(X + t * ldx + g * 32 + 16);
    UNROLL for (int i = 0; i < R; i++) {
      __m512 p = _mm512_add_ps(_mm512_mul_ps(wa[i], xa), _mm512_mul_ps(wb[i], xb));
      __m512 q = FOLD ? p : _mm512_mul_ps(p, _mm512_set1_ps(St[i * KG + g]));
      acc[i][t] = MASKED ? _mm512_mask_add_ps(acc[i][t], (skip >> i) & 1 ? 0 : 0xFFFF, acc[i][t], q)
                         : _mm512_add_ps(acc[i][t], q);
    }
  }
}

/* FOLD: St and nan are unused (a folded tile skips its E = 255 groups by their ±0 weights). The
 * fold keeps this 4 × 4 block: 16 accumulators + 8 weights + 2 x; measured against a 4 × 5 fold
 * block (AMD Zen 4, bench/kernels.ts, 1 thread, T = 32 and 256): 4 × 4 1.01–1.02× (within noise;
 * 4 divides the token chunk), 3 × 7 0.92–0.98×, 2 × 7 0.95–0.97×. */
T512 INLINE void mx_micro(const float* Wt, const float* St, const uint32_t* nan, int row0, const float* X,
                          int64_t ldx, float* A, int first, int32_t groups, const int R, const int TB, const int FOLD) {
  __m512 acc[RBMAX][TBM];
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++)
    acc[i][t] = first ? _mm512_setzero_ps() : _mm512_load_ps(A + (i * TC + t) * 16);
  /* one loop without any skip test when no group of the tile is skipped for these rows (the
   * usual case; a test per group lets the compiler merge both paths and spill) */
  uint32_t any = 0;
  if (!FOLD) for (int32_t g = 0; g < groups; g++) any |= nan[g];
  if (FOLD || __builtin_expect(!((any >> row0) & ((1u << R) - 1)), 1))
    for (int32_t g = 0; g < groups; g++) mx_group(acc, Wt, St, g, X, ldx, 0, R, TB, 0, FOLD);
  else
    for (int32_t g = 0; g < groups; g++) mx_group(acc, Wt, St, g, X, ldx, (nan[g] >> row0) & ((1u << R) - 1), R, TB, 1, 0);
  UNROLL for (int i = 0; i < R; i++) UNROLL for (int t = 0; t < TB; t++) _mm512_store_ps(A + (i * TC + t) * 16, acc[i][t]);
}

#define MX_R(R, FOLD)                                                                               \
  switch (TB) {                                                                                     \
    case 4: mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, R, 4, FOLD); break;               \
    case 3: mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, R, 3, FOLD); break;               \
    case 2: mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, R, 2, FOLD); break;               \
    default: mx_micro(Wt, St, nan, row0, X, ldx, A, first, groups, R, 1, FOLD); break;              \
  }
#define MX_RT(FOLD)                                                                                 \
  switch (R) {                                                                                      \
    case 4: MX_R(4, FOLD) break;                                                                    \
    case 3: MX_R(3, FOLD) break;                                                                    \
    case 2: MX_R(2, FOLD) break;                                                                    \
    default: MX_R(1, FOLD) break;                                                                   \
  }
T512 static void mxfp4(const float* Wt, const float* St, const uint32_t* nan, int row0, const float* X,
                       int64_t ldx, float* A, int first, int32_t groups, int R, int TB) {
  MX_RT(0)
}
T512 static void mxfold(const float* Wt, const float* X, int64_t ldx, float* A, int first, int32_t groups, int R, int TB) {
  const float* St = NULL;
  const uint32_t* nan = NULL;
  const int row0 = 0;
  MX_RT(1)
}

T512 static void reduce(const float* A, int32_t n, float* y) {
  for (int32_t t = 0; t < n; t++) y[t] = tree_avx512(_mm512_load_ps(A + t * 16));
}

/* The table's tb is per kind: dense blocks 6 tokens, MXFP4 4 (register budget). */
static const mm_batch_isa dense_isa = { RBMAX, TBD, widen_bf16, decode_mxfp4, decode_q8, decode_q4, dense, mxfp4, reduce };
static const mm_batch_isa mx_isa = { RBMAX, TBM, widen_bf16, decode_mxfp4, decode_q8, decode_q4, dense, mxfp4, reduce, RBMAX, TBM, decode_mxfp4_fold, mxfold };
T512 void k3_mm_bf16_batch_avx512(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_bf16(j, r0, r1, &dense_isa); }
T512 void k3_mm_f32_batch_avx512(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_f32(j, r0, r1, &dense_isa); }
T512 void k3_mm_mxfp4_batch_avx512(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_mxfp4(j, r0, r1, &mx_isa); }
T512 void k3_mm_q8_batch_avx512(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_q8(j, r0, r1, &mx_isa); }
T512 void k3_mm_q4_batch_avx512(const mm_job* j, int64_t r0, int64_t r1) { k3_mm_batch_q4(j, r0, r1, &mx_isa); }
