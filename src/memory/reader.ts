// Reading the shards for one streaming provider: the open files (O_DIRECT when the probe allows),
// the process-wide I/O pool, and this provider's own counters (reads, time blocked on I/O: per
// engine, never process-wide, so two engines in one process report their own).
//
// One bookkeeping scheme for every read: a read plan in flight is an `InFlight` (its tickets).
// Each is waited for exactly once — by `finish` (which throws if any byte is missing) or by
// `drain` (error paths and close: results ignored) — and a buffer is never reused or freed while
// an InFlight still writes into it. Slots that hold reads (ring, expert cache) move through
// EMPTY → INFLIGHT → READY, and only READY bytes are ever handed to the model.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { K3Error } from "../errors.ts";
import { DIRECT_MODES, kernelLimits, type Kernels } from "../kernels.ts";
import { at, type Addr } from "../model/cmem.ts";
import type { IoMode } from "../model/weights.ts";
import type { ReadPlan } from "./readplan.ts";

/** Requests the process-wide I/O pool can hold; shared by every engine in the process. */
const IO_QUEUE = 1024;
/** I/O threads when the caller does not ask for a number and no pool runs yet. */
export const DEFAULT_IO_THREADS = 4;

export const EMPTY = 0;
export const INFLIGHT = 1;
export const READY = 2;
export type SlotState = typeof EMPTY | typeof INFLIGHT | typeof READY;

export interface InFlight {
  plan: ReadPlan;
  tickets: number[];
  what: string; // "trunk of layer 3", "expert 7 of layer 2": named in errors
}

/**
 * Start the process-wide I/O pool, or join the one running. `threads` undefined: whatever runs
 * (DEFAULT_IO_THREADS if none). A number the running pool does not have is refused: the pool
 * cannot be resized while another engine's reads are in flight, and silently keeping the old
 * size would make the option a lie.
 */
export function joinIoPool(k: Kernels, threads: number | undefined): number {
  const limit = kernelLimits(k).ioThreads;
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 1 || threads > limit))
    throw new K3Error("USAGE", `--io-threads must be an integer from 1 to ${limit}, got ${threads}`);
  const running = k.k3_io_init(threads ?? DEFAULT_IO_THREADS, IO_QUEUE);
  if (running < 0) throw new K3Error("INTERNAL", `cannot start ${threads ?? DEFAULT_IO_THREADS} I/O threads (status ${running})`);
  if (threads !== undefined && running !== threads)
    throw new K3Error("USAGE", `this process's I/O pool already runs ${running} threads (the first engine opened started it); ask for ${running} or leave --io-threads out`);
  return running;
}

export class ShardReader {
  private fds = new Map<string, number>();
  readonly directIo: boolean;
  readonly ioMode: IoMode; // which direct mechanism (O_DIRECT, macOS F_NOCACHE), or buffered
  readonly ioThreads: number;
  /** Tickets submitted and not yet waited for (this reader's share of the I/O pool). */
  outstanding = 0;
  reads = 0;
  waitMs = 0;
  private ticketScratch = new BigInt64Array(64);

  constructor(
    private k: Kernels,
    ckpt: Checkpoint,
    opts: { direct: boolean; ioThreads?: number; extraFiles?: { file: string; bytes: number }[] },
  ) {
    const shardsDirect = opts.direct && k.k3_direct_probe(ckpt.shards[0]!.file) === 1;
    // Other files (a packed trunk, maybe in k3's cache folder on another file system) are probed
    // on their own; direct I/O is reported on only when every file has it.
    const extra = (opts.extraFiles ?? []).map((f) => ({ ...f, direct: opts.direct && k.k3_direct_probe(f.file) === 1 }));
    this.directIo = shardsDirect && extra.every((f) => f.direct);
    this.ioMode = this.directIo ? DIRECT_MODES[k.k3_direct_mode()]! : "buffered";
    try {
      const files = [...ckpt.shards.map((s) => ({ file: s.file, bytes: s.bytes, direct: shardsDirect })), ...extra];
      for (const s of files) {
        const fd = k.k3_file_open(s.file, s.direct ? 1 : 0);
        if (fd < 0) throw new K3Error("IO", `cannot open ${s.file} (errno ${-fd})`);
        this.fds.set(s.file, fd);
        // A file truncated or replaced after indexing must stop us, not feed wrong bytes.
        const size = Number(k.k3_file_size(fd));
        if (size !== s.bytes) throw new K3Error("CHECKPOINT", `${s.file}: size is ${size} bytes, the index was built for ${s.bytes}; re-run k3 verify`);
      }
      this.ioThreads = joinIoPool(k, opts.ioThreads);
    } catch (err) {
      this.close();
      throw err;
    }
  }

  private fd(file: string): number {
    const fd = this.fds.get(file);
    if (fd === undefined) throw new K3Error("INTERNAL", `no open file for ${file}`);
    return fd;
  }

  private ioError(res: number, what: string, file: string, off: number): K3Error {
    if (res === -4) return new K3Error("IO", `short read of ${what}: ${file} ends before offset ${off} + payload (was the shard truncated after indexing?)`);
    return new K3Error("IO", `read of ${what} failed: ${file} at offset ${off} (errno ${-res})`);
  }

  /** Submit every read of `plan` into the buffer at `base` (slot offsets from the plan). */
  start(plan: ReadPlan, base: number, what: string): InFlight {
    const tickets: number[] = [];
    for (const r of plan.reads) {
      const t = Number(this.k.k3_io_submit(this.fd(r.file), at(base, r.dst), r.len, r.off, r.need));
      if (t <= 0) {
        // Never leave a read of this plan running into a buffer we are about to give up on.
        this.drain({ plan, tickets, what });
        throw new K3Error("INTERNAL", `I/O queue full while reading ${what}`);
      }
      tickets.push(t);
      this.outstanding++;
      this.reads++;
    }
    return { plan, tickets, what };
  }

  /** Wait for every read of `f`; throws (after all were waited for) if any came back short. */
  finish(f: InFlight): void {
    let err: K3Error | undefined;
    const t0 = performance.now();
    f.tickets.forEach((t, i) => {
      const res = Number(this.k.k3_io_wait(t));
      this.outstanding--;
      const r = f.plan.reads[i]!;
      if (res < r.need && !err) err = this.ioError(res, f.what, r.file, r.off);
    });
    this.waitMs += performance.now() - t0;
    f.tickets = [];
    if (err) throw err;
  }

  /** Wait for every read of `f`, ignoring results (the buffer is being given up). */
  drain(f: InFlight): void {
    for (const t of f.tickets) this.k.k3_io_wait(t);
    this.outstanding -= f.tickets.length;
    f.tickets = [];
  }

  /** True when every read of `f` has completed (finish will not block). */
  done(f: InFlight): boolean {
    return f.tickets.every((t) => this.k.k3_io_done(t) === 1);
  }

  /** Index of the first of `list` whose reads have all landed (blocks until one has). */
  firstDone(list: InFlight[]): number {
    const n = list.length;
    if (this.ticketScratch.length < n) this.ticketScratch = new BigInt64Array(n);
    // The last read of a plan lands last (the pool serves in submission order).
    for (let j = 0; j < n; j++) this.ticketScratch[j] = BigInt(list[j]!.tickets.at(-1) ?? 0);
    const t0 = performance.now();
    const i = this.k.k3_io_wait_any(this.ticketScratch, n);
    this.waitMs += performance.now() - t0;
    return i < 0 ? 0 : i;
  }

  /** Synchronous read of `need` bytes at `off` (aligned `len`) into `dst`. */
  readNow(file: string, dst: Addr, len: number, off: number, need: number, what: string): void {
    const t0 = performance.now();
    const res = Number(this.k.k3_read_full(this.fd(file), dst, len, off, need));
    this.waitMs += performance.now() - t0;
    if (res < need) throw this.ioError(res, what, file, off);
    this.reads++;
  }

  close(): void {
    for (const fd of this.fds.values()) this.k.k3_file_close(fd);
    this.fds.clear();
  }
}
