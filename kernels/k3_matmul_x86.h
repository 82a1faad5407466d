/* What the x86 matmul files share (k3_matmul_avx2.c, k3_matmul_avx512.c and their batched
 * micro-kernels in k3_matmul_batch_avx2.c / _avx512.c): target attributes, the one-token MXFP4
 * prefetch distance and the halving tree of k3_tree16 on vector accumulators. Include only from those files (x86 intrinsics). */
#ifndef K3_MATMUL_X86_H
#define K3_MATMUL_X86_H
#include "k3_matmul_internal.h"
#include <immintrin.h>

#define TAVX2 __attribute__((target("avx2")))
#define T512 __attribute__((target("avx512f,avx512bw")))
#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("clang loop unroll(full)")

/* One-token MXFP4 (k3_matmul_avx512.c mx_decode_row, k3_matmul_avx2.c mx_t1_row): software
 * prefetch this many bytes ahead in the row stream (one line per 4 groups). Measured (issue 23,
 * dev harness interleaving libraries, Zen 4, 2 threads, from DRAM, AVX-512): without it 3072×3584
 * ran at 12 GB/s (the second thread added ~1.2×), with 1 / 2 / 4 KB 18.3 / 18.8 / 18.6; 3584×3072
 * ~20 either way; 1 thread and in-cache rates unchanged; to L2 (T1) no better
 * (docs/BENCH-KERNELS.md). */
#define MX_DECODE_PF 2048

/* Lanes 0–7 in a, 8–15 in b → halving tree → v[0]. Matches k3_tree16. */
TAVX2 INLINE float tree_avx2(__m256 a, __m256 b) {
  __m256 s8 = _mm256_add_ps(a, b);                                                  /* j<8 */
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1)); /* j<4 */
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                /* j<2 */
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));                            /* j=0 */
  return _mm_cvtss_f32(s1);
}

/* All 16 lanes in one zmm (upper 256 bits are lanes 8–15) → the same tree. */
T512 INLINE float tree_avx512(__m512 v) {
  return tree_avx2(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
#endif
