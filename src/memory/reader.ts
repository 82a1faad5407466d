// Reading the shards for one streaming provider: the open files (each shard and its mirror
// copies), one read queue per device (drive.ts: its own I/O threads, its direct-I/O probe, its
// counters), where each read goes, and this provider's own counters. Everything here is per
// engine, never process-wide, so two engines in one process report their own.
//
// One bookkeeping scheme for every read: a read plan in flight is an `InFlight` (one `ReadOp` per
// aligned read). Each is waited for exactly once — by `finish` (which throws if any byte is
// missing) or by `drain` (error paths and close: results ignored) — and a buffer is never reused
// or freed while a read still writes into it. Slots that hold reads (ring, expert cache) move
// through EMPTY → INFLIGHT → READY, and only READY bytes are ever handed to the model.
//
// Routing (docs/STREAMING.md "Routing"): a read of a shard with copies goes to the copy whose
// device would finish it first (bytes outstanding there + its own, at the rate that device has
// been reading). A read still unfinished `hedgeAfter` times its predicted time later is late:
// if it has not started it is taken back and moved to another copy (same buffer: nothing was
// written); if it is running and the caller gave its buffer (one-read plans: an expert), it is
// hedged: read again from another copy into a spare buffer, and the first good answer wins. The
// loser keeps its buffer until it ends (the buffers are swapped, never shared), so no byte is
// ever written into a buffer after it was handed out. A read that fails is retried on another
// copy. Bytes are the same whichever copy answers: outputs never change.
import { realpathSync } from "node:fs";
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { K3Error } from "../errors.ts";
import { DIRECT_MODES, kernelLimits, type Kernels } from "../kernels.ts";
import { at, type Addr, type CBuf } from "../model/cmem.ts";
import type { DeviceStats } from "../model/weights.ts";
import { deviceOfFile, type DeviceInfo, type DeviceOf } from "./devices.ts";
import { Drive } from "./drive.ts";
import type { MirrorCopies } from "./mirrors.ts";
import type { AlignedRead, ReadPlan } from "./readplan.ts";

/** I/O threads of each device's queue when the caller does not ask for a number. */
export const DEFAULT_IO_THREADS = 4;
/** A read is late once it has taken this many times the time its device was predicted to need
 *  (and at least HEDGE_MIN_MS). Measured on healthy emulated drives (bench/drives-probe.ts): a
 *  read's time ÷ its prediction has p99 1.69–1.85 (four threads share a drive, so a burst's first
 *  reads end late): 2 is above it (docs/BENCH.md "Several drives"). */
export const DEFAULT_HEDGE_AFTER = 2;
const HEDGE_MIN_MS = 2;
/** Spare expert buffers an engine with mirrors holds for hedges (the plan's "hedge buffers"). */
export const HEDGE_BUFFERS = 2;

export const EMPTY = 0;
export const INFLIGHT = 1;
export const READY = 2;
export type SlotState = typeof EMPTY | typeof INFLIGHT | typeof READY;

/** One place a shard's bytes can be read from. */
interface Copy {
  file: string;
  real: string; // where its bytes are (symlinks followed): named in errors with its device
  fd: number;
  drive: Drive;
}

/** A second read of the same bytes from another copy, into a spare buffer. */
interface Hedge {
  ticket: number;
  at: number; // copy
  buf: CBuf;
}

interface ReadOp {
  r: AlignedRead;
  copies: Copy[];
  at: number; // the copy `ticket` reads
  ticket: number; // 0 once collected
  late: number; // performance.now() after which it counts as late (Infinity: nothing left to try)
  acted: boolean; // hedged once already (a read is hedged at most once)
  failed: number; // bit i: copy i failed
  hedge: Hedge | null;
  res?: number; // the answer kept, once settled (< r.need: every copy failed)
}

export interface InFlight {
  plan: ReadPlan;
  ops: ReadOp[];
  what: string; // "trunk of layer 3", "expert 7 of layer 2": named in errors
  base: number;
  /** The caller's buffer, when a hedge may land in a spare instead (one-read plans). */
  buf?: CBuf;
  /** Set by `finish` when a hedge won: the bytes are in this buffer now, the caller's buffer
   *  became a spare (the caller swaps). */
  won?: CBuf;
}

export interface ReaderOptions {
  direct: boolean;
  /** Threads of each device's queue (default DEFAULT_IO_THREADS). */
  ioThreads?: number;
  extraFiles?: { file: string; bytes: number }[];
  /** Checked copies of shards (src/memory/mirrors.ts). */
  mirrors?: MirrorCopies;
  /** Groups files into devices another way (tests); default: by the disk behind each file. */
  deviceOf?: DeviceOf;
  /** A read is late after this many times its predicted time (Infinity: never move or hedge). */
  hedgeAfter?: number;
}

const bit = (i: number) => 2 ** i;
const hasBit = (mask: number, i: number) => Math.floor(mask / bit(i)) % 2 === 1;

export class ShardReader {
  private copies = new Map<string, Copy[]>();
  private fds: number[] = [];
  readonly drives: Drive[] = [];
  readonly directIo: boolean;
  readonly ioMode: DeviceStats["ioMode"];
  readonly ioThreads: number;
  private readonly hedgeAfter: number;
  /** Tickets this reader holds (submitted, not yet waited for): its share of the queues. */
  outstanding = 0;
  /** Read requests of plans (and synchronous reads); moves, retries and hedges are not counted. */
  reads = 0;
  /** Reads and bytes read again (hedges, retries): Σ devices = reads + extraReads, bytes likewise. */
  extraReads = 0;
  extraBytes = 0;
  hedgesIssued = 0;
  hedgesWon = 0;
  retries = 0;
  waitMs = 0;
  private spares: CBuf[] = [];
  private busySpares: { buf: CBuf; ticket: number; drive: Drive }[] = [];
  private ticketScratch = new BigInt64Array(64);

  constructor(
    private k: Kernels,
    ckpt: Checkpoint,
    opts: ReaderOptions,
  ) {
    const limit = kernelLimits(k).ioThreads;
    const threads = opts.ioThreads ?? DEFAULT_IO_THREADS;
    if (!Number.isInteger(threads) || threads < 1 || threads > limit) throw new K3Error("USAGE", `--io-threads must be an integer from 1 to ${limit}, got ${threads}`);
    this.ioThreads = threads;
    this.hedgeAfter = opts.hedgeAfter ?? DEFAULT_HEDGE_AFTER;
    try {
      const files = [
        ...ckpt.shards.map((s) => ({ key: s.file, bytes: s.bytes, paths: [s.file, ...(opts.mirrors?.get(s.file) ?? [])] })),
        ...(opts.extraFiles ?? []).map((f) => ({ key: f.file, bytes: f.bytes, paths: [f.file] })),
      ];
      const driveOf = this.openDrives(files.flatMap((f) => f.paths), opts, threads);
      for (const f of files) this.copies.set(f.key, f.paths.map((p) => this.openCopy(p, f.bytes, driveOf.get(p)!)));
    } catch (err) {
      this.close();
      throw err;
    }
    this.directIo = this.drives.every((d) => d.direct);
    this.ioMode = this.directIo ? DIRECT_MODES[k.k3_direct_mode()]! : "buffered";
  }

  /** One Drive per device the files are on, each with its direct-I/O probe and queue. */
  private openDrives(paths: string[], opts: ReaderOptions, threads: number): Map<string, Drive> {
    const byKey = new Map<string, { info: DeviceInfo; paths: string[] }>();
    for (const p of paths) {
      const info = deviceOfFile(p, opts.deviceOf);
      const g = byKey.get(info.key) ?? { info, paths: [] };
      g.paths.push(p);
      byKey.set(info.key, g);
    }
    const out = new Map<string, Drive>();
    for (const { info, paths: ps } of byKey.values()) {
      // One probe per device (tmpfs and some network file systems refuse O_DIRECT).
      const direct = opts.direct && this.k.k3_direct_probe(ps[0]!) === 1;
      const drive = new Drive(this.k, info, threads, direct, direct ? DIRECT_MODES[this.k.k3_direct_mode()]! : "buffered");
      this.drives.push(drive);
      for (const p of ps) out.set(p, drive);
    }
    return out;
  }

  private openCopy(file: string, bytes: number, drive: Drive): Copy {
    const fd = this.k.k3_file_open(file, drive.direct ? 1 : 0);
    if (fd < 0) throw new K3Error("IO", `cannot open ${file} (errno ${-fd})`);
    this.fds.push(fd);
    drive.files++;
    // A file truncated or replaced after indexing must stop us, not feed wrong bytes.
    const size = Number(this.k.k3_file_size(fd));
    if (size !== bytes) throw new K3Error("CHECKPOINT", `${file}: size is ${size} bytes, the index was built for ${bytes}; re-run k3 verify`);
    return { file, real: realpathSync(file), fd, drive };
  }

  /** True when some shard can be read from more than one copy (then spares are worth giving). */
  get mirrored(): boolean {
    for (const c of this.copies.values()) if (c.length > 1) return true;
    return false;
  }

  /** Buffers a hedge may read into (each as large as any plan started with a buffer). */
  addSpares(bufs: CBuf[]): void {
    this.spares.push(...bufs);
  }

  private copiesOf(file: string): Copy[] {
    const c = this.copies.get(file);
    if (!c) throw new K3Error("INTERNAL", `no open file for ${file}`);
    return c;
  }

  private ioError(res: number, what: string, op: { r: AlignedRead; copies: Copy[]; at: number }): K3Error {
    const c = op.copies[op.at]!;
    const file = `${c.file}${c.real === c.file ? "" : ` (${c.real})`}${this.drives.length > 1 ? ` on ${c.drive.name}` : ""}`;
    const others = op.copies.length > 1 ? ` (every copy failed: ${op.copies.map((x) => x.real).join(", ")})` : "";
    if (res === -4) return new K3Error("IO", `short read of ${what}: ${file} ends before offset ${op.r.off} + payload (was the shard truncated after indexing?)${others}`);
    return new K3Error("IO", `read of ${what} failed: ${file} at offset ${op.r.off} (errno ${-res})${others}`);
  }

  /** The copy that would finish a read of `bytes` first, among those not failed and not `exclude`; −1 if none. */
  private pick(copies: Copy[], bytes: number, failed: number, exclude = -1): number {
    if (copies.length === 1) return failed === 0 && exclude !== 0 ? 0 : -1;
    let best = -1;
    let bestMs = Infinity;
    copies.forEach((c, i) => {
      if (hasBit(failed, i) || i === exclude) return;
      const ms = c.drive.predictMs(bytes);
      if (ms < bestMs) [best, bestMs] = [i, ms];
    });
    return best;
  }

  /** Queue one read of `op` from copy `i` into the buffer at `base`; returns its ticket. */
  private submit(op: ReadOp, i: number, base: number, what: string): number {
    const c = op.copies[i]!;
    const predicted = op.copies.length > 1 ? c.drive.predictMs(op.r.len) : 0;
    const t = Number(this.k.k3_io_submit_to(c.drive.queue, c.fd, at(base, op.r.dst), op.r.len, op.r.off, op.r.need));
    if (t <= 0) throw new K3Error("INTERNAL", `I/O queue full while reading ${what}`);
    this.outstanding++;
    c.drive.counters.reads++;
    c.drive.counters.bytesRead += op.r.payload;
    // hedgeAfter 0 (tests): late at once; else after its multiple of the predicted time.
    const wait = this.hedgeAfter === 0 ? 0 : Math.max(HEDGE_MIN_MS, this.hedgeAfter * predicted);
    op.late = op.copies.length > 1 && this.hedgeAfter < Infinity ? performance.now() + wait : Infinity;
    return t;
  }

  /** A read that will not run (cancelled before it started): its counts are taken back. */
  private uncount(drive: Drive, r: AlignedRead, extra: boolean): void {
    this.outstanding--;
    drive.counters.reads--;
    drive.counters.bytesRead -= r.payload;
    if (extra) {
      this.extraReads--;
      this.extraBytes -= r.payload;
    }
  }

  /** Submit every read of `plan` into the buffer at `base` (slot offsets from the plan). With
   *  `buf` (the buffer at `base`) a one-read plan may be hedged into a spare (then see `won`). */
  start(plan: ReadPlan, base: number, what: string, buf?: CBuf): InFlight {
    const f: InFlight = { plan, ops: [], what, base, buf: buf && plan.reads.length === 1 ? buf : undefined };
    try {
      for (const r of plan.reads) {
        const copies = this.copiesOf(r.file);
        const op: ReadOp = { r, copies, at: 0, ticket: 0, late: Infinity, acted: false, failed: 0, hedge: null };
        op.at = this.pick(copies, r.len, 0);
        op.ticket = this.submit(op, op.at, base, what);
        f.ops.push(op);
        this.reads++;
      }
    } catch (err) {
      // Never leave a read of this plan running into a buffer we are about to give up on.
      this.drain(f);
      throw err;
    }
    return f;
  }

  /** Collect what of `op` has finished, without blocking; true once it is settled (an answer, or
   *  every copy failed). A failed read is retried on another copy. */
  private advance(f: InFlight, op: ReadOp): boolean {
    if (op.res !== undefined) return true;
    const h = op.hedge;
    if (h && this.k.k3_io_done(h.ticket) === 1) {
      const res = Number(this.k.k3_io_wait(h.ticket));
      this.outstanding--;
      op.hedge = null;
      if (res >= op.r.need) return this.hedgeWon(f, op, h, res);
      this.failedOn(op, h.at);
      this.spares.push(h.buf); // its read ended: nothing writes there any more
      if (op.ticket === 0) return this.retryOrSettle(f, op, res); // the first read failed too
    }
    if (op.ticket === 0 || this.k.k3_io_done(op.ticket) !== 1) return false;
    const res = Number(this.k.k3_io_wait(op.ticket));
    this.outstanding--;
    op.ticket = 0;
    if (res >= op.r.need) {
      op.res = res;
      if (op.hedge) this.retire(op.hedge.buf, op.hedge.ticket, op.copies[op.hedge.at]!.drive, op.r);
      op.hedge = null;
      return true;
    }
    this.failedOn(op, op.at);
    return op.hedge ? false : this.retryOrSettle(f, op, res); // a running hedge may still answer
  }

  private failedOn(op: ReadOp, i: number): void {
    op.copies[i]!.drive.counters.errors++;
    if (!hasBit(op.failed, i)) op.failed += bit(i);
  }

  /** After a failure with nothing else in flight: read again from another copy into the same
   *  buffer (the failed read has ended), or settle with the error when every copy failed. */
  private retryOrSettle(f: InFlight, op: ReadOp, res: number): boolean {
    const next = this.pick(op.copies, op.r.len, op.failed);
    if (next < 0) {
      op.res = res;
      return true;
    }
    op.at = next;
    op.ticket = this.submit(op, next, f.base, f.what);
    op.copies[next]!.drive.counters.retries++;
    this.retries++;
    this.extraReads++;
    this.extraBytes += op.r.payload;
    return false;
  }

  /** The hedge answered first: its spare holds the bytes now; the caller's buffer becomes a
   *  spare, kept out of use while the losing read may still write into it. */
  private hedgeWon(f: InFlight, op: ReadOp, h: Hedge, res: number): boolean {
    op.copies[h.at]!.drive.counters.hedgesWon++;
    this.hedgesWon++;
    if (op.ticket) this.retire(f.buf!, op.ticket, op.copies[op.at]!.drive, op.r);
    else this.spares.push(f.buf!);
    op.ticket = 0;
    op.at = h.at;
    op.res = res;
    f.buf = h.buf;
    f.base = h.buf.ptr;
    f.won = h.buf;
    return true;
  }

  /** A losing read: taken back if it has not started, else its buffer waits until it ends. */
  private retire(buf: CBuf, ticket: number, drive: Drive, r: AlignedRead): void {
    if (this.k.k3_io_cancel(ticket) === 1) {
      this.uncount(drive, r, true);
      this.spares.push(buf);
    } else this.busySpares.push({ buf, ticket, drive });
  }

  /** Spares whose losing read has ended become free. */
  private reapSpares(): void {
    this.busySpares = this.busySpares.filter((s) => {
      if (this.k.k3_io_done(s.ticket) !== 1) return true;
      if (Number(this.k.k3_io_wait(s.ticket)) < 0) s.drive.counters.errors++;
      this.outstanding--;
      this.spares.push(s.buf);
      return false;
    });
  }

  /** A late read: moved to another copy if it has not started, else hedged (once) when it can
   *  be; only to a copy predicted to finish sooner than its own device's queue drains. Looked at
   *  again after HEDGE_MIN_MS when nothing could be done yet. */
  private onLate(f: InFlight, op: ReadOp, now: number): void {
    op.late = now + HEDGE_MIN_MS;
    if (op.res !== undefined || op.ticket === 0) return void (op.late = Infinity);
    const alt = this.pick(op.copies, op.r.len, op.failed, op.at);
    if (alt < 0) return void (op.late = Infinity);
    const here = op.copies[op.at]!.drive;
    const there = op.copies[alt]!.drive.predictMs(op.r.len);
    // Not started: worth moving if the other copy would finish it before this queue drains.
    if (there >= here.predictMs(0)) return;
    if (this.k.k3_io_cancel(op.ticket) === 1) {
      this.uncount(op.copies[op.at]!.drive, op.r, false);
      op.at = alt;
      op.ticket = this.submit(op, alt, f.base, f.what);
      op.copies[alt]!.drive.counters.rerouted++;
      return;
    }
    if (!f.buf || op.acted) return void (op.late = Infinity);
    // Running: a hedge only pays if the other copy would deliver all of it sooner than this
    // drive, at the rate it has been reading, needs for the read alone (a stalled drive's rate
    // falls, so it is hedged; a fast drive with a deep queue is not hedged onto a slow one).
    if (there >= op.r.len / here.rate) return;
    this.reapSpares();
    const spare = this.spares.pop();
    if (!spare) return;
    op.hedge = { ticket: this.submit(op, alt, spare.ptr, f.what), at: alt, buf: spare };
    op.acted = true;
    op.late = Infinity;
    op.copies[alt]!.drive.counters.hedgesIssued++;
    this.hedgesIssued++;
    this.extraReads++;
    this.extraBytes += op.r.payload;
  }

  /**
   * Block until one (`any`) or every InFlight of `list` is settled, moving or hedging late reads
   * meanwhile; returns the index of the first settled one. Without copies to choose from this
   * is a plain wait for the reads' tickets.
   */
  private block(list: InFlight[], any: boolean): number {
    for (;;) {
      let first = -1;
      let all = true;
      list.forEach((f, i) => {
        let settled = true;
        for (const op of f.ops) settled = this.advance(f, op) && settled;
        if (settled && first < 0) first = i;
        all &&= settled;
      });
      if (any ? first >= 0 : all) return Math.max(0, first);
      let n = 0;
      let late = Infinity;
      for (const f of list)
        for (const op of f.ops) {
          if (op.res !== undefined) continue;
          n += (op.ticket ? 1 : 0) + (op.hedge ? 1 : 0);
          late = Math.min(late, op.late);
        }
      if (this.ticketScratch.length < n) this.ticketScratch = new BigInt64Array(n);
      n = 0;
      for (const f of list)
        for (const op of f.ops) {
          if (op.res !== undefined) continue;
          if (op.ticket) this.ticketScratch[n++] = BigInt(op.ticket);
          if (op.hedge) this.ticketScratch[n++] = BigInt(op.hedge.ticket);
        }
      const now = performance.now();
      if (late <= now) {
        for (const f of list) for (const op of f.ops) if (op.late <= now) this.onLate(f, op, now);
        continue;
      }
      this.k.k3_io_wait_any_for(this.ticketScratch, n, late === Infinity ? -1 : Math.ceil((late - now) * 1e6));
      this.waitMs += performance.now() - now;
    }
  }

  /** Wait for every read of `f`; throws (after all were waited for) if any came back short. When
   *  a hedge won, `f.won` is the buffer holding the bytes (the caller swaps). */
  finish(f: InFlight): void {
    this.block([f], false);
    const bad = f.ops.find((op) => op.res! < op.r.need);
    const err = bad && this.ioError(bad.res!, f.what, bad);
    f.ops = [];
    if (err) throw err;
  }

  /** Wait for every read of `f`, ignoring results (the buffer is being given up). */
  drain(f: InFlight): void {
    for (const op of f.ops) {
      if (op.ticket) this.k.k3_io_wait(op.ticket);
      if (op.ticket) this.outstanding--;
      if (op.hedge) {
        this.k.k3_io_wait(op.hedge.ticket);
        this.outstanding--;
        this.spares.push(op.hedge.buf);
      }
    }
    f.ops = [];
  }

  /** True when every read of `f` has completed (finish will not block). */
  done(f: InFlight): boolean {
    let settled = true;
    for (const op of f.ops) settled = this.advance(f, op) && settled;
    return settled;
  }

  /** Index of the first of `list` whose reads have all landed (blocks until one has). */
  firstDone(list: InFlight[]): number {
    return this.block(list, true);
  }

  /** Synchronous read of `need` bytes at `off` (aligned `len`) into `dst`, `payload` of them used;
   *  from the copy that would finish first, retried on another copy if it fails. */
  readNow(file: string, dst: Addr, len: number, off: number, need: number, payload: number, what: string): void {
    const copies = this.copiesOf(file);
    const op = { r: { file, off, len, need, dst: 0, payload }, copies, at: 0 };
    let failed = 0;
    for (let tries = 0; ; tries++) {
      op.at = this.pick(copies, len, failed);
      const d = copies[op.at]!.drive;
      const t0 = performance.now();
      const res = Number(this.k.k3_read_full(copies[op.at]!.fd, dst, len, off, need));
      const ms = performance.now() - t0;
      this.waitMs += ms;
      d.syncBusyMs += ms;
      d.counters.reads++;
      d.counters.bytesRead += payload;
      if (tries > 0) {
        d.counters.retries++;
        this.retries++;
        this.extraReads++;
        this.extraBytes += payload;
      }
      if (res >= need) break;
      d.counters.errors++;
      failed += bit(op.at);
      if (this.pick(copies, len, failed) < 0) throw this.ioError(res, what, op);
    }
    this.reads++;
  }

  /** This engine's counters per device. */
  deviceStats(): DeviceStats[] {
    return this.drives.map((d) => d.stats());
  }

  close(): void {
    for (const s of this.busySpares) {
      this.k.k3_io_wait(s.ticket);
      this.outstanding--;
    }
    this.busySpares = [];
    for (const d of this.drives.splice(0)) d.close();
    for (const fd of this.fds) this.k.k3_file_close(fd);
    this.fds = [];
    this.copies.clear();
  }
}
