/* KDA kernels (k3.h, MODEL.md §4 KDA): short conv + SiLU, per-head L2 norm, decay gate and the
 * delta-rule recurrence. FP contract: -ffp-contract=off, no fast-math, the orders in k3.h.
 * The recurrence splits heads across the pool; each head's state is touched by one thread, so
 * results are identical at any thread count. */
#include "k3_internal.h"

/* X: [T][C] in place; w: [C][4]; hist: [3][C] (hist[0] = x_{t−3} … hist[2] = x_{t−1}). */
K3_API void k3_kda_conv_silu(float* X, const float* w, float* hist, int32_t C, int32_t T) {
  for (int32_t c = 0; c < C; c++) {
    float h0 = hist[c], h1 = hist[C + c], h2 = hist[2 * C + c];
    const float* wc = w + (int64_t)c * 4;
    for (int32_t t = 0; t < T; t++) {
      float xt = X[(int64_t)t * C + c];
      float y = wc[0] * h0;
      float p;
      p = wc[1] * h1; y += p;
      p = wc[2] * h2; y += p;
      p = wc[3] * xt; y += p;
      X[(int64_t)t * C + c] = y * k3_sigmoidf(y);
      h0 = h1; h1 = h2; h2 = xt; /* the history holds raw inputs, not outputs */
    }
    hist[c] = h0; hist[C + c] = h1; hist[2 * C + c] = h2;
  }
}

/* x ← (float)(x · (1/sqrt(Σx² + eps)) · scale), Σ and the product in double. */
K3_API void k3_l2norm_heads(float* X, int32_t H, int32_t D, int32_t T, float eps, float scale) {
  for (int64_t row = 0; row < (int64_t)T * H; row++) {
    float* x = X + row * D;
    double ss = 0.0;
    for (int32_t d = 0; d < D; d++) ss += (double)x[d] * (double)x[d];
    double r = 1.0 / sqrt(ss + (double)eps);
    for (int32_t d = 0; d < D; d++) x[d] = (float)((double)x[d] * r * (double)scale);
  }
}

/* g = lower · sigmoid(exp(A_log[h]) · (f + dt_bias)), f32; A_log per head (trap §7.1). */
K3_API void k3_kda_gate(const float* f, const float* dt_bias, const float* A_log, float* g,
                        int32_t H, int32_t D, int32_t T, float lower) {
  for (int32_t t = 0; t < T; t++)
    for (int32_t h = 0; h < H; h++) {
      float a = k3_expf(A_log[h]);
      int64_t base = ((int64_t)t * H + h) * D;
      for (int32_t d = 0; d < D; d++) {
        float s = f[base + d] + dt_bias[(int64_t)h * D + d];
        float z = a * s;
        g[base + d] = lower * k3_sigmoidf(z);
      }
    }
}

typedef struct {
  const float *q, *k, *v, *g, *beta;
  float *S, *o;
  int32_t H, D, T;
} kda_job;

/* One head, all T tokens. Loops run i (key dim) outside and j (value dim) inside, so each
 * u[j] / o[j] is the sequential sum over i that k3.h specifies. u, e: fixed arrays of
 * K3_MAX_KDA_HEAD_DIM floats on the worker's stack (D is checked against it before any work). */
static void kda_head(const kda_job* J, int32_t h) {
  int32_t D = J->D, H = J->H;
  float* S = J->S + (int64_t)h * D * D;
  float u[K3_MAX_KDA_HEAD_DIM], e[K3_MAX_KDA_HEAD_DIM];
  for (int32_t t = 0; t < J->T; t++) {
    int64_t base = ((int64_t)t * H + h) * D;
    const float *q = J->q + base, *k = J->k + base, *v = J->v + base, *g = J->g + base;
    float beta = J->beta[(int64_t)t * H + h];
    for (int32_t i = 0; i < D; i++) {
      float a = k3_expf(g[i]);
      float* Si = S + (int64_t)i * D;
      for (int32_t j = 0; j < D; j++) Si[j] *= a;
    }
    for (int32_t j = 0; j < D; j++) u[j] = 0.0f;
    for (int32_t i = 0; i < D; i++) {
      const float* Si = S + (int64_t)i * D;
      for (int32_t j = 0; j < D; j++) { float p = Si[j] * k[i]; u[j] += p; }
    }
    for (int32_t j = 0; j < D; j++) { float d = v[j] - u[j]; e[j] = beta * d; }
    for (int32_t i = 0; i < D; i++) {
      float* Si = S + (int64_t)i * D;
      for (int32_t j = 0; j < D; j++) { float p = k[i] * e[j]; Si[j] += p; }
    }
    float* o = J->o + base;
    for (int32_t j = 0; j < D; j++) o[j] = 0.0f;
    for (int32_t i = 0; i < D; i++) {
      const float* Si = S + (int64_t)i * D;
      for (int32_t j = 0; j < D; j++) { float p = Si[j] * q[i]; o[j] += p; }
    }
  }
}

static void kda_part(void* ctx, int32_t i, int32_t n) {
  kda_job* J = ctx;
  int64_t lo, hi;
  k3_chunk(J->H, i, n, &lo, &hi);
  for (int64_t h = lo; h < hi; h++) kda_head(J, (int32_t)h);
}

K3_API int32_t k3_kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                                const float* beta, float* S, float* o, int32_t H, int32_t D, int32_t T) {
  if (H <= 0 || D <= 0 || T <= 0 || D > K3_MAX_KDA_HEAD_DIM) return K3_ERR_ARG;
  kda_job J = { q, k, v, g, beta, S, o, H, D, T };
  k3_pool_run_if(kda_part, &J, H == 1);
  return K3_OK;
}
