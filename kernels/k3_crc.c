/* CRC-32 (zlib / IEEE 802.3, reflected polynomial 0xEDB88320: session files) and CRC-32C
 * (Castagnoli, 0x82F63B78: `--verify` of every streamed read). One table builder and one
 * slicing-by-8 loop serve both polynomials; CRC-32C also has an SSE4.2 path (_mm_crc32_u64,
 * ~5× the tables here) that computes exactly the same value. Exact integer math: one answer on
 * every machine and path (test/crc.test.ts). Little-endian hosts only (x86-64, aarch64). */
#include "k3_io.h"

#include <cpuid.h>
#include <pthread.h>
#include <string.h>

typedef uint32_t crc_tables[8][256];

static crc_tables ieee, castagnoli;
static int has_sse42;
static pthread_once_t once = PTHREAD_ONCE_INIT;

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
  unsigned a, b, c, d;
  has_sse42 = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
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

#if defined(__x86_64__)
#include <nmmintrin.h>
__attribute__((target("sse4.2,crc32"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, int64_t len) {
  uint64_t c = crc;
  while (len >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    len -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (len-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
#endif

K3_API uint32_t k3_crc32(uint32_t crc, const void* buf, int64_t len) {
  pthread_once(&once, init);
  return ~slice8((const uint32_t(*)[256])ieee, ~crc, (const uint8_t*)buf, len);
}

/* path: -1 auto, 0 tables, 1 hardware when the CPU has SSE4.2 (else tables: the same value). */
K3_API uint32_t k3_crc32c_path(uint32_t crc, const void* buf, int64_t len, int32_t path) {
  pthread_once(&once, init);
  const uint8_t* p = (const uint8_t*)buf;
#if defined(__x86_64__)
  if (path != 0 && has_sse42) return ~crc32c_hw(~crc, p, len);
#endif
  (void)path;
  return ~slice8((const uint32_t(*)[256])castagnoli, ~crc, p, len);
}

K3_API uint32_t k3_crc32c(uint32_t crc, const void* buf, int64_t len) { return k3_crc32c_path(crc, buf, len, -1); }
