// The trunk: "units" are the layers 0..N−1 plus the head (lm_head + final norms), walked
// cyclically every token. Pinned units are read once at open. The rest stream through a ring of
// slots: while unit u computes, the next streamed unit is read into another slot (prefetch).
// With a single slot nothing runs ahead — the reader would overwrite the layer in use
// (STREAMING.md §2). Never LRU for the trunk: the walk is cyclic, LRU would hit 0%.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import type { TensorEntry } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { at, type Addr, type CBuf, type CBuffers } from "../model/cmem.ts";
import type { LayerRef, TensorRef } from "../model/weights.ts";
import { ALIGN, type ReadPlan } from "./readplan.ts";
import { EMPTY, INFLIGHT, READY, type InFlight, type ShardReader, type SlotState } from "./reader.ts";
import { unitReadPlans } from "./slots.ts";
import { trunkUnitEntries, unitName } from "./units.ts";

export interface TrunkOptions {
  /** Trunk units (layer indices; numLayers = the head) kept resident. */
  pinnedUnits: number[];
  /** Ring slots for streamed units (≥ 1 when any unit is streamed). */
  ringSlots: number;
  /** Read the next streamed unit while the current one computes (needs ringSlots ≥ 2). */
  prefetch: boolean;
  /** Called when a unit's bytes landed, before any use (--verify); throws to refuse them. */
  check?: (u: number, plan: ReadPlan, base: number) => void;
  /** Progress of loading the pinned units at open, in bytes (called with 0 first): units differ
   *  in size by 100×, so a count of units would stall on the big ones. */
  onProgress?: (doneBytes: number, totalBytes: number) => void;
}

/** Reads of pinned units kept in flight at once while loading at open. */
const PINNED_READS_IN_FLIGHT = 128;

interface Unit {
  plan: ReadPlan;
  entries: Map<string, TensorEntry>;
}

interface RingSlot {
  buf: CBuf;
  unit: number; // −1: none
  state: SlotState;
  read: InFlight | null; // while INFLIGHT
  inUse: boolean; // acquired and not yet released: never overwritten
}

export class TrunkRing {
  private units: Unit[];
  private pinned = new Map<number, CBuf>();
  private ring: RingSlot[] = [];
  private streamedOrder: number[] = []; // streamed units in walk order
  private readonly N: number; // the head's unit number
  /** Whether the head follows the last layer in the current pass (false for non-final chunks). */
  headNext = true;
  /** Payload bytes read (pinned at open, then every streamed unit each time it is read). */
  bytesRead = 0;

  constructor(
    mem: CBuffers,
    private reader: ShardReader,
    ckpt: Checkpoint,
    private opts: TrunkOptions,
  ) {
    this.N = ckpt.config.numLayers;
    const plans = unitReadPlans(ckpt);
    this.units = trunkUnitEntries(ckpt).map((list, u) => ({ plan: plans[u]!, entries: new Map(list.map((e) => [e.name, e])) }));
    const pinned = new Set(opts.pinnedUnits);
    for (let u = 0; u <= this.N; u++) if (!pinned.has(u)) this.streamedOrder.push(u);
    this.loadPinned(mem, [...pinned].sort((a, b) => a - b));
    if (this.streamedOrder.length > 0) {
      if (opts.ringSlots < 1) throw new K3Error("BUDGET", "streaming the trunk needs at least one ring slot");
      const slotBytes = Math.max(...this.streamedOrder.map((u) => this.units[u]!.plan.slotBytes));
      for (let i = 0; i < opts.ringSlots; i++)
        this.ring.push({ buf: mem.alloc(slotBytes, `ring slot ${i}`, ALIGN), unit: -1, state: EMPTY, read: null, inUse: false });
    }
  }

  private what(u: number): string {
    return `trunk of ${unitName(u, this.N)}`;
  }

  /** Read the pinned units in parallel on the I/O pool, a bounded number of reads in flight. */
  private loadPinned(mem: CBuffers, order: number[]): void {
    const inflight: { u: number; buf: CBuf; read: InFlight }[] = [];
    const totalBytes = order.reduce((n, u) => n + this.units[u]!.plan.payloadBytes, 0);
    let landedBytes = 0;
    this.opts.onProgress?.(0, totalBytes);
    const land = () => {
      const { u, buf, read } = inflight.shift()!;
      this.reader.finish(read);
      this.opts.check?.(u, read.plan, buf.ptr);
      this.pinned.set(u, buf);
      landedBytes += read.plan.payloadBytes;
      this.opts.onProgress?.(landedBytes, totalBytes);
    };
    try {
      for (const u of order) {
        const plan = this.units[u]!.plan;
        const buf = mem.alloc(plan.slotBytes, `pinned unit ${u}`, ALIGN);
        while (inflight.length > 0 && inflight.reduce((n, x) => n + x.read.tickets.length, 0) + plan.reads.length > PINNED_READS_IN_FLIGHT) land();
        inflight.push({ u, buf, read: this.reader.start(plan, buf.ptr, this.what(u)) });
        this.bytesRead += plan.payloadBytes;
      }
      while (inflight.length > 0) land();
    } catch (err) {
      // Never free a buffer an I/O thread is still writing into.
      for (const x of inflight) this.reader.drain(x.read);
      throw err;
    }
  }

  /** Land a ring slot's reads (and check them); on failure the slot is emptied, never reused stale. */
  private land(slot: RingSlot): void {
    if (slot.state !== INFLIGHT) return;
    const read = slot.read!;
    try {
      this.reader.finish(read);
      this.opts.check?.(slot.unit, read.plan, slot.buf.ptr);
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
    slot.unit = -1;
    slot.state = EMPTY;
  }

  /** Start reading unit u into a free ring slot (not in use, not holding u). */
  private prefetch(u: number): void {
    if (this.ring.some((s) => s.unit === u)) return;
    const slot = this.ring.find((s) => !s.inUse);
    if (!slot) return;
    this.empty(slot); // a read still writing into it is waited for first
    const plan = this.units[u]!.plan;
    slot.read = this.reader.start(plan, slot.buf.ptr, this.what(u));
    slot.unit = u;
    slot.state = INFLIGHT;
    this.bytesRead += plan.payloadBytes;
  }

  /** The unit that follows u in the walk: cyclic, except that a pass that does not end with the
   *  head (a prefill chunk that is not the last) goes from the last layer straight to layer 0. */
  private nextStreamed(u: number): number {
    const order = this.streamedOrder;
    let i = order.indexOf(u);
    let next = order[++i % order.length]!;
    if (next === this.N && !this.headNext && order.length > 1) next = order[++i % order.length]!;
    return next;
  }

  /** Blocks until unit u is in memory; returns its base address. Pair with release(u). */
  acquire(u: number): Addr {
    const pinned = this.pinned.get(u);
    if (pinned) return pinned.ptr;
    let slot = this.ring.find((s) => s.unit === u);
    if (!slot) {
      this.prefetch(u); // a free slot always exists here: units are used one at a time
      slot = this.ring.find((s) => s.unit === u);
      if (!slot) throw new K3Error("INTERNAL", `no ring slot free for ${unitName(u, this.N)}`);
    }
    this.land(slot);
    slot.inUse = true;
    // Run ahead only into ANOTHER slot: with one slot the next read would overwrite this unit.
    if (this.opts.prefetch && this.ring.length >= 2)
      try {
        const next = this.nextStreamed(u);
        if (next !== u) this.prefetch(next);
      } catch (err) {
        slot.inUse = false; // the caller never gets this unit, so it will never release it
        throw err;
      }
    return slot.buf.ptr;
  }

  release(u: number): void {
    const slot = this.ring.find((s) => s.unit === u);
    if (slot) slot.inUse = false;
  }

  /** Unit u's base address if it is in memory right now (pinned or landed), without waiting. */
  peek(u: number): Addr | null {
    const pinned = this.pinned.get(u);
    if (pinned) return pinned.ptr;
    const slot = this.ring.find((s) => s.unit === u);
    if (!slot) return null;
    if (slot.state === INFLIGHT) {
      if (!this.reader.done(slot.read!)) return null;
      this.land(slot); // checked like any other landing (--verify)
    }
    return slot.buf.ptr;
  }

  /** A tensor of unit u at `base`, by full name (throws naming it if the unit does not hold it). */
  tensor(u: number, base: number, name: string): TensorRef {
    const unit = this.units[u]!;
    const off = unit.plan.offsets.get(name);
    const te = unit.entries.get(name);
    if (off === undefined || !te) throw new K3Error("CHECKPOINT", `tensor ${name} is not part of the ${this.what(u)}`);
    return { ptr: at(base, off), dtype: te.dtype, shape: te.shape, bytes: te.bytes };
  }

  /** Layer L's non-expert tensors at `base`, by name below `layers.L.`. */
  layerRef(L: number, base: number): LayerRef {
    const prefix = `${LM_MODEL_PREFIX}layers.${L}.`;
    return { layer: L, t: (suffix: string) => this.tensor(L, base, prefix + suffix) };
  }

  close(): void {
    // Drain every read in flight before the buffers they write into are freed.
    for (const s of this.ring) if (s.read) this.reader.drain(s.read);
  }
}
