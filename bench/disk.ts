// Disk read bandwidth of the model's own shard files, measured the way the engine reads them:
// O_DIRECT (page cache bypassed: a 13.9 GB model fits in this machine's page cache, so buffered
// numbers would be RAM bandwidth, not disk), 4096-aligned buffer/offset/length, on the kernel
// library's I/O thread pool (k3_io_submit / k3_io_wait), several reads in flight.
//
// Patterns (each a few passes; every pass reads different bytes than the one before):
//  - "expert": reads of one expert's size (17,547,264 B on the release, rounded up to 4096) at
//    random aligned offsets across all shards, `depth` in flight: what expert misses look like.
//  - "trunk": 1 GiB sequential chunks, `threads` in flight: what a streamed trunk unit looks like
//    (the engine reads one ~1.26 GB layer as one request).
//  - "trunk-1": the same 1 GiB chunks, one at a time (one request in flight), for comparison.
//
// Run alone: `bun bench/disk.ts models/slice [--quick]` → JSON on stdout. bench/run.ts runs it
// in a child process (its buffers and I/O pool must not share a process with the decode arms).
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { loadKernels } from "../src/kernels.ts";

const ALIGN = 4096;
const GIB = 2 ** 30;

export interface DiskPattern {
  name: string;
  readBytes: number; // bytes per request
  inFlight: number; // requests outstanding at once
  ioThreads: number;
  passes: { bytes: number; seconds: number; gbps: number }[];
  gbps: number; // median pass, 1e9 bytes/s
}

export interface DiskResult {
  when?: string; // set by bench/run.ts: "before round 1", …
  direct: boolean; // O_DIRECT worked (probe + open); false = buffered, numbers are suspect
  note: string;
  files: number;
  fileBytes: number;
  patterns: DiskPattern[];
  bestGbps: number; // the largest median: the strictest floor for bytes/s
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Shard files of a model directory, largest first (the expert and trunk bytes live there). */
export function shardFiles(dir: string): { path: string; bytes: number }[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".safetensors"))
    .map((f) => ({ path: join(dir, f), bytes: statSync(join(dir, f)).size }))
    .sort((a, b) => b.bytes - a.bytes);
}

/** Small deterministic PRNG (offsets must differ per pass but be reproducible). */
function lcg(seed: number) {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

export function measureDisk(dir: string, opts: { quick?: boolean; expertBytes?: number; threads?: number } = {}): DiskResult {
  const k = loadKernels();
  const files = shardFiles(dir);
  if (files.length === 0) throw new Error(`no .safetensors files in ${dir}`);
  const threads = opts.threads ?? 4;
  const direct = k.k3_direct_probe(files[0]!.path) === 1;
  const fds = files.map((f) => {
    const fd = k.k3_file_open(f.path, direct ? 1 : 0);
    if (fd < 0) throw new Error(`cannot open ${f.path} (errno ${-fd})`);
    return fd;
  });
  if (k.k3_io_init(threads, 256) < 0) throw new Error("k3_io_init failed");
  const fileBytes = files.reduce((a, f) => a + f.bytes, 0);
  const expertRead = Math.ceil((opts.expertBytes ?? 17_547_264) / ALIGN) * ALIGN;
  const passes = opts.quick ? 2 : 3;
  // A fresh seed per run: a later measurement must not re-read exactly the bytes an earlier one
  // read (a host-side cache under a virtual disk would serve them).
  const seed = Date.now() >>> 0;

  /** Run `reqs` (file index, aligned offset) into `bufs` (one per request in flight); seconds. */
  function runReads(reqs: { f: number; off: number }[], len: number, bufs: number[]): number {
    const inFlight = bufs.length;
    {
      const tickets: (number | undefined)[] = new Array(inFlight);
      let next = 0;
      const t0 = Bun.nanoseconds();
      const submit = (slot: number) => {
        const r = reqs[next++]!;
        const t = Number(k.k3_io_submit(fds[r.f]!, bufs[slot] as any, len, r.off, len));
        if (t <= 0) throw new Error("k3_io_submit refused a request");
        tickets[slot] = t;
      };
      for (let s = 0; s < inFlight && next < reqs.length; s++) submit(s);
      // Round-robin waits: with equal-size reads the oldest finishes first (FIFO pool).
      let slot = 0;
      let live = Math.min(inFlight, reqs.length);
      while (live > 0) {
        const t = tickets[slot];
        if (t !== undefined) {
          const res = Number(k.k3_io_wait(t));
          if (res < len) throw new Error(`read failed or short: ${res}`);
          tickets[slot] = undefined;
          live--;
          if (next < reqs.length) (submit(slot), live++);
        }
        slot = (slot + 1) % inFlight;
      }
      return (Bun.nanoseconds() - t0) / 1e9;
    }
  }

  function pattern(name: string, len: number, inFlight: number, reqsFor: (pass: number) => { f: number; off: number }[]): DiskPattern {
    const out: DiskPattern["passes"] = [];
    // Buffers allocated (and zero-filled, i.e. faulted in) once, outside the timed passes.
    const bufs: number[] = [];
    try {
      for (let i = 0; i < inFlight; i++) {
        const p = k.k3_mem_alloc(len, ALIGN);
        if (!p) throw new Error(`k3_mem_alloc(${len}) failed`);
        bufs.push(p as unknown as number);
      }
      for (let p = 0; p < passes; p++) {
        const reqs = reqsFor(p);
        const seconds = runReads(reqs, len, bufs);
        const bytes = reqs.length * len;
        out.push({ bytes, seconds, gbps: bytes / seconds / 1e9 });
      }
    } finally {
      for (const p of bufs) k.k3_mem_free(p as any);
    }
    return { name, readBytes: len, inFlight, ioThreads: threads, passes: out, gbps: median(out.map((x) => x.gbps)) };
  }

  // Random aligned expert-size reads over every shard big enough to hold one.
  const expertCount = opts.quick ? 64 : 128; // × 17.5 MB = 1.1 / 2.2 GB per pass
  const expertPattern = (depth: number) =>
    pattern(`expert ${(expertRead / 1e6).toFixed(1)} MB random, ${depth} in flight`, expertRead, depth, (pass) => {
      const rnd = lcg(seed + pass * 7919 + depth);
      const big = files.map((f, i) => ({ i, f })).filter((x) => x.f.bytes >= expertRead);
      return Array.from({ length: expertCount }, () => {
        const { i, f } = big[Math.floor(rnd() * big.length)]!;
        const blocks = Math.floor((f.bytes - expertRead) / ALIGN);
        return { f: i, off: Math.floor(rnd() * (blocks + 1)) * ALIGN };
      });
    });

  // Sequential 1 GiB chunks; each pass starts where the last one stopped (different bytes).
  const chunks: { f: number; off: number }[] = [];
  files.forEach((f, i) => {
    for (let off = 0; off + GIB <= f.bytes; off += GIB) chunks.push({ f: i, off });
  });
  const perPass = opts.quick ? 2 : 4;
  let cursor = 0;
  const takeChunks = () => Array.from({ length: perPass }, () => chunks[cursor++ % chunks.length]!);
  const patterns: DiskPattern[] = [];
  patterns.push(expertPattern(16));
  patterns.push(expertPattern(threads));
  if (chunks.length) {
    patterns.push(pattern(`trunk 1 GiB sequential, ${threads} in flight`, GIB, threads, takeChunks));
    patterns.push(pattern("trunk 1 GiB sequential, 1 in flight", GIB, 1, takeChunks));
  }
  for (const fd of fds) k.k3_file_close(fd);
  k.k3_io_free();
  return {
    direct,
    note: direct ? "O_DIRECT: page cache bypassed" : "O_DIRECT UNAVAILABLE: buffered reads, the page cache may serve them (numbers overstate the disk)",
    files: files.length,
    fileBytes,
    patterns,
    bestGbps: Math.max(...patterns.map((p) => p.gbps)),
  };
}

if (import.meta.main) {
  const dir = process.argv[2];
  if (!dir) {
    process.stderr.write("usage: bun bench/disk.ts MODEL_DIR [--quick]\n");
    process.exit(2);
  }
  const r = measureDisk(dir, { quick: process.argv.includes("--quick") });
  process.stdout.write(JSON.stringify(r, null, 2) + "\n");
}
