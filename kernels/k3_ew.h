/* The elementwise ops with transcendental work (k3_ops.c): sigmoid, x·sigmoid(g), SiTU-GLU, and
 * expf / tanhf over an array (k3_expf_n, k3_tanhf_n: what tools/libm-vector-check.ts and the tests
 * compare). One job type for the scalar loop (k3_ops.c) and the vector loops (k3_math_avx512.c,
 * k3_math_avx2.c through k3_math_vec.h), and one scalar element function per op that both use: the
 * vector loops hand a lane they do not compute (NaN, ±inf, expf's |x| ≥ 88 range) to it. */
#ifndef K3_EW_H
#define K3_EW_H
#include "k3_internal.h"

enum { K3_EW_SIGMOID, K3_EW_MUL_SIGMOID, K3_EW_SITU_GLU, K3_EW_EXPF, K3_EW_TANHF };
/* x[i] = op(x[i]) (sigmoid, expf, tanhf), x[i] *= sigmoid(g[i]), or x[i] = situ(g[i], u[i]). */
typedef struct { int op; int32_t isa; float* x; const float* g; const float* u; int64_t n; float b1, b2; } k3_ew_job;

/* out = (b1·tanh(g/b1) · sigmoid(g)) · (b2·tanh(u/b2)), evaluated left to right as written. */
static inline float k3_situ_elem(float g, float u, float b1, float b2) {
  float a = b1 * k3_tanhf(g / b1);
  a = a * k3_sigmoidf(g);
  float v = b2 * k3_tanhf(u / b2);
  return a * v;
}

/* One element of op, scalar, from its inputs (each op reads only its own: x for sigmoid, expf and
 * tanhf; x and g for mul_sigmoid; g and u for SiTU-GLU). */
static inline float k3_ew_scalar(int op, float x, float g, float u, float b1, float b2) {
  switch (op) {
    case K3_EW_SIGMOID: return k3_sigmoidf(x);
    case K3_EW_MUL_SIGMOID: return x * k3_sigmoidf(g);
    case K3_EW_SITU_GLU: return k3_situ_elem(g, u, b1, b2);
    case K3_EW_EXPF: return k3_expf(x);
    default: return k3_tanhf(x);
  }
}

/* Elements [lo, hi) with the vector code: exactly the bits of k3_ew_scalar for every input. */
void k3_ew_avx512(const k3_ew_job* j, int64_t lo, int64_t hi);
void k3_ew_avx2(const k3_ew_job* j, int64_t lo, int64_t hi); /* needs FMA too (k3_cpu_has_fma) */
#endif
