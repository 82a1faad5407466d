/* Matrix products Y[t][r] = Σ_c W[r][c]·X[t][c] for bf16, f32 and MXFP4 weights (k3.h).
 *
 * FP contract: -ffp-contract=off, no fast-math. Every path (scalar, AVX2, AVX-512) performs the
 * order fixed in k3.h: 16 lane accumulators (lane j ← columns c ≡ j mod 16, increasing c), each
 * product rounded to f32 then added (no FMA), halving tree v[j]+=v[j+8], +4, +2, +1, then the
 * tail columns one by one. AVX2 holds lanes 0–7 and 8–15 in two ymm registers, AVX-512 all 16
 * in one zmm; both match the scalar functions *_scalar bit for bit.
 * MXFP4 (MODEL.md §3): per 32-column group g, p[j] = w(c0+j)·x(c0+j) + w(c0+16+j)·x(c0+16+j),
 * acc[j] += p[j]·2^(s_g−127); s_g = 255 (NaN) skips the group. Weights are decoded from the
 * nibbles in registers only, never expanded in memory.
 * Threads: rows split into contiguous chunks, one thread per row, so any thread count and any
 * T give the same bits; small products stay on the calling thread. */
#include "k3_internal.h"
#include <immintrin.h>

/* Below this many weights a product runs on the calling thread (waking workers costs more). */
#define SMALL_WEIGHTS 65536

/* E2M1 values by nibble: bits 0–2 index [0, .5, 1, 1.5, 2, 3, 4, 6], bit 3 = sign (8 = −0). */
static const float E2M1[16] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };

/* E8M0 scale 2^(s−127) built from bits; s = 0 gives the subnormal 2^-127 (bits 0x00400000),
 * which a naive s<<23 would turn into 0. s = 255 is never passed (skipped by callers). */
static inline float e8m0(uint8_t s) {
  uint32_t b = s ? (uint32_t)s << 23 : 0x00400000u;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

typedef struct {
  const void* W;          /* bf16 / f32 [rows][cols], or MXFP4 packed [rows][cols/2] */
  const uint8_t* S;       /* MXFP4 scales [rows][cols/32] */
  const float* X;         /* [T][cols] */
  float* Y;               /* [T][rows] */
  int32_t rows, cols, T, isa;
} mm_job;

/* ---------------------------------------------------------------- scalar (reference order) */
static void bf16_scalar(const mm_job* j, int64_t r0, int64_t r1) {
  const uint16_t* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] =
          k3_dot16_bf16(W + r * j->cols, j->X + (int64_t)t * j->cols, j->cols);
}

static void f32_scalar(const mm_job* j, int64_t r0, int64_t r1) {
  const float* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] =
          k3_dot16_f32(W + r * j->cols, j->X + (int64_t)t * j->cols, j->cols);
}

static float mxfp4_row_scalar(const uint8_t* pk, const uint8_t* sc, const float* x, int32_t cols) {
  float acc[16] = {0};
  for (int32_t g = 0; g < cols / 32; g++) {
    if (sc[g] == 255) continue;
    float s = e8m0(sc[g]);
    const uint8_t* b = pk + g * 16;
    const float* xg = x + g * 32;
    for (int jl = 0; jl < 16; jl++) {
      /* column c0+jl is nibble (jl&1) of byte jl/2; column c0+16+jl of byte 8+jl/2 */
      int na = (b[jl >> 1] >> ((jl & 1) * 4)) & 15;
      int nb = (b[8 + (jl >> 1)] >> ((jl & 1) * 4)) & 15;
      float pa = E2M1[na] * xg[jl];
      float pb = E2M1[nb] * xg[16 + jl];
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
      j->Y[(int64_t)t * j->rows + r] =
          mxfp4_row_scalar(P + r * rb, j->S + r * G, j->X + (int64_t)t * j->cols, j->cols);
}

/* ---------------------------------------------------------------- AVX2 */
/* Lanes 0–7 in a, 8–15 in b → halving tree → v[0]. Matches k3_tree16. */
__attribute__((target("avx2"))) static inline float tree_avx2(__m256 a, __m256 b) {
  __m256 s8 = _mm256_add_ps(a, b);                                               /* j<8 */
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1)); /* j<4 */
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                             /* j<2 */
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));                         /* j=0 */
  return _mm_cvtss_f32(s1);
}

__attribute__((target("avx2"))) static inline __m256 bf16x8_avx2(const uint16_t* p) {
  __m128i h = _mm_loadu_si128((const __m128i*)p);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2"))) static float dot_bf16_avx2(const uint16_t* w, const float* x, int32_t n) {
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  int32_t n16 = n - n % 16;
  for (int32_t c = 0; c < n16; c += 16) {
    a = _mm256_add_ps(a, _mm256_mul_ps(bf16x8_avx2(w + c), _mm256_loadu_ps(x + c)));
    b = _mm256_add_ps(b, _mm256_mul_ps(bf16x8_avx2(w + c + 8), _mm256_loadu_ps(x + c + 8)));
  }
  float s = tree_avx2(a, b);
  for (int32_t c = n16; c < n; c++) { float p = k3_bf16(w[c]) * x[c]; s += p; }
  return s;
}

__attribute__((target("avx2"))) static float dot_f32_avx2(const float* w, const float* x, int32_t n) {
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  int32_t n16 = n - n % 16;
  for (int32_t c = 0; c < n16; c += 16) {
    a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c)));
    b = _mm256_add_ps(b, _mm256_mul_ps(_mm256_loadu_ps(w + c + 8), _mm256_loadu_ps(x + c + 8)));
  }
  float s = tree_avx2(a, b);
  for (int32_t c = n16; c < n; c++) { float p = w[c] * x[c]; s += p; }
  return s;
}

/* 8 consecutive columns from 4 packed bytes: lane m holds nibble m of the little-endian word
 * (column 2j = low nibble of byte j, so nibble m is column m). Magnitude: permute of the
 * 8-entry table by bits 0–2 (permutevar8x32 ignores higher bits); sign: bit 3 of nibble m
 * shifted to bit 31 (shift left by 28 − 4m), masked and xor'd in (8 → −0, like E2M1[]). */
__attribute__((target("avx2"))) static inline __m256 e2m1x8_avx2(const uint8_t* p4, __m256 mag,
                                                                __m256i shr, __m256i shl) {
  int32_t word;
  memcpy(&word, p4, 4);
  __m256i w = _mm256_set1_epi32(word);
  __m256 m = _mm256_permutevar8x32_ps(mag, _mm256_srlv_epi32(w, shr));
  __m256i sign = _mm256_and_si256(_mm256_sllv_epi32(w, shl), _mm256_set1_epi32((int)0x80000000u));
  return _mm256_xor_ps(m, _mm256_castsi256_ps(sign));
}

__attribute__((target("avx2"))) static float row_mxfp4_avx2(const uint8_t* pk, const uint8_t* sc,
                                                            const float* x, int32_t cols) {
  const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256i shr = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i shl = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  for (int32_t g = 0; g < cols / 32; g++) {
    if (sc[g] == 255) continue;
    __m256 s = _mm256_set1_ps(e8m0(sc[g]));
    const uint8_t* by = pk + g * 16;
    const float* xg = x + g * 32;
    __m256 wa0 = e2m1x8_avx2(by, mag, shr, shl);       /* columns c0 .. c0+7 */
    __m256 wa1 = e2m1x8_avx2(by + 4, mag, shr, shl);   /* c0+8 .. c0+15 */
    __m256 wb0 = e2m1x8_avx2(by + 8, mag, shr, shl);   /* c0+16 .. c0+23 */
    __m256 wb1 = e2m1x8_avx2(by + 12, mag, shr, shl);  /* c0+24 .. c0+31 */
    __m256 p0 = _mm256_add_ps(_mm256_mul_ps(wa0, _mm256_loadu_ps(xg)),
                              _mm256_mul_ps(wb0, _mm256_loadu_ps(xg + 16)));
    __m256 p1 = _mm256_add_ps(_mm256_mul_ps(wa1, _mm256_loadu_ps(xg + 8)),
                              _mm256_mul_ps(wb1, _mm256_loadu_ps(xg + 24)));
    a = _mm256_add_ps(a, _mm256_mul_ps(p0, s));
    b = _mm256_add_ps(b, _mm256_mul_ps(p1, s));
  }
  return tree_avx2(a, b);
}

__attribute__((target("avx2"))) static void bf16_avx2(const mm_job* j, int64_t r0, int64_t r1) {
  const uint16_t* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] = dot_bf16_avx2(W + r * j->cols, j->X + (int64_t)t * j->cols, j->cols);
}
__attribute__((target("avx2"))) static void f32_avx2(const mm_job* j, int64_t r0, int64_t r1) {
  const float* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] = dot_f32_avx2(W + r * j->cols, j->X + (int64_t)t * j->cols, j->cols);
}
__attribute__((target("avx2"))) static void mxfp4_avx2(const mm_job* j, int64_t r0, int64_t r1) {
  const uint8_t* P = j->W;
  int64_t rb = j->cols / 2, G = j->cols / 32;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] =
          row_mxfp4_avx2(P + r * rb, j->S + r * G, j->X + (int64_t)t * j->cols, j->cols);
}

/* ---------------------------------------------------------------- AVX-512 (F + BW) */
#define T512 __attribute__((target("avx512f,avx512bw")))

/* All 16 lanes in one zmm → halving tree. Matches k3_tree16 (upper 256 bits are lanes 8–15). */
T512 static inline float tree_avx512(__m512 v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

T512 static float dot_bf16_avx512(const uint16_t* w, const float* x, int32_t n) {
  __m512 a = _mm512_setzero_ps();
  int32_t n16 = n - n % 16;
  for (int32_t c = 0; c < n16; c += 16) {
    __m256i h = _mm256_loadu_si256((const __m256i*)(w + c));
    __m512 wf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    a = _mm512_add_ps(a, _mm512_mul_ps(wf, _mm512_loadu_ps(x + c)));
  }
  float s = tree_avx512(a);
  for (int32_t c = n16; c < n; c++) { float p = k3_bf16(w[c]) * x[c]; s += p; }
  return s;
}

T512 static float dot_f32_avx512(const float* w, const float* x, int32_t n) {
  __m512 a = _mm512_setzero_ps();
  int32_t n16 = n - n % 16;
  for (int32_t c = 0; c < n16; c += 16)
    a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_loadu_ps(w + c), _mm512_loadu_ps(x + c)));
  float s = tree_avx512(a);
  for (int32_t c = n16; c < n; c++) { float p = w[c] * x[c]; s += p; }
  return s;
}

T512 static float row_mxfp4_avx512(const uint8_t* pk, const uint8_t* sc, const float* x, int32_t cols) {
  const __m512 tab = _mm512_loadu_ps(E2M1); /* permutexvar uses the low 4 bits = the nibble */
  const __m128i lo4 = _mm_set1_epi8(15);
  __m512 a = _mm512_setzero_ps();
  for (int32_t g = 0; g < cols / 32; g++) {
    if (sc[g] == 255) continue;
    __m128i by = _mm_loadu_si128((const __m128i*)(pk + g * 16));
    __m128i lo = _mm_and_si128(by, lo4), hi = _mm_and_si128(_mm_srli_epi16(by, 4), lo4);
    __m512 wa = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), tab);
    __m512 wb = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)), tab);
    const float* xg = x + g * 32;
    __m512 p = _mm512_add_ps(_mm512_mul_ps(wa, _mm512_loadu_ps(xg)),
                             _mm512_mul_ps(wb, _mm512_loadu_ps(xg + 16)));
    a = _mm512_add_ps(a, _mm512_mul_ps(p, _mm512_set1_ps(e8m0(sc[g]))));
  }
  return tree_avx512(a);
}

T512 static void bf16_avx512(const mm_job* j, int64_t r0, int64_t r1) {
  const uint16_t* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] = dot_bf16_avx512(W + r * j->cols, j->X + (int64_t)t * j->cols, j->cols);
}
T512 static void f32_avx512(const mm_job* j, int64_t r0, int64_t r1) {
  const float* W = j->W;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] = dot_f32_avx512(W + r * j->cols, j->X + (int64_t)t * j->cols, j->cols);
}
T512 static void mxfp4_avx512(const mm_job* j, int64_t r0, int64_t r1) {
  const uint8_t* P = j->W;
  int64_t rb = j->cols / 2, G = j->cols / 32;
  for (int64_t r = r0; r < r1; r++)
    for (int32_t t = 0; t < j->T; t++)
      j->Y[(int64_t)t * j->rows + r] =
          row_mxfp4_avx512(P + r * rb, j->S + r * G, j->X + (int64_t)t * j->cols, j->cols);
}

/* ---------------------------------------------------------------- dispatch */
typedef void (*rows_fn)(const mm_job*, int64_t, int64_t);
typedef struct { mm_job j; rows_fn fn; } mm_task;

static void mm_part(void* ctx, int32_t i, int32_t n) {
  mm_task* t = ctx;
  int64_t lo, hi;
  k3_chunk(t->j.rows, i, n, &lo, &hi);
  if (hi > lo) t->fn(&t->j, lo, hi);
}

static void run(mm_job j, rows_fn scalar, rows_fn avx2, rows_fn avx512) {
  if (j.rows <= 0 || j.T <= 0) return;
  mm_task t = { j, j.isa == K3_ISA_AVX512 ? avx512 : j.isa == K3_ISA_AVX2 ? avx2 : scalar };
  k3_pool_run_if(mm_part, &t, (int64_t)j.rows * j.cols < SMALL_WEIGHTS);
}

K3_API void k3_matmul_bf16(const uint16_t* W, const float* X, float* Y,
                           int32_t rows, int32_t cols, int32_t T) {
  mm_job j = { W, NULL, X, Y, rows, cols, T, k3_isa_current() };
  run(j, bf16_scalar, bf16_avx2, bf16_avx512);
}

K3_API void k3_matmul_f32(const float* W, const float* X, float* Y,
                          int32_t rows, int32_t cols, int32_t T) {
  mm_job j = { W, NULL, X, Y, rows, cols, T, k3_isa_current() };
  run(j, f32_scalar, f32_avx2, f32_avx512);
}

K3_API void k3_matmul_mxfp4(const uint8_t* packed, const uint8_t* scales, const float* X,
                            float* Y, int32_t rows, int32_t cols, int32_t T) {
  if (cols % 32 != 0) return; /* contract: cols multiple of 32 (checked by the caller) */
  mm_job j = { packed, scales, X, Y, rows, cols, T, k3_isa_current() };
  run(j, mxfp4_scalar, mxfp4_avx2, mxfp4_avx512);
}
