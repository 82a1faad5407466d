/* k3 I/O primitives: aligned direct reads on queues of I/O threads. Mechanism only: which bytes
 * to read, when, from which copy, on which queue and into which slot is decided by src/memory/
 * (policy).
 *
 * Direct I/O (O_DIRECT on Linux, F_NOCACHE on macOS) needs the buffer, offset and length aligned
 * to K3_IO_ALIGN; callers widen a range to aligned bounds and use the payload from inside the
 * buffer. A read is complete only when every requested byte arrived: a short read (EOF inside
 * the range) is K3_ERR_SHORT, never partial data.
 */
#ifndef K3_IO_H
#define K3_IO_H
#include "k3.h"

#define K3_IO_ALIGN 4096

/* Which mechanism `direct = 1` uses in this build: 1 O_DIRECT (Linux), 2 F_NOCACHE + F_RDAHEAD
 * off (macOS), 0 none (direct opens are plain buffered opens). */
enum { K3_DIRECT_NONE = 0, K3_DIRECT_ODIRECT = 1, K3_DIRECT_NOCACHE = 2 };
K3_API int32_t k3_direct_mode(void);
/* Open read-only. direct = 1 asks for O_DIRECT / F_NOCACHE. Returns fd ≥ 0 or −errno. */
K3_API int32_t k3_file_open(const char* path, int32_t direct);
K3_API int32_t k3_file_close(int32_t fd);
/* File size in bytes, or −errno. */
K3_API int64_t k3_file_size(int32_t fd);
/* 1 if an aligned direct read of the first block of `path` works (probe once per device). */
K3_API int32_t k3_direct_probe(const char* path);

/* Synchronous read of [off, off+len): loops over pread until len bytes arrived or EOF. Returns the
 * bytes read when at least `need` arrived (an aligned range may run past EOF; the payload must
 * not), K3_ERR_SHORT when EOF came before `need`, or −errno (as int64). */
K3_API int64_t k3_read_full(int32_t fd, void* buf, int64_t len, int64_t off, int64_t need);

/* ---- I/O queues ----
 * A queue is a FIFO of reads served by its own threads (one queue per device: a slow drive's
 * reads never hold the threads a fast drive's reads need). Requests of every queue live in one
 * process-wide table and are named by tickets: a ticket is never reused for the life of the
 * process (closing and reopening queues included), so a stale ticket can never name a later
 * read; a ticket is waited for (or cancelled) exactly once, which frees it. All state changes
 * happen under one lock. */
#define K3_IO_MAX_QUEUES 64
#define K3_IO_MAX_REQUESTS 16384 /* tickets held at once, all queues together */

/* Open a queue of nthreads (1..K3_IO_MAX_THREADS) threads holding at most max_inflight tickets
 * (submitted and not yet waited for). Returns its id ≥ 0, K3_ERR_ARG (sizes, or
 * K3_IO_MAX_QUEUES already open) or K3_ERR_NOMEM. */
K3_API int32_t k3_io_queue_open(int32_t nthreads, int32_t max_inflight);
/* Close a queue: reads already queued still run (their tickets stay valid until waited for),
 * then its threads are joined. K3_OK, or K3_ERR_ARG for a queue that is not open. */
K3_API int32_t k3_io_queue_close(int32_t q);
/* Queue a k3_read_full on queue q; returns a ticket > 0, or K3_ERR_ARG when the queue is not
 * open, already holds max_inflight tickets, or the table is full. */
K3_API int64_t k3_io_submit_to(int32_t q, int32_t fd, void* buf, int64_t len, int64_t off, int64_t need);
/* Take back a read that has not started: 1 = removed, nothing was or will be written to its
 * buffer and the ticket is freed; 0 = it is running or done (wait for it as usual);
 * K3_ERR_ARG = unknown ticket. */
K3_API int32_t k3_io_cancel(int64_t ticket);
/* Counters of a queue (out[K3_IO_STATS], indices below); K3_OK or K3_ERR_ARG. Busy time is the
 * time at least one of its reads was queued or running; bytes are bytes read (what k3_read_full
 * returned); reads and errors count completed requests. */
enum {
  K3_IO_STAT_OUTSTANDING = 0,       /* reads queued or running */
  K3_IO_STAT_OUTSTANDING_BYTES = 1, /* their lengths */
  K3_IO_STAT_QUEUED = 2,            /* of them, not started yet */
  K3_IO_STAT_READS = 3,
  K3_IO_STAT_BYTES = 4,
  K3_IO_STAT_ERRORS = 5,
  K3_IO_STAT_BUSY_NS = 6,
  K3_IO_STAT_THREADS = 7,
  K3_IO_STATS = 8,
};
K3_API int32_t k3_io_queue_stats(int32_t q, int64_t* out);

/* 1 if done, 0 if not yet (or unknown). */
K3_API int32_t k3_io_done(int64_t ticket);
/* Block until done; returns the read's result (len, K3_ERR_SHORT or −errno) and frees the
 * ticket; K3_ERR_ARG for an unknown (never issued, already freed) ticket. */
K3_API int64_t k3_io_wait(int64_t ticket);
/* Block until one of tickets[0..n) is done, at most timeout_ns (< 0: no limit); returns its index
 * (the ticket is NOT freed: call k3_io_wait on it to collect the result), −1 if none is valid,
 * −2 when the time ran out. Tickets of 0 are ignored. */
K3_API int32_t k3_io_wait_any_for(const int64_t* tickets, int32_t n, int64_t timeout_ns);
K3_API int32_t k3_io_wait_any(const int64_t* tickets, int32_t n);
/* Nanoseconds spent by callers blocked in k3_io_wait / k3_io_wait_any* (process-wide). */
K3_API int64_t k3_io_wait_ns(void);

/* The process's default queue (tools and benchmarks that want one pool): k3_io_init opens it once
 * (nthreads 1..K3_IO_MAX_THREADS, else K3_ERR_ARG); later calls keep it and return its size.
 * Safe to call from several threads at once: one queue is opened. k3_io_free closes it. */
K3_API int32_t k3_io_init(int32_t nthreads, int32_t max_inflight);
K3_API void    k3_io_free(void);
K3_API int64_t k3_io_submit(int32_t fd, void* buf, int64_t len, int64_t off, int64_t need);

/* Fault injection for tests (there is no engine option for it): the n-th request submitted from
 * now on queue q (q = −1: on any queue; n = 1: the next; n = 0 clears) misbehaves:
 *   kind 1: fails with −EIO without reading;
 *   kind 2: starts, then stalls until k3_io_release(q) (or its queue closes), then overwrites
 *           its whole buffer range with 0xA5 bytes and fails with −EIO: what a late read that
 *           lost a hedge may still do to its buffer, which nobody may be reading by then.
 * k3_io_fail_nth(n) is k3_io_fault(−1, n, 1). */
K3_API void    k3_io_fault(int32_t q, int64_t n, int32_t kind);
K3_API void    k3_io_release(int32_t q);
/* Tests: while on, queue q starts no read (they stay queued, so k3_io_cancel takes them back):
 * a drive that answers nothing. Closing the queue runs them anyway. */
K3_API void    k3_io_hold(int32_t q, int32_t on);
K3_API void    k3_io_fail_nth(int64_t n);

/* CRC-32 (IEEE, reflected, as zlib) of len bytes, continuing from crc (0 to start). */
K3_API uint32_t k3_crc32(uint32_t crc, const void* buf, int64_t len);
/* CRC-32C (Castagnoli) likewise: hardware (SSE4.2, ARMv8 CRC32) when present, else tables; same value.
 * k3_crc32c_path forces a path (0 tables, 1 hardware if present, -1 auto) for tests. */
K3_API uint32_t k3_crc32c(uint32_t crc, const void* buf, int64_t len);
K3_API uint32_t k3_crc32c_path(uint32_t crc, const void* buf, int64_t len, int32_t path);

#endif
