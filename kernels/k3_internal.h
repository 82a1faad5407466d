/* Shared internals of the kernel library (not part of the FFI API).
 *
 * FP contract for every file that includes this: -ffp-contract=off, no fast-math, one fixed
 * summation order per kernel (kernels/k3.h). Helpers here are used by several kernels and so
 * fix the order for all of them. */
#ifndef K3_INTERNAL_H
#define K3_INTERNAL_H
#include "k3.h"
#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* Current ISA (set by k3_isa_set; auto on first use). */
int32_t k3_isa_current(void);
/* The build of a kernel body compiled per ISA (k3_v16.h) that the current ISA runs: on x86-64 the
 * AVX-512 or AVX2 one, else the baseline (SSE2 on x86-64, NEON on aarch64). */
#if defined(__x86_64__)
#define K3_ISA_PICK(base, avx2, avx512) \
  (k3_isa_current() == K3_ISA_AVX512 ? (avx512) : k3_isa_current() == K3_ISA_AVX2 ? (avx2) : (base))
#else
#define K3_ISA_PICK(base, avx2, avx512) (base)
#endif

/* Run fn(ctx, i, n) for i = 0..n−1 on the pool, n = the pool size (i = 0 on the caller).
 * Returns when all n calls have returned. Calls from several host threads are serialized. */
typedef void (*k3_job_fn)(void* ctx, int32_t i, int32_t n);
void k3_pool_run(k3_job_fn fn, void* ctx);
/* Same, but with n forced to 1 (runs on the caller) when `small` is nonzero. */
static inline void k3_pool_run_if(k3_job_fn fn, void* ctx, int small) {
  if (small) fn(ctx, 0, 1); else k3_pool_run(fn, ctx);
}
/* Contiguous chunk [lo, hi) of `count` items for part i of n (every item in exactly one part). */
static inline void k3_chunk(int64_t count, int32_t i, int32_t n, int64_t* lo, int64_t* hi) {
  *lo = count * i / n;
  *hi = count * (i + 1) / n;
}

/* Rows handed out in blocks from a shared counter: a job's parts take the next block until none
 * is left, so a part on a slower or preempted vCPU does less of the job instead of holding the
 * others at the barrier (measured on the 2-vCPU Zen 4, resident decode: with halves fixed in
 * advance one thread idled ~7.5 % of the pool's time; docs/BENCH-KERNELS.md). Guided sizes: a
 * block is 1/(2·parts) of the rows still left, rounded up to a multiple of 48 (every ISA's row
 * block, 4 / 8 / 12, and the GEMM panel RP = 8, so blocks keep full register blocks), at least
 * 48: long sequential streams first, small ones at the end to even out the finish. Which
 * thread computes a row never changes its bits (each row's sum has one order), so any
 * interleaving gives the same output. */
#define K3_ROWQ_QUANTUM 48 /* rows: every block but the last is a multiple of this */
typedef struct { _Atomic int64_t next; int64_t count; int32_t parts; } k3_rowq;
static inline void k3_rowq_init(k3_rowq* q, int64_t count, int32_t parts) {
  atomic_init(&q->next, 0);
  q->count = count;
  q->parts = parts < 1 ? 1 : parts;
}
/* The next block [lo, hi) of q; 0 when the rows are all taken. */
static inline int k3_rowq_take(k3_rowq* q, int64_t* lo, int64_t* hi) {
  int64_t a = atomic_load_explicit(&q->next, memory_order_relaxed), b;
  do {
    if (a >= q->count) return 0;
    int64_t n = (q->count - a + 2 * q->parts - 1) / (2 * q->parts);
    n = (n + K3_ROWQ_QUANTUM - 1) / K3_ROWQ_QUANTUM * K3_ROWQ_QUANTUM;
    b = a + n < q->count ? a + n : q->count;
  } while (!atomic_compare_exchange_weak_explicit(&q->next, &a, b, memory_order_relaxed, memory_order_relaxed));
  *lo = a;
  *hi = b;
  return 1;
}

static inline float k3_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* exp, expf, tanhf with the same bits on every machine and libm (k3_math.c): kernels call these,
 * never libm's (sqrt, exactly rounded by IEEE 754, is the one libm function used). */
float k3_expf(float x);
double k3_exp(double x);
float k3_tanhf(float x);
/* expf's table: bits(2^(i/32)) − (i << 47) (k3_math.c; the vector expf of k3_math_vec.h reads it). */
extern const uint64_t k3_expf_T32[32];
/* Whether the CPU has FMA3 (x86-64; the AVX2 elementwise path needs it, k3_isa.c). */
int32_t k3_cpu_has_fma(void);

/* sigmoid(x) = 1 / (1 + exp(−x)) in f32 (saturates cleanly: exp overflow → inf → 0). */
static inline float k3_sigmoidf(float x) { return 1.0f / (1.0f + k3_expf(-x)); }

/* The library's 16-lane dot order (k3.h, matmuls): lane j sums products of c ≡ j (mod 16) for
 * c < n − n%16 in increasing c, halving tree, then the tail in increasing c. Products are
 * rounded to f32 before the add. Used by the scalar matmuls and by MLA. */
static inline float k3_tree16(float* v) {
  for (int j = 0; j < 8; j++) v[j] += v[j + 8];
  for (int j = 0; j < 4; j++) v[j] += v[j + 4];
  for (int j = 0; j < 2; j++) v[j] += v[j + 2];
  v[0] += v[1];
  return v[0];
}
static inline float k3_dot16_f32(const float* a, const float* b, int32_t n) {
  float v[16] = {0};
  int32_t n16 = n - n % 16;
  for (int32_t c = 0; c < n16; c += 16)
    for (int j = 0; j < 16; j++) { float p = a[c + j] * b[c + j]; v[j] += p; }
  float s = k3_tree16(v);
  for (int32_t c = n16; c < n; c++) { float p = a[c] * b[c]; s += p; }
  return s;
}
static inline float k3_dot16_bf16(const uint16_t* w, const float* x, int32_t n) {
  float v[16] = {0};
  int32_t n16 = n - n % 16;
  for (int32_t c = 0; c < n16; c += 16)
    for (int j = 0; j < 16; j++) { float p = k3_bf16(w[c + j]) * x[c + j]; v[j] += p; }
  float s = k3_tree16(v);
  for (int32_t c = n16; c < n; c++) { float p = k3_bf16(w[c]) * x[c]; s += p; }
  return s;
}
#endif
