/* Shared by the KDA recurrence files: k3_kda.c (checks, dispatch, the baseline build of the
 * body), k3_kda_avx2.c and k3_kda_avx512.c (the same body, kernels/k3_kda_body.h, for wider
 * vectors). Every build gives the same bits. */
#ifndef K3_KDA_INTERNAL_H
#define K3_KDA_INTERNAL_H
#include "k3_internal.h"

typedef struct {
  const float *q, *k, *v, *g, *beta; /* [T][H][D]; beta [T][H] */
  float *S, *o;                      /* state [H][D][D] (in place); o [T][H][D] */
  int32_t H, D, T;
} kda_job;

/* Part i of n of the heads (a k3_job_fn), per build. */
void k3_kda_part_base(void* ctx, int32_t i, int32_t n);
void k3_kda_part_avx2(void* ctx, int32_t i, int32_t n);
void k3_kda_part_avx512(void* ctx, int32_t i, int32_t n);
#endif
