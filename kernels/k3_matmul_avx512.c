/* AVX-512 (F + BW) matmuls: the k3.h order with all 16 lanes in one zmm, blocked over rows and
 * tokens (k3_matmul_internal.h). Bit-identical to the scalar functions in k3_matmul.c.
 *
 * Blocks (each output keeps its own accumulator, so blocking never changes a bit):
 *  - bf16 / f32: 4 rows × up to 4 tokens; 16 accumulators + 4 weight vectors + 1 x vector fit
 *    the 32 zmm. One weight load serves 4 tokens, one x load serves 4 rows, and 4..16
 *    independent add chains run at once. One token with rows < 6 KB: one row at a time
 *    (DENSE_BLOCK_MIN_ROW_BYTES).
 *  - MXFP4: one token: one row at a time with x pre-permuted, the E = 255 test once per row and a
 *    software prefetch; several: 4 rows × up to 4 tokens.
 *
 * MXFP4 decode, 2 vector ops per 16 weights: one 64-bit broadcast load of the 8 bytes holding 16
 * nibbles, one vpsrlvd by [0,0,4,4,…,28,28] and one vpermps of the 16 signed E2M1 floats (it reads
 * only index bits 0–3, so no mask). Dword lane 2q holds the low word (nibbles 0–7) shifted by 4q,
 * lane 2q+1 the high word (nibbles 8–15): register lane k carries logical lane π(k) with
 * π(2q) = q, π(2q+1) = 8+q — the same π for the c0..c0+15 half and the c0+16..c0+31 half, so
 * the pairing p[j] = w(c0+j)x(c0+j) + w(c0+16+j)x(c0+16+j) holds lane by lane once x is loaded
 * in π order (once per call for one token, else one vpermps per 16 x shared by the block's
 * rows). Before the halving tree the accumulator is permuted back to logical order. */
#include "k3_matmul_x86.h"
/* One-token dense products read rows of at least this many bytes DENSE_DECODE_ROWS at a time
 * (then 4, then 1); shorter rows one at a time. Measured (docs/BENCH-KERNELS.md): with 14 KB rows
 * 4 side-by-side streams were ~1.6× faster than one row at a time, with ≤ 7 KB rows slower — but
 * 12 streams beat one on 7 KB rows too in decode (issue 23, AMD Zen 4, docs/BENCH-KERNELS.md:
 * the slice's 7168×3584 calls 8.4–8.5 ms/token vs 8.7–10.4, 2 threads, 4 KiB pages; a harness over
 * one 512 MiB mapping 19.6 → 23.9 GB/s on 2 threads, 11.7 → 16.1 on 1), so the threshold is 6 KB.
 * bench/kernels.ts (separate JS buffers) saw 2 threads equal and 1 thread 21.3 → 19.3 GB/s. At
 * 3 KB rows (18432×1536) one row at a time stays faster (a 2 KB threshold: 21.5 → 14.3, 1 thread). */
#define DENSE_BLOCK_MIN_ROW_BYTES 6144
/* One-token products of long rows read this many rows side by side (decode's trunk matmuls).
 * Measured on AMD Zen 4 (issue 23, bench/kernels.ts --T 1, bf16 2048×7168, 1 thread): 4 rows
 * 13.1 GB/s, 8 rows 16.5, 12 rows 18.3, 16 rows 18.7 (within noise of 12), 24 rows 14.3; 2 threads
 * 21 → 28–30 GB/s with 12 (the read probe: 30–35). More independent streams keep more lines in
 * flight than 4 did; past 16 the accumulators no longer fit the registers. */
#define DENSE_DECODE_ROWS 12

/* ---------------------------------------------------------------- bf16 / f32 */
T512 INLINE __m512 load_w16(const void* W, int64_t i, const int bf16) {
  if (!bf16) return _mm512_loadu_ps((const float*)W + i);
  __m256i h = _mm256_loadu_si256((const __m256i*)((const uint16_t*)W + i));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
INLINE float w_at(const void* W, int64_t i, const int bf16) {
  return bf16 ? k3_bf16(((const uint16_t*)W)[i]) : ((const float*)W)[i];
}

/* Rows r..r+RB−1, tokens t0..t0+TB−1 (RB·TB ≤ 16 or RB ≤ DENSE_DECODE_ROWS with TB = 1,
 * compile-time after inlining). PF 1: sweep prefetches over a later block (k3_pf_target); PF 2
 * (one token): each row's stream ahead, into the next block's rows when r + 2·RB ≤ r1
 * (dense_decode_pf, k3_matmul_x86.h). Prefetches never change a bit. */
T512 INLINE void dense_block_x(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB,
                             const int bf16, const int PF, int64_t r1) {
  const int32_t cols = j->cols, n16 = cols - cols % 16;
  const float* X = j->X + (int64_t)t0 * j->ldx;   /* [TB][cols] */
  __m512 acc[DENSE_DECODE_ROWS][4];             /* [row][token], lane j ← columns ≡ j mod 16 */
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) acc[i][t] = _mm512_setzero_ps();
  const char* next = k3_pf_target((const char*)j->W + r * cols * (bf16 ? 2 : 4), (int64_t)RB * cols * (bf16 ? 2 : 4));
  for (int32_t c = 0; c < n16; c += 16) {
    if (PF == 1) UNROLL for (int l = 0; l < (RB * 16 * (bf16 ? 2 : 4) + 63) / 64; l++)
        _mm_prefetch(next + (int64_t)c * RB * (bf16 ? 2 : 4) + 64 * l, _MM_HINT_T0);
    if (PF == 2 && (!bf16 || (c & 31) == 0))
      dense_decode_pf(j->W, (int64_t)cols * (bf16 ? 2 : 4), r, RB, r + 2 * RB <= r1, (int64_t)c * (bf16 ? 2 : 4));
    __m512 w[DENSE_DECODE_ROWS];
    UNROLL for (int i = 0; i < RB; i++) w[i] = load_w16(j->W, (r + i) * cols + c, bf16);
    UNROLL for (int t = 0; t < TB; t++) {
      __m512 x = _mm512_loadu_ps(X + (int64_t)t * j->ldx + c);
      UNROLL for (int i = 0; i < RB; i++) acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(w[i], x));
    }
  }
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) {
    float s = tree_avx512(acc[i][t]);
    for (int32_t c = n16; c < cols; c++) { float p = w_at(j->W, (r + i) * cols + c, bf16) * X[(int64_t)t * j->ldx + c]; s += p; }
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = s;
  }
}

T512 INLINE void dense_block(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB, const int bf16) {
  dense_block_x(j, r, t0, RB, TB, bf16, 0, 0);
}
T512 INLINE void dense_block_pf(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB, const int bf16) {
  dense_block_x(j, r, t0, RB, TB, bf16, 1, 0);
}
/* Rows in blocks of 4 (leftover rows one at a time), tokens in blocks of 4 then the tail, with
 * the prefetch sweep (measured at T = 4, 1 thread: 8.8 / 11.0 GB/s for 7168 / 1536 columns vs
 * 8.2 / 9.9 without, 6.0 / 6.7 before blocking). A lone token reads short rows one at a time and
 * long rows DENSE_DECODE_ROWS at a time with each row's stream prefetched to L2 (dense_decode_pf),
 * then 4, then 1, without (DENSE_BLOCK_MIN_ROW_BYTES; the T0 sweep cost ~25% on 14 KB rows on
 * Intel, and on Zen 4 for 4 rows: 11.3 vs 13.3 GB/s). */
T512 INLINE void dense_rows(const mm_job* j, int64_t r0, int64_t r1, const int bf16) {
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
    for (; t + 4 <= T; t += 4) dense_block_pf(j, r, t, 4, 4, bf16);
    switch (T - t) {
      case 3: dense_block_pf(j, r, t, 4, 3, bf16); break;
      case 2: dense_block_pf(j, r, t, 4, 2, bf16); break;
      case 1:
        if (long_rows) dense_block(j, r, t, 4, 1, bf16);
        else for (int i = 0; i < 4; i++) dense_block(j, r + i, t, 1, 1, bf16);
        break;
    }
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) dense_block(j, r, t, 1, 4, bf16);
    for (; t < T; t++) dense_block(j, r, t, 1, 1, bf16);
  }
}

T512 void k3_mm_bf16_avx512(const mm_job* j, int64_t r0, int64_t r1) { dense_rows(j, r0, r1, 1); }
T512 void k3_mm_f32_avx512(const mm_job* j, int64_t r0, int64_t r1) { dense_rows(j, r0, r1, 0); }

/* ---------------------------------------------------------------- MXFP4 */
/* 16 weights (8 packed bytes) in π lane order (see the top of the file). */
T512 INLINE __m512 e2m1x16_pi(const uint8_t* p8, __m512 tab, __m512i cnt) {
  int64_t q;
  memcpy(&q, p8, 8);
  return _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(q), cnt), tab);
}

/* Rows r..r+RB−1, tokens t0..t0+TB−1 (several tokens, or one with cols > XPRE_MAX_COLS). x comes
 * from X, permuted to π order in the loop and shared by the RB rows; a prefetch sweep over a
 * later block (k3_pf_target). A group whose scale is 255 in any of the block's rows takes the
 * masked path (merge-masked add = the group is skipped for that row, exactly). */
T512 INLINE void mx_block(const mm_job* j, int64_t r, int32_t t0, const int RB, const int TB) {
  const int32_t cols = j->cols, G = cols / 32;
  const int64_t rb = cols / 2;
  const uint8_t* P = (const uint8_t*)j->W + r * rb;  /* [RB][cols/2] */
  const uint8_t* S = j->S + r * G;                   /* [RB][G] */
  const float* X = j->X + (int64_t)t0 * j->ldx;        /* [TB][cols] */
  const __m512 tab = _mm512_loadu_ps(k3_e2m1);
  const __m512i cnt = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  const __m512i pi = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  __m512 acc[4][4];                                  /* [row][token], register lane k = lane π(k) */
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++) acc[i][t] = _mm512_setzero_ps();
  const char* next = k3_pf_target(P, RB * rb);
  for (int32_t g = 0; g < G; g++) {
    _mm_prefetch(next + (int64_t)g * RB * 16, _MM_HINT_T0); /* RB·16 ≤ 64 bytes read per group */
    __m512 wa[4], wb[4], s[4];
    int nan_any = 0;
    UNROLL for (int i = 0; i < RB; i++) {
      const uint8_t* b = P + i * rb + g * 16;
      wa[i] = e2m1x16_pi(b, tab, cnt);        /* columns c0 .. c0+15 */
      wb[i] = e2m1x16_pi(b + 8, tab, cnt);    /* columns c0+16 .. c0+31 */
      uint8_t sc = S[i * G + g];
      nan_any |= sc == 255;
      s[i] = _mm512_set1_ps(k3_e8m0(sc));
    }
    if (__builtin_expect(!nan_any, 1)) {
      UNROLL for (int t = 0; t < TB; t++) {
        const float* xg = X + (int64_t)t * j->ldx + g * 32;
        __m512 xa = _mm512_permutexvar_ps(pi, _mm512_loadu_ps(xg));
        __m512 xb = _mm512_permutexvar_ps(pi, _mm512_loadu_ps(xg + 16));
        UNROLL for (int i = 0; i < RB; i++) {
          __m512 p = _mm512_add_ps(_mm512_mul_ps(wa[i], xa), _mm512_mul_ps(wb[i], xb));
          acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(p, s[i]));
        }
      }
    } else {
      UNROLL for (int t = 0; t < TB; t++) {
        const float* xg = X + (int64_t)t * j->ldx + g * 32;
        __m512 xa = _mm512_permutexvar_ps(pi, _mm512_loadu_ps(xg));
        __m512 xb = _mm512_permutexvar_ps(pi, _mm512_loadu_ps(xg + 16));
        UNROLL for (int i = 0; i < RB; i++) {
          __mmask16 keep = S[i * G + g] == 255 ? 0 : 0xFFFF;
          __m512 p = _mm512_add_ps(_mm512_mul_ps(wa[i], xa), _mm512_mul_ps(wb[i], xb));
          acc[i][t] = _mm512_mask_add_ps(acc[i][t], keep, acc[i][t], _mm512_mul_ps(p, s[i]));
        }
      }
    }
  }
  const __m512i unpi = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  UNROLL for (int i = 0; i < RB; i++) UNROLL for (int t = 0; t < TB; t++)
    j->Y[(int64_t)(t0 + t) * j->ldy + r + i] = tree_avx512(_mm512_permutexvar_ps(unpi, acc[i][t]));
}

/* One token, row r, x in π order (xp): 9 vector ops per group (2 vpsrlvd + 2 vpermps decode,
 * 3 vmulps, 2 vaddps). MASKED: the row has a scale 255 somewhere (those groups are skipped by a
 * merge-masked add, exactly as the scalar `continue`); rows without one run no per-group test. */
T512 INLINE void mx_decode_row(const mm_job* j, int64_t r, const float* xp, const int MASKED) {
  const int32_t G = j->cols / 32;
  const uint8_t* P = (const uint8_t*)j->W + r * (j->cols / 2);
  const uint8_t* S = j->S + r * G;
  const __m512 tab = _mm512_loadu_ps(k3_e2m1);
  const __m512i cnt = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  __m512 acc = _mm512_setzero_ps();
  for (int32_t g = 0; g < G; g++) {
    if ((g & 3) == 0) _mm_prefetch((const char*)P + g * 16 + MX_DECODE_PF, _MM_HINT_T0);
    __m512 wa = e2m1x16_pi(P + g * 16, tab, cnt), wb = e2m1x16_pi(P + g * 16 + 8, tab, cnt);
    __m512 p = _mm512_add_ps(_mm512_mul_ps(wa, _mm512_load_ps(xp + g * 32)), _mm512_mul_ps(wb, _mm512_load_ps(xp + g * 32 + 16)));
    __m512 q = _mm512_mul_ps(p, _mm512_set1_ps(k3_e8m0(S[g])));
    acc = MASKED ? _mm512_mask_add_ps(acc, S[g] == 255 ? 0 : 0xFFFF, acc, q) : _mm512_add_ps(acc, q);
  }
  const __m512i unpi = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  j->Y[r] = tree_avx512(_mm512_permutexvar_ps(unpi, acc));
}

/* Whether any of the n scale bytes at S is 255 (a vector compare per 64, the tail masked). */
T512 INLINE int mx_any_nan(const uint8_t* S, int64_t n) {
  const __m512i ff = _mm512_set1_epi8((char)0xFF);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) if (_mm512_cmpeq_epi8_mask(_mm512_loadu_si512(S + i), ff)) return 1;
  const __mmask64 tail = n > i ? ~0ull >> (64 - (n - i)) : 0;
  return _mm512_mask_cmpeq_epi8_mask(tail, _mm512_maskz_loadu_epi8(tail, S + i), ff) != 0;
}

/* One token (decode), cols ≤ XPRE_MAX_COLS: x is put in π order once per call, then rows run one
 * at a time: one sequential weight stream, no x shuffles, the E = 255 test once per row, a
 * software prefetch MX_DECODE_PF ahead. Measured (docs/BENCH-KERNELS.md, "One-token MXFP4"):
 * 2 / 4 / 8 rows side by side sharing the x loads were no faster in cache (5.2 cycles per
 * row·group either way: not the x loads) and slower from DRAM (1 thread:
 * 8.7 / 7.7 vs 9.9 GB/s, even with prefetch). The scale fold through a table per scale byte
 * (FOLD_TAB[E] = the E2M1 table times k3_fold_scale(E), read by the group's vpermps: 8 ops, no
 * scale broadcast, the same bits) measured no faster, in L2 (0.92–1.02×) or from DRAM (issue 23,
 * "the one-token scale fold" in docs/BENCH-KERNELS.md), so one token does not fold.
 * Several tokens: rows in blocks of 4 (leftover rows one at a time), tokens in blocks of 4 then the
 * tail: 16 accumulators + 8 decoded vectors + x + constants just fit the 32 zmm (4×4 measured ~4%
 * faster than 2×4 per weight·token in cache). */
#define XPRE_MAX_COLS 8192
T512 void k3_mm_mxfp4_avx512(const mm_job* j, int64_t r0, int64_t r1) {
  const int32_t T = j->T;
  int64_t r = r0;
  if (T == 1 && j->cols <= XPRE_MAX_COLS) {
    float xp[XPRE_MAX_COLS] __attribute__((aligned(64)));   /* x in π order, 32 KB of stack at most */
    const __m512i pi = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    for (int32_t c = 0; c < j->cols; c += 16) _mm512_store_ps(xp + c, _mm512_permutexvar_ps(pi, _mm512_loadu_ps(j->X + c)));
    const int32_t G = j->cols / 32;
    for (; r < r1; r++)
      if (__builtin_expect(mx_any_nan(j->S + r * G, G), 0)) mx_decode_row(j, r, xp, 1);
      else mx_decode_row(j, r, xp, 0);
    return;
  }
  for (; r + 4 <= r1; r += 4) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) mx_block(j, r, t, 4, 4);
    switch (T - t) {
      case 3: mx_block(j, r, t, 4, 3); break;
      case 2: mx_block(j, r, t, 4, 2); break;
      case 1: mx_block(j, r, t, 4, 1); break;
    }
  }
  for (; r < r1; r++) {
    int32_t t = 0;
    for (; t + 4 <= T; t += 4) mx_block(j, r, t, 1, 4);
    for (; t < T; t++) mx_block(j, r, t, 1, 1);
  }
}
