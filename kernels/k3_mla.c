/* MLA attention in the absorbed form (k3.h, MODEL.md §4 MLA). No rotary embedding anywhere.
 * FP contract: -ffp-contract=off, no fast-math. Orders:
 *   q_lat[j] = Σ_d kv_b[k-row d][j]·q_nope[d]   sequential in d (per j)
 *   s_p = scale · (dot16(q_lat, c_p[0..R)) + dot16(q_rope, c_p[R..R+dr)))   (16-lane order)
 *   a_p = (float)(exp_f32(s_p − max) / Σ_p e_p)  (Σ in double, increasing p)
 *   o_lat[j] = Σ_p a_p·c_p[j]                    sequential in p (per j)
 *   out[d] = dot16(kv_b[v-row d], o_lat)         (16-lane order)
 * dot16 is the matmuls' 16-lane order (k3_internal.h): a plain sequential sum over 512 dims
 * per cached position would be latency-bound. Heads split across the pool; each thread uses
 * its own scratch slot, so results are identical at any thread count and any T. */
#include "k3_internal.h"

static int64_t slot_floats(int32_t R, int32_t npos) { return 2 * (int64_t)R + npos; }

K3_API int64_t k3_mla_scratch_floats(int32_t R, int32_t npos) {
  if (R < 0 || npos < 0) return K3_ERR_ARG;
  return (int64_t)K3_POOL_MAX_THREADS * slot_floats(R, npos);
}

typedef struct {
  const float* q;        /* [T][Hm][dn+dr] */
  const uint16_t* kv_b;  /* [Hm·(dn+dv)][R] bf16 */
  const float* cache;    /* [npos][R+dr] */
  float* out;            /* [T][Hm][dv] */
  float* scratch;        /* K3_POOL_MAX_THREADS slots of slot_floats(R, pos0+T) */
  int32_t Hm, dn, dr, dv, R, pos0, T;
  float scale;
} mla_job;

static void mla_head_token(const mla_job* J, int32_t h, int32_t t, float* slot) {
  int32_t R = J->R, dn = J->dn, dr = J->dr, dv = J->dv, ld = R + dr;
  int32_t npos = J->pos0 + t + 1;
  float* q_lat = slot;
  float* o_lat = slot + R;
  float* a = slot + 2 * (int64_t)R;
  const float* qn = J->q + ((int64_t)t * J->Hm + h) * (dn + dr);
  const float* qr = qn + dn;
  const uint16_t* kb = J->kv_b + (int64_t)h * (dn + dv) * R; /* k_nope rows, then v rows */

  for (int32_t j = 0; j < R; j++) q_lat[j] = 0.0f;
  for (int32_t d = 0; d < dn; d++) {
    const uint16_t* row = kb + (int64_t)d * R;
    float qd = qn[d];
    for (int32_t j = 0; j < R; j++) { float p = k3_bf16(row[j]) * qd; q_lat[j] += p; }
  }

  float mx = -INFINITY;
  for (int32_t p = 0; p < npos; p++) {
    const float* c = J->cache + (int64_t)p * ld;
    float s = k3_dot16_f32(q_lat, c, R) + k3_dot16_f32(qr, c + R, dr);
    s = J->scale * s;
    a[p] = s;
    if (s > mx) mx = s;
  }
  double sum = 0.0;
  for (int32_t p = 0; p < npos; p++) { a[p] = k3_expf(a[p] - mx); sum += a[p]; }
  for (int32_t p = 0; p < npos; p++) a[p] = (float)((double)a[p] / sum);

  for (int32_t j = 0; j < R; j++) o_lat[j] = 0.0f;
  for (int32_t p = 0; p < npos; p++) {
    const float* c = J->cache + (int64_t)p * ld;
    float ap = a[p];
    for (int32_t j = 0; j < R; j++) { float v = ap * c[j]; o_lat[j] += v; }
  }

  float* o = J->out + ((int64_t)t * J->Hm + h) * dv;
  for (int32_t d = 0; d < dv; d++) o[d] = k3_dot16_bf16(kb + (int64_t)(dn + d) * R, o_lat, R);
}

static void mla_part(void* ctx, int32_t i, int32_t n) {
  mla_job* J = ctx;
  float* slot = J->scratch + (int64_t)i * slot_floats(J->R, J->pos0 + J->T);
  int64_t lo, hi;
  k3_chunk(J->Hm, i, n, &lo, &hi);
  for (int64_t h = lo; h < hi; h++)
    for (int32_t t = 0; t < J->T; t++) mla_head_token(J, (int32_t)h, t, slot);
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
  k3_pool_run_if(mla_part, &J, Hm == 1);
  return K3_OK;
}
