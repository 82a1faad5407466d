/* The MLA kernel body (the orders at the top of k3_mla.c), included once by each of k3_mla.c
 * (baseline: SSE2 on x86-64, NEON on aarch64), k3_mla_avx2.c and k3_mla_avx512.c, which define
 *   MLA_T                the target attribute of every function here (empty for the baseline),
 *   MLA_PART             the name of the entry point (a k3_job_fn over heads),
 *   MLA_TB, MLA_JB       tokens per block (≤ K3_MLA_TB_MAX) and 16-lane chunks per register block,
 *   MLA_DB, MLA_OT       rows × tokens per register block of the output projection.
 * Vectors are 16-float GNU vectors (v16): the compiler lowers each lane-wise operation to the
 * target's registers (one zmm, two ymm, four xmm or four NEON q), IEEE per lane, no FMA
 * (-ffp-contract=off), so every build gives the same bits. A v16 holds the 16 lanes of the
 * dot16 order (lane j ← columns ≡ j mod 16) or 16 consecutive outputs of a sequential sum.
 * Blocking only interleaves independent outputs: each q_lat[t][j], score, o_lat[t][j] and out
 * keeps its own accumulator and sees its own operations in the documented order. A block of
 * tokens shares each kv_b row and each cache row it reads; positions past a token's own
 * (p > pos0 + t: the causal tail inside a block) are left out of that token's sums, never added
 * as zeros (x + 0 is not always x: −0 + 0 = +0). */
#include "k3_mla_internal.h"

#define K3V_T MLA_T
#include "k3_v16.h"
#define INL MLA_T __attribute__((always_inline)) static inline

/* Instantiates BODY(n) for the runtime count n = 1..MLA_TB (compile-time block sizes). */
#if MLA_TB >= 4
#define MLA_CASES(n, BODY) switch (n) { case 1: BODY(1); break; case 2: BODY(2); break; case 3: BODY(3); break; default: BODY(4); }
#elif MLA_TB >= 2
#define MLA_CASES(n, BODY) switch (n) { case 1: BODY(1); break; default: BODY(2); }
#else
#define MLA_CASES(n, BODY) BODY(1)
#endif

/* The tokens t0..t0+tb−1 of one head. */
typedef struct {
  const mla_job* J;
  const uint16_t* kb;        /* the head's k_nope rows [dn][R], then its v rows [dv][R] */
  const float* qn[MLA_TB];   /* token t's q_nope (dn floats), q_rope right after */
  float *QL, *OL, *A;        /* slot: q_lat [tb][R], o_lat [tb][R], scores [tb][ns] */
  int64_t ns;                /* score row stride: pos0 + T */
  int32_t h, t0, tb;
} mla_blk;

/* q_lat[t][j] = Σ_d kv_b[d][j]·q_nope[t][d], sequential in d, for chunks j..j+16·JB. */
INL void qlat_chunks(const mla_blk* B, int32_t j, const int TB, const int JB) {
  const int32_t R = B->J->R, dn = B->J->dn;
  v16 acc[MLA_TB][MLA_JB];
  for (int t = 0; t < TB; t++) for (int b = 0; b < JB; b++) acc[t][b] = (v16){ 0 };
  for (int32_t d = 0; d < dn; d++) {
    const uint16_t* row = B->kb + (int64_t)d * R + j;
    for (int b = 0; b < JB; b++) {
      v16 w = ldbf(row + 16 * b);
      for (int t = 0; t < TB; t++) acc[t][b] = acc[t][b] + w * B->qn[t][d];
    }
  }
  for (int t = 0; t < TB; t++) for (int b = 0; b < JB; b++) vst(B->QL + (int64_t)t * R + j + 16 * b, acc[t][b]);
}

/* One token (decode): the same sums with q_lat in memory, 4 rows at a time, so the kv_b rows
 * stream in address order (column blocks down the rows read them with a 1 KB stride, ~1.5×
 * slower from RAM); rows PF_ROWS ahead are prefetched. */
#define PF_ROWS 8
MLA_T static void qlat_one(const mla_blk* B) {
  const int32_t R = B->J->R, dn = B->J->dn, R16 = R - R % 16;
  const float* qn = B->qn[0];
  float* ql = B->QL;
  for (int32_t j = 0; j < R16; j += 16) vst(ql + j, (v16){ 0 });
  int32_t d = 0;
  for (; d + 4 <= dn; d += 4) { /* 4 rows side by side, added in d order: 4 streams in flight */
    const uint16_t* row = B->kb + (int64_t)d * R;
    for (int32_t j = 0; j < 4 * R; j += 32) __builtin_prefetch(row + (int64_t)PF_ROWS * R + j);
    for (int32_t j = 0; j < R16; j += 16) {
      v16 acc = vld(ql + j);
      acc = acc + ldbf(row + j) * qn[d];
      acc = acc + ldbf(row + R + j) * qn[d + 1];
      acc = acc + ldbf(row + 2 * R + j) * qn[d + 2];
      acc = acc + ldbf(row + 3 * R + j) * qn[d + 3];
      vst(ql + j, acc);
    }
  }
  for (; d < dn; d++) {
    const uint16_t* row = B->kb + (int64_t)d * R;
    for (int32_t j = 0; j < R16; j += 16) vst(ql + j, vld(ql + j) + ldbf(row + j) * qn[d]);
  }
}

MLA_T static void qlat(const mla_blk* B) {
  const int32_t R = B->J->R, dn = B->J->dn, R16 = R - R % 16;
  int32_t j = 0;
  if (B->tb == 1) { qlat_one(B); j = R16; }
#define QL_WIDE(n) qlat_chunks(B, j, n, MLA_JB)
#define QL_ONE(n) qlat_chunks(B, j, n, 1)
  for (; j + 16 * MLA_JB <= R16; j += 16 * MLA_JB) MLA_CASES(B->tb, QL_WIDE)
  for (; j < R16; j += 16) MLA_CASES(B->tb, QL_ONE)
  for (int t = 0; t < B->tb; t++)
    for (j = R16; j < R; j++) {
      float s = 0.0f;
      for (int32_t d = 0; d < dn; d++) { float p = k3_bf16(B->kb[(int64_t)d * R + j]) * B->qn[t][d]; s += p; }
      B->QL[(int64_t)t * R + j] = s;
    }
}

/* s_p for positions p..p+PB−1 (cache rows c, c + ld, …) and tokens t0..t0+TB−1 of the block:
 * two dot16s, added, then scaled; written to A[t][p]. PB·TB chains side by side. */
INL void score_pos(const mla_blk* B, const float* c, int64_t p, int t0, const int PB, const int TB) {
  const int32_t R = B->J->R, dr = B->J->dr, ld = R + dr, R16 = R - R % 16, dr16 = dr - dr % 16;
  v16 a[2][MLA_TB], b[2][MLA_TB];
  for (int i = 0; i < PB; i++) for (int t = 0; t < TB; t++) a[i][t] = b[i][t] = (v16){ 0 };
  for (int32_t k = 0; k < R16; k += 16) {
    v16 cv[2];
    for (int i = 0; i < PB; i++) cv[i] = vld(c + (int64_t)i * ld + k);
    for (int t = 0; t < TB; t++) {
      v16 x = vld(B->QL + (int64_t)(t0 + t) * R + k);
      for (int i = 0; i < PB; i++) a[i][t] = a[i][t] + x * cv[i];
    }
  }
  for (int32_t k = 0; k < dr16; k += 16) {
    v16 cv[2];
    for (int i = 0; i < PB; i++) cv[i] = vld(c + (int64_t)i * ld + R + k);
    for (int t = 0; t < TB; t++) {
      v16 x = vld(B->qn[t0 + t] + B->J->dn + k);
      for (int i = 0; i < PB; i++) b[i][t] = b[i][t] + x * cv[i];
    }
  }
  for (int i = 0; i < PB; i++)
    for (int t = 0; t < TB; t++) {
      const float* ql = B->QL + (int64_t)(t0 + t) * R;
      const float* qr = B->qn[t0 + t] + B->J->dn;
      const float* ci = c + (int64_t)i * ld;
      float x = tree(a[i][t]);
      for (int32_t k = R16; k < R; k++) { float q = ql[k] * ci[k]; x += q; }
      float y = tree(b[i][t]);
      for (int32_t k = dr16; k < dr; k++) { float q = qr[k] * ci[R + k]; y += q; }
      float s = x + y;
      s = B->J->scale * s;
      B->A[(int64_t)(t0 + t) * B->ns + p + i] = s;
    }
}

/* Scores of every token of the block, then each token's softmax (k3_mla.c's order). */
MLA_T static void scores(const mla_blk* B) {
  const mla_job* J = B->J;
  const int32_t ld = J->R + J->dr;
  const int64_t common = (int64_t)J->pos0 + B->t0 + 1; /* positions every token of the block sees */
#define SC_TWO(n) score_pos(B, c, p, 0, 2, n)
#define SC_ALL(n) score_pos(B, c, p, 0, 1, n)
  int64_t p = 0;
  for (; p + 2 <= common; p += 2) { const float* c = J->cache + p * ld; MLA_CASES(B->tb, SC_TWO) }
  for (; p < common; p++) { const float* c = J->cache + p * ld; MLA_CASES(B->tb, SC_ALL) }
  for (int t = 1; t < B->tb; t++)
    for (p = common; p < common + t; p++) score_pos(B, J->cache + p * ld, p, t, 1, 1);
  for (int t = 0; t < B->tb; t++) {
    float* a = B->A + (int64_t)t * B->ns;
    int64_t npos = common + t;
    float mx = -INFINITY;
    for (int64_t p = 0; p < npos; p++) if (a[p] > mx) mx = a[p];
    double sum = 0.0;
    for (int64_t p = 0; p < npos; p++) { a[p] = k3_expf(a[p] - mx); sum += a[p]; }
    for (int64_t p = 0; p < npos; p++) a[p] = (float)((double)a[p] / sum);
  }
}

/* o_lat[t][j] = Σ_p a_p·c_p[j], sequential in p, over the positions every token sees, for
 * chunks j..j+16·JB. */
INL void olat_chunks(const mla_blk* B, int32_t j, int64_t common, const int TB, const int JB) {
  const mla_job* J = B->J;
  const int32_t ld = J->R + J->dr;
  v16 acc[MLA_TB][MLA_JB];
  for (int t = 0; t < TB; t++) for (int b = 0; b < JB; b++) acc[t][b] = (v16){ 0 };
  for (int64_t p = 0; p < common; p++) {
    const float* c = J->cache + p * ld + j;
    for (int b = 0; b < JB; b++) {
      v16 cv = vld(c + 16 * b);
      for (int t = 0; t < TB; t++) acc[t][b] = acc[t][b] + B->A[t * B->ns + p] * cv;
    }
  }
  for (int t = 0; t < TB; t++) for (int b = 0; b < JB; b++) vst(B->OL + (int64_t)t * J->R + j + 16 * b, acc[t][b]);
}

MLA_T static void olat(const mla_blk* B) {
  const mla_job* J = B->J;
  const int32_t R = J->R, ld = R + J->dr, R16 = R - R % 16;
  const int64_t common = (int64_t)J->pos0 + B->t0 + 1;
  int32_t j = 0;
#define OL_WIDE(n) olat_chunks(B, j, common, n, MLA_JB)
#define OL_ONE(n) olat_chunks(B, j, common, n, 1)
  for (; j + 16 * MLA_JB <= R16; j += 16 * MLA_JB) MLA_CASES(B->tb, OL_WIDE)
  for (; j < R16; j += 16) MLA_CASES(B->tb, OL_ONE)
  for (int t = 1; t < B->tb; t++) /* the causal tail: token t's own later positions */
    for (int64_t p = common; p < common + t; p++) {
      const float* c = J->cache + p * ld;
      float ap = B->A[t * B->ns + p];
      float* o = B->OL + (int64_t)t * R;
      for (j = 0; j < R16; j += 16) vst(o + j, vld(o + j) + ap * vld(c + j));
    }
  for (int t = 0; t < B->tb; t++)
    for (j = R16; j < R; j++) {
      float s = 0.0f;
      for (int64_t p = 0; p < common + t; p++) { float v = B->A[t * B->ns + p] * J->cache[p * ld + j]; s += v; }
      B->OL[(int64_t)t * R + j] = s;
    }
}

/* out[t][d] = dot16(kv_b[v-row d], o_lat[t]) for rows d..d+DB−1 and tokens t..t+OT−1. */
INL void out_block(const mla_blk* B, int32_t d, int t, const int DB, const int OT) {
  const mla_job* J = B->J;
  const int32_t R = J->R, R16 = R - R % 16;
  const uint16_t* vr = B->kb + (int64_t)(J->dn + d) * R;
  v16 acc[MLA_DB][MLA_OT];
  for (int i = 0; i < DB; i++) for (int u = 0; u < OT; u++) acc[i][u] = (v16){ 0 };
  for (int32_t k = 0; k < R16; k += 16) {
    v16 w[MLA_DB];
    for (int i = 0; i < DB; i++) w[i] = ldbf(vr + (int64_t)i * R + k);
    if (OT == 1) for (int i = 0; i < DB; i++) __builtin_prefetch(vr + (int64_t)(PF_ROWS + i) * R + k);
    for (int u = 0; u < OT; u++) {
      v16 x = vld(B->OL + (int64_t)(t + u) * R + k);
      for (int i = 0; i < DB; i++) acc[i][u] = acc[i][u] + w[i] * x;
    }
  }
  for (int i = 0; i < DB; i++)
    for (int u = 0; u < OT; u++) {
      const float* x = B->OL + (int64_t)(t + u) * R;
      float s = tree(acc[i][u]);
      for (int32_t k = R16; k < R; k++) { float p = k3_bf16(vr[(int64_t)i * R + k]) * x[k]; s += p; }
      J->out[((int64_t)(B->t0 + t + u) * J->Hm + B->h) * J->dv + d + i] = s;
    }
}

MLA_T static void out_proj(const mla_blk* B) {
  const int32_t dv = B->J->dv;
  int t = 0;
  for (; t + MLA_OT <= B->tb; t += MLA_OT) {
    int32_t d = 0;
    for (; d + MLA_DB <= dv; d += MLA_DB) out_block(B, d, t, MLA_DB, MLA_OT);
    for (; d < dv; d++) out_block(B, d, t, 1, MLA_OT);
  }
  for (; t < B->tb; t++) {
    int32_t d = 0;
    for (; d + MLA_DB <= dv; d += MLA_DB) out_block(B, d, t, MLA_DB, 1);
    for (; d < dv; d++) out_block(B, d, t, 1, 1);
  }
}

/* Heads split across the pool in contiguous chunks; each head's tokens in blocks of MLA_TB. */
MLA_T void MLA_PART(void* ctx, int32_t i, int32_t n) {
  const mla_job* J = ctx;
  const int64_t ns = (int64_t)J->pos0 + J->T;
  float* slot = J->scratch + (int64_t)i * k3_mla_slot_floats(J->R, (int32_t)ns);
  mla_blk B = { .J = J, .QL = slot, .OL = slot + K3_MLA_TB_MAX * (int64_t)J->R,
                .A = slot + 2 * K3_MLA_TB_MAX * (int64_t)J->R, .ns = ns };
  int64_t lo, hi;
  k3_chunk(J->Hm, i, n, &lo, &hi);
  for (int64_t h = lo; h < hi; h++) {
    B.h = (int32_t)h;
    B.kb = J->kv_b + h * (J->dn + J->dv) * J->R;
    for (int32_t t0 = 0; t0 < J->T; t0 += MLA_TB) {
      B.t0 = t0;
      B.tb = J->T - t0 < MLA_TB ? J->T - t0 : MLA_TB;
      for (int t = 0; t < B.tb; t++) B.qn[t] = J->q + ((int64_t)(t0 + t) * J->Hm + h) * (J->dn + J->dr);
      qlat(&B);
      scores(&B);
      olat(&B);
      out_proj(&B);
    }
  }
}
