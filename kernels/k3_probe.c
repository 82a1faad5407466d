/* Floating-point peak probe (k3_probe.h): the ceiling the batched matmuls are compared with.
 *
 * Shape of the loop: 12 accumulator chains per thread, each iteration acc[i] += w[i]·x with w[i]
 * loaded from a 12-vector array (L1) and x a register the compiler must treat as new every
 * iteration (an empty asm makes it opaque), so the product cannot be hoisted. 12 chains cover
 * the add/FMA latency (4 cycles) at 2–3 vector ops per cycle on the machines we know. Values
 * stay normal (x = 1, w ∈ [1, 2], acc saturates near 2^25: no subnormal, no overflow).
 * This is the only file with FMA instructions; their results are discarded. */
#include "k3_probe.h"
#include "k3_internal.h"

#if !defined(__x86_64__)
/* No probe for this architecture yet (the NEON path's peak was never measured: docs/PORTS.md). */
K3_API double k3_peak_flops(int32_t isa, int32_t mode, int64_t iters) {
  (void)isa, (void)mode, (void)iters;
  return -1;
}
#else
#include <immintrin.h>

#define NCH K3_PEAK_CHAINS

typedef struct { int32_t isa, mode; int64_t iters; volatile float sink[K3_POOL_MAX_THREADS]; } peak_job;

__attribute__((target("avx2,fma"))) static float peak_avx2(int fma, int64_t iters) {
  float wv[NCH * 8] __attribute__((aligned(64)));
  for (int i = 0; i < NCH * 8; i++) wv[i] = 1.0f + (float)i / (NCH * 8);
  __m256 acc[NCH], x = _mm256_set1_ps(1.0f);
  for (int i = 0; i < NCH; i++) acc[i] = _mm256_setzero_ps();
  if (fma) {
    for (int64_t it = 0; it < iters; it++) {
      __asm__ volatile("" : "+x"(x));
      for (int i = 0; i < NCH; i++) acc[i] = _mm256_fmadd_ps(_mm256_load_ps(wv + 8 * i), x, acc[i]);
    }
  } else {
    for (int64_t it = 0; it < iters; it++) {
      __asm__ volatile("" : "+x"(x));
      for (int i = 0; i < NCH; i++) acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_load_ps(wv + 8 * i), x));
    }
  }
  __m256 s = acc[0];
  for (int i = 1; i < NCH; i++) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) static float peak_avx512(int fma, int64_t iters) {
  float wv[NCH * 16] __attribute__((aligned(64)));
  for (int i = 0; i < NCH * 16; i++) wv[i] = 1.0f + (float)i / (NCH * 16);
  __m512 acc[NCH], x = _mm512_set1_ps(1.0f);
  for (int i = 0; i < NCH; i++) acc[i] = _mm512_setzero_ps();
  if (fma) {
    for (int64_t it = 0; it < iters; it++) {
      __asm__ volatile("" : "+v"(x));
      for (int i = 0; i < NCH; i++) acc[i] = _mm512_fmadd_ps(_mm512_load_ps(wv + 16 * i), x, acc[i]);
    }
  } else {
    for (int64_t it = 0; it < iters; it++) {
      __asm__ volatile("" : "+v"(x));
      for (int i = 0; i < NCH; i++) acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_load_ps(wv + 16 * i), x));
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < NCH; i++) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

static void peak_part(void* ctx, int32_t i, int32_t n) {
  (void)n;
  peak_job* j = ctx;
  j->sink[i] = j->isa == K3_ISA_AVX512 ? peak_avx512(j->mode, j->iters) : peak_avx2(j->mode, j->iters);
}


K3_API double k3_peak_flops(int32_t isa, int32_t mode, int64_t iters) {
  if ((isa != K3_ISA_AVX2 && isa != K3_ISA_AVX512) || !k3_isa_supported(isa)) return -1;
  if ((mode != 0 && mode != 1) || iters < 0 || (mode == 1 && !k3_cpu_has_fma())) return -1;
  peak_job j = { .isa = isa, .mode = mode, .iters = iters };
  k3_pool_run(peak_part, &j);
  return 2.0 * (isa == K3_ISA_AVX512 ? 16 : 8) * NCH * (double)iters * k3_pool_size();
}
#endif
