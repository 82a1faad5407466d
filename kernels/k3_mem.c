/* Aligned memory and a memory-read bandwidth probe (k3.h). Allocation is this file's job. */
#include "k3_internal.h"
#include <pthread.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Every allocation carries a 64-byte header just below the returned pointer: how it was made and
 * how to undo it. Large buffers (weights, slots, caches: ≥ 4 MiB) are anonymous mappings with
 * MAP_POPULATE: the kernel faults them in bulk, zeroed (0.32 s/GiB here, against 0.56 s/GiB for
 * posix_memalign + memset's one fault per 4 KiB page). Transparent huge pages were measured and
 * refused: 0.12 s/GiB when memory is unfragmented, but 2 s/GiB when the kernel must compact first
 * (defrag=madvise; right after a benchmark filled the page cache) — unpredictable open times.
 * Measured again for decode (issue 23, AMD Zen 4; docs/BENCH-KERNELS.md): 2 MiB pages make a
 * one-token bf16 matmul 5–15% faster in isolation (2 threads), but resident decode of the slice
 * showed no gain beyond the host's noise (5 alternating pairs), while one open took 65 s against
 * 41 s (9.9 of 13.3 GiB got huge pages). Refused again.
 * Memory is still resident at allocation, so peak RSS reflects the whole plan at once. */
#include <sys/mman.h>
#ifndef MAP_POPULATE
#define MAP_POPULATE 0 /* Linux only; elsewhere (macOS) pages are faulted on first touch */
#endif
#define K3_MEM_HDR 64
#define K3_MEM_LARGE (4LL << 20)
#define K3_MEM_MAGIC_HEAP 0x6b33686561700001ULL
#define K3_MEM_MAGIC_MAP 0x6b336d6d61700001ULL
typedef struct { uint64_t magic; void* base; int64_t bytes; } k3_mem_hdr;

/* The live allocations: an open-addressing set of the pointers k3_mem_alloc returned and
 * k3_mem_free has not yet taken back (linear probing, 0 = empty, kept at most half full, removal
 * by backward shift). k3_mem_free looks a pointer up here before it touches its header, so a
 * second free, or a pointer that was never ours, is refused without reading memory that was freed
 * (heap) or unmapped (a large buffer: reading its header would fault). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t* live_set;
static size_t live_cap, live_count;

static size_t live_home(uintptr_t p, size_t cap) { return (size_t)(((uint64_t)p >> 6) * 0x9E3779B97F4A7C15ULL >> 17) & (cap - 1); }

static void live_put(uintptr_t* set, size_t cap, uintptr_t p) {
  size_t i = live_home(p, cap);
  while (set[i]) i = (i + 1) & (cap - 1);
  set[i] = p;
}

/* Add p (under live_lock); 0 on success, -1 when the table cannot grow. */
static int live_add(uintptr_t p) {
  if ((live_count + 1) * 2 > live_cap) {
    size_t cap = live_cap ? live_cap * 2 : 1024;
    uintptr_t* set = calloc(cap, sizeof *set);
    if (!set) return -1;
    for (size_t i = 0; i < live_cap; i++)
      if (live_set[i]) live_put(set, cap, live_set[i]);
    free(live_set);
    live_set = set;
    live_cap = cap;
  }
  live_put(live_set, live_cap, p);
  live_count++;
  return 0;
}

/* Remove p (under live_lock); 1 when it was there. */
static int live_remove(uintptr_t p) {
  if (!live_cap) return 0;
  size_t mask = live_cap - 1, i = live_home(p, live_cap);
  while (live_set[i] != p) {
    if (!live_set[i]) return 0;
    i = (i + 1) & mask;
  }
  live_set[i] = 0;
  for (size_t j = (i + 1) & mask; live_set[j]; j = (j + 1) & mask) {
    size_t h = live_home(live_set[j], live_cap);
    /* the entry at j stays when its home lies cyclically in (i, j] */
    if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue;
    live_set[i] = live_set[j];
    live_set[j] = 0;
    i = j;
  }
  live_count--;
  return 1;
}

static void release(void* base, int64_t total, uint64_t magic) {
  if (magic == K3_MEM_MAGIC_MAP) munmap(base, (size_t)total);
  else free(base);
}

K3_API void* k3_mem_alloc(int64_t bytes, int64_t align) {
  if (bytes < 0 || align < 0) return NULL;
  if (align & (align - 1)) return NULL; /* power of two only (0 = default) */
  if (align < K3_MEM_HDR) align = K3_MEM_HDR;
  if (bytes == 0) bytes = 1;
  if (bytes > INT64_MAX - align) return NULL; /* bytes + align must not overflow */
  int64_t total = bytes + align; /* the header lives in the first `align` bytes */
  void* base = NULL;
  uint64_t magic;
  if (bytes >= K3_MEM_LARGE && align <= 4096) {
    base = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (base == MAP_FAILED) return NULL;
    magic = K3_MEM_MAGIC_MAP;
  } else {
    if (posix_memalign(&base, (size_t)align, (size_t)total) != 0) return NULL;
    magic = K3_MEM_MAGIC_HEAP;
  }
  uint8_t* p = (uint8_t*)base + align;
  if (magic == K3_MEM_MAGIC_HEAP) memset(p, 0, (size_t)bytes); /* populated mappings are zero already */
  k3_mem_hdr* h = (k3_mem_hdr*)(p - K3_MEM_HDR);
  h->magic = magic;
  h->base = base;
  h->bytes = total;
  pthread_mutex_lock(&live_lock);
  int added = live_add((uintptr_t)p);
  pthread_mutex_unlock(&live_lock);
  if (added != 0) {
    release(base, total, magic);
    return NULL;
  }
  return p;
}

K3_API int32_t k3_mem_free(void* p) {
  if (!p) return K3_OK;
  pthread_mutex_lock(&live_lock);
  int was_live = live_remove((uintptr_t)p);
  pthread_mutex_unlock(&live_lock);
  if (!was_live) return K3_ERR_ARG; /* freed already, or not ours: nothing is read or freed */
  k3_mem_hdr* h = (k3_mem_hdr*)((uint8_t*)p - K3_MEM_HDR);
  uint64_t magic = h->magic;
  h->magic = 0;
  release(h->base, h->bytes, magic);
  return K3_OK;
}

K3_API void k3_mem_copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}

/* Read bandwidth probe: sum of all bytes (mod 2^64). The bench times it against the matmuls; the
 * sum is returned so the reads cannot be elided. The pool's parts take fixed 2 MiB blocks from a
 * shared counter until none is left, so a part on a slower or preempted vCPU reads less instead of
 * holding the others at the barrier: fixed halves under-measured the 2-vCPU Zen 4 by 4–9 % (the
 * median of interleaved rounds' paired ratios; guided blocks and fixed 1, 4 or 16 MiB blocks read
 * the same within the noise; docs/BENCH-KERNELS.md, "Issue 23, round five"). Integer sums are
 * order-free, so the value does not depend on which part read which block. */
enum { SUM_BLOCK = 2 << 20 };
typedef struct { const uint8_t* p; int64_t n; _Atomic int64_t next; uint64_t part[K3_POOL_MAX_THREADS]; } sum_job;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint8_t* p, int64_t n) {
  __m256i z = _mm256_setzero_si256(), a0 = z, a1 = z, a2 = z, a3 = z;
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i*)(p + i)), z));
    a1 = _mm256_add_epi64(a1, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i*)(p + i + 32)), z));
    a2 = _mm256_add_epi64(a2, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i*)(p + i + 64)), z));
    a3 = _mm256_add_epi64(a3, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i*)(p + i + 96)), z));
  }
  __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  uint64_t s = (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 1) +
               (uint64_t)_mm256_extract_epi64(a, 2) + (uint64_t)_mm256_extract_epi64(a, 3);
  for (; i < n; i++) s += p[i];
  return s;
}

static uint64_t sum_sse2(const uint8_t* p, int64_t n) {
  __m128i z = _mm_setzero_si128(), a0 = z, a1 = z;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm_add_epi64(a0, _mm_sad_epu8(_mm_loadu_si128((const __m128i*)(p + i)), z));
    a1 = _mm_add_epi64(a1, _mm_sad_epu8(_mm_loadu_si128((const __m128i*)(p + i + 16)), z));
  }
  uint64_t t[2];
  _mm_storeu_si128((__m128i*)t, _mm_add_epi64(a0, a1));
  uint64_t s = t[0] + t[1];
  for (; i < n; i++) s += p[i];
  return s;
}

static uint64_t sum_bytes(const uint8_t* p, int64_t n) {
  return k3_isa_current() == K3_ISA_AVX2 || k3_isa_current() == K3_ISA_AVX512 ? sum_avx2(p, n) : sum_sse2(p, n);
}
#else
/* Other architectures: a plain loop in 8 independent sums (aarch64: compiled to NEON widening adds). */
static uint64_t sum_bytes(const uint8_t* p, int64_t n) {
  uint64_t a[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) a[l] += p[i + l];
  uint64_t s = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
  for (; i < n; i++) s += p[i];
  return s;
}
#endif

static void sum_part(void* vctx, int32_t i, int32_t n) {
  (void)n;
  sum_job* j = vctx;
  uint64_t s = 0;
  for (int64_t lo; (lo = atomic_fetch_add_explicit(&j->next, SUM_BLOCK, memory_order_relaxed)) < j->n;)
    s += sum_bytes(j->p + lo, j->n - lo < SUM_BLOCK ? j->n - lo : SUM_BLOCK);
  j->part[i] = s;
}

K3_API int64_t k3_mem_read_sum(const void* p, int64_t bytes) {
  sum_job j = { .p = p, .n = bytes };
  atomic_init(&j.next, 0);
  k3_pool_run(sum_part, &j);
  uint64_t s = 0;
  for (int32_t i = 0; i < K3_POOL_MAX_THREADS; i++) s += j.part[i];
  return (int64_t)s;
}
