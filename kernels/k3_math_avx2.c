/* The elementwise ops of k3_ew.h with AVX2 + FMA (16 floats in two ymm, 4 × 4 doubles for expf): the code is
 * kernels/k3_math_vec.h, written once for both x86 widths; here only the types and the few
 * operations clang's vector types do not express (fused multiply-add, truncating conversion, the
 * 32-entry table lookup as a gather). Chosen only when the CPU has FMA (k3_cpu_has_fma). */
#include <immintrin.h>
#include "k3_ew.h"

/* W = 16: two ymm per value, so the core overlaps two independent chains (k3_math_avx512.c). */
#define W 16
typedef float VF __attribute__((vector_size(64)));
typedef int32_t VI __attribute__((vector_size(64)));
typedef uint32_t VU __attribute__((vector_size(64)));
typedef float VH __attribute__((vector_size(32)));
typedef double VD __attribute__((vector_size(64)));
typedef uint64_t VUL __attribute__((vector_size(64)));
typedef double D4 __attribute__((vector_size(32)));
typedef uint64_t L4 __attribute__((vector_size(32)));
typedef int32_t I8V __attribute__((vector_size(32)));

#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#define I4 0, 1, 2, 3
#define I4H 4, 5, 6, 7
#define I8 I4, I4H
#define I8H 8, 9, 10, 11, 12, 13, 14, 15
#define LO(v) __builtin_shufflevector(v, v, I8)
#define HI(v) __builtin_shufflevector(v, v, I8H)
#define JOIN(a, b) __builtin_shufflevector(a, b, I8, I8H)
#define EW_ENTRY k3_ew_avx2

static inline VD FMA_D(VD a, VD b, VD c) {
  D4 lo = (D4)_mm256_fmadd_pd((__m256d)__builtin_shufflevector(a, a, I4), (__m256d)__builtin_shufflevector(b, b, I4),
                              (__m256d)__builtin_shufflevector(c, c, I4));
  D4 hi = (D4)_mm256_fmadd_pd((__m256d)__builtin_shufflevector(a, a, I4H), (__m256d)__builtin_shufflevector(b, b, I4H),
                              (__m256d)__builtin_shufflevector(c, c, I4H));
  return __builtin_shufflevector(lo, hi, I8);
}
#define SET1_D(c) ((VD){0} + (c)) /* c ≠ −0 here: 0 + c = c */
static inline VI CVTT(VF v) {
  I8V lo = (I8V)_mm256_cvttps_epi32((__m256)LO(v)), hi = (I8V)_mm256_cvttps_epi32((__m256)HI(v));
  return __builtin_shufflevector(lo, hi, I8, I8H);
}
/* k3_expf_T32[i] by a gather, 4 lanes at a time. */
static inline L4 lookup4(L4 i) { return (L4)_mm256_i64gather_epi64((const long long*)k3_expf_T32, (__m256i)i, 8); }
static inline VUL LOOKUP32(VUL i) {
  return __builtin_shufflevector(lookup4(__builtin_shufflevector(i, i, I4)), lookup4(__builtin_shufflevector(i, i, I4H)), I8);
}

#include "k3_math_vec.h"
#pragma clang attribute pop
