/* The exact compact trunk's format, BX4 (k3.h, docs/TRUNK.md "The exact trunk"), shared by its
 * encoder, decoder and matmul paths (k3_bx4.c, k3_bx4_avx2.c, k3_bx4_avx512.c, k3_bx4_neon.c).
 *
 * A bf16 weight w is its high byte hb = w >> 8 (sign, exponent bits 7..1) and its low byte
 * lb = w & 255 (exponent bit 0, mantissa). A row of `cols` weights is one record of
 * bx4_row_bytes(cols) bytes:
 *   table [16]            the row's 16 most frequent high bytes (count desc, then value asc; 0 pads)
 *   codes [8·⌈cols/16⌉]   a 4-bit index into the table per column: chunk q (columns 16q..16q+15)
 *                         is one little-endian u64 whose nibble p (bits 4p..4p+3) is column
 *                         16q + 2p for p < 8 and 16q + 2(p − 8) + 1 for p ≥ 8 — so a 64-bit
 *                         broadcast shifted by [0,0,4,4,…,28,28] per 32-bit lane leaves column j's
 *                         index in lane j's low bits (AVX-512, and AVX2 per half): column order,
 *                         no permute of x; padding columns of a last partial chunk code 0
 *   low   [cols]          lb of every column
 * Weights whose hb is not in the table are escapes: their code is 0, their hb is listed in the
 * matrix's escape table (kept apart from the rows, in the layer's core): idx[rows + 1] u32, then
 * entries u32 (column << 8 | hb), row r's at [idx[r], idx[r + 1]), columns strictly increasing.
 * Decoding is exact: w = (hb << 8) | lb with hb = table[code], or the escape's hb. */
#ifndef K3_BX4_INTERNAL_H
#define K3_BX4_INTERNAL_H
#include "k3_matmul_internal.h"
#include <stdatomic.h>

#define BX4_TABLE 16
static inline int64_t bx4_code_bytes(int32_t cols) { return 8 * (int64_t)((cols + 15) / 16); }
static inline int64_t bx4_row_bytes(int32_t cols) { return BX4_TABLE + bx4_code_bytes(cols) + cols; }
/* Nibble position of column j (0..15) of a chunk. */
static inline int bx4_nibble(int j) { return (j & 1) ? 8 + (j >> 1) : j >> 1; }
static inline int bx4_code_at(const uint8_t* codes, int32_t c) {
  int p = bx4_nibble(c & 15);
  return (codes[(int64_t)(c >> 4) * 8 + (p >> 1)] >> ((p & 1) * 4)) & 15;
}

typedef struct {
  const uint8_t* B;       /* row records [rows][bx4_row_bytes(cols)] */
  const uint32_t* eidx;   /* [rows + 1]: this call's rows' first escapes (absolute into ent) */
  const uint32_t* ent;    /* the matrix's escape entries [nent] */
  int64_t nent;
  const float* X;         /* row t at X + t·ldx */
  float* Y;               /* row t at Y + t·ldy */
  int64_t ldx, ldy;
  int32_t rows, cols, T;
  atomic_int* bad;        /* set when a row's escapes are out of range (a damaged pack) */
} bx_job;
typedef void (*bx_rows_fn)(const bx_job*, int64_t r0, int64_t r1);

/* Row r's escapes [*e0, *e1) after checking them: inside the entry array, columns strictly
 * increasing and < cols. A row that fails marks the job bad (the call returns K3_ERR_DATA) and
 * gets no escapes, so no read ever leaves the buffers whatever the bytes. */
static inline void bx4_escapes(const bx_job* j, int64_t r, const uint32_t** e0, const uint32_t** e1) {
  uint32_t s = j->eidx[r], e = j->eidx[r + 1];
  int ok = s <= e && e <= j->nent;
  for (uint32_t k = s; ok && k < e; k++) {
    uint32_t col = j->ent[k] >> 8;
    ok = col < (uint32_t)j->cols && (k == s || col > (j->ent[k - 1] >> 8));
  }
  if (!ok) {
    atomic_store_explicit(j->bad, 1, memory_order_relaxed);
    s = e = 0;
  }
  *e0 = j->ent + s;
  *e1 = j->ent + e;
}

/* First column of the chunk holding the row's next escape (cols when none is left). */
static inline int32_t bx4_next_escape_chunk(const uint32_t* e, const uint32_t* end, int32_t cols) {
  return e < end ? (int32_t)((e[0] >> 8) & ~15u) : cols;
}

/* Columns [c, c + n) of a row as f32 (exactly its bf16 values), applying and passing the escapes
 * among them (*e advances). The scalar statement of the decode; the vector paths use it for the
 * rare chunks that hold an escape and for the tail columns. */
static inline void bx4_decode_cols(const uint8_t* row, int32_t cols, int32_t c, int32_t n,
                                   const uint32_t** e, const uint32_t* end, float* w) {
  const uint8_t* codes = row + BX4_TABLE;
  const uint8_t* low = codes + bx4_code_bytes(cols);
  for (int32_t i = 0; i < n; i++) {
    int32_t col = c + i;
    uint32_t hb = row[bx4_code_at(codes, col)];
    if (*e < end && ((*e)[0] >> 8) == (uint32_t)col) hb = (*e)[0] & 255, (*e)++;
    w[i] = k3_bf16((uint16_t)(hb << 8 | low[col]));
  }
}

/* The row's escapes from column k0 on (*e advances past the earlier ones). */
static inline void bx4_skip_to(const uint32_t** e, const uint32_t* end, int32_t k0) {
  while (*e < end && ((*e)[0] >> 8) < (uint32_t)k0) (*e)++;
}

/* Overwrites out[col − k0] for the row's escapes with col < k1 (*e advances past them): the
 * patch after a vector decode of columns [k0, k1) into memory. */
static inline void bx4_patch(const uint8_t* row, int32_t cols, int32_t k0, int32_t k1, const uint32_t** e, const uint32_t* end, float* out) {
  const uint8_t* low = row + BX4_TABLE + bx4_code_bytes(cols);
  for (; *e < end && ((*e)[0] >> 8) < (uint32_t)k1; (*e)++) {
    uint32_t col = (*e)[0] >> 8;
    out[col - k0] = k3_bf16((uint16_t)(((*e)[0] & 255) << 8 | low[col]));
  }
}

/* The batched loop nest's prefetch of the next tile (k3_matmul_batch.c): rows r..r+rows−1,
 * columns [k0, k0 + KC): their codes (KC/2 bytes) and low bytes (KC) per row. */
static inline void bx4_prefetch_tile(const mm_job* mj, int64_t r, int32_t k0, int rows) {
  const bx_job* j = mj->ctx;
  const int64_t rb = bx4_row_bytes(j->cols), cb = bx4_code_bytes(j->cols);
  for (int i = 0; i < rows; i++) {
    const char* row = (const char*)j->B + (r + i) * rb + BX4_TABLE;
    for (int32_t b = 0; b < KC / 2 && k0 / 2 + b < cb; b += 64) __builtin_prefetch(row + k0 / 2 + b, 0, 2);
    for (int32_t b = 0; b < KC && k0 + b < j->cols; b += 64) __builtin_prefetch(row + cb + k0 + b, 0, 2);
  }
}

/* Many tokens per call (T ≥ BATCH_MIN_T): k3_matmul_bf16's batched loop nest of the ISA
 * (k3_matmul_batch.c) with its weight tiles decoded from BX4 instead of widened from bf16 — the
 * same f32 values, so the same bits. */
void k3_bx4_batch_avx2(const bx_job* j, int64_t r0, int64_t r1);
void k3_bx4_batch_avx512(const bx_job* j, int64_t r0, int64_t r1);
void k3_bx4_batch_neon(const bx_job* j, int64_t r0, int64_t r1);

void k3_bx4_avx2(const bx_job* j, int64_t r0, int64_t r1);
void k3_bx4_avx512(const bx_job* j, int64_t r0, int64_t r1);
void k3_bx4_neon(const bx_job* j, int64_t r0, int64_t r1);
#endif
