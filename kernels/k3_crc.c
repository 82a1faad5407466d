/* CRC-32 (zlib / IEEE 802.3, reflected polynomial 0xEDB88320: session files) and CRC-32C
 * (Castagnoli, 0x82F63B78: `--verify` of every streamed read). One table builder and one
 * slicing-by-8 loop serve both polynomials; CRC-32C also has a hardware path (SSE4.2
 * _mm_crc32_u64, ~5× the tables here; on aarch64 the ARMv8 CRC32 __crc32cd) that computes
 * exactly the same value. Exact integer math: one answer on
 * every machine and path (test/crc.test.ts). Little-endian hosts only (x86-64, aarch64). */
#include "k3_io.h"

#include <pthread.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#if defined(__linux__)
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#endif

typedef uint32_t crc_tables[8][256];

static crc_tables ieee, castagnoli;
static int has_hw; /* x86-64: SSE4.2; aarch64: the ARMv8 CRC32 instructions */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int detect_hw(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
#elif defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP) >> 7) & 1; /* HWCAP_CRC32 */
#elif defined(__aarch64__) && defined(__APPLE__)
  int v = 0; /* every Apple Silicon CPU has it; ask anyway */
  size_t len = sizeof v;
  return sysctlbyname("hw.optional.armv8_crc32", &v, &len, NULL, 0) == 0 && v;
#else
  return 0;
#endif
}

static void build(crc_tables t, uint32_t poly) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? poly ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int s = 1; s < 8; s++) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
}

static void init(void) {
  build(ieee, 0xEDB88320u);
  build(castagnoli, 0x82F63B78u);
  has_hw = detect_hw();
}

/* Slicing-by-8 on a pre-inverted crc (the callers invert before and after). */
static uint32_t slice8(const crc_tables t, uint32_t crc, const uint8_t* p, int64_t len) {
  while (len >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len-- > 0) crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

/* The CRC-32C instructions: the same loop on both architectures, 8 bytes then 1 at a time. */
#if defined(__x86_64__)
#define CRC_HW __attribute__((target("sse4.2,crc32")))
#define CRC_U64(c, v) (uint32_t)_mm_crc32_u64(c, v)
#define CRC_U8(c, b) _mm_crc32_u8(c, b)
#elif defined(__aarch64__)
#define CRC_HW __attribute__((target("crc")))
#define CRC_U64(c, v) __crc32cd(c, v)
#define CRC_U8(c, b) __crc32cb(c, b)
#endif
#ifdef CRC_HW
CRC_HW static uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, int64_t len) {
  while (len >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    crc = CRC_U64(crc, v);
    p += 8;
    len -= 8;
  }
  while (len-- > 0) crc = CRC_U8(crc, *p++);
  return crc;
}
#endif

K3_API uint32_t k3_crc32(uint32_t crc, const void* buf, int64_t len) {
  pthread_once(&once, init);
  return ~slice8((const uint32_t(*)[256])ieee, ~crc, (const uint8_t*)buf, len);
}

/* path: -1 auto, 0 tables, 1 hardware when the CPU has the CRC instructions (else tables: the same value). */
K3_API uint32_t k3_crc32c_path(uint32_t crc, const void* buf, int64_t len, int32_t path) {
  pthread_once(&once, init);
  const uint8_t* p = (const uint8_t*)buf;
#ifdef CRC_HW
  if (path != 0 && has_hw) return ~crc32c_hw(~crc, p, len);
#endif
  (void)path;
  return ~slice8((const uint32_t(*)[256])castagnoli, ~crc, p, len);
}

K3_API uint32_t k3_crc32c(uint32_t crc, const void* buf, int64_t len) { return k3_crc32c_path(crc, buf, len, -1); }
