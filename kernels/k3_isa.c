/* ISA detection and the process-wide dispatch choice (k3.h).
 * x86-64: cpuid + xgetbv (the OS must have enabled the YMM/ZMM state, not only the CPU support
 * it); __builtin_cpu_supports is avoided because it needs libgcc's init in the .so.
 * aarch64: Advanced SIMD (NEON) is mandatory in ARMv8-A, so every aarch64 CPU has it. */
#include "k3_internal.h"
#if defined(__x86_64__)
#include <cpuid.h>
#endif

static int32_t detected = -2; /* -2: not yet; else best supported ISA */
static int32_t current = -2;  /* ISA in effect; -2: auto on first use */

#if defined(__x86_64__)
static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static int32_t detect(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return K3_ISA_SCALAR;
  int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  if (!osxsave || !avx) return K3_ISA_SCALAR;
  uint64_t xcr0 = xgetbv0();
  if ((xcr0 & 0x6) != 0x6) return K3_ISA_SCALAR; /* XMM + YMM state */
  if (__get_cpuid_max(0, 0) < 7) return K3_ISA_SCALAR;
  __cpuid_count(7, 0, a, b, c, d);
  int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1;
  if (!avx2) return K3_ISA_SCALAR;
  if (avx512f && avx512bw && (xcr0 & 0xE6) == 0xE6) return K3_ISA_AVX512; /* opmask + ZMM state */
  return K3_ISA_AVX2;
}
#elif defined(__aarch64__)
static int32_t detect(void) { return K3_ISA_NEON; }
#else
static int32_t detect(void) { return K3_ISA_SCALAR; }
#endif

/* FMA3 (CPUID.1:ECX bit 12): every AVX2 CPU sold has it, but a VM may hide it, so the elementwise
 * AVX2 path (which needs fused steps exactly where the scalar code calls fma()) checks. */
#if defined(__x86_64__)
int32_t k3_cpu_has_fma(void) {
  static int32_t fma = -1;
  if (fma < 0) {
    unsigned a, b, c, d;
    fma = __get_cpuid(1, &a, &b, &c, &d) ? (int32_t)((c >> 12) & 1) : 0;
  }
  return fma;
}
#else
int32_t k3_cpu_has_fma(void) { return 0; }
#endif

static int32_t best(void) {
  if (detected == -2) detected = detect();
  return detected;
}

/* Scalar everywhere; the best path; and AVX2 on an AVX-512 machine (it runs both). */
K3_API int32_t k3_isa_supported(int32_t isa) {
  int32_t b = best();
  return isa == K3_ISA_SCALAR || isa == b || (isa == K3_ISA_AVX2 && b == K3_ISA_AVX512) ? 1 : 0;
}

K3_API int32_t k3_isa_set(int32_t isa) {
  if (isa == K3_ISA_AUTO) { current = best(); return current; }
  if (!k3_isa_supported(isa)) return K3_ERR_ARG;
  current = isa;
  return current;
}

K3_API int32_t k3_isa_get(void) { return k3_isa_current(); }

int32_t k3_isa_current(void) {
  if (current == -2) current = best();
  return current;
}
