/* Vector op throughput of the one-token MXFP4 loop's instruction mix (bench/op-mix.ts builds and
 * runs this; docs/BENCH-KERNELS.md, "Issue 23 end to end after round five"). One thread, AVX-512
 * (zmm) ops from registers only: each op is its own chain (12–18 independent chains: at the 1–2
 * ops per cycle measured, enough to hide latencies up to 6 cycles, and few enough to stay in the
 * 32 zmm registers), operands made opaque by empty asm so nothing folds; multiplies by 1.0000001
 * and adds of 1e-9 keep every value normal. The clock is a chain of dependent integer adds (1 per
 * cycle on x86 cores).
 * Prints ops per cycle per line and what one MXFP4 row·group costs at that rate: 9 ops unfolded
 * (2 vpsrlvd, 2 vpermps, 3 vmulps, 2 vaddps), 8 with the scale fold (no scale multiply).
 * Every test has the same 18 chain variables (no arrays), 22 live vectors with the operands: all
 * stay in the 32 zmm registers (arrays or 36 live vectors spilled to the stack and measured the
 * stores instead). Not part of the product or npm test; the runner checks for AVX-512F first. */
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
/* One op on chain i: multiply, add, permute (the chain is its own index), variable shift. */
#define M(i) v##i = _mm512_mul_ps(v##i, b);
#define A(i) v##i = _mm512_add_ps(v##i, c);
#define P(i) v##i = _mm512_permutexvar_ps(_mm512_castps_si512(v##i), tab);
#define S(i) v##i = _mm512_castsi512_ps(_mm512_srlv_epi32(_mm512_castps_si512(v##i), cnt));
#define V6(a)                                                                                      \
  __m512 v##a##0 = _mm512_set1_ps(1.0f), v##a##1 = _mm512_set1_ps(2.0f), v##a##2 = _mm512_set1_ps(3.0f); \
  __m512 v##a##3 = _mm512_set1_ps(4.0f), v##a##4 = _mm512_set1_ps(5.0f), v##a##5 = _mm512_set1_ps(6.0f);
#define RED6(a)                                                                                    \
  (_mm512_reduce_add_ps(v##a##0) + _mm512_reduce_add_ps(v##a##1) + _mm512_reduce_add_ps(v##a##2) + \
   _mm512_reduce_add_ps(v##a##3) + _mm512_reduce_add_ps(v##a##4) + _mm512_reduce_add_ps(v##a##5))
/* Chains are named v0..v5, v10..v15, v20..v25 (three groups of six); NOPS ops per iteration. */
#define OP_TEST(fn, NOPS, BODY)                                                                   \
  __attribute__((target("avx512f"))) static double fn(long n) {                                   \
    __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f), tab = _mm512_set1_ps(1.0f); \
    __m512i cnt = _mm512_set1_epi32(0);                                                           \
    __asm__ volatile("" : "+v"(b), "+v"(c), "+v"(tab), "+v"(cnt));                              \
    V6() V6(1) V6(2)                                                                              \
    double t0 = now();                                                                            \
    for (long it = 0; it < n; it++) {                                                             \
      BODY                                                                                        \
      __asm__ volatile("" : "+v"(v0), "+v"(v1), "+v"(v2), "+v"(v3), "+v"(v4), "+v"(v5));         \
      __asm__ volatile("" : "+v"(v10), "+v"(v11), "+v"(v12), "+v"(v13), "+v"(v14), "+v"(v15));   \
      __asm__ volatile("" : "+v"(v20), "+v"(v21), "+v"(v22), "+v"(v23), "+v"(v24), "+v"(v25));   \
    }                                                                                             \
    double s = now() - t0;                                                                        \
    sink = RED6() + RED6(1) + RED6(2);                                                            \
    return (double)(NOPS) * n / s;                                                                \
  }

OP_TEST(mul12, 12, M(0) M(1) M(2) M(3) M(4) M(5) M(10) M(11) M(12) M(13) M(14) M(15))
OP_TEST(add12, 12, A(0) A(1) A(2) A(3) A(4) A(5) A(10) A(11) A(12) A(13) A(14) A(15))
OP_TEST(perm12, 12, P(0) P(1) P(2) P(3) P(4) P(5) P(10) P(11) P(12) P(13) P(14) P(15))
OP_TEST(srlv12, 12, S(0) S(1) S(2) S(3) S(4) S(5) S(10) S(11) S(12) S(13) S(14) S(15))
OP_TEST(muladd12, 12, M(0) A(1) M(2) A(3) M(4) A(5) M(10) A(11) M(12) A(13) M(14) A(15))
OP_TEST(srlvperm12, 12, S(0) P(1) S(2) P(3) S(4) P(5) S(10) P(11) S(12) P(13) S(14) P(15))
/* two row·groups of the one-token loop: 4 vpsrlvd, 4 vpermps, 6 vmulps, 4 vaddps */
OP_TEST(mx18, 18, S(0) P(1) M(2) A(3) S(4) P(5) M(10) A(11) M(12)
                  S(13) P(14) M(15) A(20) S(21) P(22) M(23) A(24) M(25))
/* the same folded (no scale multiply): 4 vpsrlvd, 4 vpermps, 4 vmulps, 4 vaddps */
OP_TEST(fold16, 16, S(0) P(1) M(2) A(3) S(4) P(5) M(10) A(11)
                    S(12) P(13) M(14) A(15) S(20) P(21) M(22) A(23))

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
