/* Matrix products Y[t][r] = Σ_c W[r][c]·X[t][c] for bf16, f32 and MXFP4 weights (k3.h):
 * the scalar reference order and the dispatch. The AVX2, AVX-512 and NEON paths live in
 * k3_matmul_avx2.c / k3_matmul_avx512.c / k3_matmul_neon.c and match these scalar functions
 * bit for bit.
 *
 * FP contract: -ffp-contract=off, no fast-math. Every path performs the order fixed in k3.h:
 * 16 lane accumulators (lane j ← columns c ≡ j mod 16, increasing c), each product rounded to
 * f32 then added (no FMA), halving tree v[j]+=v[j+8], +4, +2, +1, then the tail columns one by
 * one. MXFP4 (MODEL.md §3): per 32-column group g, p[j] = w(c0+j)·x(c0+j) + w(c0+16+j)·x(c0+16+j),
 * acc[j] += p[j]·2^(s_g−127); s_g = 255 (NaN) skips the group. Weights are decoded from the
 * nibbles in registers only, never expanded in memory.
 * Threads: rows handed out in blocks from a shared counter (k3_rowq, k3_internal.h), each row on
 * one thread, so any thread count, any interleaving and any T give the same bits; small products
 * stay on the calling thread.
 * The scalar functions are deliberately left simple: they are the readable statement of the
 * order (and were the source of the bits pinned in test/kernels-matmul-bits.test.ts). */
#include "k3_matmul_internal.h"

/* Below this many weights a product runs on the calling thread (waking workers costs more). */
#define SMALL_WEIGHTS 65536

const float k3_e2m1[16] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };

#define E8(s) ((uint32_t)(s) << 23)
#define E8x8(s) E8(s), E8(s + 1), E8(s + 2), E8(s + 3), E8(s + 4), E8(s + 5), E8(s + 6), E8(s + 7)
#define E8x32(s) E8x8(s), E8x8(s + 8), E8x8(s + 16), E8x8(s + 24)
const uint32_t k3_e8m0_bits[256] = {
  0x00400000u, E8(1), E8(2), E8(3), E8(4), E8(5), E8(6), E8(7), E8x8(8), E8x8(16), E8x8(24),
  E8x32(32), E8x32(64), E8x32(96), E8x32(128), E8x32(160), E8x32(192), E8x32(224),
};

/* ---------------------------------------------------------------- scalar (reference order) */
static void bf16_scalar(const mm_job* j, int64_t r0, int64_t r1) {
  const uint16_t* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->ldy + r] =
          k3_dot16_bf16(W + r * j->cols, j->X + (int64_t)t * j->ldx, j->cols);
}

static void f32_scalar(const mm_job* j, int64_t r0, int64_t r1) {
  const float* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->ldy + r] =
          k3_dot16_f32(W + r * j->cols, j->X + (int64_t)t * j->ldx, j->cols);
}

static float mxfp4_row_scalar(const uint8_t* pk, const uint8_t* sc, const float* x, int32_t cols) {
  float acc[16] = {0};
  for (int32_t g = 0; g < cols / 32; g++) {
    if (sc[g] == 255) continue;
    float s = k3_e8m0(sc[g]);
    const uint8_t* b = pk + g * 16;
    const float* xg = x + g * 32;
    for (int jl = 0; jl < 16; jl++) {
      /* column c0+jl is nibble (jl&1) of byte jl/2; column c0+16+jl of byte 8+jl/2 */
      int na = (b[jl >> 1] >> ((jl & 1) * 4)) & 15;
      int nb = (b[8 + (jl >> 1)] >> ((jl & 1) * 4)) & 15;
      float pa = k3_e2m1[na] * xg[jl];
      float pb = k3_e2m1[nb] * xg[16 + jl];
      float p = pa + pb;
      float q = p * s;
      acc[jl] += q;
    }
  }
  return k3_tree16(acc);
}

static void mxfp4_scalar(const mm_job* j, int64_t r0, int64_t r1) {
  const uint8_t* P = j->W;
  int64_t rb = j->cols / 2, G = j->cols / 32;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->ldy + r] =
          mxfp4_row_scalar(P + r * rb, j->S + r * G, j->X + (int64_t)t * j->ldx, j->cols);
}

/* ---------------------------------------------------------------- dispatch */
typedef struct { mm_job j; mm_rows_fn fn; k3_rowq q; } mm_task;

static void mm_part(void* ctx, int32_t i, int32_t n) {
  (void)i, (void)n;
  mm_task* t = ctx;
  int64_t lo, hi;
  while (k3_rowq_take(&t->q, &lo, &hi)) t->fn(&t->j, lo, hi);
}

/* Checks the arguments, then runs the path of the current ISA on the pool (k3_matmul_internal.h). */
int32_t k3_mm_run(mm_job j, int32_t group, int need_s, mm_paths p) {
  const void* scales = j.S ? (const void*)j.S : (const void*)j.Sf; /* MXFP4's or Q8/Q4's */
  int32_t st = k3_mm_check(j.W, scales, need_s, j.X, j.ldx, j.Y, j.ldy, j.rows, j.cols, j.T, group);
  if (st != K3_OK || j.rows == 0 || j.T == 0) return st;
  const int batch = j.T >= BATCH_MIN_T;
  mm_task t = { j, j.isa == K3_ISA_AVX512 ? (batch ? p.batch_avx512 : p.avx512)
                 : j.isa == K3_ISA_AVX2 ? (batch ? p.batch_avx2 : p.avx2)
                 : j.isa == K3_ISA_NEON ? (batch ? p.batch_neon : p.neon) : p.scalar };
  const int small = (int64_t)j.rows * j.cols < SMALL_WEIGHTS;
  k3_rowq_init(&t.q, j.rows, small ? 1 : k3_pool_size());
  k3_pool_run_if(mm_part, &t, small);
  return K3_OK;
}

K3_API int32_t k3_matmul_bf16(const uint16_t* W, const float* X, int32_t ldx, float* Y, int32_t ldy,
                              int32_t rows, int32_t cols, int32_t T) {
  return k3_mm_run((mm_job){ W, NULL, X, Y, rows, cols, T, k3_isa_current(), ldx, ldy, NULL }, 1, 0, K3_MM_PATHS(bf16_scalar, bf16));
}

K3_API int32_t k3_matmul_f32(const float* W, const float* X, int32_t ldx, float* Y, int32_t ldy,
                             int32_t rows, int32_t cols, int32_t T) {
  return k3_mm_run((mm_job){ W, NULL, X, Y, rows, cols, T, k3_isa_current(), ldx, ldy, NULL }, 1, 0, K3_MM_PATHS(f32_scalar, f32));
}

K3_API int32_t k3_matmul_mxfp4(const uint8_t* packed, const uint8_t* scales, const float* X, int32_t ldx,
                               float* Y, int32_t ldy, int32_t rows, int32_t cols, int32_t T) {
  return k3_mm_run((mm_job){ packed, scales, X, Y, rows, cols, T, k3_isa_current(), ldx, ldy, NULL }, K3_MXFP4_GROUP, 1,
                   K3_MM_PATHS(mxfp4_scalar, mxfp4));
}
