/* MLA attention, AVX-512 build of kernels/k3_mla_body.h (same bits as every build, k3_mla.c):
 * a v16 is one zmm; 4 tokens × 4 chunks (16 zmm accumulators), output rows 4 × 4 tokens. */
#define MLA_T __attribute__((target("avx512f,avx512bw")))
#define MLA_PART k3_mla_part_avx512
#define MLA_TB 4
#define MLA_JB 4
#define MLA_DB 4
#define MLA_OT 4
#include "k3_mla_body.h"
