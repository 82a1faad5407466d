/* I/O primitives and the I/O queues (see k3_io.h). */
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

/* ---- the I/O queues ---- */

#define TICKET_BITS 14 /* K3_IO_MAX_REQUESTS = 2^14: a ticket is (serial << 14) | table index */
_Static_assert((1 << TICKET_BITS) == K3_IO_MAX_REQUESTS, "ticket index bits");

enum { FREE = 0, QUEUED = 1, RUNNING = 2, DONE = 3 };

typedef struct {
  int64_t ticket; /* 0 = free entry */
  int32_t queue, fd;
  int64_t qgen; /* the queue's generation at submit (its counters may be reused after a close) */
  void* buf;
  int64_t len, off, need;
  int64_t result;
  int32_t state, fault;
  int32_t next; /* the queue's FIFO link (table index), −1 = last */
} io_req;

typedef struct {
  int32_t open, stop;
  int64_t gen;
  pthread_cond_t work;
  pthread_t* threads;
  int32_t nthreads, cap;
  int32_t head, tail; /* FIFO of QUEUED requests */
  int64_t held;       /* tickets submitted here and not yet freed */
  int64_t outstanding, outstanding_bytes, queued;
  int64_t reads, bytes, errors;
  int64_t busy_ns, busy_since;
  int64_t submitted, fault_at; /* per-queue request count; the count that misbehaves (0 none) */
  int32_t fault_kind, released;
  int32_t hold; /* tests: start nothing until released (k3_io_hold) */
} io_queue;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t done, release;
  int ready; /* free list built (on first use, under the lock) */
  io_req reqs[K3_IO_MAX_REQUESTS];
  int32_t free_list[K3_IO_MAX_REQUESTS];
  int32_t free_top;
  int64_t serial; /* tickets issued so far: never reset */
  io_queue queues[K3_IO_MAX_QUEUES];
  int32_t default_q; /* k3_io_init's queue + 1; 0 = none */
  int64_t fault_any_at;
  int32_t fault_any_kind;
  int64_t wait_ns;
} io = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Everything below runs with io.mu held unless it says otherwise. */

static void ensure_ready(void) {
  if (io.ready) return;
  for (int32_t i = 0; i < K3_IO_MAX_REQUESTS; i++) io.free_list[i] = K3_IO_MAX_REQUESTS - 1 - i;
  io.free_top = K3_IO_MAX_REQUESTS;
  io.ready = 1;
}

static io_req* find(int64_t ticket) {
  if (ticket <= 0) return NULL; /* 0 marks a free entry: never a valid ticket */
  io_req* r = &io.reqs[ticket & (K3_IO_MAX_REQUESTS - 1)];
  return r->ticket == ticket ? r : NULL;
}

static io_queue* queue_of(int32_t q) {
  return q >= 0 && q < K3_IO_MAX_QUEUES && io.queues[q].open ? &io.queues[q] : NULL;
}

/* A request left the queue's outstanding set (it completed, or was cancelled before starting). */
static void leave_outstanding(io_queue* q, io_req* r) {
  q->outstanding--;
  q->outstanding_bytes -= r->len;
  if (q->outstanding == 0) q->busy_ns += now_ns() - q->busy_since;
}

static void free_req(io_req* r) {
  io_queue* q = &io.queues[r->queue];
  if (q->gen == r->qgen) q->held--;
  r->ticket = 0;
  r->state = FREE;
  io.free_list[io.free_top++] = (int32_t)(r - io.reqs);
}

/* Kind 2 fault: the stall, then the poison (outside the lock, as a real read would write). */
static int64_t stalled_read(io_queue* q, io_req* r) {
  while (!q->released && !q->stop) pthread_cond_wait(&io.release, &io.mu);
  void* buf = r->buf;
  int64_t len = r->len;
  pthread_mutex_unlock(&io.mu);
  memset(buf, 0xA5, (size_t)len);
  pthread_mutex_lock(&io.mu);
  return -EIO;
}

static void* io_worker(void* arg) {
  io_queue* q = &io.queues[(intptr_t)arg];
  pthread_mutex_lock(&io.mu);
  for (;;) {
    if (q->head < 0 || (q->hold && !q->stop)) {
      if (q->stop) break;
      pthread_cond_wait(&q->work, &io.mu);
      continue;
    }
    io_req* r = &io.reqs[q->head];
    q->head = r->next;
    if (q->head < 0) q->tail = -1;
    q->queued--;
    r->state = RUNNING;
    int64_t res;
    if (r->fault == 2) {
      res = stalled_read(q, r);
    } else if (r->fault == 1) {
      res = -EIO;
    } else {
      int32_t fd = r->fd;
      void* buf = r->buf;
      int64_t len = r->len, off = r->off, need = r->need;
      pthread_mutex_unlock(&io.mu);
      res = k3_read_full(fd, buf, len, off, need);
      pthread_mutex_lock(&io.mu);
    }
    r->result = res;
    r->state = DONE;
    q->reads++;
    if (res >= 0) q->bytes += res;
    else q->errors++;
    leave_outstanding(q, r);
    pthread_cond_broadcast(&io.done);
  }
  pthread_mutex_unlock(&io.mu);
  return NULL;
}

/* Stop queue `q` (no new submissions; queued reads still run), wake its workers and join them,
 * then give its slot back. Called with io.mu held; drops it while joining (the workers need it)
 * and holds it again on return. `q->threads` stays set until then, so the slot is not reused
 * while its threads end. */
static void stop_and_join_locked(io_queue* q) {
  q->stop = 1;
  pthread_cond_broadcast(&q->work);
  pthread_cond_broadcast(&io.release);
  pthread_t* threads = q->threads;
  int32_t n = q->nthreads;
  pthread_mutex_unlock(&io.mu);
  for (int32_t i = 0; i < n; i++) pthread_join(threads[i], NULL);
  pthread_mutex_lock(&io.mu);
  pthread_cond_destroy(&q->work);
  free(threads);
  q->threads = NULL;
  q->nthreads = 0;
  q->open = 0;
}

static int32_t open_locked(int32_t nthreads, int32_t max_inflight) {
  if (nthreads < 1 || nthreads > K3_IO_MAX_THREADS || max_inflight < 1) return K3_ERR_ARG;
  ensure_ready();
  int32_t id = -1;
  for (int32_t i = 0; i < K3_IO_MAX_QUEUES && id < 0; i++)
    if (!io.queues[i].open && !io.queues[i].threads) id = i;
  if (id < 0) return K3_ERR_ARG;
  io_queue* q = &io.queues[id];
  pthread_t* threads = calloc((size_t)nthreads, sizeof(pthread_t));
  if (!threads) return K3_ERR_NOMEM;
  int64_t gen = q->gen + 1;
  memset(q, 0, sizeof *q);
  q->gen = gen;
  q->head = q->tail = -1;
  q->cap = max_inflight;
  q->threads = threads;
  q->open = 1;
  pthread_cond_init(&q->work, NULL);
  /* The workers start blocked on io.mu, which this caller holds until it returns. */
  for (int32_t i = 0; i < nthreads; i++) {
    if (pthread_create(&threads[i], NULL, io_worker, (void*)(intptr_t)id) != 0) {
      q->nthreads = i;
      stop_and_join_locked(q);
      return K3_ERR_NOMEM;
    }
  }
  q->nthreads = nthreads;
  return id;
}

K3_API int32_t k3_io_queue_open(int32_t nthreads, int32_t max_inflight) {
  pthread_mutex_lock(&io.mu);
  int32_t id = open_locked(nthreads, max_inflight);
  pthread_mutex_unlock(&io.mu);
  return id;
}

K3_API int32_t k3_io_queue_close(int32_t id) {
  pthread_mutex_lock(&io.mu);
  io_queue* q = queue_of(id);
  if (!q || q->stop) {
    pthread_mutex_unlock(&io.mu);
    return K3_ERR_ARG;
  }
  stop_and_join_locked(q);
  pthread_mutex_unlock(&io.mu);
  return K3_OK;
}

K3_API int64_t k3_io_submit_to(int32_t id, int32_t fd, void* buf, int64_t len, int64_t off, int64_t need) {
  pthread_mutex_lock(&io.mu);
  io_queue* q = queue_of(id);
  if (!q || q->stop || q->held >= q->cap || io.free_top == 0) {
    pthread_mutex_unlock(&io.mu);
    return K3_ERR_ARG;
  }
  int32_t i = io.free_list[--io.free_top];
  io_req* r = &io.reqs[i];
  int64_t serial = ++io.serial;
  r->ticket = (serial << TICKET_BITS) | i;
  r->queue = id;
  r->qgen = q->gen;
  r->fd = fd;
  r->buf = buf;
  r->len = len;
  r->off = off;
  r->need = need;
  r->result = 0;
  r->state = QUEUED;
  r->next = -1;
  q->submitted++;
  r->fault = 0;
  if (io.fault_any_at && serial == io.fault_any_at) r->fault = io.fault_any_kind;
  if (q->fault_at && q->submitted == q->fault_at) r->fault = q->fault_kind;
  if (q->tail >= 0) io.reqs[q->tail].next = i;
  else q->head = i;
  q->tail = i;
  q->held++;
  q->queued++;
  if (q->outstanding++ == 0) q->busy_since = now_ns();
  q->outstanding_bytes += len;
  int64_t t = r->ticket;
  pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&io.mu);
  return t;
}

K3_API int32_t k3_io_cancel(int64_t ticket) {
  pthread_mutex_lock(&io.mu);
  io_req* r = find(ticket);
  int32_t res = r ? 0 : K3_ERR_ARG;
  if (r && r->state == QUEUED) {
    io_queue* q = &io.queues[r->queue];
    int32_t i = (int32_t)(r - io.reqs), prev = -1;
    for (int32_t j = q->head; j != i; j = io.reqs[j].next) prev = j;
    if (prev < 0) q->head = r->next;
    else io.reqs[prev].next = r->next;
    if (q->tail == i) q->tail = prev;
    q->queued--;
    leave_outstanding(q, r);
    free_req(r);
    res = 1;
  }
  pthread_mutex_unlock(&io.mu);
  return res;
}

K3_API int32_t k3_io_queue_stats(int32_t id, int64_t* out) {
  pthread_mutex_lock(&io.mu);
  io_queue* q = queue_of(id);
  if (!q) {
    pthread_mutex_unlock(&io.mu);
    return K3_ERR_ARG;
  }
  out[K3_IO_STAT_OUTSTANDING] = q->outstanding;
  out[K3_IO_STAT_OUTSTANDING_BYTES] = q->outstanding_bytes;
  out[K3_IO_STAT_QUEUED] = q->queued;
  out[K3_IO_STAT_READS] = q->reads;
  out[K3_IO_STAT_BYTES] = q->bytes;
  out[K3_IO_STAT_ERRORS] = q->errors;
  out[K3_IO_STAT_BUSY_NS] = q->busy_ns + (q->outstanding > 0 ? now_ns() - q->busy_since : 0);
  out[K3_IO_STAT_THREADS] = q->nthreads;
  pthread_mutex_unlock(&io.mu);
  return K3_OK;
}

K3_API int32_t k3_io_done(int64_t ticket) {
  pthread_mutex_lock(&io.mu);
  io_req* r = find(ticket);
  int d = r && r->state == DONE;
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
  if (r->state != DONE) {
    int64_t t0 = now_ns();
    while (r->state != DONE) pthread_cond_wait(&io.done, &io.mu);
    io.wait_ns += now_ns() - t0;
  }
  int64_t res = r->result;
  free_req(r);
  pthread_mutex_unlock(&io.mu);
  return res;
}

K3_API int32_t k3_io_wait_any_for(const int64_t* tickets, int32_t n, int64_t timeout_ns) {
  pthread_mutex_lock(&io.mu);
  int64_t t0 = 0;
  struct timespec until = {0, 0};
  if (timeout_ns >= 0) {
    /* pthread_cond_timedwait's clock is CLOCK_REALTIME by default (macOS has no other) */
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + timeout_ns % 1000000000;
    until.tv_sec += (time_t)(timeout_ns / 1000000000 + ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
  }
  int32_t res;
  for (;;) {
    int valid = 0, found = -1;
    for (int32_t i = 0; i < n && found < 0; i++) {
      io_req* r = tickets[i] ? find(tickets[i]) : NULL;
      if (!r) continue;
      valid = 1;
      if (r->state == DONE) found = i;
    }
    if (found >= 0 || !valid) {
      res = found >= 0 ? found : -1;
      break;
    }
    if (!t0) t0 = now_ns();
    if (timeout_ns < 0) pthread_cond_wait(&io.done, &io.mu);
    else if (pthread_cond_timedwait(&io.done, &io.mu, &until) == ETIMEDOUT) {
      res = -2;
      break;
    }
  }
  if (t0) io.wait_ns += now_ns() - t0;
  pthread_mutex_unlock(&io.mu);
  return res;
}

K3_API int32_t k3_io_wait_any(const int64_t* tickets, int32_t n) { return k3_io_wait_any_for(tickets, n, -1); }

K3_API int64_t k3_io_wait_ns(void) {
  pthread_mutex_lock(&io.mu);
  int64_t w = io.wait_ns;
  pthread_mutex_unlock(&io.mu);
  return w;
}

/* ---- the default queue ---- */

K3_API int32_t k3_io_init(int32_t nthreads, int32_t max_inflight) {
  if (nthreads < 1 || nthreads > K3_IO_MAX_THREADS || max_inflight < 1) return K3_ERR_ARG;
  /* One check-and-open under the lock: two callers at once open one queue, and a second engine
   * or tool in the process keeps the running one (its reads and tickets) as it is. */
  pthread_mutex_lock(&io.mu);
  int32_t res;
  if (io.default_q) {
    res = io.queues[io.default_q - 1].nthreads;
  } else {
    int32_t id = open_locked(nthreads, max_inflight);
    if (id >= 0) io.default_q = id + 1;
    res = id >= 0 ? nthreads : id;
  }
  pthread_mutex_unlock(&io.mu);
  return res;
}

K3_API void k3_io_free(void) {
  pthread_mutex_lock(&io.mu);
  int32_t id = io.default_q - 1;
  io.default_q = 0;
  pthread_mutex_unlock(&io.mu);
  if (id >= 0) k3_io_queue_close(id);
}

K3_API int64_t k3_io_submit(int32_t fd, void* buf, int64_t len, int64_t off, int64_t need) {
  pthread_mutex_lock(&io.mu);
  int32_t id = io.default_q - 1;
  pthread_mutex_unlock(&io.mu);
  return id >= 0 ? k3_io_submit_to(id, fd, buf, len, off, need) : K3_ERR_ARG;
}

/* ---- fault injection (tests) ---- */

K3_API void k3_io_fault(int32_t id, int64_t n, int32_t kind) {
  pthread_mutex_lock(&io.mu);
  if (id < 0) {
    io.fault_any_at = n > 0 ? io.serial + n : 0;
    io.fault_any_kind = kind;
  } else if (queue_of(id)) {
    io_queue* q = &io.queues[id];
    q->fault_at = n > 0 ? q->submitted + n : 0;
    q->fault_kind = kind;
    q->released = 0;
  }
  pthread_mutex_unlock(&io.mu);
}

K3_API void k3_io_release(int32_t id) {
  pthread_mutex_lock(&io.mu);
  if (queue_of(id)) io.queues[id].released = 1;
  pthread_cond_broadcast(&io.release);
  pthread_mutex_unlock(&io.mu);
}

K3_API void k3_io_hold(int32_t id, int32_t on) {
  pthread_mutex_lock(&io.mu);
  if (queue_of(id)) {
    io.queues[id].hold = on != 0;
    pthread_cond_broadcast(&io.queues[id].work);
  }
  pthread_mutex_unlock(&io.mu);
}

K3_API void k3_io_fail_nth(int64_t n) { k3_io_fault(-1, n, 1); }
