/* Benchmark probes of the kernel library: measuring instruments, never used for model math.
 * Kept out of k3.h (the model API); bench/peak.ts binds them. */
#ifndef K3_PROBE_H
#define K3_PROBE_H
#include "k3.h"

/* Floating-point peak probe: every pool thread runs `iters` iterations of K3_PEAK_CHAINS
 * independent accumulations on full vectors of the given ISA (1 AVX2 ymm, 2 AVX-512 zmm), one
 * operand loaded from L1 as in the matmuls. mode 0: a separate multiply then add per element
 * (what the matmuls do under the FP contract: -ffp-contract=off, no FMA); mode 1: one fused
 * multiply-add (the machine's advertised peak; FMA is used nowhere else in the library).
 * Returns the floating-point operations performed (2 per element per iteration, both modes) —
 * the caller times the call — or −1 if the ISA is unsupported or the mode is unknown. */
#define K3_PEAK_CHAINS 12
K3_API double k3_peak_flops(int32_t isa, int32_t mode, int64_t iters);

#endif
