#include "k3.h"
/* 2: k3_limit; k3_router_topk and k3_attnres_mix return a status; k3_argmax refuses non-finite
 * input; k3_pool_init refuses sizes outside 1..K3_POOL_MAX_THREADS instead of clamping. */
/* 3: every k3_matmul_* takes row strides (ldx, ldy) and returns a status (K3_ERR_ARG for sizes
 * it does not handle, never a silent no-op).
 * 4: k3_mla_attend takes the cache rows and scratch floats it may use and returns a status;
 * k3_kda_recurrent returns a status (D ≤ K3_MAX_KDA_HEAD_DIM, limit 6); k3_mem_free returns a
 * status (a pointer that is not a live allocation is refused). */
/* 5: the draft model's kernels (k3_rope_interleaved, k3_sincos, k3_silu_glu) and their limits
 * (K3_LIMIT_ROPE_PAIRS, K3_LIMIT_ROPE_ANGLE).
 * 6: the exact compact trunk: k3_matmul_bx4, k3_bx4_encode, k3_bx4_decode, status K3_ERR_DATA.
 * 7: k3_expf_n, k3_tanhf_n (the elementwise vector paths' check). */
K3_API int32_t k3_version(void) { return 7; }

K3_API int32_t k3_limit(int32_t which) {
  switch (which) {
    case K3_LIMIT_ROUTER_EXPERTS: return K3_MAX_ROUTER_EXPERTS;
    case K3_LIMIT_ATTNRES_SOURCES: return K3_MAX_ATTNRES_SOURCES;
    case K3_LIMIT_POOL_THREADS: return K3_POOL_MAX_THREADS;
    case K3_LIMIT_IO_THREADS: return K3_IO_MAX_THREADS;
    case K3_LIMIT_MXFP4_GROUP: return K3_MXFP4_GROUP;
    case K3_LIMIT_KDA_CONV_WIDTH: return K3_KDA_CONV_WIDTH;
    case K3_LIMIT_KDA_HEAD_DIM: return K3_MAX_KDA_HEAD_DIM;
    case K3_LIMIT_ROPE_PAIRS: return K3_MAX_ROPE_PAIRS;
    case K3_LIMIT_ROPE_ANGLE: return K3_ROPE_MAX_ANGLE;
    default: return K3_ERR_ARG;
  }
}
