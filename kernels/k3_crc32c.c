/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), used to check every streamed read under
 * `--verify`. SSE4.2 computes it in hardware (_mm_crc32_u64: ~8 bytes per cycle of latency); the
 * slicing-by-8 table path computes exactly the same value where SSE4.2 is missing. Exact integer
 * math: one answer on every machine and path (test/crc.test.ts compares both). */
#include "k3_io.h"

#include <cpuid.h>
#include <pthread.h>
#include <string.h>

static uint32_t table[8][256];
static int has_sse42;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
  unsigned a, b, c, d;
  has_sse42 = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
}

static uint32_t crc_table(uint32_t crc, const uint8_t* p, int64_t len) {
  while (len >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= crc; /* little-endian hosts only (x86-64, aarch64) */
    crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
          table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len-- > 0) crc = table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
__attribute__((target("sse4.2,crc32"))) static uint32_t crc_hw(uint32_t crc, const uint8_t* p, int64_t len) {
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

/* path: -1 auto, 0 table, 1 hardware (K3_ERR_ARG-like 0 result is impossible to signal, so a forced
 * hardware path on a CPU without SSE4.2 falls back to the table: same value). */
K3_API uint32_t k3_crc32c_path(uint32_t crc, const void* buf, int64_t len, int32_t path) {
  pthread_once(&once, init);
  const uint8_t* p = (const uint8_t*)buf;
  crc = ~crc;
#if defined(__x86_64__)
  if (path != 0 && has_sse42) return ~crc_hw(crc, p, len);
#endif
  (void)path;
  return ~crc_table(crc, p, len);
}

K3_API uint32_t k3_crc32c(uint32_t crc, const void* buf, int64_t len) { return k3_crc32c_path(crc, buf, len, -1); }
