/* 16-float GNU vectors for the kernel bodies built once per ISA (k3_mla_body.h, k3_kda_body.h).
 * The includer defines K3V_T, the target attribute of its build (empty for the baseline), so
 * each build has its own copies of these helpers (no vector crosses a call between builds).
 * Every operation is lane-wise IEEE f32; with -ffp-contract=off nothing fuses, so a v16 sum
 * rounds exactly like 16 scalar ones on every target. No include guard: one include per body. */
#include "k3_internal.h"

#define K3V_INL K3V_T __attribute__((always_inline)) static inline
/* Builds narrower than AVX-512 warn that a v16 argument or return "changes the ABI": every
 * function taking or returning one is always_inline and static, so no v16 crosses a real call. */
#pragma clang diagnostic ignored "-Wpsabi"

typedef float v16 __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef float v2f __attribute__((vector_size(8)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

K3V_INL v16 vld(const float* p) { v16 v; memcpy(&v, p, sizeof v); return v; }
K3V_INL void vst(float* p, v16 v) { memcpy(p, &v, sizeof v); }
K3V_INL v16 ldbf(const uint16_t* p) {
  u16x16 h;
  memcpy(&h, p, sizeof h);
  return (v16)(__builtin_convertvector(h, u32x16) << 16);
}
/* k3_tree16: v[j] += v[j+8], then +4, +2, +1, operands in that order. */
K3V_INL float tree(v16 v) {
  v8f a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  v4f b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  v2f c = __builtin_shufflevector(b, b, 0, 1) + __builtin_shufflevector(b, b, 2, 3);
  return c[0] + c[1];
}

