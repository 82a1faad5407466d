/* k3 kernel library: the public C API, loaded by src/kernels.ts through bun:ffi.
 *
 * Mechanism only: arithmetic, aligned memory, reads, thread pools. No policy, no getenv, no
 * printing, no exit(). Every buffer is owned by the caller; no kernel allocates (except the
 * k3_mem_* and pool/io init calls, whose whole job is allocation).
 *
 * Conventions
 *  - Activations are f32. Weights are as stored: bf16 (uint16_t, upper half of an f32),
 *    f32, or MXFP4 (packed E2M1 nibbles + E8M0 scales, see MODEL.md §3).
 *  - W is [rows][cols] row-major; y = W·x. A batch of T token vectors is X[T][cols] → Y[T][rows].
 *  - Sizes are int32 (every dimension of K3 fits), element counts that may exceed 2^31 are int64.
 *  - FP contract (docs/NUMERICS.md): -ffp-contract=off, no fast-math, one fixed reduction order
 *    per kernel. The matmuls have scalar, AVX2, AVX-512 and NEON paths that perform exactly the same
 *    operations in the same order; SiTU-GLU and the sigmoids have AVX2 / AVX-512 paths with the
 *    scalar code's bits for every input (k3_math_vec.h); every other kernel has one
 *    implementation. Threads split
 *    output rows (or heads); each output element is summed by one thread, so results are
 *    bit-identical at any thread count and any T (a row of a T-token batch equals the same
 *    row computed alone).
 */
#ifndef K3_H
#define K3_H
#include <stdint.h>
#include <stddef.h>

#define K3_API __attribute__((visibility("default")))

/* ---- status codes (returned as int32; 0 = ok) ---- */
enum {
  K3_OK = 0,
  K3_ERR_ARG = -1,      /* bad argument (size, alignment, unsupported ISA) */
  K3_ERR_NOMEM = -2,
  K3_ERR_IO = -3,       /* read failed; errno-derived detail via k3_io_* results */
  K3_ERR_SHORT = -4,    /* short read (file shorter than expected) */
  K3_ERR_NONFINITE = -5, /* an input that must be finite holds NaN or ±inf (k3_argmax) */
  K3_ERR_DATA = -6,     /* coded weights out of their own bounds (a damaged BX4 escape table) */
};

/* ---- limits: the one place they are declared ----
 * Kernels size stack arrays and scratch by these; a call past one is refused with K3_ERR_ARG
 * (never a silent no-op). The bindings read them through k3_limit, so the TypeScript side checks
 * a config against the same numbers before any work. */
#define K3_MAX_ROUTER_EXPERTS 4096   /* k3_router_topk: N */
#define K3_MAX_ATTNRES_SOURCES 64    /* k3_attnres_mix: n snapshots + P */
#define K3_POOL_MAX_THREADS 64       /* k3_pool_init; k3_mla_scratch_floats has a slot per thread */
#define K3_IO_MAX_THREADS 256        /* k3_io_queue_open, k3_io_init: threads per queue */
#define K3_MXFP4_GROUP 32            /* k3_matmul_mxfp4, _q8, _q4: cols is a multiple of this */
#define K3_KDA_CONV_WIDTH 4          /* k3_kda_conv_silu: the only width implemented */
#define K3_MAX_KDA_HEAD_DIM 1024     /* k3_kda_recurrent: D (two D-float arrays on each worker's stack; K3: 128) */
#define K3_MAX_ROPE_PAIRS 128        /* k3_rope_interleaved: rope dims / 2 */
#define K3_ROPE_MAX_ANGLE 1600000    /* k3_rope_interleaved, k3_sincos: |position · frequency| below this (radians) */
enum {
  K3_LIMIT_ROUTER_EXPERTS = 0,
  K3_LIMIT_ATTNRES_SOURCES = 1,
  K3_LIMIT_POOL_THREADS = 2,
  K3_LIMIT_IO_THREADS = 3,
  K3_LIMIT_MXFP4_GROUP = 4,
  K3_LIMIT_KDA_CONV_WIDTH = 5,
  K3_LIMIT_KDA_HEAD_DIM = 6,
  K3_LIMIT_ROPE_PAIRS = 7,
  K3_LIMIT_ROPE_ANGLE = 8,
};
K3_API int32_t k3_limit(int32_t which);          /* the limit's value; K3_ERR_ARG for an unknown id */

/* ---- library ---- */
K3_API int32_t k3_version(void);                 /* bumps when the ABI changes */

/* ---- ISA dispatch (process-wide) ----
 * isa: -1 auto (best supported), 0 scalar, 1 AVX2, 2 AVX-512 (F+BW), 3 NEON (aarch64).
 * Scalar is supported everywhere; x86-64 adds AVX2 / AVX-512 when the CPU has them, aarch64 NEON.
 * k3_isa_set returns the ISA now in effect, or K3_ERR_ARG if the forced one is unsupported. */
enum { K3_ISA_AUTO = -1, K3_ISA_SCALAR = 0, K3_ISA_AVX2 = 1, K3_ISA_AVX512 = 2, K3_ISA_NEON = 3 };
K3_API int32_t k3_isa_set(int32_t isa);
K3_API int32_t k3_isa_get(void);
K3_API int32_t k3_isa_supported(int32_t isa);    /* 1 / 0 */

/* ---- compute thread pool (process-wide: one pool per process, shared by all models) ----
 * Persistent worker threads; the calling thread takes part (so n = 1 means no workers).
 * Matmuls hand their output rows out in guided blocks from a shared counter (a thread that runs
 * slower takes fewer; each row on one thread, so the bits never depend on who ran it); KDA/MLA
 * split heads into n contiguous chunks. */
/* (Re)size to nthreads (1..K3_POOL_MAX_THREADS; anything else is K3_ERR_ARG and the pool is left
 * as it was). Returns the threads in effect: fewer than asked only if the OS refused a thread. */
K3_API int32_t k3_pool_init(int32_t nthreads);
K3_API int32_t k3_pool_size(void);
K3_API void    k3_pool_free(void);

/* ---- memory ----
 * k3_mem_alloc: zeroed; NULL on failure (bytes < 0, align not a power of two, bytes + align past
 * INT64_MAX, no memory). k3_mem_free: K3_OK, or K3_ERR_ARG (nothing touched) for a pointer that
 * is not a live k3_mem_alloc allocation (freed already, or never ours): live allocations are kept
 * in a table, so the check never reads memory that was freed or unmapped. NULL is K3_OK. */
K3_API void*   k3_mem_alloc(int64_t bytes, int64_t align);
K3_API int32_t k3_mem_free(void* p);
K3_API void    k3_mem_copy(void* dst, const void* src, int64_t bytes);
/* Memory-read probe for benchmarks: the sum of all bytes (mod 2^64), read by the pool in
 * contiguous chunks with the current ISA. Added for bench/kernels.ts (GB/s next to the matmuls). */
K3_API int64_t k3_mem_read_sum(const void* p, int64_t bytes);

/* ---- matrix products: Y[t·ldy + r] = Σ_c W[r][c] · X[t·ldx + c] ----
 * for rows r < rows, tokens t < T, columns c < cols. Strides are in floats: ldx ≥ cols (a token's
 * columns may sit inside a wider row), ldy ≥ rows, so a row slice [r0, r1) of a T-token product
 * is one call with Y + r0 and ldy = the whole product's rows. Every entry point returns K3_OK, or
 * K3_ERR_ARG (nothing written) for negative sizes, a stride shorter than a row, cols that the
 * format does not handle (MXFP4, Q8, Q4: a multiple of 32) or a NULL buffer it would touch;
 * rows = 0 or T = 0 is an empty product (K3_OK, nothing written).
 * Reduction order (all paths): 16 lane accumulators, lane j sums the products of columns
 * c ≡ j (mod 16) for c < cols16 = cols − cols % 16, in increasing c; lanes are combined by the
 * halving tree v[j] += v[j+8] (j<8), v[j] += v[j+4] (j<4), v[j] += v[j+2], v[0] += v[1];
 * then the tail columns cols16..cols−1 are added one by one in increasing c.
 * Each product is w·x rounded to f32, then added (no FMA). An output depends only on its row of
 * W and its token's x: never on T, the strides, the thread count or the ISA path. */
K3_API int32_t k3_matmul_bf16(const uint16_t* W, const float* X, int32_t ldx, float* Y, int32_t ldy,
                              int32_t rows, int32_t cols, int32_t T);
K3_API int32_t k3_matmul_f32(const float* W, const float* X, int32_t ldx, float* Y, int32_t ldy,
                             int32_t rows, int32_t cols, int32_t T);
/* MXFP4: packed [rows][cols/2] (element 2j = low nibble of byte j), scales [rows][cols/32] E8M0.
 * cols must be a multiple of 32. Order: for each group g of 32 columns (increasing g):
 * p[j] = e2m1(c0+j)·x(c0+j) + e2m1(c0+16+j)·x(c0+16+j) for lanes j = 0..15, then
 * acc[j] += p[j] · 2^(s_g − 127); a group with s_g = 255 (NaN) is skipped (contributes 0).
 * Lanes are combined by the halving tree above. Never expands a whole matrix in memory: below 8
 * tokens per call weights are decoded in registers, from 8 on one 8-row × 512-column tile at a
 * time (a stack buffer; docs/NUMERICS.md "Batched"). */
K3_API int32_t k3_matmul_mxfp4(const uint8_t* packed, const uint8_t* scales, const float* X, int32_t ldx,
                               float* Y, int32_t ldy, int32_t rows, int32_t cols, int32_t T);

/* Compact trunk (opt-in, issue 16; kernels/k3_matmul_q.c): integers q in groups of 32 columns with
 * one f32 scale per group, w ≈ q·s. Q8: q int8 [rows][cols]. Q4: [rows][cols/2]; in group g, byte
 * i (0..15) holds column 32g+i in its low nibble and column 32g+16+i in its high nibble, each as
 * q+8. Scales [rows][cols/32] f32. cols must be a multiple of 32 (else K3_ERR_ARG).
 * Order (all paths): for each group g (increasing), p[j] = q(c0+j)·x(c0+j) + q(c0+16+j)·x(c0+16+j)
 * for lanes j = 0..15, then acc[j] += p[j]·s_g; lanes combined by the halving tree above.
 * Strides and statuses as for the matmuls above. From 8 tokens per call the products are
 * GEMM-blocked like MXFP4's (an 8-row × 512-column tile of integers widened to f32 at a time). */
K3_API int32_t k3_matmul_q8(const int8_t* q, const float* scales, const float* X, int32_t ldx, float* Y,
                            int32_t ldy, int32_t rows, int32_t cols, int32_t T);
K3_API int32_t k3_matmul_q4(const uint8_t* q, const float* scales, const float* X, int32_t ldx, float* Y,
                            int32_t ldy, int32_t rows, int32_t cols, int32_t T);
/* Exact compact trunk (issue 25; kernels/k3_bx4.c, format in k3_bx4_internal.h): BX4 codes a
 * bf16 matrix in 12 bits per weight — per row a 16-entry table of high bytes (sign + exponent
 * bits 7..1), a 4-bit index per weight, the low bytes raw — plus escapes for high bytes outside
 * the table: eidx[r] .. eidx[r+1] index the entries (column << 8 | high byte) of row r in ent.
 * Decoding is exact, so k3_matmul_bx4 is k3_matmul_bf16 on the decoded matrix, bit for bit (same
 * order, every path). eidx has rows + 1 entries (absolute into ent[0 .. nent)); a row slice of a
 * matrix passes its records and eidx + r0 with the whole ent. Strides and statuses as for the
 * other matmuls, plus K3_ERR_DATA when an escape index leaves ent or an escape's column is out of
 * order or range (the product is then garbage, never a read outside the buffers). */
K3_API int32_t k3_matmul_bx4(const uint8_t* B, const uint32_t* eidx, const uint32_t* ent, int64_t nent,
                             const float* X, int32_t ldx, float* Y, int32_t ldy, int32_t rows, int32_t cols,
                             int32_t T);
/* Encode rows × cols bf16 into BX4 records `out` (rows × (16 + 8·⌈cols/16⌉ + cols) bytes) and
 * eidx[0 .. rows] (escape numbering starts at `base`); writes the first `cap` escapes to ent and
 * returns how many there are (call again with a larger ent when that exceeds cap). K3_ERR_ARG
 * for bad sizes (cols < 1 or ≥ 2^24) or more than 2^32 − 1 escapes in all. */
K3_API int64_t k3_bx4_encode(const uint16_t* W, int32_t rows, int32_t cols, uint8_t* out, uint32_t* eidx,
                             uint32_t* ent, int64_t cap, int64_t base);
/* Decode BX4 back to bf16 [rows][cols]: K3_OK, K3_ERR_DATA for a bad escape table, K3_ERR_ARG. */
K3_API int32_t k3_bx4_decode(const uint8_t* B, const uint32_t* eidx, const uint32_t* ent, int64_t nent,
                             int32_t rows, int32_t cols, uint16_t* out);
/* Quantise a bf16 matrix to Q8 (bits 8) or Q4 (bits 4): per group s = amax/127 (or /7) in f32,
 * q = nearest integer to w/s (ties to even), clamped to ±127 (±7); an all-zero group has s = 0.
 * Q: [rows][cols] or [rows][cols/2] bytes; scales [rows][cols/32]. K3_ERR_ARG for bad sizes,
 * K3_ERR_NONFINITE (nothing written) when a weight is NaN or ±inf. */
K3_API int32_t k3_quantize_bf16(const uint16_t* W, int32_t rows, int32_t cols, int32_t bits,
                                uint8_t* Q, float* scales);
/* Quantisation error of Q/scales against the bf16 W they came from (reports only): out[0] +=
 * Σ(w − q·s)², out[1] += Σw², out[2] = max(out[2], largest per-row Σ(w − q·s)²/Σw²); double,
 * sequential. */
K3_API void k3_quant_error(const uint16_t* W, int32_t rows, int32_t cols, int32_t bits,
                           const uint8_t* Q, const float* scales, double* out);

/* ---- elementwise and vector ops (single implementation, sequential order; k3_sigmoid,
 * k3_mul_sigmoid and k3_situ_glu split their elements across the pool from 4096 on: each element
 * is computed by one thread, the same bits at any thread count; their AVX-512 / AVX2 paths give
 * the scalar code's bits for every input) ---- */
K3_API void    k3_bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
K3_API void    k3_add(float* y, const float* x, int64_t n);                  /* y += x */
K3_API void    k3_axpy(float* y, float a, const float* x, int64_t n);       /* y += a·x (a·x rounded, then added) */
K3_API void    k3_sigmoid(float* x, int64_t n);                              /* in place */
K3_API void    k3_mul_sigmoid(float* x, const float* gate, int64_t n);      /* x *= sigmoid(gate) */
/* SiTU-GLU: out = b1·tanh(g/b1)·sigmoid(g) · b2·tanh(u/b2). out may alias g or u. */
K3_API void    k3_situ_glu(const float* g, const float* u, float* out, int64_t n, float b1, float b2);
/* x[i] = expf(x[i]) / tanhf(x[i]) in place, with the library's bits (k3_math.c, what the ops above
 * use) on the current ISA's path: for tests and tools/libm-vector-check.ts. */
K3_API void    k3_expf_n(float* x, int64_t n);
K3_API void    k3_tanhf_n(float* x, int64_t n);
/* argmax over n floats; ties → lowest index. K3_ERR_NONFINITE if any x is NaN or ±inf (logits
 * of a sound model are finite: a non-finite one means broken weights, and picking among the rest
 * would be a wrong answer), K3_ERR_ARG if n ≤ 0. */
K3_API int32_t k3_argmax(const float* x, int32_t n);

/* RMSNorm over n elements, T rows: y = w · x / sqrt(mean(x²) + eps). Statistic accumulated in
 * double, sequentially; y[i] = (float)(w[i] · (x[i] · r)) with r = 1/sqrt(mean + eps) in double.
 * Row t of x starts at x + t·ldx, of y at y + t·ldy. y may alias x. */
K3_API void k3_rmsnorm_bf16w(const float* x, int32_t ldx, const uint16_t* w, float* y,
                             int32_t ldy, int32_t n, int32_t T, float eps);
K3_API void k3_rmsnorm_f32w(const float* x, int32_t ldx, const float* w, float* y,
                            int32_t ldy, int32_t n, int32_t T, float eps);

/* ---- KDA ---- */
/* Depthwise causal short conv (width 4, no bias) + SiLU, in place on X[T][C].
 * w is [C][4] (the checkpoint's [C,1,4] F32); hist is [3][C]: hist[0] = x_{t−3}, hist[2] = x_{t−1}
 * (zeros at sequence start), updated to the last three inputs on return.
 * y_t[c] = Σ_{j=0..3} w[c][j] · x_{t−3+j}[c] (j increasing, f32), then y·sigmoid(y). */
K3_API void k3_kda_conv_silu(float* X, const float* w, float* hist, int32_t C, int32_t T);
/* Per head of D: x ← x / sqrt(Σ x² + eps) · scale (Σ in double). X is [T][H][D], in place. */
K3_API void k3_l2norm_heads(float* X, int32_t H, int32_t D, int32_t T, float eps, float scale);
/* Decay gate: g[t][h][d] = lower · sigmoid(exp(A_log[h]) · (f[t][h][d] + dt_bias[h·D+d])).
 * A_log is read PER HEAD (entries H.. are padding, MODEL.md §7.1). g may alias f. */
K3_API void k3_kda_gate(const float* f, const float* dt_bias, const float* A_log, float* g,
                        int32_t H, int32_t D, int32_t T, float lower);
/* Delta-rule recurrence. q, k (already L2-normed, q scaled), v, g: [T][H][D]; beta: [T][H];
 * K3_OK, or K3_ERR_ARG (nothing written) unless H, T ≥ 1 and 1 ≤ D ≤ K3_MAX_KDA_HEAD_DIM.
 * S: [H][D][D] (S[h][i][j], i = key dim, j = value dim), updated in place; o: [T][H][D].
 * Per token t, per head, in this order (MODEL.md §4 KDA step 6):
 *   S[i][:] *= exp(g[i]);  u[j] = Σ_i S[i][j]·k[i];  S[i][j] += k[i]·(beta·(v[j] − u[j]));
 *   o[j] = Σ_i S[i][j]·q[i]   (sums over i in increasing order, f32).
 * Heads are split across the pool. */
K3_API int32_t k3_kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                                const float* beta, float* S, float* o, int32_t H, int32_t D, int32_t T);

/* ---- MLA (absorbed form; cache rows hold [normed c_kv (R) | k_rope (dr)]) ----
 * q: [T][Hm][dn+dr]; kv_b: bf16 [Hm·(dn+dv)][R] (per head: dn rows of k_nope, then dv rows of v);
 * cache: [npos][R+dr], rows 0..pos0+T−1 valid (the T new tokens already written);
 * out: [T][Hm][dv]. Token t sits at position pos0+t and attends to positions 0..pos0+t.
 *   q_lat[j] = Σ_d kv_b[h(dn+dv)+d][j]·q_nope[d]         (d increasing)
 *   s_p = scale · (Σ_j q_lat[j]·c[p][j] + Σ_r q_rope[r]·c[p][R+r])   (j then r increasing)
 *   a = softmax(s) (max-subtracted, exp in f32, sum in double, increasing p)
 *   o_lat[j] = Σ_p a_p·c[p][j] (p increasing);  out[d] = Σ_j kv_b[h(dn+dv)+dn+d][j]·o_lat[j]
 * Clarification (implementation): the two Σ_j/Σ_r of s_p and the Σ_j of out[d] use the matmuls'
 * 16-lane order (each separately, then added); a_p = (float)(e_p / Σe) in double.
 * scratch: k3_mla_scratch_floats(R, npos) floats owned by the caller, npos ≥ pos0+T (one slot per
 * possible pool thread, so it stays valid after k3_pool_init). Heads split across the pool.
 * The caller says what it allocated: cache_rows rows of cache, scratch_floats floats of scratch.
 * K3_OK, or K3_ERR_ARG (nothing written) for a bad size, pos0 + T > cache_rows, or a scratch
 * smaller than k3_mla_scratch_floats(R, pos0 + T). */
K3_API int64_t k3_mla_scratch_floats(int32_t R, int32_t npos);
K3_API int32_t k3_mla_attend(const float* q, const uint16_t* kv_b, const float* cache, float* out,
                             float* scratch, int32_t Hm, int32_t dn, int32_t dr, int32_t dv,
                             int32_t R, int32_t pos0, int32_t T, float scale,
                             int32_t cache_rows, int64_t scratch_floats);

/* ---- AttnRes mix (MODEL.md §4) ----
 * Sources for token t: bank[i][t] (i < n, bank is [n][T][E]) then P[t] (P is [T][E]).
 * score_i = Σ_d (V_i[d]·r_i)·norm[d]·proj[d], r_i = 1/sqrt(mean(V_i²)+eps)   (double, d increasing)
 * p = softmax(score) (double); out[t][d] = (float) Σ_i p_i·V_i[d] (double, i increasing) — RAW sources.
 * Returns K3_OK, or K3_ERR_ARG (nothing written) when n < 0 or n + 1 > K3_MAX_ATTNRES_SOURCES. */
K3_API int32_t k3_attnres_mix(const float* bank, int32_t n, const float* P, const uint16_t* proj,
                           const uint16_t* norm, float* out, int32_t E, int32_t T, float eps);

/* ---- router (MODEL.md §4) ----
 * logits [T][N] (f32, from the gate matmul); s = sigmoid(logits); choice = s + bias;
 * idx[t][0..K) = top-K of choice, descending, ties → lowest expert id;
 * w = s[idx] / (Σ s[idx] + 1e-20) · scaling  (sum in double, rank order) — the bias never
 * enters w (MODEL.md §7.2). Returns K3_OK; K3_ERR_ARG unless 0 < K ≤ N ≤ K3_MAX_ROUTER_EXPERTS;
 * K3_ERR_NONFINITE if a logit is NaN or a bias is NaN/±inf (nothing is written on either). */
K3_API int32_t k3_router_topk(const float* logits, const float* bias, int32_t N, int32_t K,
                              int32_t T, float scaling, int32_t* idx, float* w);

/* ---- draft model (EAGLE-3 format A, docs/DRAFT.md; kernels/k3_draft.c) ----
 * Rotary position embedding on interleaved pairs (DeepSeek's non-NeoX convention), in place. Row t
 * (x + t·ldx) is at position pos0 + t; head h's rope dims start at x + t·ldx + h·hstride; pair i
 * (dims 2i, 2i+1, i < dr/2) turns by φ = (pos0 + t)·freq[i] (double):
 *   c = (float)(cos φ · mscale), s = (float)(sin φ · mscale)   (sin/cos: the library's own, below)
 *   x'[2i] = x[2i]·c − x[2i+1]·s,  x'[2i+1] = x[2i+1]·c + x[2i]·s   (each product rounded, no FMA)
 * K3_ERR_ARG (nothing written) for dr odd or dr/2 > K3_MAX_ROPE_PAIRS, heads < 1, pos0 < 0, T < 0,
 * a negative or non-finite frequency, or an angle ≥ K3_ROPE_MAX_ANGLE. One implementation. */
K3_API int32_t k3_rope_interleaved(float* x, int32_t ldx, int32_t heads, int32_t hstride, int32_t dr,
                                   const double* freq, int32_t pos0, int32_t T, float mscale);
/* out[0] = sin x, out[1] = cos x in double, the same bits on every machine (libm's are not):
 * x = n·π/2 + r with fdlibm's two-part π/2, Taylor polynomials on |r| ≤ π/4. K3_ERR_ARG when
 * |x| ≥ K3_ROPE_MAX_ANGLE (the reduction is exact only below it). What k3_rope_interleaved uses. */
K3_API int32_t k3_sincos(double x, double* out);
/* SiLU-gated MLP activation: out = (g · sigmoid(g)) · u, left to right in f32 (sigmoid as in
 * k3_sigmoid). out may alias g or u. K3_ERR_ARG if n < 0. */
K3_API int32_t k3_silu_glu(const float* g, const float* u, float* out, int64_t n);

#endif
