/* Candidate codings of bf16 trunk matrices (issue 25), for tools/trunk-codings.ts: measurement
 * only, not part of k3 (the chosen format and its kernels are kernels/k3_matmul_bx.c). Built by
 * the tool with the repo's zig into a temporary library; every decoder here writes bf16 words and
 * the tool checks them against the original before it trusts a time.
 *
 * Codings (each splits a bf16 word into its high byte hb = sign + exponent bits 7..1 and its low
 * byte lb = exponent bit 0 + the 7 mantissa bits; lb is stored raw in every coding):
 *   copy     the bf16 words as they are (a memcpy: the memory rate, the bar every decoder meets)
 *   huffman  hb by a per-tensor canonical Huffman code (lengths ≤ 12 bits, LSB-first), S
 *            segments of the matrix, 4 decoded side by side
 *   rans     hb by a per-tensor rANS (32-bit state, byte renormalisation, 12-bit frequencies),
 *            S segments, 4 states side by side
 *   hbk      hb as a k-bit index (k = 3 or 4) into the row's 2^k most frequent high bytes, the
 *            rest listed per row as escapes (column, hb), patched after the row
 * Threads: pthreads split the segments (entropy coders) or rows (hbk) into contiguous parts. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* ---------------------------------------------------------------- statistics */
void cod_hist16(const uint16_t* w, int64_t n, uint64_t* h) {
  for (int64_t i = 0; i < n; i++) h[w[i]]++;
}

/* The k most frequent high bytes of one row (count desc, then value asc) into tab[0..k). */
static void top_k(const uint16_t* w, int32_t cols, int32_t k, uint8_t* tab, uint32_t* cnt) {
  memset(cnt, 0, 256 * sizeof *cnt);
  for (int32_t c = 0; c < cols; c++) cnt[w[c] >> 8]++;
  uint8_t used[256] = {0};
  for (int32_t i = 0; i < k; i++) {
    int best = -1;
    for (int v = 0; v < 256; v++)
      if (!used[v] && (best < 0 || cnt[v] > cnt[best])) best = v;
    used[best] = 1;
    tab[i] = (uint8_t)best;
  }
}

/* Escapes of the per-row k-bit table (2^k entries) over a whole matrix; *worst = most escapes in one row. */
int64_t cod_row_escapes(const uint16_t* w, int32_t rows, int32_t cols, int32_t k, int32_t* worst) {
  uint32_t cnt[256];
  uint8_t tab[16];
  int64_t total = 0;
  *worst = 0;
  for (int32_t r = 0; r < rows; r++) {
    top_k(w + (int64_t)r * cols, cols, 1 << k, tab, cnt);
    int32_t kept = 0;
    for (int32_t i = 0; i < 1 << k; i++) kept += (int32_t)cnt[tab[i]];
    int32_t esc = cols - kept;
    total += esc;
    if (esc > *worst) *worst = esc;
  }
  return total;
}

/* ---------------------------------------------------------------- threads */
typedef void (*part_fn)(void* ctx, int64_t lo, int64_t hi);
typedef struct { part_fn fn; void* ctx; int64_t lo, hi; } part;
static void* part_main(void* a) {
  part* p = a;
  p->fn(p->ctx, p->lo, p->hi);
  return NULL;
}
/* fn over [0, count) split in nt contiguous parts, reps times; returns the best time in ns. */
static double timed(part_fn fn, void* ctx, int64_t count, int32_t nt, int32_t reps) {
  double best = 1e300;
  if (nt < 1) nt = 1;
  if (nt > 64) nt = 64;
  for (int32_t rep = 0; rep < reps; rep++) {
    struct timespec t0, t1;
    pthread_t th[64];
    part ps[64];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int32_t i = 0; i < nt; i++) {
      ps[i] = (part){ fn, ctx, count * i / nt, count * (i + 1) / nt };
      if (i > 0) pthread_create(&th[i], NULL, part_main, &ps[i]);
    }
    part_main(&ps[0]);
    for (int32_t i = 1; i < nt; i++) pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    if (ns < best) best = ns;
  }
  return best;
}

/* ---------------------------------------------------------------- copy */
typedef struct { const uint16_t* src; uint16_t* dst; } copy_ctx;
static void copy_part(void* c, int64_t lo, int64_t hi) {
  copy_ctx* x = c;
  memcpy(x->dst + lo, x->src + lo, (size_t)(hi - lo) * 2);
}
double cod_copy_time(const uint16_t* src, uint16_t* dst, int64_t n, int32_t nt, int32_t reps) {
  copy_ctx c = { src, dst };
  return timed(copy_part, &c, n, nt, reps);
}

/* ---------------------------------------------------------------- segments
 * Entropy-coded hb of weights [seg_lo[s], seg_lo[s+1]) lives in stream s (own bytes); lb is one
 * plane for all. Segment s's stream starts at data + soff[s]. */
#define MAXSEG 64
typedef struct {
  int32_t S;
  const int64_t* seg_lo;  /* [S+1] */
  const uint8_t* data;
  const int64_t* soff;    /* [S] */
  const uint8_t* lb;
  uint16_t* dst;
  const uint16_t* htab;   /* huffman: [4096] = sym | len << 8 */
  const uint16_t* rfreq;  /* rans: [256] */
  const uint16_t* rcum;   /* rans: [256] */
  const uint8_t* rsym;    /* rans: [4096] slot → symbol */
} seg_ctx;

/* ---------------------------------------------------------------- huffman */
#define HBITS 12
/* Encodes segment by segment, LSB-first; codes[v] is the code of symbol v already bit-reversed
 * (first bit in bit 0), lens[v] its length. out must hold Σ lengths/8 + 8·S + 8 bytes; soff gets
 * each segment's start. Returns the bytes written. */
int64_t cod_huff_encode(const uint16_t* w, int32_t S, const int64_t* seg_lo, const uint32_t* codes,
                        const uint8_t* lens, uint8_t* out, int64_t* soff) {
  int64_t at = 0;
  for (int32_t s = 0; s < S; s++) {
    soff[s] = at;
    uint64_t buf = 0;
    int nb = 0;
    for (int64_t i = seg_lo[s]; i < seg_lo[s + 1]; i++) {
      int v = w[i] >> 8;
      buf |= (uint64_t)codes[v] << nb;
      nb += lens[v];
      while (nb >= 8) { out[at++] = (uint8_t)buf; buf >>= 8; nb -= 8; }
    }
    if (nb > 0) out[at++] = (uint8_t)buf;
    for (int k = 0; k < 8; k++) out[at++] = 0; /* the decoder reads 8 bytes at a time */
  }
  return at;
}

static void huff_part(void* c, int64_t lo, int64_t hi) {
  seg_ctx* x = c;
  const uint16_t* T = x->htab;
  for (int64_t s0 = lo; s0 < hi; s0 += 4) {
    int m = hi - s0 < 4 ? (int)(hi - s0) : 4;
    const uint8_t* p[4];
    uint64_t bit[4] = {0}, i[4], end[4];
    for (int k = 0; k < 4; k++) {
      int s = (int)(s0 + (k < m ? k : 0));
      p[k] = x->data + x->soff[s];
      i[k] = (uint64_t)x->seg_lo[s];
      end[k] = k < m ? (uint64_t)x->seg_lo[s + 1] : i[k];
    }
    for (;;) {
      int live = 0;
      for (int k = 0; k < 4; k++) {
        if (i[k] >= end[k]) continue;
        live = 1;
        uint16_t e = T[(load64(p[k] + (bit[k] >> 3)) >> (bit[k] & 7)) & ((1u << HBITS) - 1)];
        bit[k] += e >> 8;
        x->dst[i[k]] = (uint16_t)((e & 255) << 8 | x->lb[i[k]]);
        i[k]++;
      }
      if (!live) break;
    }
  }
}
double cod_huff_time(const seg_ctx* c, int32_t nt, int32_t reps) { return timed(huff_part, (void*)c, c->S, nt, reps); }

/* ---------------------------------------------------------------- rANS (ryg_rans, byte-wise) */
#define RPROB 12
#define RL (1u << 23)
/* Encodes each segment backwards into its own stream; freq/cum sum to 4096. Returns bytes. */
int64_t cod_rans_encode(const uint16_t* w, int32_t S, const int64_t* seg_lo, const uint16_t* freq,
                        const uint16_t* cum, uint8_t* out, int64_t cap, int64_t* soff) {
  uint8_t* tmp = malloc((size_t)cap);
  int64_t at = 0;
  for (int32_t s = 0; s < S; s++) {
    int64_t n = seg_lo[s + 1] - seg_lo[s];
    uint8_t* end = tmp + cap;
    uint8_t* ptr = end;
    uint32_t x = RL;
    for (int64_t i = seg_lo[s] + n - 1; i >= seg_lo[s]; i--) {
      int v = w[i] >> 8;
      uint32_t f = freq[v];
      uint32_t xmax = ((RL >> RPROB) << 8) * f;
      while (x >= xmax) { *--ptr = (uint8_t)x; x >>= 8; }
      x = ((x / f) << RPROB) + (x % f) + cum[v];
    }
    for (int k = 3; k >= 0; k--) *--ptr = (uint8_t)(x >> (8 * k)); /* the state, little-endian: read first */
    int64_t len = end - ptr;
    soff[s] = at;
    memcpy(out + at, ptr, (size_t)len);
    at += len;
  }
  free(tmp);
  return at;
}

static void rans_part(void* c, int64_t lo, int64_t hi) {
  seg_ctx* xc = c;
  for (int64_t s0 = lo; s0 < hi; s0 += 4) {
    int m = hi - s0 < 4 ? (int)(hi - s0) : 4;
    const uint8_t* p[4];
    uint32_t x[4];
    int64_t i[4], end[4];
    for (int k = 0; k < 4; k++) {
      int s = (int)(s0 + (k < m ? k : 0));
      p[k] = xc->data + xc->soff[s];
      x[k] = (uint32_t)p[k][0] | (uint32_t)p[k][1] << 8 | (uint32_t)p[k][2] << 16 | (uint32_t)p[k][3] << 24;
      p[k] += 4;
      i[k] = xc->seg_lo[s];
      end[k] = k < m ? xc->seg_lo[s + 1] : i[k];
    }
    for (;;) {
      int live = 0;
      for (int k = 0; k < 4; k++) {
        if (i[k] >= end[k]) continue;
        live = 1;
        uint32_t slot = x[k] & ((1u << RPROB) - 1);
        uint8_t v = xc->rsym[slot];
        x[k] = xc->rfreq[v] * (x[k] >> RPROB) + slot - xc->rcum[v];
        while (x[k] < RL) x[k] = x[k] << 8 | *p[k]++;
        xc->dst[i[k]] = (uint16_t)(v << 8 | xc->lb[i[k]]);
        i[k]++;
      }
      if (!live) break;
    }
  }
}
double cod_rans_time(const seg_ctx* c, int32_t nt, int32_t reps) { return timed(rans_part, (void*)c, c->S, nt, reps); }

/* ---------------------------------------------------------------- hbk (k = 3, 4)
 * Row r: codes at codes + r·code_bytes (k bits per column, little-endian bit order), lb at
 * lb + r·cols, table tabs[r·16 ..], escapes esc[estart[r] .. estart[r+1]) as (column << 8 | hb). */
typedef struct {
  int32_t rows, cols, k;
  int64_t code_bytes;
  const uint8_t* codes;
  const uint8_t* lb;
  const uint8_t* tabs;
  const uint32_t* estart; /* [rows + 1] */
  const uint32_t* esc;
  uint16_t* dst;
} hbk_ctx;

/* Encodes (tables, codes, escapes); returns the number of escapes written. */
int64_t cod_hbk_encode(const uint16_t* w, int32_t rows, int32_t cols, int32_t k, uint8_t* tabs,
                       uint8_t* codes, int64_t code_bytes, uint8_t* lb, uint32_t* estart, uint32_t* esc) {
  uint32_t cnt[256];
  int64_t ne = 0;
  memset(codes, 0, (size_t)(code_bytes * rows));
  for (int32_t r = 0; r < rows; r++) {
    const uint16_t* row = w + (int64_t)r * cols;
    uint8_t* tab = tabs + (int64_t)r * 16;
    memset(tab, 0, 16);
    top_k(row, cols, 1 << k, tab, cnt);
    int16_t code_of[256];
    for (int v = 0; v < 256; v++) code_of[v] = -1;
    for (int i = 0; i < (1 << k); i++) code_of[tab[i]] = (int16_t)i;
    estart[r] = (uint32_t)ne;
    uint8_t* cr = codes + (int64_t)r * code_bytes;
    for (int32_t c = 0; c < cols; c++) {
      int v = row[c] >> 8;
      lb[(int64_t)r * cols + c] = (uint8_t)row[c];
      int code = code_of[v];
      if (code < 0) { esc[ne++] = (uint32_t)c << 8 | (uint32_t)v; code = 0; }
      int64_t bit = (int64_t)c * k;
      cr[bit >> 3] |= (uint8_t)(code << (bit & 7));
      if ((bit & 7) + k > 8) cr[(bit >> 3) + 1] |= (uint8_t)(code >> (8 - (bit & 7)));
    }
  }
  estart[rows] = (uint32_t)ne;
  return ne;
}

static void hbk_part(void* c, int64_t lo, int64_t hi) {
  hbk_ctx* x = c;
  const int32_t cols = x->cols, k = x->k;
  const uint32_t mask = (1u << k) - 1;
  for (int64_t r = lo; r < hi; r++) {
    const uint8_t* cr = x->codes + r * x->code_bytes;
    const uint8_t* lb = x->lb + r * cols;
    const uint8_t* tab = x->tabs + r * 16;
    uint16_t* out = x->dst + r * cols;
    if (k == 4) {
      for (int32_t c = 0; c + 1 < cols; c += 2) {
        uint8_t b = cr[c >> 1];
        out[c] = (uint16_t)(tab[b & 15] << 8 | lb[c]);
        out[c + 1] = (uint16_t)(tab[b >> 4] << 8 | lb[c + 1]);
      }
      if (cols & 1) out[cols - 1] = (uint16_t)(tab[cr[cols >> 1] & 15] << 8 | lb[cols - 1]);
    } else {
      for (int32_t c = 0; c < cols; c++) {
        int64_t bit = (int64_t)c * k;
        uint32_t v = (cr[bit >> 3] | (uint32_t)cr[(bit >> 3) + 1] << 8) >> (bit & 7);
        out[c] = (uint16_t)(tab[v & mask] << 8 | lb[c]);
      }
    }
    for (uint32_t e = x->estart[r]; e < x->estart[r + 1]; e++) {
      uint32_t col = x->esc[e] >> 8;
      out[col] = (uint16_t)((x->esc[e] & 255) << 8 | lb[col]);
    }
  }
}
double cod_hbk_time(const hbk_ctx* c, int32_t nt, int32_t reps) { return timed(hbk_part, (void*)c, c->rows, nt, reps); }
