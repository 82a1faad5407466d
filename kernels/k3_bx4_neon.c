/* NEON BX4 matmul (aarch64 builds only): k3_matmul_bf16's order (lanes 4q..4q+3 in float32x4
 * q = 0..3, vmulq then vaddq, never fused) on weights decoded in registers (format:
 * k3_bx4_internal.h). Bit-identical to the scalar path in k3_bx4.c.
 *
 * Decode of 16 columns: the chunk's 8 code bytes split into low and high nibbles (the format's
 * nibble positions 0, 2, … and 1, 3, …), one vqtbl1q puts them in column order, one more looks
 * the high bytes up in the row's table, zips with the low bytes give the bf16 words and widening
 * shifts by 16 the f32. A chunk holding an escape is decoded by bx4_decode_cols. Blocks as in
 * k3_matmul_neon.c. From 8 tokens on, k3_matmul_bf16's batched NEON loop nest
 * (k3_matmul_batch_neon.c) with its tiles decoded from BX4 (tile_neon). The speed was not
 * measured on ARM hardware (docs/PORTS.md); only the bits. */
#include "k3_bx4_internal.h"
#if defined(__aarch64__)
#include <arm_neon.h>

#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("clang loop unroll(full)")

/* Column j of a chunk ← index j of [low nibbles of bytes 0..7 | high nibbles]: bx4_nibble(j) = p,
 * p even → byte p/2's low nibble (index p/2), p odd → its high nibble (index 8 + p/2). */
static const uint8_t COLUMN_OF[16] = { 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15 };

INLINE float tree_neon(const float32x4_t a[4]) {
  float32x4_t s8lo = vaddq_f32(a[0], a[2]), s8hi = vaddq_f32(a[1], a[3]);
  float32x4_t s4 = vaddq_f32(s8lo, s8hi);
  float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

INLINE void chunk16(float32x4_t w[4], const uint8_t* codes, const uint8_t* low, int32_t c, uint8x16_t tab, uint8x16_t perm) {
  uint8x8_t b = vld1_u8(codes + c / 2);
  uint8x16_t nib = vcombine_u8(vand_u8(b, vdup_n_u8(15)), vshr_n_u8(b, 4));
  uint8x16_t hb = vqtbl1q_u8(tab, vqtbl1q_u8(nib, perm));
  uint8x16_t lb = vld1q_u8(low + c);
  uint16x8_t a = vreinterpretq_u16_u8(vzip1q_u8(lb, hb)), z = vreinterpretq_u16_u8(vzip2q_u8(lb, hb));
  w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
  w[1] = vreinterpretq_f32_u32(vshll_high_n_u16(a, 16));
  w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(z), 16));
  w[3] = vreinterpretq_f32_u32(vshll_high_n_u16(z, 16));
}

/* acc[t] += w · x_t (columns c..c+15) for tokens 0..TB−1: products rounded, then added. */
INLINE void accumulate(float32x4_t acc[4][4], const float32x4_t w[4], const float* X, int64_t ldx, int32_t c, const int TB) {
  UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++)
    acc[t][q] = vaddq_f32(acc[t][q], vmulq_f32(w[q], vld1q_f32(X + t * ldx + c + 4 * q)));
}

/* Rows r..r+RB−1 × tokens t0..t0+TB−1 (RB·TB ≤ 4). */
INLINE void bx_block(const bx_job* j, int64_t r, int32_t t0, const int RB, const int TB) {
  const int32_t cols = j->cols, n16 = cols - cols % 16;
  const int64_t rb = bx4_row_bytes(cols), cb = bx4_code_bytes(cols);
  const uint8x16_t perm = vld1q_u8(COLUMN_OF);
  const uint8_t *row[4], *codes[4], *low[4];
  const uint32_t *e[4], *end[4];
  uint8x16_t tab[4];
  float32x4_t acc[4][4][4]; /* [row][token][quarter] */
  UNROLL for (int i = 0; i < RB; i++) {
    row[i] = j->B + (r + i) * rb;
    codes[i] = row[i] + BX4_TABLE;
    low[i] = codes[i] + cb;
    tab[i] = vld1q_u8(row[i]);
    bx4_escapes(j, r + i, &e[i], &end[i]);
    UNROLL for (int t = 0; t < TB; t++) UNROLL for (int q = 0; q < 4; q++) acc[i][t][q] = vdupq_n_f32(0.0f);
  }
  const float* X = j->X + t0 * j->ldx;
  for (int32_t c = 0; c < n16;) {
    int32_t stop = n16;
    UNROLL for (int i = 0; i < RB; i++) {
      int32_t s = bx4_next_escape_chunk(e[i], end[i], cols);
      stop = s < stop ? s : stop;
    }
    for (; c < stop; c += 16)
      UNROLL for (int i = 0; i < RB; i++) {
        float32x4_t w[4];
        chunk16(w, codes[i], low[i], c, tab[i], perm);
        accumulate(acc[i], w, X, j->ldx, c, TB);
      }
    if (c >= n16) break;
    UNROLL for (int i = 0; i < RB; i++) { /* the chunk at c holds an escape of some row */
      float wv[16];
      float32x4_t w[4];
      bx4_decode_cols(row[i], cols, c, 16, &e[i], end[i], wv);
      UNROLL for (int q = 0; q < 4; q++) w[q] = vld1q_f32(wv + 4 * q);
      accumulate(acc[i], w, X, j->ldx, c, TB);
    }
    c += 16;
  }
  UNROLL for (int i = 0; i < RB; i++) {
    float wt[16];
    if (n16 < cols) bx4_decode_cols(row[i], cols, n16, cols - n16, &e[i], end[i], wt);
    UNROLL for (int t = 0; t < TB; t++) {
      float s = tree_neon(acc[i][t]);
      for (int32_t c = n16; c < cols; c++) { float p = wt[c - n16] * X[t * j->ldx + c]; s += p; }
      j->Y[(t0 + t) * j->ldy + r + i] = s;
    }
  }
}

/* Rows in blocks of 4: token pairs as two 2×2 blocks, a last single token as a 4 × 1 block;
 * leftover rows 1 × 4, then 1 × 1. */
void k3_bx4_neon(const bx_job* j, int64_t r0, int64_t r1) {
  const int32_t T = j->T;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) { bx_block(j, r, t, 2, 2); bx_block(j, r + 2, t, 2, 2); }
    if (t < T) bx_block(j, r, t, 4, 1);
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) bx_block(j, r, t, 1, 4);
    for (; t < T; t++) bx_block(j, r, t, 1, 1);
  }
}

/* ---------------------------------------------------------------- many tokens */
/* As tile_avx512 (k3_bx4_avx512.c): whole chunks decoded in registers and stored, the escapes
 * among them patched, a partial chunk (the tail columns) by bx4_decode_cols. */
static void tile_neon(const mm_job* mj, int64_t r, int32_t k0, float* tile, int64_t ldt, int rows, int32_t n) {
  const bx_job* j = mj->ctx;
  const int32_t cols = j->cols;
  const int64_t rb = bx4_row_bytes(cols), cb = bx4_code_bytes(cols);
  const uint8x16_t perm = vld1q_u8(COLUMN_OF);
  for (int i = 0; i < rows; i++) {
    const uint8_t* row = j->B + (r + i) * rb;
    const uint32_t *e, *end;
    bx4_escapes(j, r + i, &e, &end);
    bx4_skip_to(&e, end, k0);
    float* out = tile + i * ldt - k0;
    const uint8x16_t tab = vld1q_u8(row);
    int32_t c = k0;
    if (k0 % 16 == 0)
      for (; c + 16 <= k0 + n; c += 16) {
        float32x4_t w[4];
        chunk16(w, row + BX4_TABLE, row + BX4_TABLE + cb, c, tab, perm);
        UNROLL for (int q = 0; q < 4; q++) vst1q_f32(out + c + 4 * q, w[q]);
      }
    bx4_patch(row, cols, 0, c, &e, end, out);
    if (c < k0 + n) bx4_decode_cols(row, cols, c, k0 + n - c, &e, end, out + c);
  }
}

void k3_bx4_batch_neon(const bx_job* j, int64_t r0, int64_t r1) {
  mm_job mj = { .W = j->B, .X = j->X, .Y = j->Y, .rows = j->rows, .cols = j->cols, .T = j->T, .isa = K3_ISA_NEON, .ldx = j->ldx, .ldy = j->ldy, .decode = tile_neon, .prefetch = bx4_prefetch_tile, .ctx = j };
  k3_mm_bf16_batch_neon(&mj, r0, r1);
}
#endif
