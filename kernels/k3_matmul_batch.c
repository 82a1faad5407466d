/* Matmuls for many tokens per call (prefill, big expert batches): compute-bound, so blocked like
 * a GEMM, while every output keeps the k3.h order bit for bit. This file is the loop nest shared
 * by the AVX2 and AVX-512 paths; k3_matmul_batch_avx2.c / _avx512.c hold the register-blocked
 * micro-kernels it calls (mm_batch_isa).
 *
 * Why it is exact. Each output Y[t][r] owns one 16-lane accumulator (lane j ← columns ≡ j mod 16,
 * the k3.h order) for its whole life. Micro-kernels only ever do acc += w·x (the product rounded
 * to f32, then added; no FMA) — the grouped formats (MXFP4, Q8, Q4): acc += (wa·xa + wb·xb)·s —
 * in increasing column order. MXFP4 tiles inside the scale fold's guard (k3_matmul_internal.h)
 * are decoded already multiplied by their power-of-two scale and run acc += wa·xa + wb·xb, which
 * gives the same bits (the proof: docs/NUMERICS.md, "The scale fold").
 * Between column tiles the accumulator is parked in a stack scratch (a store and a load change
 * no bit). At the end the same halving tree and the same one-by-one tail as the scalar path.
 * Weights are first widened to f32 into a small tile: bf16 → f32, E2M1 → f32 and the int8 / int4
 * integers → f32 are exact, so the products are the same products. Blocks only decide which independent sums run side by
 * side, never the order within one.
 *
 * The loop nest, per thread (rows [r0, r1) of the job):
 *   tokens in equal chunks of ≤ TC
 *     rows in sweeps of ≤ RS                          accumulators: RS × TC × 64 B = 192 KB (L2)
 *       columns in tiles of ≤ KC                      x tile: TC × KC f32 = 128 KB (L2), shared by the sweep
 *         rows in panels of ≤ RP
 *           widen / decode the panel's tile           weight tile: RP × KC f32 = 16 KB (L1)
 *           tokens in blocks of TB (the ISA's)         x block: TB × KC f32 (L1)
 *             rows in blocks of RB (the ISA's)         RB × TB accumulators in registers
 *               micro-kernel over the tile's columns
 *       per panel: halving tree + tail, store Y
 * One weight load serves TB tokens, one x load RB rows; the tile is widened once per chunk
 * (1/TC of the multiply work) and read from L1 by every token block; the chunk's x is read from
 * L2/L3 once per sweep (RS rows), not once per panel. */
#include "k3_matmul_internal.h"

_Static_assert(RP <= 32, "MXFP4 NaN-group flags are a 32-bit mask over the panel's rows");
_Static_assert(TC % 4 == 0, "equal chunks round up to a multiple of 4 and must stay within TC");
_Static_assert(K3_ROWQ_QUANTUM % RS == 0, "a thread's guided row block must be whole sweeps");

/* tail columns [n16, cols) of row r, token x, added one by one in increasing c (k3.h) */
static float dense_tail(const mm_job* j, int64_t r, const float* x, int32_t n16, float s, int bf16) {
  float coded[16];
  if (j->decode) j->decode(j, r, n16, coded, 16, 1, j->cols - n16);
  for (int32_t c = n16; c < j->cols; c++) {
    float w = j->decode ? coded[c - n16] : bf16 ? k3_bf16(((const uint16_t*)j->W)[r * j->cols + c]) : ((const float*)j->W)[r * j->cols + c];
    float p = w * x[c];
    s += p;
  }
  return s;
}

/* The weight formats of the loop nest; the grouped ones (MXFP4, Q8, Q4) share one micro-kernel. */
enum { F32, BF16, MXFP4, Q8, Q4 };
/* bytes per 2 columns of a weight row, by kind */
static const int64_t BYTES2[] = { 8, 4, 1, 2, 1 };

/* Asks L2 for the weights of the tile (p, k0) of rp rows: the next one the loop nest visits. Its
 * rows are RP separate streams that each advance only a tile width per visit, too short for the
 * hardware prefetcher; the request is made while the current tile (≥ TB·RP·KC multiply-adds per
 * token block) computes. */
static void prefetch_tile(const mm_job* j, int kind, int64_t p, int rp, int32_t k0) {
  if (rp <= 0) return;
  if (j->decode) { /* coded rows: the decoder knows where their bytes are */
    if (j->prefetch) j->prefetch(j, p, k0, rp);
    return;
  }
  const int64_t esz2 = BYTES2[kind];
  const int64_t row = (int64_t)j->cols * esz2 / 2, off = (int64_t)k0 * esz2 / 2;
  const int64_t len = (off + (int64_t)KC * esz2 / 2 < row ? (int64_t)KC * esz2 / 2 : row - off);
  /* every cache line the tile's bytes touch: a matrix read straight from a checkpoint (O_DIRECT
   * keeps the file's alignment) may start anywhere in a line, and a row's last line then lies past
   * off + len − 64 */
  for (int i = 0; i < rp; i++) {
    const uintptr_t a = (uintptr_t)((const char*)j->W + (p + i) * row + off);
    for (uintptr_t l = a & ~(uintptr_t)63; l < a + (uintptr_t)len; l += 64) __builtin_prefetch((const void*)l, 0, 2);
  }
}

/* A panel's column tile [k0, k0 + kc) of the grouped formats: the weights decoded into `tile`, the
 * group scales as f32 into sc[i·KG + g], and nan[g] bit i set where row i's MXFP4 scale is 255
 * (the group is then skipped exactly; the int8/int4 scales are plain f32: never skipped). */
static void grouped_tile(const mm_job* j, int kind, const mm_batch_isa* isa, int64_t p, int rp, int32_t k0, int32_t kc,
                         float* tile, float* sc, uint32_t* nan) {
  const int32_t cols = j->cols, G = cols / 32, groups = kc / 32;
  for (int32_t g = 0; g < groups; g++) nan[g] = 0;
  if (kind == MXFP4) {
    isa->decode_mxfp4((const uint8_t*)j->W + p * (cols / 2) + k0 / 2, cols / 2, tile, rp, groups);
    for (int i = 0; i < rp; i++)
      for (int32_t g = 0; g < groups; g++) {
        uint8_t s = j->S[(p + i) * G + k0 / 32 + g];
        sc[i * KG + g] = k3_e8m0(s);
        nan[g] |= (uint32_t)(s == 255) << i;
      }
    return;
  }
  if (kind == Q8) isa->decode_q8((const int8_t*)j->W + p * cols + k0, cols, tile, rp, groups);
  else isa->decode_q4((const uint8_t*)j->W + p * (cols / 2) + k0 / 2, cols / 2, tile, rp, groups);
  for (int i = 0; i < rp; i++)
    for (int32_t g = 0; g < groups; g++) sc[i * KG + g] = j->Sf[(p + i) * G + k0 / 32 + g];
}

/* One panel's column tile [k0, k0 + kc): widen / decode it (f32 weights are read in place), then
 * every token block × row block of the chunk on it, into the panel's parked accumulators A. */
static void panel_tile(const mm_job* j, const mm_batch_isa* isa, int kind, int fold_x, int64_t p, int rp, int32_t k0,
                       int32_t kc, const float* X, int32_t tc, float* tile, float* sc, uint32_t* nan, float* A) {
  const int32_t cols = j->cols;
  const int grouped = kind >= MXFP4;
  const float* Wp = tile;
  int64_t ldw = KC;
  if (kind == F32) Wp = (const float*)j->W + p * cols + k0, ldw = cols;
  else if (kind == BF16 && j->decode) j->decode(j, p, k0, tile, KC, rp, kc);
  else if (kind == BF16) isa->widen_bf16((const uint16_t*)j->W + p * cols + k0, cols, tile, rp, kc);
  const int fold = fold_x && k3_fold_s_ok(j->S + p * (cols / 32) + k0 / 32, cols / 32, rp, kc / 32);
  if (fold) isa->decode_mxfp4_fold((const uint8_t*)j->W + p * (cols / 2) + k0 / 2, cols / 2,
                                   j->S + p * (cols / 32) + k0 / 32, cols / 32, tile, rp, kc / 32);
  else if (grouped) grouped_tile(j, kind, isa, p, rp, k0, kc, tile, sc, nan);
  /* token blocks outside, row blocks inside: the token block's x stays in L1 while the
   * panel's rows sweep the L1-resident tile */
  const int TBk = fold ? isa->tbf : isa->tb, RBk = fold ? isa->rbf : isa->rb;
  for (int32_t t = 0; t < tc; t += TBk) {
    const int tb = tc - t < TBk ? tc - t : TBk;
    const float* Xt = X + (int64_t)t * j->ldx + k0;
    for (int rb = 0; rb < rp; rb += RBk) {
      const int R = rp - rb < RBk ? rp - rb : RBk;
      float* At = A + (rb * TC + t) * 16;
      if (fold) isa->mxfold(Wp + rb * ldw, Xt, j->ldx, At, k0 == 0, kc / 32, R, tb);
      else if (grouped) isa->grouped(Wp + rb * ldw, sc + rb * KG, nan, rb, Xt, j->ldx, At, k0 == 0, kc / 32, R, tb);
      else isa->dense(Wp + rb * ldw, ldw, Xt, j->ldx, At, k0 == 0, kc, R, tb);
    }
  }
}

static void batch(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa, int kind) {
  const int32_t cols = j->cols, T = j->T;
  const int grouped = kind >= MXFP4;
  const int32_t n = grouped ? cols : cols - cols % 16; /* columns the accumulators cover */
  float tile[RP * KC] __attribute__((aligned(64)));      /* widened weights [row][KC] */
  float sc[RP * KG];                                      /* grouped: scales [row][KG] */
  uint32_t nan[KG];                                       /* MXFP4: bit i = row i has scale 255 */
  float A[RS * TC * 16] __attribute__((aligned(64)));    /* parked accumulators [row][token][16] */
  float y[RP * TC];
  /* equal chunks of ≤ TC tokens (a multiple of 4, the grouped token block, but the last): T = 66
   * runs as 36 + 30, not 64 + 2, whose 2-token chunk would decode every tile for two tokens */
  const int32_t nch = (T + TC - 1) / TC, step = ((T + nch - 1) / nch + 3) / 4 * 4; /* ≤ TC: TC % 4 == 0 */
  for (int32_t t0 = 0; t0 < T; t0 += step) {
    const int32_t tc = T - t0 < step ? T - t0 : step;
    const float* X = j->X + (int64_t)t0 * j->ldx;
    /* the fold's x guard, once per chunk (tc × cols reads next to rows × cols × tc products) */
    const int fold_x = kind == MXFP4 && isa->mxfold && k3_fold_x_ok(X, j->ldx, tc, cols);
    for (int64_t s0 = r0; s0 < r1; s0 += RS) {
      const int64_t s1 = r1 - s0 < RS ? r1 : s0 + RS;
      if (n == 0) memset(A, 0, sizeof(float) * 16 * (size_t)((s1 - s0) * TC)); /* no column reaches a lane */
      /* column tiles outside, the sweep's panels inside: the chunk's x tile (tc × KC) stays in L2
       * while every panel of the sweep uses it */
      for (int32_t k0 = 0; k0 < n; k0 += KC) {
        const int32_t kc = n - k0 < KC ? n - k0 : KC;
        for (int64_t p = s0; p < s1; p += RP) {
          const int rp = s1 - p < RP ? (int)(s1 - p) : RP;
          /* the tile visited next: the next panel's, the sweep's first at the next k0, or the
           * next sweep's first */
          if (p + RP < s1) prefetch_tile(j, kind, p + RP, s1 - p - RP < RP ? (int)(s1 - p - RP) : RP, k0);
          else if (k0 + KC < n) prefetch_tile(j, kind, s0, s1 - s0 < RP ? (int)(s1 - s0) : RP, k0 + KC);
          else prefetch_tile(j, kind, s1, r1 - s1 < RP ? (int)(r1 - s1) : RP, 0);
          panel_tile(j, isa, kind, fold_x, p, rp, k0, kc, X, tc, tile, sc, nan, A + (p - s0) * TC * 16);
        }
      }
      for (int64_t p = s0; p < s1; p += RP) {
        const int rp = s1 - p < RP ? (int)(s1 - p) : RP;
        const float* Ap = A + (p - s0) * TC * 16;
        for (int i = 0; i < rp; i++) isa->reduce(Ap + i * TC * 16, tc, y + i * TC);
        for (int32_t t = 0; t < tc; t++)
          for (int i = 0; i < rp; i++) {
            float s = y[i * TC + t];
            if (!grouped && n < cols) s = dense_tail(j, p + i, X + (int64_t)t * j->ldx, n, s, kind == BF16);
            j->Y[(int64_t)(t0 + t) * j->ldy + p + i] = s;
          }
      }
    }
  }
}

void k3_mm_batch_f32(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa) { batch(j, r0, r1, isa, F32); }
void k3_mm_batch_bf16(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa) { batch(j, r0, r1, isa, BF16); }
void k3_mm_batch_mxfp4(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa) { batch(j, r0, r1, isa, MXFP4); }
void k3_mm_batch_q8(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa) { batch(j, r0, r1, isa, Q8); }
void k3_mm_batch_q4(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa) { batch(j, r0, r1, isa, Q4); }
