/* The process-wide compute thread pool (k3.h): persistent workers, the caller takes part.
 *
 * Protocol. A job is (fn, ctx, n). The poster stores it, bumps `generation` (release) and wakes
 * sleepers; worker i (1..n−1) sees the new generation, runs fn(ctx, i, n), then decrements
 * `pending`. The poster runs part 0 itself and waits for pending == 0. Workers spin briefly on
 * the generation before sleeping on a condition variable, because decode posts hundreds of
 * small jobs per token and a futex wake costs tens of microseconds.
 * Invariant: a job's parts touch disjoint outputs, so the result never depends on which thread
 * ran a part or when (bit-identical at any thread count). */
#include "k3_internal.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

enum { SPIN_ITERS = 20000 };
#define POOL_STACK_BYTES ((size_t)8 << 20) /* per worker; the caller's is its own */

static struct {
  int32_t n;                 /* threads in effect, caller included; 1 = no workers */
  pthread_t threads[K3_POOL_MAX_THREADS];
  pthread_mutex_t mu;        /* guards sleepers / cond waits */
  pthread_cond_t wake;       /* workers sleep here */
  pthread_cond_t done;       /* the poster sleeps here */
  int32_t sleepers;
  int32_t poster_waiting;
  atomic_uint generation;
  unsigned start_generation; /* generation when the current workers were created */
  atomic_int pending;
  atomic_int quit;
  k3_job_fn fn;
  void* ctx;
} P = { .n = 1, .mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
        .done = PTHREAD_COND_INITIALIZER };

/* Serializes whole jobs (and init/free) when several host threads use the pool. */
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;

static void* worker(void* arg) {
  int32_t id = (int32_t)(intptr_t)arg;
  /* Not a fresh load: a job posted before this thread first ran must still be seen as new. */
  unsigned seen = P.start_generation;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = atomic_load_explicit(&P.generation, memory_order_acquire)) == seen) {
      if (++spins < SPIN_ITERS) { CPU_RELAX(); continue; }
      pthread_mutex_lock(&P.mu);
      P.sleepers++;
      while ((g = atomic_load_explicit(&P.generation, memory_order_acquire)) == seen)
        pthread_cond_wait(&P.wake, &P.mu);
      P.sleepers--;
      pthread_mutex_unlock(&P.mu);
      break;
    }
    seen = g;
    if (atomic_load_explicit(&P.quit, memory_order_acquire)) return NULL;
    P.fn(P.ctx, id, P.n);
    if (atomic_fetch_sub_explicit(&P.pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&P.mu);
      if (P.poster_waiting) pthread_cond_signal(&P.done);
      pthread_mutex_unlock(&P.mu);
    }
  }
}

static void post(void) {
  atomic_fetch_add_explicit(&P.generation, 1, memory_order_release);
  pthread_mutex_lock(&P.mu);
  if (P.sleepers) pthread_cond_broadcast(&P.wake);
  pthread_mutex_unlock(&P.mu);
}

static void wait_done(void) {
  for (int spins = 0; spins < SPIN_ITERS; spins++) {
    if (atomic_load_explicit(&P.pending, memory_order_acquire) == 0) return;
    CPU_RELAX();
  }
  pthread_mutex_lock(&P.mu);
  P.poster_waiting = 1;
  while (atomic_load_explicit(&P.pending, memory_order_acquire) != 0)
    pthread_cond_wait(&P.done, &P.mu);
  P.poster_waiting = 0;
  pthread_mutex_unlock(&P.mu);
}

static void stop_workers(void) {
  if (P.n <= 1) return;
  atomic_store_explicit(&P.quit, 1, memory_order_release);
  post();
  for (int32_t i = 1; i < P.n; i++) pthread_join(P.threads[i], NULL);
  atomic_store_explicit(&P.quit, 0, memory_order_release);
  P.n = 1;
}

K3_API int32_t k3_pool_init(int32_t nthreads) {
  /* K3_POOL_MAX_THREADS (k3.h) bounds the worker array and k3_mla_scratch_floats' slots. */
  if (nthreads < 1 || nthreads > K3_POOL_MAX_THREADS) return K3_ERR_ARG;
  pthread_mutex_lock(&run_lock);
  if (nthreads != P.n) {
    stop_workers();
    int32_t started = 1;
    P.n = nthreads; /* workers read P.n only inside a job, after the next post */
    P.start_generation = atomic_load_explicit(&P.generation, memory_order_acquire);
    /* An explicit stack: the batched matmuls park ~210 KB on it (k3_matmul_batch.c), more than
     * some platforms' default thread stack (musl 128 KB, macOS 512 KB with the rest). */
    pthread_attr_t attr;
    const int have_attr = pthread_attr_init(&attr) == 0;
    const int ok = have_attr && pthread_attr_setstacksize(&attr, POOL_STACK_BYTES) == 0;
    for (int32_t i = 1; ok && i < nthreads; i++) {
      if (pthread_create(&P.threads[i], &attr, worker, (void*)(intptr_t)i) != 0) break;
      started++;
    }
    if (have_attr) pthread_attr_destroy(&attr);
    if (started != nthreads) { P.n = started; stop_workers(); }
  }
  int32_t n = P.n;
  pthread_mutex_unlock(&run_lock);
  return n;
}

K3_API int32_t k3_pool_size(void) { return P.n; }

K3_API void k3_pool_free(void) {
  pthread_mutex_lock(&run_lock);
  stop_workers();
  pthread_mutex_unlock(&run_lock);
}

void k3_pool_run(k3_job_fn fn, void* ctx) {
  pthread_mutex_lock(&run_lock);
  int32_t n = P.n;
  if (n <= 1) {
    fn(ctx, 0, 1);
  } else {
    P.fn = fn;
    P.ctx = ctx;
    atomic_store_explicit(&P.pending, n - 1, memory_order_relaxed);
    post();
    fn(ctx, 0, n);
    wait_done();
  }
  pthread_mutex_unlock(&run_lock);
}
