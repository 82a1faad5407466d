/* MLA attention in the absorbed form (k3.h, MODEL.md §4 MLA). No rotary embedding anywhere.
 * FP contract: -ffp-contract=off, no fast-math. Orders:
 *   q_lat[j] = Σ_d kv_b[k-row d][j]·q_nope[d]   sequential in d (per j)
 *   s_p = scale · (dot16(q_lat, c_p[0..R)) + dot16(q_rope, c_p[R..R+dr)))   (16-lane order)
 *   a_p = (float)(exp_f32(s_p − max) / Σ_p e_p)  (Σ in double, increasing p)
 *   o_lat[j] = Σ_p a_p·c_p[j]                    sequential in p (per j)
 *   out[d] = dot16(kv_b[v-row d], o_lat)         (16-lane order)
 * dot16 is the matmuls' 16-lane order (k3_internal.h): a plain sequential sum over 512 dims
 * per cached position would be latency-bound. Heads split across the pool; each thread uses
 * its own scratch slot, so results are identical at any thread count and any T.
 * One body (k3_mla_body.h) is built per ISA: here for the baseline (SSE2 / NEON), in
 * k3_mla_avx2.c and k3_mla_avx512.c for wider vectors, picked by k3_isa_current(). It blocks
 * each head's tokens (one pass over a kv_b row or a cache row serves up to 4 tokens) without
 * changing any output's own operations: every path gives the bits of the one-head-token loop
 * this file held before (pinned in test/kernels-mla-bits.test.ts). */
#include "k3_mla_internal.h"

/* The baseline build of the body (no target attribute): SSE2 on x86-64 (a v16 is four xmm, so
 * small blocks), NEON on aarch64 (four q registers; 32 of them). */
#define MLA_T
#define MLA_PART k3_mla_part_base
#if defined(__aarch64__)
#define MLA_TB 4
#define MLA_JB 1
#define MLA_DB 2
#define MLA_OT 2
#else
#define MLA_TB 2
#define MLA_JB 1
#define MLA_DB 1
#define MLA_OT 2
#endif
#include "k3_mla_body.h"

K3_API int64_t k3_mla_scratch_floats(int32_t R, int32_t npos) {
  if (R < 0 || npos < 0) return K3_ERR_ARG;
  return (int64_t)K3_POOL_MAX_THREADS * k3_mla_slot_floats(R, npos);
}

/* Every size the kernel strides by is checked against what the caller says it allocated: the
 * cache must hold positions 0..pos0+T−1 and the scratch K3_POOL_MAX_THREADS slots strided by
 * pos0+T (a session longer than the scratch was sized for would write past its end). */
K3_API int32_t k3_mla_attend(const float* q, const uint16_t* kv_b, const float* cache, float* out,
                             float* scratch, int32_t Hm, int32_t dn, int32_t dr, int32_t dv,
                             int32_t R, int32_t pos0, int32_t T, float scale,
                             int32_t cache_rows, int64_t scratch_floats) {
  if (Hm <= 0 || T <= 0 || dn <= 0 || dr < 0 || dv <= 0 || R <= 0 || pos0 < 0) return K3_ERR_ARG;
  if ((int64_t)pos0 + T > cache_rows) return K3_ERR_ARG;
  if (k3_mla_scratch_floats(R, pos0 + T) > scratch_floats) return K3_ERR_ARG;
  mla_job J = { q, kv_b, cache, out, scratch, Hm, dn, dr, dv, R, pos0, T, scale };
  k3_job_fn part = K3_ISA_PICK(k3_mla_part_base, k3_mla_part_avx2, k3_mla_part_avx512);
  k3_pool_run_if(part, &J, Hm == 1);
  return K3_OK;
}
