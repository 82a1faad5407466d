/* KDA kernels (k3.h, MODEL.md §4 KDA): short conv + SiLU, per-head L2 norm, decay gate and the
 * delta-rule recurrence. FP contract: -ffp-contract=off, no fast-math, the orders in k3.h.
 * The recurrence splits heads across the pool; each head's state is touched by one thread, so
 * results are identical at any thread count; its loops (k3_kda_body.h) are built per ISA with the
 * same bits on every path (pinned in test/kernels-kda-bits.test.ts). */
#include "k3_kda_internal.h"

/* The recurrence: one body (k3_kda_body.h) per build, here the baseline (SSE2 / NEON); the AVX2
 * and AVX-512 builds are k3_kda_avx2.c / k3_kda_avx512.c, picked by k3_isa_current(). */
#define KDA_T
#define KDA_PART k3_kda_part_base
#include "k3_kda_body.h"

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

K3_API int32_t k3_kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                                const float* beta, float* S, float* o, int32_t H, int32_t D, int32_t T) {
  if (H <= 0 || D <= 0 || T <= 0 || D > K3_MAX_KDA_HEAD_DIM) return K3_ERR_ARG;
  kda_job J = { q, k, v, g, beta, S, o, H, D, T };
  k3_job_fn part = K3_ISA_PICK(k3_kda_part_base, k3_kda_part_avx2, k3_kda_part_avx512);
  k3_pool_run_if(part, &J, H == 1);
  return K3_OK;
}
