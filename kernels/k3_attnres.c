/* AttnRes mix (k3.h, MODEL.md §4 "Attention residuals"). One scalar implementation, all in
 * double, sequential orders: Σ_d for the statistics and the score, softmax over sources in
 * source order, out[d] = Σ_i p_i·V_i[d] with i increasing. Returns the mix of the RAW sources
 * (trap §7.7: mixing the normed sources gives a different, still fluent, model). */
#include "k3_internal.h"

/* Stack arrays are sized by K3_MAX_ATTNRES_SOURCES (k3.h); K3 itself has at most 9 sources. */
K3_API int32_t k3_attnres_mix(const float* bank, int32_t n, const float* P, const uint16_t* proj,
                              const uint16_t* norm, float* out, int32_t E, int32_t T, float eps) {
  if (n < 0 || n + 1 > K3_MAX_ATTNRES_SOURCES) return K3_ERR_ARG;
  double score[K3_MAX_ATTNRES_SOURCES], p[K3_MAX_ATTNRES_SOURCES];
  const float* V[K3_MAX_ATTNRES_SOURCES];
  for (int32_t t = 0; t < T; t++) {
    for (int32_t i = 0; i < n; i++) V[i] = bank + ((int64_t)i * T + t) * E;
    V[n] = P + (int64_t)t * E;
    double mx = -INFINITY;
    for (int32_t i = 0; i <= n; i++) {
      double ss = 0.0;
      for (int32_t d = 0; d < E; d++) ss += (double)V[i][d] * (double)V[i][d];
      double r = 1.0 / sqrt(ss / E + (double)eps);
      double s = 0.0;
      for (int32_t d = 0; d < E; d++)
        s += ((double)V[i][d] * r) * (double)k3_bf16(norm[d]) * (double)k3_bf16(proj[d]);
      score[i] = s;
      if (s > mx) mx = s;
    }
    double z = 0.0;
    for (int32_t i = 0; i <= n; i++) { p[i] = k3_exp(score[i] - mx); z += p[i]; }
    for (int32_t i = 0; i <= n; i++) p[i] /= z;
    float* o = out + (int64_t)t * E;
    /* out may alias P: every source value of element d is read before o[d] is written. */
    for (int32_t d = 0; d < E; d++) {
      double acc = 0.0;
      for (int32_t i = 0; i <= n; i++) acc += p[i] * (double)V[i][d];
      o[d] = (float)acc;
    }
  }
  return K3_OK;
}
