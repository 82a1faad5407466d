/* k3 I/O primitives: aligned direct reads on a pool of I/O threads. Mechanism only: which bytes
 * to read, when, and into which slot is decided by src/memory/ (policy).
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
/* 1 if an aligned direct read of the first block of `path` works (probe once per file system). */
K3_API int32_t k3_direct_probe(const char* path);

/* Synchronous read of [off, off+len): loops over pread until len bytes arrived or EOF. Returns the
 * bytes read when at least `need` arrived (an aligned range may run past EOF; the payload must
 * not), K3_ERR_SHORT when EOF came before `need`, or −errno (as int64). */
K3_API int64_t k3_read_full(int32_t fd, void* buf, int64_t len, int64_t off, int64_t need);

/* I/O thread pool (process-wide). Requests are tickets; a ticket is waited for exactly once.
 * k3_io_init starts the pool once (nthreads 1..K3_IO_MAX_THREADS, else K3_ERR_ARG); later calls
 * keep the running pool and return its size, which the caller compares with what it asked for. */
K3_API int32_t k3_io_init(int32_t nthreads, int32_t max_inflight);
K3_API void    k3_io_free(void);
/* Queue a k3_read_full; returns a ticket > 0, or K3_ERR_ARG when max_inflight are outstanding. */
K3_API int64_t k3_io_submit(int32_t fd, void* buf, int64_t len, int64_t off, int64_t need);
/* 1 if done, 0 if not yet. */
K3_API int32_t k3_io_done(int64_t ticket);
/* Block until done; returns the read's result (len, K3_ERR_SHORT or −errno) and frees the ticket. */
K3_API int64_t k3_io_wait(int64_t ticket);
/* Block until one of tickets[0..n) is done; returns its index (the ticket is NOT freed: call
 * k3_io_wait on it to collect the result). Tickets of 0 are ignored. −1 if none are valid. */
K3_API int32_t k3_io_wait_any(const int64_t* tickets, int32_t n);
/* Nanoseconds spent by callers blocked in k3_io_wait / k3_io_wait_any since init. */
K3_API int64_t k3_io_wait_ns(void);

/* Fault injection for tests: the n-th request submitted from now (1 = next) fails with −EIO.
 * 0 disables. Process-wide; tests call it directly through the bindings (there is no engine
 * option for it). */
K3_API void    k3_io_fail_nth(int64_t n);

/* CRC-32 (IEEE, reflected, as zlib) of len bytes, continuing from crc (0 to start). */
K3_API uint32_t k3_crc32(uint32_t crc, const void* buf, int64_t len);
/* CRC-32C (Castagnoli) likewise: hardware (SSE4.2, ARMv8 CRC32) when present, else tables; same value.
 * k3_crc32c_path forces a path (0 tables, 1 hardware if present, -1 auto) for tests. */
K3_API uint32_t k3_crc32c(uint32_t crc, const void* buf, int64_t len);
K3_API uint32_t k3_crc32c_path(uint32_t crc, const void* buf, int64_t len, int32_t path);

#endif
