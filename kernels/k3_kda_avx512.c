/* The KDA recurrence, AVX-512 build of kernels/k3_kda_body.h (same bits as every build, k3_kda.c). */
#define KDA_T __attribute__((target("avx512f,avx512bw")))
#define KDA_PART k3_kda_part_avx512
#define KDA_JB 8 /* D = 128: all of u (then o) in 8 zmm */
#include "k3_kda_body.h"
