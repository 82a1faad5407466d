/* AVX2 BX4 matmul: k3_matmul_bf16's order (lanes 0–7 in one ymm, 8–15 in another) on weights
 * decoded in registers (format: k3_bx4_internal.h). Bit-identical to the scalar path in k3_bx4.c.
 *
 * Decode of 8 columns (one half of a chunk), 6 vector ops: the chunk's codes broadcast as a
 * 64-bit word and shifted per 32-bit lane by [0,0,4,4,8,8,12,12] (half 0) or [16,16,…,28,28]
 * (half 1) leave column j's index in lane j's low nibble; AND 15, then vpshufb looks the high
 * byte up in the row's 16-byte table (in both 128-bit lanes) and a shift by 24 moves it to bits
 * 24–31 (discarding the lookups of the zero upper bytes); the low bytes widen and shift to bits
 * 16–23; OR. AVX2's vpermd has only 8 entries, hence the byte shuffle. A chunk holding an escape
 * is decoded by bx4_decode_cols. Blocks as in k3_matmul_avx2.c (each (row, token) keeps its
 * own two accumulators). */
#include "k3_bx4_internal.h"
#include "k3_matmul_x86.h"

#define BLOCK_MIN_ROW_BYTES 8192

/* Half h (columns c+8h .. c+8h+7) of a chunk. */
TAVX2 INLINE __m256 half8(const uint8_t* codes, const uint8_t* low, int32_t c, int h, __m256i tab, __m256i cnt) {
  int64_t word;
  memcpy(&word, codes + c / 2, 8);
  __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi64x(word), cnt), _mm256_set1_epi32(15));
  __m256i hb = _mm256_slli_epi32(_mm256_shuffle_epi8(tab, idx), 24);
  __m256i lb = _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(low + c + 8 * h))), 16);
  return _mm256_castsi256_ps(_mm256_or_si256(hb, lb));
}

/* Rows r..r+RB−1 × tokens t0..t0+TB−1 (RB·TB ≤ 4). */
TAVX2 INLINE void bx_block(const bx_job* j, int64_t r, int32_t t0, const int RB, const int TB) {
  const int32_t cols = j->cols, n16 = cols - cols % 16;
  const int64_t rb = bx4_row_bytes(cols), cb = bx4_code_bytes(cols);
  const __m256i cnt[2] = { _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12), _mm256_setr_epi32(16, 16, 20, 20, 24, 24, 28, 28) };
  const uint8_t *row[4], *codes[4], *low[4];
  const uint32_t *e[4], *end[4];
  __m256i tab[4];
  __m256 acc[2][4][4]; /* [half][row][token] */
  UNROLL for (int i = 0; i < RB; i++) {
    row[i] = j->B + (r + i) * rb;
    codes[i] = row[i] + BX4_TABLE;
    low[i] = codes[i] + cb;
    tab[i] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)row[i]));
    bx4_escapes(j, r + i, &e[i], &end[i]);
    UNROLL for (int t = 0; t < TB; t++) acc[0][i][t] = acc[1][i][t] = _mm256_setzero_ps();
  }
  const float* X = j->X + t0 * j->ldx;
  for (int32_t c = 0; c < n16;) {
    int32_t stop = n16;
    UNROLL for (int i = 0; i < RB; i++) {
      int32_t s = bx4_next_escape_chunk(e[i], end[i], cols);
      stop = s < stop ? s : stop;
    }
    for (; c < stop; c += 16)
      UNROLL for (int h = 0; h < 2; h++) UNROLL for (int i = 0; i < RB; i++) {
        __m256 w = half8(codes[i], low[i], c, h, tab[i], cnt[h]);
        UNROLL for (int t = 0; t < TB; t++)
          acc[h][i][t] = _mm256_add_ps(acc[h][i][t], _mm256_mul_ps(w, _mm256_loadu_ps(X + t * j->ldx + c + 8 * h)));
      }
    if (c >= n16) break;
    UNROLL for (int i = 0; i < RB; i++) { /* the chunk at c holds an escape of some row */
      float wv[16];
      bx4_decode_cols(row[i], cols, c, 16, &e[i], end[i], wv);
      UNROLL for (int h = 0; h < 2; h++) {
        __m256 w = _mm256_loadu_ps(wv + 8 * h);
        UNROLL for (int t = 0; t < TB; t++)
          acc[h][i][t] = _mm256_add_ps(acc[h][i][t], _mm256_mul_ps(w, _mm256_loadu_ps(X + t * j->ldx + c + 8 * h)));
      }
    }
    c += 16;
  }
  UNROLL for (int i = 0; i < RB; i++) {
    float wt[16];
    if (n16 < cols) bx4_decode_cols(row[i], cols, n16, cols - n16, &e[i], end[i], wt);
    UNROLL for (int t = 0; t < TB; t++) {
      float s = tree_avx2(acc[0][i][t], acc[1][i][t]);
      for (int32_t c = n16; c < cols; c++) { float p = wt[c - n16] * X[t * j->ldx + c]; s += p; }
      j->Y[(t0 + t) * j->ldy + r + i] = s;
    }
  }
}

/* One token: long rows 4 at a time, short rows one at a time; several tokens: 2 rows × 2 tokens
 * (one decode per 2 tokens), leftovers one by one. */
TAVX2 void k3_bx4_avx2(const bx_job* j, int64_t r0, int64_t r1) {
  const int32_t T = j->T;
  int64_t r = r0;
  if (T == 1) {
    if (bx4_row_bytes(j->cols) >= BLOCK_MIN_ROW_BYTES)
      for (; r + 4 <= r1; r += 4) bx_block(j, r, 0, 4, 1);
    for (; r < r1; r++) bx_block(j, r, 0, 1, 1);
    return;
  }
  for (; r + 2 <= r1; r += 2) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) bx_block(j, r, t, 2, 2);
    if (t < T) bx_block(j, r, t, 2, 1);
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) bx_block(j, r, t, 1, 4);
    for (; t < T; t++) bx_block(j, r, t, 1, 1);
  }
}

/* ---------------------------------------------------------------- many tokens */
/* As tile_avx512 (k3_bx4_avx512.c): whole chunks decoded in registers and stored, escapes
 * patched, a partial chunk by bx4_decode_cols. */
TAVX2 static void tile_avx2(const mm_job* mj, int64_t r, int32_t k0, float* tile, int64_t ldt, int rows, int32_t n) {
  const bx_job* j = mj->ctx;
  const int32_t cols = j->cols;
  const int64_t rb = bx4_row_bytes(cols), cb = bx4_code_bytes(cols);
  const __m256i cnt[2] = { _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12), _mm256_setr_epi32(16, 16, 20, 20, 24, 24, 28, 28) };
  for (int i = 0; i < rows; i++) {
    const uint8_t* row = j->B + (r + i) * rb;
    const uint32_t *e, *end;
    bx4_escapes(j, r + i, &e, &end);
    bx4_skip_to(&e, end, k0);
    float* out = tile + i * ldt - k0;
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)row));
    int32_t c = k0;
    if (k0 % 16 == 0)
      for (; c + 16 <= k0 + n; c += 16)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(out + c + 8 * h, half8(row + BX4_TABLE, row + BX4_TABLE + cb, c, h, tab, cnt[h]));
    bx4_patch(row, cols, 0, c, &e, end, out);
    if (c < k0 + n) bx4_decode_cols(row, cols, c, k0 + n - c, &e, end, out + c);
  }
}

TAVX2 void k3_bx4_batch_avx2(const bx_job* j, int64_t r0, int64_t r1) {
  mm_job mj = { .W = j->B, .X = j->X, .Y = j->Y, .rows = j->rows, .cols = j->cols, .T = j->T, .isa = K3_ISA_AVX2, .ldx = j->ldx, .ldy = j->ldy, .decode = tile_avx2, .prefetch = bx4_prefetch_tile, .ctx = j };
  k3_mm_bf16_batch_avx2(&mj, r0, r1);
}
