/* Shared by the MLA files: k3_mla.c (checks, scratch size, dispatch, the baseline build of the
 * body), k3_mla_avx2.c and k3_mla_avx512.c (the same body, kernels/k3_mla_body.h, compiled for
 * wider vectors). Every build performs the orders at the top of k3_mla.c, bit for bit. */
#ifndef K3_MLA_INTERNAL_H
#define K3_MLA_INTERNAL_H
#include "k3_internal.h"

/* Tokens per block of any build (MLA_TB ≤ this): the scratch holds this many tokens' q_lat,
 * o_lat and score rows per thread. */
#define K3_MLA_TB_MAX 4

typedef struct {
  const float* q;        /* [T][Hm][dn+dr] */
  const uint16_t* kv_b;  /* [Hm·(dn+dv)][R] bf16 */
  const float* cache;    /* [npos][R+dr] */
  float* out;            /* [T][Hm][dv] */
  float* scratch;        /* K3_POOL_MAX_THREADS slots of k3_mla_slot_floats(R, pos0+T) */
  int32_t Hm, dn, dr, dv, R, pos0, T;
  float scale;
} mla_job;

/* One thread's slot: q_lat [TB][R], o_lat [TB][R], scores [TB][npos]. */
static inline int64_t k3_mla_slot_floats(int32_t R, int32_t npos) {
  return K3_MLA_TB_MAX * (2 * (int64_t)R + npos);
}

/* Part i of n of the heads (a k3_job_fn), per build. */
void k3_mla_part_base(void* ctx, int32_t i, int32_t n);
void k3_mla_part_avx2(void* ctx, int32_t i, int32_t n);
void k3_mla_part_avx512(void* ctx, int32_t i, int32_t n);
#endif
