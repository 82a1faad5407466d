/* AVX2 matmuls: the k3.h order with lanes 0–7 in one ymm and lanes 8–15 in another, blocked over
 * rows and tokens (k3_matmul_internal.h). Bit-identical to the scalar functions in k3_matmul.c.
 *
 * Blocks (16 ymm registers; each (row, token) keeps its own two accumulators):
 *  - one token, dense rows ≥ 6 KB: DENSE_DECODE_ROWS rows (16 accumulators), then 4, then 1;
 *    shorter dense rows and MXFP4 rows: one row at a time (one sequential stream; for MXFP4 with
 *    a software prefetch 2 KB ahead and the E = 255 test once per row);
 *  - several tokens: 2 rows × 2 tokens (8 accumulators): one weight load / decode per 2 tokens.
 * MXFP4 decode: 4 vector ops per 8 weights (e2m1x8_avx2). */
#include "k3_matmul_x86.h"
/* One-token dense products read rows of at least this many bytes DENSE_DECODE_ROWS at a time,
 * shorter rows one at a time (the reason is in k3_matmul_avx512.c, same constant). More rows side
 * by side keep more lines in flight, as on AVX-512; 8 rows use all 16 ymm as accumulators (the
 * weights and x come in as memory operands). Measured (issue 23, AMD Zen 4 with --isa avx2,
 * bench/kernels.ts --T 1 --runs 5, median GB/s 1 / 2 threads, old = 4 rows and a 12 KB threshold,
 * docs/BENCH-KERNELS.md): 2048×7168 15.1 / 25.9 → 19.0 / 28.7, 12288×7168 11.9 / 19.9 → 15.5 /
 * 20.9; 7168×3584 (7 KB rows, one at a time before) 20.3 / 18.2 → 16.5 / 24.2 — a loss on one
 * thread, a gain on the two that decode uses; 3 KB rows stay one at a time. */
#define DENSE_BLOCK_MIN_ROW_BYTES 6144
#define DENSE_DECODE_ROWS 8

/* ---------------------------------------------------------------- bf16 / f32 */
TAVX2 INLINE __m256 load_w8(const void* W, int64_t i, const int bf16) {
  if (!bf16) return _mm256_loadu_ps((const float*)W + i);
  __m128i h = _mm_loadu_si128((const __m128i*)((const uint16_t*)W + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
INLINE float w_at(const void* W, int64_t i, const int bf16) {
  return bf16 ? k3_bf16(((const uint16_t*)W)[i]) : ((const float*)W)[i];
}

/* Rows r..r+RB−1, tokens t0..t0+TB−1 (RB·TB ≤ 4, or RB = DENSE_DECODE_ROWS with TB = 1;
 * compile-time after inlining). PF 1: sweep prefetches over a later block (k3_pf_target); PF 2
 * (one token): each row's stream ahead, into the next block's rows when r + 2·RB ≤ r1
 * (dense_decode_pf, k3_matmul_x86.h). Prefetches never change a bit. */
TAVX2 INLINE void dense_block_x(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB,
                                const int bf16, const int PF, int64_t r1) {
  const int32_t cols = j->cols, n16 = cols - cols % 16;
  const float* X = j->X + (int64_t)t0 * j->ldx;   /* [TB][cols] */
  __m256 lo[DENSE_DECODE_ROWS][2], hi[DENSE_DECODE_ROWS][2]; /* [row][token]: lanes 0–7 / 8–15 */
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++)
    lo[i][t] = hi[i][t] = _mm256_setzero_ps();
  const char* next = k3_pf_target((const char*)j->W + r * cols * (bf16 ? 2 : 4), (int64_t)RB * cols * (bf16 ? 2 : 4));
  for (int32_t c = 0; c < n16; c += 16) {
    if (PF == 1) UNROLL for (int l = 0; l < (RB * 16 * (bf16 ? 2 : 4) + 63) / 64; l++)
        _mm_prefetch(next + (int64_t)c * RB * (bf16 ? 2 : 4) + 64 * l, _MM_HINT_T0);
    if (PF == 2 && (!bf16 || (c & 31) == 0))
      dense_decode_pf(j->W, (int64_t)cols * (bf16 ? 2 : 4), r, RB, r + 2 * RB <= r1, (int64_t)c * (bf16 ? 2 : 4));
    UNROLL for (int i = 0; i < RB; i++) {
      __m256 w0 = load_w8(j->W, (r + i) * cols + c, bf16), w1 = load_w8(j->W, (r + i) * cols + c + 8, bf16);
      UNROLL for (int t = 0; t < TB; t++) {
        const float* x = X + (int64_t)t * j->ldx + c;
        lo[i][t] = _mm256_add_ps(lo[i][t], _mm256_mul_ps(w0, _mm256_loadu_ps(x)));
        hi[i][t] = _mm256_add_ps(hi[i][t], _mm256_mul_ps(w1, _mm256_loadu_ps(x + 8)));
      }
    }
  }
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) {
    float s = tree_avx2(lo[i][t], hi[i][t]);
    for (int32_t c = n16; c < cols; c++) { float p = w_at(j->W, (r + i) * cols + c, bf16) * X[(int64_t)t * j->ldx + c]; s += p; }
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = s;
  }
}

TAVX2 INLINE void dense_block(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB, const int bf16) {
  dense_block_x(j, r, t0, RB, TB, bf16, 0, 0);
}
/* One token on long rows: DENSE_DECODE_ROWS rows at a time first. Rows in blocks of 4 (leftover
 * rows one at a time); token pairs as two 2×2 blocks with the
 * prefetch sweep (measured, 1 thread, bf16 7168×1536: T = 2 21.2 GB/s vs 8.6 without, 18.9 before
 * blocking; T = 4 10.6 vs 6.3 / 6.2), a last single token as one 4×1 block (long rows) or four
 * 1×1 blocks (short rows), without software prefetch. */
TAVX2 INLINE void dense_rows(const mm_job* j, int64_t r0, int64_t r1, const int bf16) {
  const int32_t T = j->T;
  const int long_rows = (int64_t)j->cols * (bf16 ? 2 : 4) >= DENSE_BLOCK_MIN_ROW_BYTES;
  int64_t r = r0;
  if (T == 1 && !long_rows) { /* the common decode case for short rows: a plain row loop */
    for (; r < r1; r++) dense_block(j, r, 0, 1, 1, bf16);
    return;
  }
  if (T == 1)
    for (; r + DENSE_DECODE_ROWS <= r1; r += DENSE_DECODE_ROWS) dense_block_x(j, r, 0, DENSE_DECODE_ROWS, 1, bf16, 2, r1);
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) { dense_block_x(j, r, t, 2, 2, bf16, 1, 0); dense_block_x(j, r + 2, t, 2, 2, bf16, 1, 0); }
    if (t < T) {
      if (long_rows) dense_block(j, r, t, 4, 1, bf16);
      else for (int i = 0; i < 4; i++) dense_block(j, r + i, t, 1, 1, bf16);
    }
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) dense_block(j, r, t, 1, 4, bf16);
    for (; t < T; t++) dense_block(j, r, t, 1, 1, bf16);
  }
}

TAVX2 void k3_mm_bf16_avx2(const mm_job* j, int64_t r0, int64_t r1) { dense_rows(j, r0, r1, 1); }
TAVX2 void k3_mm_f32_avx2(const mm_job* j, int64_t r0, int64_t r1) { dense_rows(j, r0, r1, 0); }

/* ---------------------------------------------------------------- MXFP4 */
/* The 8 E2M1 magnitudes as f32 bits, each xor'd with (k << 28) for its index k = 0..7 (see below). */
static const uint32_t MAG_XK[8] = {
  0x00000000u ^ (0u << 28), 0x3F000000u ^ (1u << 28), 0x3F800000u ^ (2u << 28), 0x3FC00000u ^ (3u << 28),
  0x40000000u ^ (4u << 28), 0x40400000u ^ (5u << 28), 0x40800000u ^ (6u << 28), 0x40C00000u ^ (7u << 28),
};

/* 8 consecutive columns from one broadcast 32-bit word, 4 vector ops: v = word >> 4m puts nibble
 * m (= column m) in bits 0–3 of lane m; vpermps picks MAG_XK[n & 7] (it reads bits 0–2 only);
 * xor with v << 28 (= n << 28 exactly, higher bits shift out) cancels the k << 28 folded into the
 * table and sets bit 31 to the nibble's bit 3: the float of E2M1[n], −0 for n = 8 included. */
TAVX2 INLINE __m256 e2m1x8_avx2(const uint8_t* p4, __m256 magxk, __m256i shr) {
  int32_t word;
  memcpy(&word, p4, 4);
  __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(word), shr);
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(magxk, v), _mm256_castsi256_ps(_mm256_slli_epi32(v, 28)));
}

/* One group g of rows r..r+RB−1 for tokens t0..t0+TB−1. Lanes 0–7 (half 0: bytes 0–3 and 8–11)
 * then lanes 8–15 (half 1: bytes 4–7 and 12–15), so only two decoded vectors are live at a time.
 * MASKED: some row of the block has scale 255 here; its q is AND-ed to +0, and acc + (+0) = acc
 * exactly because acc (started at +0) is never −0 under round-to-nearest — i.e. skipped. */
TAVX2 INLINE void mx_group(__m256 acc[2][4][2], const uint8_t* P, int64_t rb, const uint8_t* S, int32_t G,
                           const float* X, int64_t ldx, int32_t g, __m256 magxk, __m256i shr,
                           const int RB, const int TB, const int MASKED) {
  UNROLL for (int h = 0; h < 2; h++) UNROLL for (int i = 0; i < RB; i++) {
    const uint8_t* b = P + i * rb + g * 16 + 4 * h;
    __m256 wa = e2m1x8_avx2(b, magxk, shr);      /* columns c0+8h .. c0+8h+7 */
    __m256 wb = e2m1x8_avx2(b + 8, magxk, shr);  /* columns c0+16+8h .. c0+16+8h+7 */
    uint8_t sc = S[i * G + g];
    __m256 s = _mm256_set1_ps(k3_e8m0(sc));
    UNROLL for (int t = 0; t < TB; t++) {
      const float* xg = X + t * ldx + g * 32 + 8 * h;
      __m256 p = _mm256_add_ps(_mm256_mul_ps(wa, _mm256_loadu_ps(xg)), _mm256_mul_ps(wb, _mm256_loadu_ps(xg + 16)));
      __m256 q = _mm256_mul_ps(p, s);
      if (MASKED) q = _mm256_and_ps(q, _mm256_castsi256_ps(_mm256_set1_epi32(sc == 255 ? 0 : -1)));
      acc[h][i][t] = _mm256_add_ps(acc[h][i][t], q);
    }
  }
}

/* Rows r..r+RB−1, tokens t0..t0+TB−1 (RB·TB ≤ 4). */
TAVX2 INLINE void mx_block_pf(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB, const int PF) {
  const int32_t cols = j->cols, G = cols / 32;
  const int64_t rb = cols / 2;
  const uint8_t* P = (const uint8_t*)j->W + r * rb;  /* [RB][cols/2] */
  const uint8_t* S = j->S + r * G;                   /* [RB][G] */
  const float* X = j->X + (int64_t)t0 * j->ldx;        /* [TB][cols] */
  const __m256 magxk = _mm256_loadu_ps((const float*)MAG_XK);
  const __m256i shr = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  __m256 acc[2][4][2];                               /* [half][row][token] */
  UNROLL for (int h = 0; h < 2; h++) UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++)
    acc[h][i][t] = _mm256_setzero_ps();
  const char* next = k3_pf_target(P, RB * rb);
  for (int32_t g = 0; g < G; g++) {
    if (PF) _mm_prefetch(next + (int64_t)g * RB * 16, _MM_HINT_T0); /* RB·16 ≤ 64 bytes read per group */
    int nan_any = 0;
    UNROLL for (int i = 0; i < RB; i++) nan_any |= S[i * G + g] == 255;
    if (__builtin_expect(!nan_any, 1)) mx_group(acc, P, rb, S, G, X, j->ldx, g, magxk, shr, RB, TB, 0);
    else mx_group(acc, P, rb, S, G, X, j->ldx, g, magxk, shr, RB, TB, 1);
  }
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++)
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = tree_avx2(acc[0][i][t], acc[1][i][t]);
}

TAVX2 INLINE void mx_block(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB) {
  mx_block_pf(j, r, t0, RB, TB, 1);
}
/* ---------------------------------------------------------------- MXFP4, one token */
/* One token, cols ≤ XPRE_MAX_COLS: rows one at a time (one sequential weight stream) with a
 * byte-shuffle decode, 10 vector ops per 32 weights (was 16 with e2m1x8_avx2), no cross-lane
 * permute. Per group of 16 bytes b[0..15] (byte k: columns 2k and 2k+1):
 *  1. N = [b & 15 | b >> 4 & 15] (vpsrlvd by 0 | 4, vpand): lane L, byte k = nibble of column 2k+L;
 *  2. two vpshufb through 16-entry tables: the top byte (sign, exponent) and the next byte
 *     (exponent bit 0, mantissa) of the f32 of every E2M1 value (its low 16 bits are zero);
 *  3. vpunpcklbw / vpunpckhbw pair them into bf16 words: bytes 0–7 give the a-columns (c0..c0+15),
 *     bytes 8–15 the b-columns (c0+16..c0+31) at the same positions, so the k3.h pairing
 *     (column c0+j with c0+16+j) holds lane by lane;
 *  4. words → f32: even words by vpslld 16, odd words by vpand 0xFFFF0000.
 * Register lane 4L+d of the "even" vectors carries logical lane 4d+L, of the "odd" ones 4d+2+L
 * (lane L of step 1, dword d). x is put in that order once per call (xpre), the accumulators are
 * put back in logical order before the halving tree: the additions are the same, lane for lane. */
#define XPRE_MAX_COLS 8192
static const uint8_t E2M1_HI[16] = { 0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0 };
static const uint8_t E2M1_LO[16] = { 0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0, 0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0 };

/* column (within its 16-column half) of register lane k of the even (o = 0) / odd (o = 2) vector */
static inline int t1_col(int k, int o) { return 4 * (k & 3) + o + (k >> 2); }

/* One token, row r (see above). MASKED: the row has a scale 255 somewhere (those groups are
 * skipped); rows without one run no per-group test. The software prefetch is MX_DECODE_PF
 * (k3_matmul_x86.h; here: 10.3 → 11.0 GB/s on 3072×3584 at 2 threads in the dev harness, 1.02× in
 * bench/kernels.ts — the AVX2 loop's 20 ymm ops per group bound it first). The scale fold (the
 * two vpshufb tables of each scale byte's E2M1·s, loaded per group: 18 ops) ran 0.95–1.06× as
 * fast in L2 and the same from DRAM (docs/BENCH-KERNELS.md, "the one-token scale fold"). */
TAVX2 INLINE float mx_t1_row(const uint8_t* P, const uint8_t* S, int32_t G, const float* xp, const int MASKED) {
  const __m256i hi_tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)E2M1_HI));
  const __m256i lo_tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)E2M1_LO));
  const __m256i cnt = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), m4 = _mm256_set1_epi8(15);
  const __m256i hiw = _mm256_set1_epi32((int)0xFFFF0000u);
  __m256 ae = _mm256_setzero_ps(), ao = _mm256_setzero_ps();
  for (int32_t g = 0; g < G; g++) {
    if ((g & 3) == 0) _mm_prefetch((const char*)P + g * 16 + MX_DECODE_PF, _MM_HINT_T0);
    if (MASKED && S[g] == 255) continue; /* NaN scale: the group is skipped */
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(P + g * 16)));
    __m256i n = _mm256_and_si256(_mm256_srlv_epi32(v, cnt), m4);
    __m256i th = _mm256_shuffle_epi8(hi_tab, n), tl = _mm256_shuffle_epi8(lo_tab, n);
    __m256i wa = _mm256_unpacklo_epi8(tl, th), wb = _mm256_unpackhi_epi8(tl, th);
    __m256 ae_w = _mm256_castsi256_ps(_mm256_slli_epi32(wa, 16)), ao_w = _mm256_castsi256_ps(_mm256_and_si256(wa, hiw));
    __m256 be_w = _mm256_castsi256_ps(_mm256_slli_epi32(wb, 16)), bo_w = _mm256_castsi256_ps(_mm256_and_si256(wb, hiw));
    const float* x = xp + g * 32;
    __m256 s = _mm256_set1_ps(k3_e8m0(S[g]));
    __m256 pe = _mm256_add_ps(_mm256_mul_ps(ae_w, _mm256_load_ps(x)), _mm256_mul_ps(be_w, _mm256_load_ps(x + 16)));
    __m256 po = _mm256_add_ps(_mm256_mul_ps(ao_w, _mm256_load_ps(x + 8)), _mm256_mul_ps(bo_w, _mm256_load_ps(x + 24)));
    ae = _mm256_add_ps(ae, _mm256_mul_ps(pe, s));
    ao = _mm256_add_ps(ao, _mm256_mul_ps(po, s));
  }
  float e[8], o[8], v[16];
  _mm256_storeu_ps(e, ae);
  _mm256_storeu_ps(o, ao);
  for (int k = 0; k < 8; k++) v[t1_col(k, 0)] = e[k], v[t1_col(k, 2)] = o[k];
  return k3_tree16(v);
}

TAVX2 static void mx_t1_rows(const mm_job* j, int64_t r0, int64_t r1) {
  const int32_t cols = j->cols, G = cols / 32;
  float xp[XPRE_MAX_COLS] __attribute__((aligned(32)));   /* per group: a-even, a-odd, b-even, b-odd */
  for (int32_t g = 0; g < G; g++)
    for (int k = 0; k < 8; k++) {
      xp[g * 32 + k] = j->X[g * 32 + t1_col(k, 0)];
      xp[g * 32 + 8 + k] = j->X[g * 32 + t1_col(k, 2)];
      xp[g * 32 + 16 + k] = j->X[g * 32 + 16 + t1_col(k, 0)];
      xp[g * 32 + 24 + k] = j->X[g * 32 + 16 + t1_col(k, 2)];
    }
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t* P = (const uint8_t*)j->W + r * (cols / 2);
    const uint8_t* S = j->S + r * G;
    int nan = 0;
    for (int32_t g = 0; g < G; g++) nan |= S[g] == 255;
    j->Y[r] = __builtin_expect(nan, 0) ? mx_t1_row(P, S, G, xp, 1) : mx_t1_row(P, S, G, xp, 0);
  }
}

/* One token (cols ≤ XPRE_MAX_COLS): mx_t1_rows. Otherwise rows in blocks of 4 (leftover rows one
 * at a time); token pairs as two 2×2 blocks (with the prefetch sweep), a last single token row by
 * row: one row already gives enough independent work
 * per group (26 ops vs a 2-add dependency), and one sequential stream needs no software prefetch
 * (measured: 12.5 vs 11.7 G weights/s in cache, 6.3 vs 6.1 GB/s from DRAM, vs 4×1 blocks). */
TAVX2 void k3_mm_mxfp4_avx2(const mm_job* j, int64_t r0, int64_t r1) {
  const int32_t T = j->T;
  int64_t r = r0;
  if (T == 1 && j->cols <= XPRE_MAX_COLS) { mx_t1_rows(j, r0, r1); return; }
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) { mx_block(j, r, t, 2, 2); mx_block(j, r + 2, t, 2, 2); }
    if (t < T) for (int i = 0; i < 4; i++) mx_block_pf(j, r + i, t, 1, 1, 0);
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 2 <= T; t += 2) mx_block(j, r, t, 1, 2);
    for (; t < T; t++) mx_block(j, r, t, 1, 1);
  }
}
