// A ring of slots streaming trunk pieces (pieces.ts) in their walk order, cyclically every token.
// Pinned pieces are read once at open, by loadPinned() (a generator that yields as each piece
// lands, so an opener can let its event loop run and stop between pieces). The rest go through the slots: while piece p computes,
// the next streamed pieces are read into the other slots (prefetch). With a single slot nothing
// runs ahead — the reader would overwrite the piece in use (STREAMING.md §2). Never LRU for the
// trunk: the walk is cyclic, LRU would hit 0%.
//
// The trunk uses two rings (trunk.ts): one for the units' cores, one for their matrix pieces.
import { K3Error } from "../errors.ts";
import type { CBuf, CBuffers } from "../model/cmem.ts";
import type { TrunkPiece } from "./pieces.ts";
import { ALIGN, type ReadPlan } from "./readplan.ts";
import { EMPTY, INFLIGHT, READY, type InFlight, type ShardReader, type SlotState } from "./reader.ts";

export interface RingOptions {
  /** Pieces of this ring in walk order (a subset of the trunk's pieces). */
  pieces: TrunkPiece[];
  /** Their read plans, by piece id. */
  plans: Map<number, ReadPlan>;
  /** Piece ids kept resident. */
  pinned: Set<number>;
  /** Slots for the streamed pieces (≥ 1 when any is streamed). */
  slots: number;
  /** Read ahead while a piece computes (needs slots ≥ 2). */
  prefetch: boolean;
  /** Unit number of the head: its pieces are skipped by a pass that does not end with the head. */
  headUnit: number;
  /** Names a piece in errors. */
  describe: (id: number) => string;
  /** Called when a piece's bytes landed, before any use (--verify); throws to refuse them. */
  check?: (id: number, plan: ReadPlan, base: number) => void;
}

interface RingSlot {
  buf: CBuf;
  piece: number; // −1: none
  state: SlotState;
  read: InFlight | null; // while INFLIGHT
  inUse: boolean; // acquired and not yet released: never overwritten
}

/** Reads of pinned pieces kept in flight at once while loading at open. */
const PINNED_READS_IN_FLIGHT = 128;

export class PieceRing {
  private pinnedBufs = new Map<number, CBuf>();
  private ring: RingSlot[] = [];
  private order: number[] = []; // streamed piece ids in walk order
  private pos = new Map<number, number>(); // piece id → index in order
  private unitOf = new Map<number, number>();
  /** Whether the head follows the last layer in the current pass (false for non-final chunks). */
  headNext = true;
  /** Payload bytes read (pinned at open, then every streamed piece each time it is read). */
  bytesRead = 0;

  private readonly toPin: number[];

  constructor(
    private mem: CBuffers,
    private reader: ShardReader,
    private opts: RingOptions,
    private onPinned?: (payloadBytes: number) => void,
  ) {
    for (const p of opts.pieces) {
      this.unitOf.set(p.id, p.unit);
      if (!opts.pinned.has(p.id)) {
        this.pos.set(p.id, this.order.length);
        this.order.push(p.id);
      }
    }
    this.toPin = opts.pieces.filter((p) => opts.pinned.has(p.id)).map((p) => p.id);
    if (this.order.length > 0) {
      if (opts.slots < 1) throw new K3Error("BUDGET", "streaming the trunk needs at least one ring slot");
      const slotBytes = Math.max(...this.order.map((id) => this.plan(id).slotBytes));
      for (let i = 0; i < opts.slots; i++) this.ring.push({ buf: mem.alloc(slotBytes, `ring slot ${i}`, ALIGN), piece: -1, state: EMPTY, read: null, inUse: false });
    }
  }

  private plan(id: number): ReadPlan {
    const p = this.opts.plans.get(id);
    if (!p) throw new K3Error("INTERNAL", `no read plan for trunk piece ${id}`);
    return p;
  }

  /**
   * Read the pinned pieces in parallel on the device queues, a bounded number of reads in flight,
   * yielding after each piece lands (and passed its check). Must run to its end before the first
   * acquire. Abandoned early (an error, or the opener's return()), it waits for every read still
   * in flight: a buffer an I/O thread writes into is never freed.
   */
  *loadPinned(): Generator<void> {
    const inflight: { id: number; buf: CBuf; read: InFlight }[] = [];
    const readsInFlight = () => inflight.reduce((n, x) => n + x.read.ops.length, 0);
    const land = () => {
      const { id, buf, read } = inflight.shift()!;
      this.reader.finish(read);
      this.opts.check?.(id, read.plan, buf.ptr);
      this.pinnedBufs.set(id, buf);
      this.onPinned?.(read.plan.payloadBytes);
    };
    try {
      for (const id of this.toPin) {
        const plan = this.plan(id);
        const buf = this.mem.alloc(plan.slotBytes, `pinned piece ${id}`, ALIGN);
        while (inflight.length > 0 && readsInFlight() + plan.reads.length > PINNED_READS_IN_FLIGHT) {
          land();
          yield;
        }
        inflight.push({ id, buf, read: this.reader.start(plan, buf.ptr, this.opts.describe(id)) });
        this.bytesRead += plan.payloadBytes;
      }
      while (inflight.length > 0) {
        land();
        yield;
      }
    } finally {
      // Never free a buffer an I/O thread is still writing into.
      for (const x of inflight) this.reader.drain(x.read);
    }
  }

  /** Land a slot's reads (and check them); on failure the slot is emptied, never reused stale. */
  private land(slot: RingSlot): void {
    if (slot.state !== INFLIGHT) return;
    const read = slot.read!;
    try {
      this.reader.finish(read);
      this.opts.check?.(slot.piece, read.plan, slot.buf.ptr);
    } catch (err) {
      this.empty(slot);
      throw err;
    }
    slot.read = null;
    slot.state = READY;
  }

  private empty(slot: RingSlot): void {
    if (slot.read) this.reader.drain(slot.read);
    slot.read = null;
    slot.piece = -1;
    slot.state = EMPTY;
  }

  /** Start reading piece `id` into a free slot (not in use, not holding a piece still ahead). */
  private prefetch(id: number, keep: Set<number>): boolean {
    if (this.ring.some((s) => s.piece === id)) return true;
    const slot = this.ring.find((s) => !s.inUse && !keep.has(s.piece));
    if (!slot) return false;
    this.empty(slot); // a read still writing into it is waited for first
    const plan = this.plan(id);
    slot.read = this.reader.start(plan, slot.buf.ptr, this.opts.describe(id));
    slot.piece = id;
    slot.state = INFLIGHT;
    this.bytesRead += plan.payloadBytes;
    return true;
  }

  /** The streamed pieces after `id` in the walk: cyclic, except that a pass that does not end
   *  with the head (a prefill chunk that is not the last) goes from the last layer to layer 0. */
  private ahead(id: number, n: number): number[] {
    const order = this.order;
    const out: number[] = [];
    let i = this.pos.get(id)!;
    for (let step = 0; step < order.length - 1 && out.length < n; step++) {
      i = (i + 1) % order.length;
      const next = order[i]!;
      if (!this.headNext && this.unitOf.get(next) === this.opts.headUnit && this.unitOf.get(id) !== this.opts.headUnit) continue;
      out.push(next);
    }
    return out;
  }

  /** Blocks until piece `id` is in memory; returns its base address. Pair with release(id). */
  acquire(id: number): number {
    const pinned = this.pinnedBufs.get(id);
    if (pinned) return pinned.ptr;
    if (!this.pos.has(id)) throw new K3Error("INTERNAL", `trunk piece ${id} is not part of this ring`);
    let slot = this.ring.find((s) => s.piece === id);
    if (!slot) {
      // A free slot always exists here: one piece of a ring is used at a time.
      if (!this.prefetch(id, new Set())) throw new K3Error("INTERNAL", `no ring slot free for ${this.opts.describe(id)}`);
      slot = this.ring.find((s) => s.piece === id)!;
    }
    this.land(slot);
    slot.inUse = true;
    // Run ahead only into OTHER slots: with one slot the next read would overwrite this piece.
    if (this.opts.prefetch && this.ring.length >= 2)
      try {
        const next = this.ahead(id, this.ring.length - 1);
        const keep = new Set(next);
        for (const n of next) if (!this.prefetch(n, keep)) break;
      } catch (err) {
        slot.inUse = false; // the caller never gets this piece, so it will never release it
        throw err;
      }
    return slot.buf.ptr;
  }

  release(id: number): void {
    const slot = this.ring.find((s) => s.piece === id);
    if (slot) slot.inUse = false;
  }

  /** Piece `id`'s base address if it is in memory right now (pinned or landed), without waiting. */
  peek(id: number): number | null {
    const pinned = this.pinnedBufs.get(id);
    if (pinned) return pinned.ptr;
    const slot = this.ring.find((s) => s.piece === id);
    if (!slot) return null;
    if (slot.state === INFLIGHT) {
      if (!this.reader.done(slot.read!)) return null;
      this.land(slot); // checked like any other landing (--verify)
    }
    return slot.buf.ptr;
  }

  close(): void {
    // Drain every read in flight before the buffers they write into are freed.
    for (const s of this.ring) if (s.read) this.reader.drain(s.read);
  }
}
