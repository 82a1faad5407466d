/* The KDA recurrence, AVX2 build of kernels/k3_kda_body.h (same bits as every build, k3_kda.c). */
#define KDA_T __attribute__((target("avx2")))
#define KDA_PART k3_kda_part_avx2
#define KDA_JB 4 /* 4 chunks of u (then o) in 8 ymm, 4 of e in 8 more */
#include "k3_kda_body.h"
