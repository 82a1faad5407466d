/* The KDA recurrence body (the order at k3_kda.c's kda_head: k3.h's delta rule), included once
 * by each of k3_kda.c (baseline: SSE2 / NEON), k3_kda_avx2.c and k3_kda_avx512.c, which define
 * KDA_T (the target attribute, empty for the baseline), KDA_PART (the entry point's name) and
 * optionally KDA_JB (16-lane chunks of u / o held in registers when D is a multiple of 16·KDA_JB).
 * Lanes run over the value dim j (independent outputs, 16 at a time in a v16, k3_v16.h); every
 * u[j], S[i][j] and o[j] sees its own operations in the scalar order. The four passes over the
 * state per token are fused into two, which changes no value: row i is decayed just before it
 * adds into u (u's sum over i stays sequential), and updated just before it adds into o (o reads
 * the updated rows, as after a full update pass). The state is read twice per token, not four
 * times. */
#include "k3_kda_internal.h"

#define K3V_T KDA_T
#include "k3_v16.h"

#ifndef KDA_JB
#define KDA_JB 0
#endif
#if KDA_JB > 0
/* D a multiple of 16·KDA_JB: the same two passes with a block of KDA_JB chunks of u (then o) in
 * registers and the rows walked down the block (the state is still read twice per token, and u,
 * e, o no longer go through memory per row). */
KDA_T static void kda_token_blocked(float* S, int32_t D, const float* alpha, const float* k,
                                    const float* q, const float* v, float beta, float* u, float* o) {
  for (int32_t j0 = 0; j0 < D; j0 += 16 * KDA_JB) {
    v16 acc[KDA_JB];
    for (int b = 0; b < KDA_JB; b++) acc[b] = (v16){ 0 };
    for (int32_t i = 0; i < D; i++) {
      float* Si = S + (int64_t)i * D + j0;
      float a = alpha[i], ki = k[i];
      for (int b = 0; b < KDA_JB; b++) {
        v16 s = vld(Si + 16 * b) * a;
        vst(Si + 16 * b, s);
        acc[b] = acc[b] + s * ki;
      }
    }
    for (int b = 0; b < KDA_JB; b++) vst(u + j0 + 16 * b, acc[b]);
  }
  for (int32_t j = 0; j < D; j++) { float d = v[j] - u[j]; u[j] = beta * d; } /* u now holds e */
  for (int32_t j0 = 0; j0 < D; j0 += 16 * KDA_JB) {
    v16 acc[KDA_JB], e[KDA_JB];
    for (int b = 0; b < KDA_JB; b++) { acc[b] = (v16){ 0 }; e[b] = vld(u + j0 + 16 * b); }
    for (int32_t i = 0; i < D; i++) {
      float* Si = S + (int64_t)i * D + j0;
      float ki = k[i], qi = q[i];
      for (int b = 0; b < KDA_JB; b++) {
        v16 s = vld(Si + 16 * b) + ki * e[b];
        vst(Si + 16 * b, s);
        acc[b] = acc[b] + s * qi;
      }
    }
    for (int b = 0; b < KDA_JB; b++) vst(o + j0 + 16 * b, acc[b]);
  }
}
#endif

/* One head, all T tokens: j < D16 in v16s, the tail one by one (u, e, alpha: K3_MAX_KDA_HEAD_DIM
 * floats on the worker's stack; D is checked against it before any work). */
KDA_T static void kda_head_body(const kda_job* J, int32_t h) {
  const int32_t D = J->D, H = J->H, D16 = D - D % 16;
  float* S = J->S + (int64_t)h * D * D;
  float u[K3_MAX_KDA_HEAD_DIM], e[K3_MAX_KDA_HEAD_DIM], alpha[K3_MAX_KDA_HEAD_DIM], *o;
  for (int32_t t = 0; t < J->T; t++) {
    int64_t base = ((int64_t)t * H + h) * D;
    const float *q = J->q + base, *k = J->k + base, *v = J->v + base, *g = J->g + base;
    float beta = J->beta[(int64_t)t * H + h];
    for (int32_t i = 0; i < D; i++) alpha[i] = k3_expf(g[i]);
#if KDA_JB > 0
    if (D % (16 * KDA_JB) == 0) { kda_token_blocked(S, D, alpha, k, q, v, beta, u, J->o + base); continue; }
#endif
    for (int32_t j = 0; j < D; j++) u[j] = 0.0f;
    for (int32_t i = 0; i < D; i++) {
      float a = alpha[i], ki = k[i];
      float* Si = S + (int64_t)i * D;
      int32_t j = 0;
      for (; j < D16; j += 16) {
        v16 s = vld(Si + j) * a;
        vst(Si + j, s);
        vst(u + j, vld(u + j) + s * ki);
      }
      for (; j < D; j++) { Si[j] *= a; float p = Si[j] * ki; u[j] += p; }
    }
    for (int32_t j = 0; j < D; j++) { float d = v[j] - u[j]; e[j] = beta * d; }
    o = J->o + base;
    for (int32_t j = 0; j < D; j++) o[j] = 0.0f;
    for (int32_t i = 0; i < D; i++) {
      float ki = k[i], qi = q[i];
      float* Si = S + (int64_t)i * D;
      int32_t j = 0;
      for (; j < D16; j += 16) {
        v16 s = vld(Si + j) + ki * vld(e + j);
        vst(Si + j, s);
        vst(o + j, vld(o + j) + s * qi);
      }
      for (; j < D; j++) { float p = ki * e[j]; Si[j] += p; float r = Si[j] * qi; o[j] += r; }
    }
  }
}

/* Part i of n of the heads; each head's state is touched by one thread. */
KDA_T void KDA_PART(void* ctx, int32_t i, int32_t n) {
  const kda_job* J = ctx;
  int64_t lo, hi;
  k3_chunk(J->H, i, n, &lo, &hi);
  for (int64_t h = lo; h < hi; h++) kda_head_body(J, (int32_t)h);
}
