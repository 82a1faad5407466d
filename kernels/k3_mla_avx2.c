/* MLA attention, AVX2 build of kernels/k3_mla_body.h (same bits as every build, k3_mla.c):
 * a v16 is two ymm; 4 tokens × 1 chunk (8 ymm accumulators), output rows 2 × 2 tokens. */
#define MLA_T __attribute__((target("avx2")))
#define MLA_PART k3_mla_part_avx2
#define MLA_TB 4
#define MLA_JB 1
#define MLA_DB 2
#define MLA_OT 2
#include "k3_mla_body.h"
