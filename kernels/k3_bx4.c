/* The exact compact trunk (issue 25, `k3 pack --trunk exact`): BX4, bf16 matrices in 12 bits per
 * weight plus rare escapes, decoded to exactly the release's bf16 values (format:
 * k3_bx4_internal.h). Here: the encoder, the decoder, the scalar matmul (the readable statement
 * of the order) and the dispatch; the vector paths are k3_bx4_avx2.c, k3_bx4_avx512.c,
 * k3_bx4_neon.c.
 *
 * The product is k3_matmul_bf16's, bit for bit: the same 16-lane order over the same decoded
 * values (decoding is exact and happens in registers, before the product), the same halving tree
 * and tail. So a BX4 trunk gives the bf16 trunk's bits on every path, thread count and T. */
#include "k3_bx4_internal.h"

/* Below this many weights a product runs on the calling thread (waking workers costs more). */
#define SMALL_WEIGHTS 65536
#define MAX_COLS (1 << 24) /* an escape entry holds its column in 24 bits */

/* ---------------------------------------------------------------- encoder */
/* The row's 16 most frequent high bytes, count desc then value asc; entries past the distinct
 * values are 0. Returns how many are real. */
static int top16(const uint16_t* w, int32_t cols, uint8_t* tab) {
  uint32_t cnt[256] = {0};
  for (int32_t c = 0; c < cols; c++) cnt[w[c] >> 8]++;
  uint8_t used[256] = {0};
  memset(tab, 0, BX4_TABLE);
  for (int i = 0; i < BX4_TABLE; i++) {
    int best = -1;
    for (int v = 0; v < 256; v++)
      if (!used[v] && cnt[v] > 0 && (best < 0 || cnt[v] > cnt[best])) best = v;
    if (best < 0) return i;
    used[best] = 1;
    tab[i] = (uint8_t)best;
  }
  return BX4_TABLE;
}

K3_API int64_t k3_bx4_encode(const uint16_t* W, int32_t rows, int32_t cols, uint8_t* out, uint32_t* eidx,
                             uint32_t* ent, int64_t cap, int64_t base) {
  if (rows < 0 || cols <= 0 || cols >= MAX_COLS || base < 0 || cap < 0 || !W || !out || !eidx) return K3_ERR_ARG;
  const int64_t rb = bx4_row_bytes(cols), cb = bx4_code_bytes(cols);
  int64_t n = 0;
  for (int32_t r = 0; r < rows; r++) {
    const uint16_t* w = W + (int64_t)r * cols;
    uint8_t* row = out + r * rb;
    uint8_t* codes = row + BX4_TABLE;
    uint8_t* low = codes + cb;
    int real = top16(w, cols, row);
    int code_of[256];
    for (int v = 0; v < 256; v++) code_of[v] = -1;
    for (int i = 0; i < real; i++) code_of[row[i]] = i;
    memset(codes, 0, (size_t)cb);
    eidx[r] = (uint32_t)(base + n);
    for (int32_t c = 0; c < cols; c++) {
      int hb = w[c] >> 8, code = code_of[hb];
      low[c] = (uint8_t)w[c];
      if (code < 0) {
        if (n < cap) ent[n] = (uint32_t)c << 8 | (uint32_t)hb;
        n++;
        code = 0;
      }
      int p = bx4_nibble(c & 15);
      codes[(int64_t)(c >> 4) * 8 + (p >> 1)] |= (uint8_t)(code << ((p & 1) * 4));
    }
  }
  eidx[rows] = (uint32_t)(base + n);
  if (base + n > UINT32_MAX) return K3_ERR_ARG; /* more escapes than the u32 index can count */
  return n;
}

/* ---------------------------------------------------------------- decoder */
K3_API int32_t k3_bx4_decode(const uint8_t* B, const uint32_t* eidx, const uint32_t* ent, int64_t nent,
                             int32_t rows, int32_t cols, uint16_t* out) {
  if (rows < 0 || cols <= 0 || cols >= MAX_COLS || nent < 0 || !B || !eidx || !out) return K3_ERR_ARG;
  atomic_int bad = 0;
  bx_job j = { B, eidx, ent, nent, NULL, NULL, 0, 0, rows, cols, 0, &bad };
  const int64_t rb = bx4_row_bytes(cols);
  for (int32_t r = 0; r < rows && !bad; r++) {
    const uint32_t *e, *end;
    bx4_escapes(&j, r, &e, &end);
    const uint8_t* row = B + r * rb;
    const uint8_t* low = row + BX4_TABLE + bx4_code_bytes(cols);
    for (int32_t c = 0; c < cols; c++) {
      uint32_t hb = row[bx4_code_at(row + BX4_TABLE, c)];
      if (e < end && (e[0] >> 8) == (uint32_t)c) hb = e[0] & 255, e++;
      out[(int64_t)r * cols + c] = (uint16_t)(hb << 8 | low[c]);
    }
  }
  return bad ? K3_ERR_DATA : K3_OK;
}

/* ---------------------------------------------------------------- scalar (reference order) */
/* k3_dot16_bf16's order on the decoded row: lanes over c < cols16, halving tree, tail. */
static float bx4_row_scalar(const bx_job* j, int64_t r, const float* x) {
  const uint8_t* row = j->B + r * bx4_row_bytes(j->cols);
  const uint32_t *e, *end;
  bx4_escapes(j, r, &e, &end);
  const int32_t cols = j->cols, n16 = cols - cols % 16;
  float v[16] = {0}, w[16];
  for (int32_t c = 0; c < n16; c += 16) {
    bx4_decode_cols(row, cols, c, 16, &e, end, w);
    for (int l = 0; l < 16; l++) { float p = w[l] * x[c + l]; v[l] += p; }
  }
  float s = k3_tree16(v);
  if (n16 < cols) bx4_decode_cols(row, cols, n16, cols - n16, &e, end, w);
  for (int32_t c = n16; c < cols; c++) { float p = w[c - n16] * x[c]; s += p; }
  return s;
}

static void bx4_scalar(const bx_job* j, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++) j->Y[t * j->ldy + r] = bx4_row_scalar(j, r, j->X + t * j->ldx);
}

/* ---------------------------------------------------------------- dispatch */
typedef struct { bx_job j; bx_rows_fn fn; k3_rowq q; } bx_task;
/* Rows in guided blocks from a shared counter (k3_rowq): any thread, any interleaving, same bits. */
static void bx_part(void* ctx, int32_t i, int32_t n) {
  (void)i, (void)n;
  bx_task* t = ctx;
  int64_t lo, hi;
  while (k3_rowq_take(&t->q, &lo, &hi)) t->fn(&t->j, lo, hi);
}

K3_API int32_t k3_matmul_bx4(const uint8_t* B, const uint32_t* eidx, const uint32_t* ent, int64_t nent,
                             const float* X, int32_t ldx, float* Y, int32_t ldy, int32_t rows, int32_t cols, int32_t T) {
  int32_t st = k3_mm_check(B, eidx, 1, X, ldx, Y, ldy, rows, cols, T, 1);
  if (st != K3_OK || cols >= MAX_COLS || nent < 0) return K3_ERR_ARG;
  if (rows == 0 || T == 0) return K3_OK;
  if (!eidx || (nent > 0 && !ent)) return K3_ERR_ARG;
  if (cols == 0) {
    for (int32_t t = 0; t < T; t++) memset(Y + (int64_t)t * ldy, 0, sizeof(float) * (size_t)rows);
    return K3_OK;
  }
  atomic_int bad = 0;
  const int32_t isa = k3_isa_current();
  const int batch = T >= BATCH_MIN_T;
  bx_task t = { { B, eidx, ent, nent, X, Y, ldx, ldy, rows, cols, T, &bad },
                isa == K3_ISA_AVX512 ? (batch ? X86(k3_bx4_batch_avx512) : X86(k3_bx4_avx512))
                : isa == K3_ISA_AVX2 ? (batch ? X86(k3_bx4_batch_avx2) : X86(k3_bx4_avx2))
                : isa == K3_ISA_NEON ? (batch ? ARM(k3_bx4_batch_neon) : ARM(k3_bx4_neon)) : bx4_scalar };
  const int small = (int64_t)rows * cols < SMALL_WEIGHTS;
  k3_rowq_init(&t.q, rows, small ? 1 : k3_pool_size());
  k3_pool_run_if(bx_part, &t, small);
  return atomic_load(&bad) ? K3_ERR_DATA : K3_OK;
}
