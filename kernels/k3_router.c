/* MoE router (k3.h, MODEL.md §4 Router). s = sigmoid(logits) (f32), choice = s + bias (f32);
 * top-K of choice by repeated selection: strict > keeps the lowest expert id on ties. Weights
 * use the UNBIASED s (trap §7.2): w = s/(Σ s + 1e-20)·scaling, Σ in double in rank order, the
 * division and scaling in double, rounded once to f32. A NaN logit or a non-finite bias is
 * refused before anything is written: ranking around it would silently drop an expert. */
#include "k3_internal.h"

K3_API int32_t k3_router_topk(const float* logits, const float* bias, int32_t N, int32_t K,
                              int32_t T, float scaling, int32_t* idx, float* w) {
  if (N <= 0 || N > K3_MAX_ROUTER_EXPERTS || K <= 0 || K > N) return K3_ERR_ARG;
  for (int32_t e = 0; e < N; e++)
    if (!isfinite(bias[e])) return K3_ERR_NONFINITE;
  for (int64_t i = 0; i < (int64_t)T * N; i++)
    if (logits[i] != logits[i]) return K3_ERR_NONFINITE; /* ±inf is fine: sigmoid saturates */
  float s[K3_MAX_ROUTER_EXPERTS], choice[K3_MAX_ROUTER_EXPERTS];
  unsigned char taken[K3_MAX_ROUTER_EXPERTS];
  for (int32_t t = 0; t < T; t++) {
    const float* l = logits + (int64_t)t * N;
    int32_t* it = idx + (int64_t)t * K;
    float* wt = w + (int64_t)t * K;
    for (int32_t e = 0; e < N; e++) {
      s[e] = k3_sigmoidf(l[e]);
      choice[e] = s[e] + bias[e];
      taken[e] = 0;
    }
    double sum = 0.0;
    for (int32_t k = 0; k < K; k++) {
      int32_t best = -1;
      for (int32_t e = 0; e < N; e++) {
        if (taken[e]) continue;
        if (best < 0 || choice[e] > choice[best]) best = e;
      }
      taken[best] = 1;
      it[k] = best;
      sum += (double)s[best];
    }
    double denom = sum + 1e-20;
    for (int32_t k = 0; k < K; k++) wt[k] = (float)((double)s[it[k]] / denom * (double)scaling);
  }
  return K3_OK;
}
