// One device as a streaming provider sees it (docs/STREAMING.md "Routing"): its own read queue
// (kernels/k3_io.c: its own threads, so a slow drive never holds the threads a fast one needs),
// whether direct I/O works on it, the rate it has been reading at, and this engine's counters
// for it. The queue is this engine's: every counter here is per engine, never process-wide.
import { K3Error } from "../errors.ts";
import { IO_STAT, type Kernels } from "../kernels.ts";
import type { DeviceStats, IoMode } from "../model/weights.ts";
import type { DeviceInfo } from "./devices.ts";

/** Tickets one device queue holds at most (an engine keeps far fewer reads in flight). */
const QUEUE_TICKETS = 1024;
/** The read rate assumed before a device has read RATE_SAMPLE_BYTES (bytes per ms = 1 GB/s):
 *  only the first reads of an engine are routed by it. */
const PRIOR_BYTES_PER_MS = 1e6;
/** A rate sample spans at least this many bytes and this much busy time: reads on one queue end
 *  in bunches (four threads share a drive's bandwidth), so a shorter window sees a bunch or none. */
const RATE_SAMPLE_BYTES = 8 * 2 ** 20;
const RATE_WINDOW_MS = 250;
/** Time constant of the rate's moving average (ms of busy time): a sample of w ms weighs w / this. */
const RATE_TIME_CONSTANT_MS = 2000;
/** A device busy this long since the last sample without reading RATE_SAMPLE_BYTES is bounded:
 *  one that answers nothing (a stalled drive) then looks slow and stops being chosen. */
const RATE_SAMPLE_MS = 500;
/** The slowest rate a device is thought to have (bytes per ms): a stalled one, not "never". */
const MIN_BYTES_PER_MS = 1;

export class Drive {
  readonly queue: number;
  readonly counters: Omit<DeviceStats, "name" | "busyMs" | "threads" | "directIo" | "ioMode" | "files" | "queue"> = {
    bytesRead: 0,
    reads: 0,
    errors: 0,
    retries: 0,
    rerouted: 0,
    hedgesIssued: 0,
    hedgesWon: 0,
  };
  /** Files opened on this device (shards and copies). */
  files = 0;
  /** Time synchronous reads (k3_read_full on the caller's thread: embedding rows) took. */
  syncBusyMs = 0;
  private bytesPerMs = PRIOR_BYTES_PER_MS;
  private measured = false;
  private sampleBytes = 0;
  private sampleBusyNs = 0;
  private stat = new BigInt64Array(IO_STAT.count);

  constructor(
    private k: Kernels,
    readonly info: DeviceInfo,
    readonly threads: number,
    readonly direct: boolean,
    readonly ioMode: IoMode,
  ) {
    const q = k.k3_io_queue_open(threads, QUEUE_TICKETS);
    if (q < 0) throw new K3Error("INTERNAL", `cannot start ${threads} I/O threads for ${info.name} (status ${q})`);
    this.queue = q;
  }

  get name(): string {
    return this.info.name;
  }

  /** The queue's counters now (kernels/k3_io.h K3_IO_STAT_*), and the rate updated from them. */
  private poll(): BigInt64Array {
    this.k.k3_io_queue_stats(this.queue, this.stat);
    const bytes = Number(this.stat[IO_STAT.bytes]);
    const busy = Number(this.stat[IO_STAT.busyNs]);
    const busyMs = (busy - this.sampleBusyNs) / 1e6;
    const read = bytes - this.sampleBytes;
    if (read >= RATE_SAMPLE_BYTES && busyMs >= RATE_WINDOW_MS) {
      const rate = read / busyMs;
      const w = Math.min(1, busyMs / RATE_TIME_CONSTANT_MS);
      this.bytesPerMs = this.measured ? (1 - w) * this.bytesPerMs + w * rate : rate;
      this.measured = true;
    } else if (busyMs >= RATE_SAMPLE_MS) {
      // Busy this long with little done: it cannot be faster than finishing everything it holds
      // now within that time. Only ever lowers the estimate (a stalled drive stops being chosen).
      const bound = (read + Number(this.stat[IO_STAT.outstandingBytes])) / busyMs;
      if (bound < this.bytesPerMs) this.bytesPerMs = Math.max(MIN_BYTES_PER_MS, bound);
    } else return this.stat;
    this.sampleBytes = bytes;
    this.sampleBusyNs = busy;
    return this.stat;
  }

  /** When a read of `bytes` submitted now would finish, in ms from now: everything queued or
   *  running here first, at the rate this device has been reading at (queue depth × rate). */
  predictMs(bytes: number): number {
    const s = this.poll();
    return (Number(s[IO_STAT.outstandingBytes]) + bytes) / this.bytesPerMs;
  }

  /** The rate this device has been reading at while busy (bytes per ms; the prior until measured). */
  get rate(): number {
    return this.bytesPerMs;
  }

  /** Time this engine had a read queued or running here (ms). */
  busyMs(): number {
    return Number(this.poll()[IO_STAT.busyNs]) / 1e6 + this.syncBusyMs;
  }

  stats(): DeviceStats {
    return { name: this.name, ...this.counters, busyMs: this.busyMs(), threads: this.threads, directIo: this.direct, ioMode: this.ioMode, files: this.files, queue: this.queue };
  }

  /** Joins the queue's threads: every read of it must have been waited for. */
  close(): void {
    this.k.k3_io_queue_close(this.queue);
  }
}
