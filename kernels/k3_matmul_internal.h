/* Shared by the matmul files: k3_matmul.c (scalar reference order + dispatch),
 * k3_matmul_avx2.c, k3_matmul_avx512.c and k3_matmul_neon.c (the same order, blocked for speed).
 *
 * Blocking never changes a bit: each output Y[t][r] keeps its own accumulators and sees exactly
 * the operations of k3.h in the same order; blocks only interleave independent (row, token)
 * sums so that one weight load / decode serves several tokens, one x load serves several rows,
 * and several add-latency chains run at once. */
#ifndef K3_MATMUL_INTERNAL_H
#define K3_MATMUL_INTERNAL_H
#include "k3_internal.h"

typedef struct mm_job_s {
  const void* W;          /* bf16 / f32 [rows][cols], or MXFP4 packed [rows][cols/2] */
  const uint8_t* S;       /* MXFP4 scales [rows][cols/32] */
  const float* X;         /* row t at X + t·ldx (cols floats) */
  float* Y;               /* row t at Y + t·ldy (rows floats) */
  int32_t rows, cols, T, isa;
  int64_t ldx, ldy;       /* row strides in floats: ldx ≥ cols, ldy ≥ rows (k3.h) */
  const float* Sf;        /* Q8 / Q4 scales [rows][cols/32] (kernels/k3_matmul_q.c) */
  /* Coded bf16 weights (the exact trunk's BX4, k3_bx4.c): the batched bf16 loop nest fills its
   * tiles (and the tail columns) through this instead of widening W, with the same f32 values;
   * rows × n weights from row r, column k0, at tile + i·ldt. NULL for plain bf16. */
  void (*decode)(const struct mm_job_s* j, int64_t r, int32_t k0, float* tile, int64_t ldt, int rows, int32_t n);
  /* … and asks L2 for the coded bytes of rows × KC columns from (r, k0): the next tile's. */
  void (*prefetch)(const struct mm_job_s* j, int64_t r, int32_t k0, int rows);
  const void* ctx;        /* the decoder's own job */
} mm_job;

/* The argument check every k3_matmul_* entry point makes before any work (k3.h): K3_OK, or
 * K3_ERR_ARG for negative sizes, strides shorter than a row, cols not a multiple of `group`
 * (1: any), or a NULL buffer the call would read or write. Empty products (rows or T = 0) are OK
 * and write nothing. */
static inline int32_t k3_mm_check(const void* W, const void* S, int need_s, const float* X, int64_t ldx,
                                  const float* Y, int64_t ldy, int32_t rows, int32_t cols, int32_t T,
                                  int32_t group) {
  if (rows < 0 || cols < 0 || T < 0 || ldx < cols || ldy < rows || cols % group != 0) return K3_ERR_ARG;
  if (rows == 0 || T == 0) return K3_OK;
  if (!Y || (cols > 0 && (!W || !X || (need_s && !S)))) return K3_ERR_ARG;
  return K3_OK;
}

/* Computes rows [r0, r1) for all T tokens. */
typedef void (*mm_rows_fn)(const mm_job*, int64_t r0, int64_t r1);
/* One path of every format (k3_mm_<fmt>_<suffix>: the row-blocked k3_mm_bf16_avx2, the batched
 * k3_mm_q8_batch_neon, …). */
#define K3_MM_DECL(suffix)                                                    \
  void k3_mm_f32_##suffix(const mm_job* j, int64_t r0, int64_t r1);          \
  void k3_mm_bf16_##suffix(const mm_job* j, int64_t r0, int64_t r1);         \
  void k3_mm_mxfp4_##suffix(const mm_job* j, int64_t r0, int64_t r1);        \
  void k3_mm_q8_##suffix(const mm_job* j, int64_t r0, int64_t r1);           \
  void k3_mm_q4_##suffix(const mm_job* j, int64_t r0, int64_t r1);

/* Per ISA: the row-blocked paths below BATCH_MIN_T tokens, the GEMM-blocked ones
 * (k3_matmul_batch*.c) from there on. Same bits either way. A path this build lacks is NULL and
 * never chosen (k3_isa_set never selects an ISA the build lacks). */
typedef struct { mm_rows_fn scalar, avx2, avx512, neon, batch_avx2, batch_avx512, batch_neon; } mm_paths;
/* The whole call of a k3_matmul_* entry point: the argument check (k3_mm_check: cols a multiple
 * of `group`, scales present if `need_s`), then the current ISA's path on the pool. */
int32_t k3_mm_run(mm_job j, int32_t group, int need_s, mm_paths p);
#if defined(__x86_64__)
#define X86(f) f
#else
#define X86(f) NULL
#endif
#if defined(__aarch64__)
#define ARM(f) f
#else
#define ARM(f) NULL
#endif
/* Every path of one format: the scalar function, then k3_mm_<fmt>_<isa> and k3_mm_<fmt>_batch_<isa>. */
#define K3_MM_PATHS(scalar, fmt)                                                                      \
  (mm_paths){ scalar, X86(k3_mm_##fmt##_avx2), X86(k3_mm_##fmt##_avx512), ARM(k3_mm_##fmt##_neon),     \
              X86(k3_mm_##fmt##_batch_avx2), X86(k3_mm_##fmt##_batch_avx512), ARM(k3_mm_##fmt##_batch_neon) }

/* E2M1 values by nibble: bits 0–2 index [0, .5, 1, 1.5, 2, 3, 4, 6], bit 3 = sign (8 = −0). */
extern const float k3_e2m1[16];
/* E8M0 scale 2^(s−127) as f32 bits for every s: s = 0 is the subnormal 2^-127 (0x00400000, a
 * naive s<<23 would give 0); s = 255 (NaN) maps to +inf but is never applied (group skipped).
 * A table so the vector paths broadcast the scale straight from memory (a load, no shuffle). */
extern const uint32_t k3_e8m0_bits[256];
static inline float k3_e8m0(uint8_t s) {
  float f;
  memcpy(&f, &k3_e8m0_bits[s], 4);
  return f;
}

/* The MXFP4 scale fold of the batched paths (docs/NUMERICS.md, "The scale fold"): a group
 * with scale s = 2^(E−127) is computed as acc += (w·s)·xa + (w·s)·xb instead of
 * acc += (w·xa + w·xb)·s (2 multiplies and 2 adds per 32 weight·tokens instead of 3 and 2), with the
 * same bits whenever no intermediate is subnormal or overflows. The guard that ensures it: every
 * scale of the group with E − 127 ∈ [−30, 30] or E = 255, and every x the group meets finite with
 * x = ±0 or 2^-60 ≤ |x| ≤ 2^60. E = 255 (the group is skipped) folds as w·s = ±0: with finite x
 * the group then adds ±0, and acc + (±0) = acc exactly because an accumulator that starts at +0 is
 * never −0 under round-to-nearest (x + y = −0 needs both −0). x is checked per 64-token chunk (TC),
 * the scales per 8 × 512 tile; a chunk or tile that fails the guard takes the unfolded code. */
#define K3_FOLD_E_MIN 97                 /* 2^-30 */
#define K3_FOLD_E_MAX 157                /* 2^30 */
#define K3_FOLD_X_MIN_BITS 0x21800000u   /* |x| bits of 2^-60 */
#define K3_FOLD_X_MAX_BITS 0x5D800000u   /* |x| bits of 2^60 */
static inline int k3_fold_e_ok(uint8_t e) { return (uint8_t)(e - K3_FOLD_E_MIN) <= K3_FOLD_E_MAX - K3_FOLD_E_MIN || e == 255; }
/* What a folded group's weights are multiplied by: s, or 0 for a skipped group (E = 255). */
static inline float k3_fold_scale(uint8_t e) { return e == 255 ? 0.0f : k3_e8m0(e); }
/* 1 when every x of rows [0, T) × cols (row stride ldx) is inside the fold's guard. */
static inline int k3_fold_x_ok(const float* X, int64_t ldx, int32_t T, int32_t cols) {
  uint32_t bad = 0;
  for (int32_t t = 0; t < T; t++) {
    const float* x = X + (int64_t)t * ldx;
    for (int32_t c = 0; c < cols; c++) {
      uint32_t a;
      memcpy(&a, x + c, 4);
      a &= 0x7FFFFFFFu;
      bad |= (a != 0) & (a - K3_FOLD_X_MIN_BITS > K3_FOLD_X_MAX_BITS - K3_FOLD_X_MIN_BITS);
    }
  }
  return !bad;
}
/* 1 when every scale of rows [0, rows) × groups (row stride lds) is inside the fold's guard. */
static inline int k3_fold_s_ok(const uint8_t* S, int64_t lds, int rows, int32_t groups) {
  uint32_t bad = 0;
  for (int i = 0; i < rows; i++)
    for (int32_t g = 0; g < groups; g++) bad |= !k3_fold_e_ok(S[i * lds + g]);
  return !bad;
}

/* Software prefetch for multi-row blocks (MXFP4 several tokens, AVX2 MXFP4 token pairs, AVX-512
 * dense several tokens). A block reads RB rows side by side (RB interleaved streams); short rows
 * (MXFP4: 1.75 KB for 3584 columns) are too short for the hardware prefetcher to train on each
 * stream, so the block sweeps prefetches linearly over a later block at its own pace: each step
 * prefetches as many bytes as it reads, so the later block is covered exactly once while this one
 * is read. The later block is the first that starts ≥ K3_PF_AHEAD bytes after this one (0, 8,
 * 16, 32 KB measured within noise of each other). One-row paths need none (one sequential
 * stream; a sweep there measured slower). */
#define K3_PF_AHEAD 8192
static inline const char* k3_pf_target(const void* block, int64_t block_bytes) {
  int64_t n = (K3_PF_AHEAD + block_bytes - 1) / block_bytes;
  return (const char*)block + (n < 1 ? 1 : n) * block_bytes;
}

/* Many tokens per call (k3_matmul_batch.c): from BATCH_MIN_T tokens on, a GEMM-blocked loop nest
 * with register-blocked micro-kernels per ISA. KC: columns per widened weight tile; RP: rows per
 * panel; RS: rows per sweep (the sweep's panels share each column tile of x, and their
 * accumulators stay parked across the column tiles); TC: tokens per chunk. The stack holds
 * RP × KC f32 (16 KB) of tile and RS × TC × 16 f32 (192 KB) of accumulators.
 * Measured (issue 23, AMD Zen 4, bench/kernels.ts, old vs new in one run): 8 × 512 is 3–6 %
 * faster than 16 × 256 for bf16, MXFP4 and int4 on AVX2 and AVX-512 at T = 32–256 (an
 * accumulator is parked and reloaded half as often, the tile is the same 16 KB); 4 × 1024 and
 * 15-row panels with 3 × 8 blocks were no better. Round six (docs/BENCH-KERNELS.md): sweeps of
 * 48 rows (before: 8, one panel) and chunks of 64 tokens (before: 32) — the chunk's x tile is read
 * from L2 once per sweep instead of once per panel, and each weight tile is decoded once per 64
 * tokens; RS divides the row-block quantum of k3_rowq (K3_ROWQ_QUANTUM, asserted), so a thread's block
 * is whole sweeps. */
#define BATCH_MIN_T 8
#define KC 512
#define KG (KC / 32)
#define RP 8
#define TC 64
#define RS 48

/* An ISA's part of the batched matmuls. Accumulators are 16 floats (the k3.h lanes, in order)
 * at A + (i·TC + t)·16 for row i and token t of the block; `first` = start them at +0 instead of
 * loading them. Tiles are row-major with row stride KC (the grouped formats: decoded E2M1 or
 * integer values in column order; scales St[i·KG + g] as f32; nan[g] bit (row0 + i) = row i of
 * the block has MXFP4 scale 255 in group g, whose contribution is then skipped exactly). */
typedef struct {
  int rb, tb; /* register block: rows × tokens per micro-kernel call (R ≤ rb, TB ≤ tb) */
  void (*widen_bf16)(const uint16_t* W, int64_t ldw, float* tile, int rows, int32_t n);
  void (*decode_mxfp4)(const uint8_t* P, int64_t ldp, float* tile, int rows, int32_t groups);
  void (*decode_q8)(const int8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups);
  void (*decode_q4)(const uint8_t* Q, int64_t ldq, float* tile, int rows, int32_t groups);
  void (*dense)(const float* Wt, int64_t ldw, const float* X, int64_t ldx, float* A, int first,
                int32_t n, int R, int TB);
  void (*grouped)(const float* Wt, const float* St, const uint32_t* nan, int row0, const float* X,
                  int64_t ldx, float* A, int first, int32_t groups, int R, int TB);
  void (*reduce)(const float* A, int32_t n, float* y); /* y[t] = halving tree of A[t·16 ..] */
  /* The MXFP4 scale fold (K3_FOLD_*; NULL: this ISA never folds): the tile decoded already
   * multiplied by its group's scale (S[i·lds + g], every one inside the guard), and the
   * micro-kernel acc += wa·xa + wb·xb on it, register block rbf × tbf. */
  int rbf, tbf;
  void (*decode_mxfp4_fold)(const uint8_t* P, int64_t ldp, const uint8_t* S, int64_t lds, float* tile, int rows, int32_t groups);
  void (*mxfold)(const float* Wt, const float* X, int64_t ldx, float* A, int first, int32_t groups, int R, int TB);
} mm_batch_isa;
void k3_mm_batch_f32(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa);
void k3_mm_batch_bf16(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa);
void k3_mm_batch_mxfp4(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa);
void k3_mm_batch_q8(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa);
void k3_mm_batch_q4(const mm_job* j, int64_t r0, int64_t r1, const mm_batch_isa* isa);
/* Each ISA's batched entry points, per format (k3_mm_<fmt>_batch_<isa>). */
K3_MM_DECL(batch_avx2)
K3_MM_DECL(batch_avx512)
K3_MM_DECL(batch_neon)

/* The row-blocked paths per ISA and format: k3_matmul_<isa>.c (bf16, f32, mxfp4) and
 * k3_matmul_q.c (q8, q4). The x86 ones are built for x86-64 only, NEON for aarch64 (build.zig). */
K3_MM_DECL(avx2)
K3_MM_DECL(avx512)
K3_MM_DECL(neon)
#endif
