/* The elementwise ops of k3_ew.h with AVX-512 (32 floats in two zmm, 4 × 8 doubles for expf): the code is
 * kernels/k3_math_vec.h, written once for both x86 widths; here only the types and the few
 * operations clang's vector types do not express (fused multiply-add, truncating conversion, the
 * 32-entry table lookup: two two-register permutes and a blend on the index's bit 4). */
#include <immintrin.h>
#include "k3_ew.h"

/* W = 32: two zmm per value. One 16-lane chain (two divisions deep in tanhf) is longer than the
 * FP scheduler's window, so independent pairs of zmm operations let the core overlap two. */
#define W 32
typedef float VF __attribute__((vector_size(128)));
typedef int32_t VI __attribute__((vector_size(128)));
typedef uint32_t VU __attribute__((vector_size(128)));
typedef float VH __attribute__((vector_size(64)));
typedef double VD __attribute__((vector_size(128)));
typedef uint64_t VUL __attribute__((vector_size(128)));
typedef double D8 __attribute__((vector_size(64)));
typedef uint64_t L8 __attribute__((vector_size(64)));
typedef int32_t I16V __attribute__((vector_size(64)));

#pragma clang attribute push(__attribute__((target("avx512f,avx512bw"))), apply_to = function)
#define I8 0, 1, 2, 3, 4, 5, 6, 7
#define I8H 8, 9, 10, 11, 12, 13, 14, 15
#define I16 I8, I8H
#define I16H 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31
#define LO(v) __builtin_shufflevector(v, v, I16)
#define HI(v) __builtin_shufflevector(v, v, I16H)
#define JOIN(a, b) __builtin_shufflevector(a, b, I16, I16H)
#define EW_ENTRY k3_ew_avx512

static inline VD FMA_D(VD a, VD b, VD c) {
  D8 lo = (D8)_mm512_fmadd_pd((__m512d)__builtin_shufflevector(a, a, I8), (__m512d)__builtin_shufflevector(b, b, I8),
                              (__m512d)__builtin_shufflevector(c, c, I8));
  D8 hi = (D8)_mm512_fmadd_pd((__m512d)__builtin_shufflevector(a, a, I8H), (__m512d)__builtin_shufflevector(b, b, I8H),
                              (__m512d)__builtin_shufflevector(c, c, I8H));
  return __builtin_shufflevector(lo, hi, I16);
}
#define SET1_D(c) ((VD){0} + (c)) /* c ≠ −0 here: 0 + c = c */
static inline VI CVTT(VF v) {
  I16V lo = (I16V)_mm512_cvttps_epi32((__m512)LO(v)), hi = (I16V)_mm512_cvttps_epi32((__m512)HI(v));
  return __builtin_shufflevector(lo, hi, I16, I16H);
}
/* k3_expf_T32[i] for 8 lanes: two two-register permutes (bits 0–3) and a blend on bit 4. */
static inline L8 lookup8(L8 i) {
  const __m512i* t = (const __m512i*)k3_expf_T32;
  __m512i lo = _mm512_permutex2var_epi64(_mm512_loadu_si512(t), (__m512i)i, _mm512_loadu_si512(t + 1));
  __m512i hi = _mm512_permutex2var_epi64(_mm512_loadu_si512(t + 2), (__m512i)i, _mm512_loadu_si512(t + 3));
  return (L8)_mm512_mask_blend_epi64(_mm512_test_epi64_mask((__m512i)i, _mm512_set1_epi64(16)), lo, hi);
}
static inline VUL LOOKUP32(VUL i) {
  return __builtin_shufflevector(lookup8(__builtin_shufflevector(i, i, I8)), lookup8(__builtin_shufflevector(i, i, I8H)), I16);
}

#include "k3_math_vec.h"
#pragma clang attribute pop
