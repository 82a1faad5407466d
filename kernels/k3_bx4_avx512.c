/* AVX-512 (F + BW) BX4 matmul: k3_matmul_bf16's order (16 lanes in one zmm, lane j ← columns
 * ≡ j mod 16) on weights decoded in registers (format: k3_bx4_internal.h). Bit-identical to the
 * scalar path in k3_bx4.c and to k3_matmul_bf16 on the decoded matrix.
 *
 * Decode of 16 columns, 4 vector ops: a 64-bit broadcast of the chunk's codes shifted by
 * [0,0,4,4,…,28,28] puts column j's index in lane j's low 4 bits (the format's nibble order);
 * vpermd looks the high byte up in the row's table (held as 16 dwords hb << 24, ignoring the
 * garbage bits above the index); the low bytes are widened and shifted to bits 16–23; an OR
 * makes the f32 (= bf16 << 16). A chunk holding an escape (rare: ~1e-4 of weights) is decoded by
 * bx4_decode_cols instead. Blocks of rows × tokens as in k3_matmul_avx512.c: each (row, token)
 * keeps its own accumulator, so blocking never changes a bit. */
#include "k3_bx4_internal.h"
#include "k3_matmul_x86.h"

/* One-token rows of at least this many bytes run BX_DECODE_ROWS at a time, then 4, then 1 (as
 * in k3_matmul_avx512.c, whose DENSE_DECODE_ROWS measurement this follows: more independent row
 * streams keep more lines in flight). */
#define BLOCK_MIN_ROW_BYTES 8192
#define BX_DECODE_ROWS 12

T512 INLINE __m512 chunk16(const uint8_t* codes, const uint8_t* low, int32_t c, __m512i tab, __m512i cnt) {
  int64_t word;
  memcpy(&word, codes + c / 2, 8);
  __m512i hb = _mm512_permutexvar_epi32(_mm512_srlv_epi32(_mm512_set1_epi64(word), cnt), tab);
  __m512i lb = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(low + c))), 16);
  return _mm512_castsi512_ps(_mm512_or_si512(hb, lb));
}

/* Rows r..r+RB−1 × tokens t0..t0+TB−1 (RB, TB ≤ 4, or RB ≤ BX_DECODE_ROWS with TB = 1). At a
 * chunk holding an escape, only the rows whose escape it is take the scalar decode. */
T512 INLINE void bx_block(const bx_job* j, int64_t r, int32_t t0, const int RB, const int TB) {
  const int32_t cols = j->cols, n16 = cols - cols % 16;
  const int64_t rb = bx4_row_bytes(cols), cb = bx4_code_bytes(cols);
  const __m512i cnt = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  const uint8_t *row[BX_DECODE_ROWS], *codes[BX_DECODE_ROWS], *low[BX_DECODE_ROWS];
  const uint32_t *e[BX_DECODE_ROWS], *end[BX_DECODE_ROWS];
  __m512i tab[BX_DECODE_ROWS];
  __m512 acc[BX_DECODE_ROWS][4];
  UNROLL for (int i = 0; i < RB; i++) {
    row[i] = j->B + (r + i) * rb;
    codes[i] = row[i] + BX4_TABLE;
    low[i] = codes[i] + cb;
    tab[i] = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)row[i])), 24);
    bx4_escapes(j, r + i, &e[i], &end[i]);
    UNROLL for (int t = 0; t < TB; t++) acc[i][t] = _mm512_setzero_ps();
  }
  const float* X = j->X + t0 * j->ldx;
  for (int32_t c = 0; c < n16;) {
    int32_t stop = n16;
    UNROLL for (int i = 0; i < RB; i++) {
      int32_t s = bx4_next_escape_chunk(e[i], end[i], cols);
      stop = s < stop ? s : stop;
    }
    for (; c < stop; c += 16) {
      UNROLL for (int i = 0; i < RB; i++) {
        __m512 w = chunk16(codes[i], low[i], c, tab[i], cnt);
        UNROLL for (int t = 0; t < TB; t++) acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(w, _mm512_loadu_ps(X + t * j->ldx + c)));
      }
    }
    if (c >= n16) break;
    UNROLL for (int i = 0; i < RB; i++) { /* the chunk at c holds an escape of some row */
      float wv[16];
      __m512 w;
      if (bx4_next_escape_chunk(e[i], end[i], cols) == c) {
        bx4_decode_cols(row[i], cols, c, 16, &e[i], end[i], wv);
        w = _mm512_loadu_ps(wv);
      } else {
        w = chunk16(codes[i], low[i], c, tab[i], cnt);
      }
      UNROLL for (int t = 0; t < TB; t++) acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(w, _mm512_loadu_ps(X + t * j->ldx + c)));
    }
    c += 16;
  }
  UNROLL for (int i = 0; i < RB; i++) {
    float wt[16];
    if (n16 < cols) bx4_decode_cols(row[i], cols, n16, cols - n16, &e[i], end[i], wt);
    UNROLL for (int t = 0; t < TB; t++) {
      float s = tree_avx512(acc[i][t]);
      for (int32_t c = n16; c < cols; c++) { float p = wt[c - n16] * X[t * j->ldx + c]; s += p; }
      j->Y[(t0 + t) * j->ldy + r + i] = s;
    }
  }
}

/* Rows in blocks of 4 × tokens in blocks of 4 (one decode serves 4 tokens, one x load 4 rows); a
 * lone token reads long rows BX_DECODE_ROWS at a time (then 4, then 1: independent add chains),
 * short rows one at a time (one stream). */
T512 void k3_bx4_avx512(const bx_job* j, int64_t r0, int64_t r1) {
  const int32_t T = j->T;
  const int long_rows = bx4_row_bytes(j->cols) >= BLOCK_MIN_ROW_BYTES;
  int64_t r = r0;
  if (T == 1 && !long_rows) {
    for (; r < r1; r++) bx_block(j, r, 0, 1, 1);
    return;
  }
  if (T == 1)
    for (; r + BX_DECODE_ROWS <= r1; r += BX_DECODE_ROWS) bx_block(j, r, 0, BX_DECODE_ROWS, 1);
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) bx_block(j, r, t, 4, 4);
    switch (T - t) {
      case 3: bx_block(j, r, t, 4, 3); break;
      case 2: bx_block(j, r, t, 4, 2); break;
      case 1: bx_block(j, r, t, 4, 1); break;
    }
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) bx_block(j, r, t, 1, 4);
    for (; t < T; t++) bx_block(j, r, t, 1, 1);
  }
}

/* ---------------------------------------------------------------- many tokens */
/* Rows r.. r+rows−1, columns [k0, k0+n) decoded into tile (row stride ldt) for the batched loop
 * nest: whole chunks in registers, stored, then the escapes among them patched; a partial chunk
 * (the tail columns) by bx4_decode_cols. */
T512 static void tile_avx512(const mm_job* mj, int64_t r, int32_t k0, float* tile, int64_t ldt, int rows, int32_t n) {
  const bx_job* j = mj->ctx;
  const int32_t cols = j->cols;
  const int64_t rb = bx4_row_bytes(cols), cb = bx4_code_bytes(cols);
  const __m512i cnt = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  for (int i = 0; i < rows; i++) {
    const uint8_t* row = j->B + (r + i) * rb;
    const uint32_t *e, *end;
    bx4_escapes(j, r + i, &e, &end);
    bx4_skip_to(&e, end, k0);
    float* out = tile + i * ldt - k0;
    const __m512i tab = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)row)), 24);
    int32_t c = k0;
    if (k0 % 16 == 0)
      for (; c + 16 <= k0 + n; c += 16) _mm512_storeu_ps(out + c, chunk16(row + BX4_TABLE, row + BX4_TABLE + cb, c, tab, cnt));
    bx4_patch(row, cols, 0, c, &e, end, out);
    if (c < k0 + n) bx4_decode_cols(row, cols, c, k0 + n - c, &e, end, out + c);
  }
}

T512 void k3_bx4_batch_avx512(const bx_job* j, int64_t r0, int64_t r1) {
  mm_job mj = { .W = j->B, .X = j->X, .Y = j->Y, .rows = j->rows, .cols = j->cols, .T = j->T, .isa = K3_ISA_AVX512, .ldx = j->ldx, .ldy = j->ldy, .decode = tile_avx512, .prefetch = bx4_prefetch_tile, .ctx = j };
  k3_mm_bf16_batch_avx512(&mj, r0, r1);
}
