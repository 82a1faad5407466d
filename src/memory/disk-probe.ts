// Measuring a device's read rate the way the engine reads it (`k3 disks`, bench/drives.ts): one
// queue of `depth` I/O threads (kernels/k3_io.c, as a device's queue in reader.ts), aligned reads
// of k3's own request sizes (an expert: random offsets; a trunk chunk: sequential runs) into
// aligned buffers, O_DIRECT when the device takes it (else the page cache answers, and the
// result says so). Bytes are read from the model's own files; nothing is written.
import { K3Error } from "../errors.ts";
import { loadKernels, type Kernels } from "../kernels.ts";
import { ALIGN } from "./readplan.ts";

export interface ProbeOptions {
  /** Bytes per request (rounded up to 4096; at most the largest file, rounded down). */
  readBytes: number;
  /** Requests in flight = threads of the probe's queue. */
  depth: number;
  /** "random": each request at a random aligned offset; "sequential": runs of consecutive
   *  requests from a random start, as a streamed trunk piece is read. */
  pattern: "random" | "sequential";
  /** Stop issuing after this long (s), or after maxBytes, whichever first (at least depth requests). */
  seconds: number;
  /** Read this long first, untimed (s, default 0.5): a drive idle before the probe answers its
   *  first reads faster than it can go on (a cache, a rate cap's credit). */
  warmupSeconds?: number;
  maxBytes?: number;
  /** Direct I/O (the engine's default); false measures through the page cache. */
  direct: boolean;
  seed?: number;
}

export interface ProbeResult {
  readBytes: number;
  depth: number;
  pattern: "random" | "sequential";
  direct: boolean; // whether O_DIRECT was in effect (false: page cache, not the drive)
  reads: number;
  bytes: number;
  seconds: number;
  bytesPerSecond: number;
}

/** Small deterministic PRNG: offsets differ per seed, reproducibly. */
function lcg(seed: number): () => number {
  let x = seed >>> 0;
  return () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

/** Read rate of the device holding `files` (all on one device) for one request size and depth. */
export function probeReadRate(k: Kernels, files: { file: string; bytes: number }[], o: ProbeOptions): ProbeResult {
  const largest = Math.floor(Math.max(...files.map((f) => f.bytes)) / ALIGN) * ALIGN;
  if (largest < ALIGN) throw new K3Error("USAGE", `no file on this device holds a ${ALIGN}-byte read`);
  const len = Math.min(largest, Math.ceil(o.readBytes / ALIGN) * ALIGN);
  const usable = files.filter((f) => f.bytes >= len);
  const direct = o.direct && k.k3_direct_probe(usable[0]!.file) === 1;
  const fds: number[] = [];
  const bufs: number[] = [];
  const q = k.k3_io_queue_open(o.depth, 2 * o.depth);
  if (q < 0) throw new K3Error("INTERNAL", `cannot start ${o.depth} I/O threads (status ${q})`);
  try {
    for (const f of usable) {
      const fd = k.k3_file_open(f.file, direct ? 1 : 0);
      if (fd < 0) throw new K3Error("IO", `cannot open ${f.file} (errno ${-fd})`);
      fds.push(fd);
    }
    for (let i = 0; i < o.depth; i++) {
      const p = k.k3_mem_alloc(len, ALIGN);
      if (!p) throw new K3Error("BUDGET", `cannot allocate ${o.depth} buffers of ${len} bytes`);
      bufs.push(p as unknown as number);
    }
    const warmup = o.warmupSeconds ?? 0.5;
    if (warmup > 0) timedReads(k, q, usable, fds, bufs, len, { ...o, seconds: warmup, maxBytes: undefined, seed: (o.seed ?? 1) + 7919 });
    return { ...timedReads(k, q, usable, fds, bufs, len, o), readBytes: len, depth: o.depth, pattern: o.pattern, direct };
  } finally {
    k.k3_io_queue_close(q);
    for (const fd of fds) k.k3_file_close(fd);
    for (const p of bufs) k.k3_mem_free(p as never);
  }
}

/** Keep `bufs.length` reads in flight until the time or byte budget is spent. */
function timedReads(k: Kernels, q: number, files: { bytes: number }[], fds: number[], bufs: number[], len: number, o: ProbeOptions) {
  const rnd = lcg(o.seed ?? 1);
  const total = files.reduce((a, f) => a + f.bytes, 0);
  let cursor = { f: 0, off: 0, left: 0 };
  const nextRequest = (): { f: number; off: number } => {
    if (o.pattern === "sequential" && cursor.left > 0 && cursor.off + 2 * len <= files[cursor.f]!.bytes) {
      cursor = { ...cursor, off: cursor.off + len, left: cursor.left - 1 };
      return cursor;
    }
    // A file picked by size, a random aligned offset in it (a sequential run: 16 requests from there).
    let at = rnd() * total;
    let f = 0;
    while (f < files.length - 1 && at >= files[f]!.bytes) at -= files[f++]!.bytes;
    const blocks = Math.floor((files[f]!.bytes - len) / ALIGN);
    cursor = { f, off: Math.floor(rnd() * (blocks + 1)) * ALIGN, left: 15 };
    return cursor;
  };
  const tickets: number[] = new Array(bufs.length).fill(0);
  const t0 = performance.now();
  let reads = 0;
  let bytes = 0;
  const more = () => (performance.now() - t0) / 1000 < o.seconds && (o.maxBytes === undefined || (reads + live()) * len < o.maxBytes);
  const live = () => tickets.filter((t) => t > 0).length;
  const submit = (slot: number) => {
    const r = nextRequest();
    const t = Number(k.k3_io_submit_to(q, fds[r.f]!, bufs[slot] as never, len, r.off, len));
    if (t <= 0) throw new K3Error("INTERNAL", "the probe's I/O queue refused a read");
    tickets[slot] = t;
  };
  for (let s = 0; s < bufs.length; s++) submit(s);
  // Equal-size reads on one FIFO queue: the oldest finishes first, so waiting round-robin is fair.
  for (let slot = 0; live() > 0; slot = (slot + 1) % bufs.length) {
    if (!tickets[slot]) continue;
    const res = Number(k.k3_io_wait(tickets[slot]!));
    tickets[slot] = 0;
    if (res < len) throw new K3Error("IO", `a probe read failed or came back short (result ${res})`);
    reads++;
    bytes += len;
    if (more()) submit(slot);
  }
  const seconds = (performance.now() - t0) / 1000;
  return { reads, bytes, seconds, bytesPerSecond: bytes / seconds };
}

/** probeReadRate with the process's kernel library (for `k3 disks`, which loads nothing else). */
export function probeDevice(files: { file: string; bytes: number }[], o: ProbeOptions): ProbeResult {
  return probeReadRate(loadKernels(), files, o);
}
