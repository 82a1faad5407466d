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

/* One-token dense rows read DENSE_DECODE_ROWS side by side (k3_matmul_avx2.c / _avx512.c): each
 * row stream asks L2 (prefetcht1) for the line DENSE_DECODE_PF bytes ahead of its reads, once per
 * 64 bytes; past the row's end, for the same row of the next block when the thread's range holds
 * one (the next block then starts with its lines on the way), else for nothing. Measured (issue 23,
 * round six, dev harness interleaving arms with a read-probe pass of the same bytes before each,
 * Zen 4, 2 threads, docs/BENCH-KERNELS.md): bf16 12288×7168 0.83–0.90 of the probe without, 0.93 with
 * 1.5–2 KB ahead but no wrap, 1.04–1.06 with the wrap; 7168×12288 0.93 → 1.03, 7168×3584 0.81 →
 * 0.91; prefetcht0 at 2 KB was slower than none (0.63), 3–4 KB ahead no better than 2. */
#define DENSE_DECODE_PF 2048
INLINE void dense_decode_pf(const char* W, int64_t row_bytes, int64_t r, const int RB, int has_next, int64_t at) {
  int64_t off = at + DENSE_DECODE_PF, base = r;
  if (off >= row_bytes) {
    if (!has_next) return;
    off -= row_bytes;
    base = r + RB;
  }
  UNROLL for (int i = 0; i < RB; i++) _mm_prefetch(W + (base + i) * row_bytes + off, _MM_HINT_T1);
}

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
