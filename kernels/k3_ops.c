/* Elementwise and vector ops (k3.h). One scalar implementation each, sequential order (the
 * costly elementwise ones split their elements across the pool and have vector paths with the
 * same bits: below).
 * FP contract: -ffp-contract=off, no fast-math; k3_expf/k3_tanhf (k3_math.c, libm's x86-64 bits). Loops over independent
 * elements may be vectorized by the compiler, which never reorders a single element's ops. */
#include "k3_ew.h"

K3_API void k3_bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = k3_bf16(src[i]);
}

K3_API void k3_add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

K3_API void k3_axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) { float p = a * x[i]; y[i] += p; }
}

/* The elementwise ops with transcendental work (sigmoid, SiTU-GLU: ~10–20 ns an element scalar,
 * ~1 on the vector paths) split their elements across the pool from PAR_ELEMS on (a prefill
 * chunk's SiTU-GLU is 10⁶–10⁷ elements). Each element is computed by one thread with the same
 * code, so the bits do not depend on the thread count. The AVX-512 and AVX2 (+FMA) paths
 * (k3_math_vec.h) give the scalar functions' bits for every input; NEON and x86 CPUs without FMA
 * run the scalar loop below. */
#define PAR_ELEMS 4096

static void ew_scalar(const k3_ew_job* j, int64_t lo, int64_t hi) {
  float* x = j->x;
  if (j->op == K3_EW_SIGMOID)
    for (int64_t i = lo; i < hi; i++) x[i] = k3_sigmoidf(x[i]);
  else if (j->op == K3_EW_MUL_SIGMOID)
    for (int64_t i = lo; i < hi; i++) x[i] *= k3_sigmoidf(j->g[i]);
  else if (j->op == K3_EW_SITU_GLU)
    for (int64_t i = lo; i < hi; i++) x[i] = k3_situ_elem(j->g[i], j->u[i], j->b1, j->b2);
  else
    for (int64_t i = lo; i < hi; i++) x[i] = k3_ew_scalar(j->op, x[i], 0, 0, 0, 0);
}

static void ew_part(void* ctx, int32_t i, int32_t n) {
  const k3_ew_job* j = ctx;
  int64_t lo, hi;
  k3_chunk(j->n, i, n, &lo, &hi);
#if defined(__x86_64__)
  if (j->isa == K3_ISA_AVX512) { k3_ew_avx512(j, lo, hi); return; }
  if (j->isa == K3_ISA_AVX2) { k3_ew_avx2(j, lo, hi); return; }
#endif
  ew_scalar(j, lo, hi);
}

/* The path is chosen once, on the calling thread: the ISA in effect, AVX2 only with FMA. */
static void ew_run(int op, float* x, const float* g, const float* u, int64_t n, float b1, float b2) {
  int32_t isa = k3_isa_current();
  if (isa == K3_ISA_AVX2 && !k3_cpu_has_fma()) isa = K3_ISA_SCALAR;
  k3_ew_job j = { op, isa, x, g, u, n, b1, b2 };
  if (n > 0) k3_pool_run_if(ew_part, &j, n < PAR_ELEMS);
}

K3_API void k3_sigmoid(float* x, int64_t n) { ew_run(K3_EW_SIGMOID, x, NULL, NULL, n, 0, 0); }

K3_API void k3_mul_sigmoid(float* x, const float* gate, int64_t n) {
  ew_run(K3_EW_MUL_SIGMOID, x, gate, NULL, n, 0, 0);
}

/* Both inputs of an element are read before its output is written, so out may alias g or u. */
K3_API void k3_situ_glu(const float* g, const float* u, float* out, int64_t n, float b1, float b2) {
  ew_run(K3_EW_SITU_GLU, out, g, u, n, b1, b2);
}

K3_API void k3_expf_n(float* x, int64_t n) { ew_run(K3_EW_EXPF, x, NULL, NULL, n, 0, 0); }
K3_API void k3_tanhf_n(float* x, int64_t n) { ew_run(K3_EW_TANHF, x, NULL, NULL, n, 0, 0); }

/* Ties → lowest index (strict >). NaN never wins; all-NaN (or n ≤ 0 → −1) returns 0 / −1. */
K3_API int32_t k3_argmax(const float* x, int32_t n) {
  if (n <= 0) return K3_ERR_ARG;
  int32_t best = 0;
  for (int32_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) return K3_ERR_NONFINITE;
    if (x[i] > x[best]) best = i;
  }
  return best;
}

/* y[i] = (float)(w[i] · (x[i] · r)), r = 1/sqrt(Σx²/n + eps), all in double, Σ sequential. */
static inline double rms_r(const float* x, int32_t n, float eps) {
  double ss = 0.0;
  for (int32_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
  return 1.0 / sqrt(ss / n + (double)eps);
}

K3_API void k3_rmsnorm_bf16w(const float* x, int32_t ldx, const uint16_t* w, float* y,
                             int32_t ldy, int32_t n, int32_t T, float eps) {
  for (int32_t t = 0; t < T; t++) {
    const float* xr = x + (int64_t)t * ldx;
    float* yr = y + (int64_t)t * ldy;
    double r = rms_r(xr, n, eps);
    for (int32_t i = 0; i < n; i++) yr[i] = (float)((double)k3_bf16(w[i]) * ((double)xr[i] * r));
  }
}

K3_API void k3_rmsnorm_f32w(const float* x, int32_t ldx, const float* w, float* y,
                            int32_t ldy, int32_t n, int32_t T, float eps) {
  for (int32_t t = 0; t < T; t++) {
    const float* xr = x + (int64_t)t * ldx;
    float* yr = y + (int64_t)t * ldy;
    double r = rms_r(xr, n, eps);
    for (int32_t i = 0; i < n; i++) yr[i] = (float)((double)w[i] * ((double)xr[i] * r));
  }
}
