/* Elementwise and vector ops (k3.h). One scalar implementation each, sequential order (the
 * costly elementwise ones split their elements across the pool: below).
 * FP contract: -ffp-contract=off, no fast-math; k3_expf/k3_tanhf (k3_math.c, libm's x86-64 bits). Loops over independent
 * elements may be vectorized by the compiler, which never reorders a single element's ops. */
#include "k3_internal.h"

K3_API void k3_bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = k3_bf16(src[i]);
}

K3_API void k3_add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

K3_API void k3_axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) { float p = a * x[i]; y[i] += p; }
}

/* The elementwise ops with transcendental work (sigmoid, SiTU-GLU: ~10–20 ns an element) split
 * their elements across the pool from PAR_ELEMS on (a prefill chunk's SiTU-GLU is 10⁶–10⁷
 * elements). Each element is computed by one thread with the same code, so the bits do not depend
 * on the thread count. */
#define PAR_ELEMS 4096
enum { EW_SIGMOID, EW_MUL_SIGMOID, EW_SITU_GLU };
typedef struct { int op; float* x; const float* g; const float* u; int64_t n; float b1, b2; } ew_job;

static void ew_range(const ew_job* j, int64_t lo, int64_t hi) {
  float* x = j->x;
  if (j->op == EW_SIGMOID)
    for (int64_t i = lo; i < hi; i++) x[i] = k3_sigmoidf(x[i]);
  else if (j->op == EW_MUL_SIGMOID)
    for (int64_t i = lo; i < hi; i++) x[i] *= k3_sigmoidf(j->g[i]);
  else
    /* out = (b1·tanh(g/b1) · sigmoid(g)) · (b2·tanh(u/b2)), evaluated left to right as written */
    for (int64_t i = lo; i < hi; i++) {
      float gi = j->g[i], ui = j->u[i];
      float a = j->b1 * k3_tanhf(gi / j->b1);
      a = a * k3_sigmoidf(gi);
      float v = j->b2 * k3_tanhf(ui / j->b2);
      x[i] = a * v;
    }
}

static void ew_part(void* ctx, int32_t i, int32_t n) {
  const ew_job* j = ctx;
  int64_t lo, hi;
  k3_chunk(j->n, i, n, &lo, &hi);
  ew_range(j, lo, hi);
}

static void ew_run(ew_job j) {
  if (j.n > 0) k3_pool_run_if(ew_part, &j, j.n < PAR_ELEMS);
}

K3_API void k3_sigmoid(float* x, int64_t n) {
  ew_run((ew_job){ EW_SIGMOID, x, NULL, NULL, n, 0, 0 });
}

K3_API void k3_mul_sigmoid(float* x, const float* gate, int64_t n) {
  ew_run((ew_job){ EW_MUL_SIGMOID, x, gate, NULL, n, 0, 0 });
}

/* Both inputs of an element are read before its output is written, so out may alias g or u. */
K3_API void k3_situ_glu(const float* g, const float* u, float* out, int64_t n, float b1, float b2) {
  ew_run((ew_job){ EW_SITU_GLU, out, g, u, n, b1, b2 });
}

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
