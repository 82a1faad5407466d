/* I/O primitives and the I/O thread pool (see k3_io.h). */
#include "k3_io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Linux: O_DIRECT (DMA straight into the caller's aligned buffer, no page cache).
 * macOS has no O_DIRECT: F_NOCACHE asks the unified buffer cache not to keep the pages (reads of
 * aligned ranges into aligned buffers then go straight to the device) and F_RDAHEAD 0 turns off
 * the kernel's sequential read-ahead, which would otherwise read (and cache) bytes we skip. */
K3_API int32_t k3_direct_mode(void) {
#if defined(O_DIRECT)
  return K3_DIRECT_ODIRECT;
#elif defined(F_NOCACHE)
  return K3_DIRECT_NOCACHE;
#else
  return K3_DIRECT_NONE;
#endif
}

K3_API int32_t k3_file_open(const char* path, int32_t direct) {
  int flags = O_RDONLY | O_CLOEXEC;
#ifdef O_DIRECT
  if (direct) flags |= O_DIRECT;
#endif
  int fd = open(path, flags);
  if (fd < 0) return -errno;
#if !defined(O_DIRECT) && defined(F_NOCACHE)
  if (direct && (fcntl(fd, F_NOCACHE, 1) != 0
#if defined(F_RDAHEAD)
                 || fcntl(fd, F_RDAHEAD, 0) != 0
#endif
                 )) {
    int e = errno;
    close(fd);
    return -e;
  }
#endif
  return fd;
}

K3_API int32_t k3_file_close(int32_t fd) { return close(fd) == 0 ? 0 : -errno; }

K3_API int64_t k3_file_size(int32_t fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  return (int64_t)st.st_size;
}

K3_API int64_t k3_read_full(int32_t fd, void* buf, int64_t len, int64_t off, int64_t need) {
  int64_t done = 0;
  while (done < len) {
    ssize_t n = pread(fd, (char*)buf + done, (size_t)(len - done), (off_t)(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) break; /* EOF */
    done += n;
    /* O_DIRECT: a read that reaches EOF returns what exists, and the next pread would start
     * mid-block (EINVAL). Once the payload (`need`) is in, a partial block means EOF: stop.
     * Before that, keep reading: a buffered fd may return short counts mid-file (NFS, FUSE). */
    if (done < len && done >= need && (n % K3_IO_ALIGN) != 0) break;
  }
  return done >= need ? done : K3_ERR_SHORT;
}

K3_API int32_t k3_direct_probe(const char* path) {
  int fd = k3_file_open(path, 1);
  if (fd < 0) return 0;
  void* buf = NULL;
  if (posix_memalign(&buf, K3_IO_ALIGN, K3_IO_ALIGN) != 0) {
    close(fd);
    return 0;
  }
  ssize_t n = pread(fd, buf, K3_IO_ALIGN, 0);
  free(buf);
  close(fd);
  return n >= 0 ? 1 : 0; /* a file shorter than a block still reads (n < 4096) */
}

/* ---- the I/O pool ---- */

typedef struct {
  int64_t ticket; /* 0 = free slot */
  int32_t fd;
  void* buf;
  int64_t len, off, need;
  int64_t result;
  int state; /* 0 queued, 1 running, 2 done */
} io_req;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_t* threads;
  int32_t nthreads;
  io_req* reqs;
  int32_t cap;
  int64_t next_ticket;
  int64_t fail_at; /* ticket number that fails with EIO; 0 = none */
  int64_t wait_ns;
  int stop;
} io = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void* io_worker(void* arg) {
  (void)arg;
  pthread_mutex_lock(&io.mu);
  for (;;) {
    io_req* r = NULL;
    /* oldest queued request first (lowest ticket), so reads are served in submission order */
    for (int32_t i = 0; i < io.cap; i++)
      if (io.reqs[i].ticket && io.reqs[i].state == 0 && (!r || io.reqs[i].ticket < r->ticket)) r = &io.reqs[i];
    if (!r) {
      if (io.stop) break;
      pthread_cond_wait(&io.work, &io.mu);
      continue;
    }
    r->state = 1;
    int fail = io.fail_at && r->ticket == io.fail_at;
    int32_t fd = r->fd;
    void* buf = r->buf;
    int64_t len = r->len, off = r->off, need = r->need;
    pthread_mutex_unlock(&io.mu);
    int64_t res = fail ? -EIO : k3_read_full(fd, buf, len, off, need);
    pthread_mutex_lock(&io.mu);
    r->result = res;
    r->state = 2;
    pthread_cond_broadcast(&io.done);
  }
  pthread_mutex_unlock(&io.mu);
  return NULL;
}

K3_API void k3_io_free(void) {
  pthread_mutex_lock(&io.mu);
  if (!io.threads) {
    pthread_mutex_unlock(&io.mu);
    return;
  }
  io.stop = 1;
  pthread_cond_broadcast(&io.work);
  pthread_mutex_unlock(&io.mu);
  for (int32_t i = 0; i < io.nthreads; i++) pthread_join(io.threads[i], NULL);
  free(io.threads);
  free(io.reqs);
  io.threads = NULL;
  io.reqs = NULL;
  io.nthreads = 0;
  io.cap = 0;
  io.stop = 0;
}

K3_API int32_t k3_io_init(int32_t nthreads, int32_t max_inflight) {
  if (nthreads < 1 || nthreads > K3_IO_MAX_THREADS || max_inflight < 1) return K3_ERR_ARG;
  /* Process-wide and shared: a second engine in the same process must not tear down the pool
   * (and the tickets) of the first, so a running pool is kept as it is. */
  pthread_mutex_lock(&io.mu);
  int32_t running = io.threads ? io.nthreads : 0;
  pthread_mutex_unlock(&io.mu);
  if (running) return running;
  io.reqs = calloc((size_t)max_inflight, sizeof(io_req));
  io.threads = calloc((size_t)nthreads, sizeof(pthread_t));
  if (!io.reqs || !io.threads) {
    free(io.reqs);
    free(io.threads);
    io.reqs = NULL;
    io.threads = NULL;
    return K3_ERR_NOMEM;
  }
  io.cap = max_inflight;
  io.next_ticket = 1;
  io.wait_ns = 0;
  for (int32_t i = 0; i < nthreads; i++) {
    if (pthread_create(&io.threads[i], NULL, io_worker, NULL) != 0) {
      io.nthreads = i;
      k3_io_free();
      return K3_ERR_NOMEM;
    }
  }
  io.nthreads = nthreads;
  return nthreads;
}

K3_API void k3_io_fail_nth(int64_t n) {
  pthread_mutex_lock(&io.mu);
  io.fail_at = n > 0 ? io.next_ticket + n - 1 : 0;
  pthread_mutex_unlock(&io.mu);
}

static io_req* find(int64_t ticket) {
  if (ticket <= 0) return NULL; /* 0 marks a free entry: never a valid ticket */
  for (int32_t i = 0; i < io.cap; i++)
    if (io.reqs[i].ticket == ticket) return &io.reqs[i];
  return NULL;
}

K3_API int64_t k3_io_submit(int32_t fd, void* buf, int64_t len, int64_t off, int64_t need) {
  pthread_mutex_lock(&io.mu);
  io_req* slot = NULL;
  for (int32_t i = 0; i < io.cap && !slot; i++)
    if (!io.reqs[i].ticket) slot = &io.reqs[i];
  if (!slot || !io.threads) {
    pthread_mutex_unlock(&io.mu);
    return K3_ERR_ARG;
  }
  slot->ticket = io.next_ticket++;
  slot->fd = fd;
  slot->buf = buf;
  slot->len = len;
  slot->off = off;
  slot->need = need;
  slot->result = 0;
  slot->state = 0;
  int64_t t = slot->ticket;
  pthread_cond_signal(&io.work);
  pthread_mutex_unlock(&io.mu);
  return t;
}

K3_API int32_t k3_io_done(int64_t ticket) {
  pthread_mutex_lock(&io.mu);
  io_req* r = find(ticket);
  int d = r && r->state == 2;
  pthread_mutex_unlock(&io.mu);
  return d;
}

K3_API int64_t k3_io_wait(int64_t ticket) {
  pthread_mutex_lock(&io.mu);
  io_req* r = find(ticket);
  if (!r) {
    pthread_mutex_unlock(&io.mu);
    return K3_ERR_ARG;
  }
  if (r->state != 2) {
    int64_t t0 = now_ns();
    while (r->state != 2) pthread_cond_wait(&io.done, &io.mu);
    io.wait_ns += now_ns() - t0;
  }
  int64_t res = r->result;
  r->ticket = 0;
  pthread_mutex_unlock(&io.mu);
  return res;
}

K3_API int32_t k3_io_wait_any(const int64_t* tickets, int32_t n) {
  pthread_mutex_lock(&io.mu);
  int64_t t0 = 0;
  for (;;) {
    int valid = 0;
    for (int32_t i = 0; i < n; i++) {
      if (!tickets[i]) continue;
      io_req* r = find(tickets[i]);
      if (!r) continue;
      valid = 1;
      if (r->state == 2) {
        if (t0) io.wait_ns += now_ns() - t0;
        pthread_mutex_unlock(&io.mu);
        return i;
      }
    }
    if (!valid) {
      pthread_mutex_unlock(&io.mu);
      return -1;
    }
    if (!t0) t0 = now_ns();
    pthread_cond_wait(&io.done, &io.mu);
  }
}

K3_API int64_t k3_io_wait_ns(void) {
  pthread_mutex_lock(&io.mu);
  int64_t w = io.wait_ns;
  pthread_mutex_unlock(&io.mu);
  return w;
}
