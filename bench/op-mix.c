/* Vector op throughput of the one-token MXFP4 loop's instruction mix (bench/op-mix.ts builds and
 * runs this; docs/BENCH-KERNELS.md, "Issue 23, round five"). One thread, AVX-512 (zmm) ops from
 * registers only: each op is its own chain (12–18 independent chains, enough to cover 3–6 cycle
 * latencies at up to 4 ops per cycle, and few enough to stay in the 32 zmm registers), operands
 * made opaque by empty asm so nothing folds; multiplies by 1.0000001 and adds of 1e-9 keep every
 * value normal. The clock is a chain of dependent integer adds (1 per cycle on x86 cores).
 * Prints ops per cycle per line and what one MXFP4 row·group costs at that rate: 9 ops unfolded
 * (2 vpsrlvd, 2 vpermps, 3 vmulps, 2 vaddps), 8 with the scale fold (no scale multiply).
 * Each test is written out in full (one variable per chain, no arrays) so every chain stays in a
 * register. Not part of the product or npm test; the runner checks the CPU has AVX-512F first. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static volatile float sink;
__attribute__((target("avx512f"))) static double mul12(long n) { /* vmulps */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512 f0 = _mm512_set1_ps(1.0f + 0); __m512 f1 = _mm512_set1_ps(1.0f + 1);
  __m512 f2 = _mm512_set1_ps(1.0f + 2); __m512 f3 = _mm512_set1_ps(1.0f + 3);
  __m512 f4 = _mm512_set1_ps(1.0f + 4); __m512 f5 = _mm512_set1_ps(1.0f + 5);
  __m512 f6 = _mm512_set1_ps(1.0f + 6); __m512 f7 = _mm512_set1_ps(1.0f + 7);
  __m512 f8 = _mm512_set1_ps(1.0f + 8); __m512 f9 = _mm512_set1_ps(1.0f + 9);
  __m512 f10 = _mm512_set1_ps(1.0f + 10); __m512 f11 = _mm512_set1_ps(1.0f + 11);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    f0=_mm512_mul_ps(f0,b); f1=_mm512_mul_ps(f1,b); f2=_mm512_mul_ps(f2,b); f3=_mm512_mul_ps(f3,b);
    f4=_mm512_mul_ps(f4,b); f5=_mm512_mul_ps(f5,b); f6=_mm512_mul_ps(f6,b); f7=_mm512_mul_ps(f7,b);
    f8=_mm512_mul_ps(f8,b); f9=_mm512_mul_ps(f9,b); f10=_mm512_mul_ps(f10,b);
    f11=_mm512_mul_ps(f11,b);
    __asm__ volatile("" : "+v"(f0), "+v"(f1), "+v"(f2), "+v"(f3), "+v"(f4), "+v"(f5), "+v"(f6),
        "+v"(f7), "+v"(f8), "+v"(f9), "+v"(f10), "+v"(f11));
  }
  double s = now() - t0;
  sink = _mm512_reduce_add_ps(f0) + _mm512_reduce_add_ps(f1) + _mm512_reduce_add_ps(f2) +
      _mm512_reduce_add_ps(f3) + _mm512_reduce_add_ps(f4) + _mm512_reduce_add_ps(f5) +
      _mm512_reduce_add_ps(f6) + _mm512_reduce_add_ps(f7) + _mm512_reduce_add_ps(f8) +
      _mm512_reduce_add_ps(f9) + _mm512_reduce_add_ps(f10) + _mm512_reduce_add_ps(f11);
  return 12.0 * n / s;
}
__attribute__((target("avx512f"))) static double add12(long n) { /* vaddps */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512 f0 = _mm512_set1_ps(1.0f + 0); __m512 f1 = _mm512_set1_ps(1.0f + 1);
  __m512 f2 = _mm512_set1_ps(1.0f + 2); __m512 f3 = _mm512_set1_ps(1.0f + 3);
  __m512 f4 = _mm512_set1_ps(1.0f + 4); __m512 f5 = _mm512_set1_ps(1.0f + 5);
  __m512 f6 = _mm512_set1_ps(1.0f + 6); __m512 f7 = _mm512_set1_ps(1.0f + 7);
  __m512 f8 = _mm512_set1_ps(1.0f + 8); __m512 f9 = _mm512_set1_ps(1.0f + 9);
  __m512 f10 = _mm512_set1_ps(1.0f + 10); __m512 f11 = _mm512_set1_ps(1.0f + 11);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    f0=_mm512_add_ps(f0,c); f1=_mm512_add_ps(f1,c); f2=_mm512_add_ps(f2,c); f3=_mm512_add_ps(f3,c);
    f4=_mm512_add_ps(f4,c); f5=_mm512_add_ps(f5,c); f6=_mm512_add_ps(f6,c); f7=_mm512_add_ps(f7,c);
    f8=_mm512_add_ps(f8,c); f9=_mm512_add_ps(f9,c); f10=_mm512_add_ps(f10,c);
    f11=_mm512_add_ps(f11,c);
    __asm__ volatile("" : "+v"(f0), "+v"(f1), "+v"(f2), "+v"(f3), "+v"(f4), "+v"(f5), "+v"(f6),
        "+v"(f7), "+v"(f8), "+v"(f9), "+v"(f10), "+v"(f11));
  }
  double s = now() - t0;
  sink = _mm512_reduce_add_ps(f0) + _mm512_reduce_add_ps(f1) + _mm512_reduce_add_ps(f2) +
      _mm512_reduce_add_ps(f3) + _mm512_reduce_add_ps(f4) + _mm512_reduce_add_ps(f5) +
      _mm512_reduce_add_ps(f6) + _mm512_reduce_add_ps(f7) + _mm512_reduce_add_ps(f8) +
      _mm512_reduce_add_ps(f9) + _mm512_reduce_add_ps(f10) + _mm512_reduce_add_ps(f11);
  return 12.0 * n / s;
}
__attribute__((target("avx512f"))) static double perm12(long n) { /* vpermps */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512i i0 = _mm512_set1_epi32(0); __m512i i1 = _mm512_set1_epi32(1);
  __m512i i2 = _mm512_set1_epi32(2); __m512i i3 = _mm512_set1_epi32(3);
  __m512i i4 = _mm512_set1_epi32(4); __m512i i5 = _mm512_set1_epi32(5);
  __m512i i6 = _mm512_set1_epi32(6); __m512i i7 = _mm512_set1_epi32(7);
  __m512i i8 = _mm512_set1_epi32(8); __m512i i9 = _mm512_set1_epi32(9);
  __m512i i10 = _mm512_set1_epi32(10); __m512i i11 = _mm512_set1_epi32(11);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    i0=_mm512_castps_si512(_mm512_permutexvar_ps(i0,tab));
    i1=_mm512_castps_si512(_mm512_permutexvar_ps(i1,tab));
    i2=_mm512_castps_si512(_mm512_permutexvar_ps(i2,tab));
    i3=_mm512_castps_si512(_mm512_permutexvar_ps(i3,tab));
    i4=_mm512_castps_si512(_mm512_permutexvar_ps(i4,tab));
    i5=_mm512_castps_si512(_mm512_permutexvar_ps(i5,tab));
    i6=_mm512_castps_si512(_mm512_permutexvar_ps(i6,tab));
    i7=_mm512_castps_si512(_mm512_permutexvar_ps(i7,tab));
    i8=_mm512_castps_si512(_mm512_permutexvar_ps(i8,tab));
    i9=_mm512_castps_si512(_mm512_permutexvar_ps(i9,tab));
    i10=_mm512_castps_si512(_mm512_permutexvar_ps(i10,tab));
    i11=_mm512_castps_si512(_mm512_permutexvar_ps(i11,tab));
    __asm__ volatile("" : "+v"(i0), "+v"(i1), "+v"(i2), "+v"(i3), "+v"(i4), "+v"(i5), "+v"(i6),
        "+v"(i7), "+v"(i8), "+v"(i9), "+v"(i10), "+v"(i11));
  }
  double s = now() - t0;
  sink = (float)_mm512_reduce_add_epi32(i0) + (float)_mm512_reduce_add_epi32(i1) +
      (float)_mm512_reduce_add_epi32(i2) + (float)_mm512_reduce_add_epi32(i3) +
      (float)_mm512_reduce_add_epi32(i4) + (float)_mm512_reduce_add_epi32(i5) +
      (float)_mm512_reduce_add_epi32(i6) + (float)_mm512_reduce_add_epi32(i7) +
      (float)_mm512_reduce_add_epi32(i8) + (float)_mm512_reduce_add_epi32(i9) +
      (float)_mm512_reduce_add_epi32(i10) + (float)_mm512_reduce_add_epi32(i11);
  return 12.0 * n / s;
}
__attribute__((target("avx512f"))) static double srlv12(long n) { /* vpsrlvd */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512i i0 = _mm512_set1_epi32(0); __m512i i1 = _mm512_set1_epi32(1);
  __m512i i2 = _mm512_set1_epi32(2); __m512i i3 = _mm512_set1_epi32(3);
  __m512i i4 = _mm512_set1_epi32(4); __m512i i5 = _mm512_set1_epi32(5);
  __m512i i6 = _mm512_set1_epi32(6); __m512i i7 = _mm512_set1_epi32(7);
  __m512i i8 = _mm512_set1_epi32(8); __m512i i9 = _mm512_set1_epi32(9);
  __m512i i10 = _mm512_set1_epi32(10); __m512i i11 = _mm512_set1_epi32(11);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    i0=_mm512_srlv_epi32(i0,cnt); i1=_mm512_srlv_epi32(i1,cnt); i2=_mm512_srlv_epi32(i2,cnt);
    i3=_mm512_srlv_epi32(i3,cnt); i4=_mm512_srlv_epi32(i4,cnt); i5=_mm512_srlv_epi32(i5,cnt);
    i6=_mm512_srlv_epi32(i6,cnt); i7=_mm512_srlv_epi32(i7,cnt); i8=_mm512_srlv_epi32(i8,cnt);
    i9=_mm512_srlv_epi32(i9,cnt); i10=_mm512_srlv_epi32(i10,cnt); i11=_mm512_srlv_epi32(i11,cnt);
    __asm__ volatile("" : "+v"(i0), "+v"(i1), "+v"(i2), "+v"(i3), "+v"(i4), "+v"(i5), "+v"(i6),
        "+v"(i7), "+v"(i8), "+v"(i9), "+v"(i10), "+v"(i11));
  }
  double s = now() - t0;
  sink = (float)_mm512_reduce_add_epi32(i0) + (float)_mm512_reduce_add_epi32(i1) +
      (float)_mm512_reduce_add_epi32(i2) + (float)_mm512_reduce_add_epi32(i3) +
      (float)_mm512_reduce_add_epi32(i4) + (float)_mm512_reduce_add_epi32(i5) +
      (float)_mm512_reduce_add_epi32(i6) + (float)_mm512_reduce_add_epi32(i7) +
      (float)_mm512_reduce_add_epi32(i8) + (float)_mm512_reduce_add_epi32(i9) +
      (float)_mm512_reduce_add_epi32(i10) + (float)_mm512_reduce_add_epi32(i11);
  return 12.0 * n / s;
}
__attribute__((target("avx512f"))) static double muladd12(long n) { /* vmulps + vaddps */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512 f0 = _mm512_set1_ps(1.0f + 0); __m512 f1 = _mm512_set1_ps(1.0f + 1);
  __m512 f2 = _mm512_set1_ps(1.0f + 2); __m512 f3 = _mm512_set1_ps(1.0f + 3);
  __m512 f4 = _mm512_set1_ps(1.0f + 4); __m512 f5 = _mm512_set1_ps(1.0f + 5);
  __m512 f6 = _mm512_set1_ps(1.0f + 6); __m512 f7 = _mm512_set1_ps(1.0f + 7);
  __m512 f8 = _mm512_set1_ps(1.0f + 8); __m512 f9 = _mm512_set1_ps(1.0f + 9);
  __m512 f10 = _mm512_set1_ps(1.0f + 10); __m512 f11 = _mm512_set1_ps(1.0f + 11);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    f0=_mm512_mul_ps(f0,b); f1=_mm512_add_ps(f1,c); f2=_mm512_mul_ps(f2,b); f3=_mm512_add_ps(f3,c);
    f4=_mm512_mul_ps(f4,b); f5=_mm512_add_ps(f5,c); f6=_mm512_mul_ps(f6,b); f7=_mm512_add_ps(f7,c);
    f8=_mm512_mul_ps(f8,b); f9=_mm512_add_ps(f9,c); f10=_mm512_mul_ps(f10,b);
    f11=_mm512_add_ps(f11,c);
    __asm__ volatile("" : "+v"(f0), "+v"(f1), "+v"(f2), "+v"(f3), "+v"(f4), "+v"(f5), "+v"(f6),
        "+v"(f7), "+v"(f8), "+v"(f9), "+v"(f10), "+v"(f11));
  }
  double s = now() - t0;
  sink = _mm512_reduce_add_ps(f0) + _mm512_reduce_add_ps(f1) + _mm512_reduce_add_ps(f2) +
      _mm512_reduce_add_ps(f3) + _mm512_reduce_add_ps(f4) + _mm512_reduce_add_ps(f5) +
      _mm512_reduce_add_ps(f6) + _mm512_reduce_add_ps(f7) + _mm512_reduce_add_ps(f8) +
      _mm512_reduce_add_ps(f9) + _mm512_reduce_add_ps(f10) + _mm512_reduce_add_ps(f11);
  return 12.0 * n / s;
}
__attribute__((target("avx512f"))) static double srlvperm12(long n) { /* vpsrlvd + vpermps */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512i i0 = _mm512_set1_epi32(0); __m512i i1 = _mm512_set1_epi32(1);
  __m512i i2 = _mm512_set1_epi32(2); __m512i i3 = _mm512_set1_epi32(3);
  __m512i i4 = _mm512_set1_epi32(4); __m512i i5 = _mm512_set1_epi32(5);
  __m512i i6 = _mm512_set1_epi32(6); __m512i i7 = _mm512_set1_epi32(7);
  __m512i i8 = _mm512_set1_epi32(8); __m512i i9 = _mm512_set1_epi32(9);
  __m512i i10 = _mm512_set1_epi32(10); __m512i i11 = _mm512_set1_epi32(11);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    i0=_mm512_srlv_epi32(i0,cnt); i1=_mm512_castps_si512(_mm512_permutexvar_ps(i1,tab));
    i2=_mm512_srlv_epi32(i2,cnt); i3=_mm512_castps_si512(_mm512_permutexvar_ps(i3,tab));
    i4=_mm512_srlv_epi32(i4,cnt); i5=_mm512_castps_si512(_mm512_permutexvar_ps(i5,tab));
    i6=_mm512_srlv_epi32(i6,cnt); i7=_mm512_castps_si512(_mm512_permutexvar_ps(i7,tab));
    i8=_mm512_srlv_epi32(i8,cnt); i9=_mm512_castps_si512(_mm512_permutexvar_ps(i9,tab));
    i10=_mm512_srlv_epi32(i10,cnt); i11=_mm512_castps_si512(_mm512_permutexvar_ps(i11,tab));
    __asm__ volatile("" : "+v"(i0), "+v"(i1), "+v"(i2), "+v"(i3), "+v"(i4), "+v"(i5), "+v"(i6),
        "+v"(i7), "+v"(i8), "+v"(i9), "+v"(i10), "+v"(i11));
  }
  double s = now() - t0;
  sink = (float)_mm512_reduce_add_epi32(i0) + (float)_mm512_reduce_add_epi32(i1) +
      (float)_mm512_reduce_add_epi32(i2) + (float)_mm512_reduce_add_epi32(i3) +
      (float)_mm512_reduce_add_epi32(i4) + (float)_mm512_reduce_add_epi32(i5) +
      (float)_mm512_reduce_add_epi32(i6) + (float)_mm512_reduce_add_epi32(i7) +
      (float)_mm512_reduce_add_epi32(i8) + (float)_mm512_reduce_add_epi32(i9) +
      (float)_mm512_reduce_add_epi32(i10) + (float)_mm512_reduce_add_epi32(i11);
  return 12.0 * n / s;
}
__attribute__((target("avx512f"))) static double mx18(long n) { /* MXFP4 one-token mix (9 per group) */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512i i0 = _mm512_set1_epi32(0); __m512i i1 = _mm512_set1_epi32(1);
  __m512 f2 = _mm512_set1_ps(1.0f + 2); __m512 f3 = _mm512_set1_ps(1.0f + 3);
  __m512i i4 = _mm512_set1_epi32(4); __m512i i5 = _mm512_set1_epi32(5);
  __m512 f6 = _mm512_set1_ps(1.0f + 6); __m512 f7 = _mm512_set1_ps(1.0f + 7);
  __m512 f8 = _mm512_set1_ps(1.0f + 8); __m512i i9 = _mm512_set1_epi32(9);
  __m512i i10 = _mm512_set1_epi32(10); __m512 f11 = _mm512_set1_ps(1.0f + 11);
  __m512 f12 = _mm512_set1_ps(1.0f + 12); __m512i i13 = _mm512_set1_epi32(13);
  __m512i i14 = _mm512_set1_epi32(14); __m512 f15 = _mm512_set1_ps(1.0f + 15);
  __m512 f16 = _mm512_set1_ps(1.0f + 16); __m512 f17 = _mm512_set1_ps(1.0f + 17);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    i0=_mm512_srlv_epi32(i0,cnt); i1=_mm512_castps_si512(_mm512_permutexvar_ps(i1,tab));
    f2=_mm512_mul_ps(f2,b); f3=_mm512_add_ps(f3,c); i4=_mm512_srlv_epi32(i4,cnt);
    i5=_mm512_castps_si512(_mm512_permutexvar_ps(i5,tab)); f6=_mm512_mul_ps(f6,b);
    f7=_mm512_add_ps(f7,c); f8=_mm512_mul_ps(f8,b); i9=_mm512_srlv_epi32(i9,cnt);
    i10=_mm512_castps_si512(_mm512_permutexvar_ps(i10,tab)); f11=_mm512_mul_ps(f11,b);
    f12=_mm512_add_ps(f12,c); i13=_mm512_srlv_epi32(i13,cnt);
    i14=_mm512_castps_si512(_mm512_permutexvar_ps(i14,tab)); f15=_mm512_mul_ps(f15,b);
    f16=_mm512_add_ps(f16,c); f17=_mm512_mul_ps(f17,b);
    __asm__ volatile("" : "+v"(i0), "+v"(i1), "+v"(f2), "+v"(f3), "+v"(i4), "+v"(i5), "+v"(f6),
        "+v"(f7), "+v"(f8), "+v"(i9), "+v"(i10), "+v"(f11));
    __asm__ volatile("" : "+v"(f12), "+v"(i13), "+v"(i14), "+v"(f15), "+v"(f16), "+v"(f17));
  }
  double s = now() - t0;
  sink = (float)_mm512_reduce_add_epi32(i0) + (float)_mm512_reduce_add_epi32(i1) +
      _mm512_reduce_add_ps(f2) + _mm512_reduce_add_ps(f3) + (float)_mm512_reduce_add_epi32(i4) +
      (float)_mm512_reduce_add_epi32(i5) + _mm512_reduce_add_ps(f6) + _mm512_reduce_add_ps(f7) +
      _mm512_reduce_add_ps(f8) + (float)_mm512_reduce_add_epi32(i9) +
      (float)_mm512_reduce_add_epi32(i10) + _mm512_reduce_add_ps(f11) + _mm512_reduce_add_ps(f12) +
      (float)_mm512_reduce_add_epi32(i13) + (float)_mm512_reduce_add_epi32(i14) +
      _mm512_reduce_add_ps(f15) + _mm512_reduce_add_ps(f16) + _mm512_reduce_add_ps(f17);
  return 18.0 * n / s;
}
__attribute__((target("avx512f"))) static double fold16(long n) { /* the same folded (8 per group) */
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f);
  __m512i cnt = _mm512_set1_epi32(0);
  __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));
  __m512i i0 = _mm512_set1_epi32(0); __m512i i1 = _mm512_set1_epi32(1);
  __m512 f2 = _mm512_set1_ps(1.0f + 2); __m512 f3 = _mm512_set1_ps(1.0f + 3);
  __m512i i4 = _mm512_set1_epi32(4); __m512i i5 = _mm512_set1_epi32(5);
  __m512 f6 = _mm512_set1_ps(1.0f + 6); __m512 f7 = _mm512_set1_ps(1.0f + 7);
  __m512i i8 = _mm512_set1_epi32(8); __m512i i9 = _mm512_set1_epi32(9);
  __m512 f10 = _mm512_set1_ps(1.0f + 10); __m512 f11 = _mm512_set1_ps(1.0f + 11);
  __m512i i12 = _mm512_set1_epi32(12); __m512i i13 = _mm512_set1_epi32(13);
  __m512 f14 = _mm512_set1_ps(1.0f + 14); __m512 f15 = _mm512_set1_ps(1.0f + 15);
  double t0 = now();
  for (long it = 0; it < n; it++) {
    i0=_mm512_srlv_epi32(i0,cnt); i1=_mm512_castps_si512(_mm512_permutexvar_ps(i1,tab));
    f2=_mm512_mul_ps(f2,b); f3=_mm512_add_ps(f3,c); i4=_mm512_srlv_epi32(i4,cnt);
    i5=_mm512_castps_si512(_mm512_permutexvar_ps(i5,tab)); f6=_mm512_mul_ps(f6,b);
    f7=_mm512_add_ps(f7,c); i8=_mm512_srlv_epi32(i8,cnt);
    i9=_mm512_castps_si512(_mm512_permutexvar_ps(i9,tab)); f10=_mm512_mul_ps(f10,b);
    f11=_mm512_add_ps(f11,c); i12=_mm512_srlv_epi32(i12,cnt);
    i13=_mm512_castps_si512(_mm512_permutexvar_ps(i13,tab)); f14=_mm512_mul_ps(f14,b);
    f15=_mm512_add_ps(f15,c);
    __asm__ volatile("" : "+v"(i0), "+v"(i1), "+v"(f2), "+v"(f3), "+v"(i4), "+v"(i5), "+v"(f6),
        "+v"(f7), "+v"(i8), "+v"(i9), "+v"(f10), "+v"(f11));
    __asm__ volatile("" : "+v"(i12), "+v"(i13), "+v"(f14), "+v"(f15));
  }
  double s = now() - t0;
  sink = (float)_mm512_reduce_add_epi32(i0) + (float)_mm512_reduce_add_epi32(i1) +
      _mm512_reduce_add_ps(f2) + _mm512_reduce_add_ps(f3) + (float)_mm512_reduce_add_epi32(i4) +
      (float)_mm512_reduce_add_epi32(i5) + _mm512_reduce_add_ps(f6) + _mm512_reduce_add_ps(f7) +
      (float)_mm512_reduce_add_epi32(i8) + (float)_mm512_reduce_add_epi32(i9) +
      _mm512_reduce_add_ps(f10) + _mm512_reduce_add_ps(f11) + (float)_mm512_reduce_add_epi32(i12) +
      (float)_mm512_reduce_add_epi32(i13) + _mm512_reduce_add_ps(f14) + _mm512_reduce_add_ps(f15);
  return 16.0 * n / s;
}

static double clock_hz(void) {
  long n = 200000000, x = 0;
  double t0 = now();
  for (long i = 0; i < n;
  i++) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  return 4.0 * n / (now() - t0);
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  const char* names[] = { "vmulps", "vaddps", "vpermps", "vpsrlvd", "vmulps + vaddps", "vpsrlvd + vpermps",
                          "MXFP4 one-token mix (9 per group)", "the same folded (8 per group)" };
  double (*fn[])(long) = { mul12, add12, perm12, srlv12, muladd12, srlvperm12, mx18, fold16 };
  enum { N = sizeof(fn) / sizeof(fn[0]) };
  double best[N] = { 0 }, hz = 0;
  for (int r = 0; r < rounds; r++) {
    double h = clock_hz();
    if (h > hz) hz = h;
    for (int i = 0; i < N; i++) {
      double v = fn[i](20000000) / h;
      if (v > best[i]) best[i] = v;
    }
  }
  printf("clock %.2f GHz (dependent integer adds, best of %d rounds); each rate: ops per cycle of that round's "
         "clock, best round\n", hz / 1e9, rounds);
  printf("| ops (zmm, independent chains) | ops per cycle | cycles per MXFP4 row·group |\n|---|---|---|\n");
  for (int i = 0; i < N; i++) {
    if (i == N - 2) printf("| %s | %.2f | %.2f |\n", names[i], best[i], 9 / best[i]);
    else if (i == N - 1) printf("| %s | %.2f | %.2f |\n", names[i], best[i], 8 / best[i]);
    else printf("| %s | %.2f | |\n", names[i], best[i]);
  }
  return 0;
}
