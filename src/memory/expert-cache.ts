// The routed-expert slot cache. A slot is EMPTY, INFLIGHT (its read running) or READY, keyed by
// layer·N + expert. All experts a layer needs are requested at once: hits are served from their
// slots, misses are given slots one by one (the eviction policy picks victims) and read in
// parallel on the device queues; `next` hands them to the model in arrival order. The model sums
// them in router rank order, so bits do not depend on arrival order.
// Invariants: a slot is published (READY) only when every byte arrived (and passed the check);
// INFLIGHT slots are never handed out; slots in use by the current layer are never victims.
// Counters (STREAMING.md §5): a hit is a demand request served without reading the disk during
// this token; a lookahead read used in the token it was issued is a miss counted as lookaheadUsed.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { expertTensorNames } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import { at, type CBuf, type CBuffers } from "../model/cmem.ts";
import type { ExpertRef } from "../model/weights.ts";
import { makePolicy, type PolicyName } from "./policy/index.ts";
import type { EvictionPolicy } from "./policy/types.ts";
import { ALIGN, type ReadPlan } from "./readplan.ts";
import { EMPTY, INFLIGHT, READY, type InFlight, type ShardReader } from "./reader.ts";
import { expertReadPlan, expertSlotBytes } from "./slots.ts";

export interface ExpertCacheOptions {
  slots: number;
  /** Spare slot buffers given to the reader for hedged reads (with mirrors). */
  spares?: number;
  policy: PolicyName;
  /** Called when an expert's bytes landed, before it is published (--verify); throws to refuse. */
  check?: (layer: number, e: number, plan: ReadPlan, base: number) => void;
}

/** Expert reads one provider keeps in flight at most: far past what saturates a disk, and far
 *  below the I/O queue (a server-sized cache can need ~400 distinct experts in one prefill chunk). */
const EXPERT_READS_IN_FLIGHT = 128;

export interface ExpertCounters {
  bytesRead: number;
  requests: number;
  hits: number;
  lookaheadIssued: number;
  lookaheadUsed: number;
}

export class ExpertSlotCache {
  private readonly N: number; // experts per layer
  private plans = new Map<number, ReadPlan>();
  private bufs: CBuf[] = [];
  private key: Int32Array; // layer·N + e, −1 when EMPTY
  private state: Uint8Array;
  private inUse: Uint8Array;
  private issuedIn: Float64Array; // the token (epoch) whose pass started the slot's read
  private read: (InFlight | null)[];
  private keyToSlot = new Map<number, number>();
  private policy: EvictionPolicy;
  private t = 0; // request counter for the policy
  private candidates: Int32Array;
  // the current layer's request
  private reqLayer = -1;
  private reqQueue: number[] = []; // experts not yet given a slot (cache smaller than the chunk's set)
  private reqSlots: number[] = []; // slots of requested experts not yet handed out
  private handedOut = -1; // slot handed out by the last `next` (consumed at the next call)
  /** Forward passes so far: "this token" for hit accounting (the provider bumps it at layer 0). */
  epoch = 0;
  readonly counters: ExpertCounters = { bytesRead: 0, requests: 0, hits: 0, lookaheadIssued: 0, lookaheadUsed: 0 };

  constructor(
    mem: CBuffers,
    private reader: ShardReader,
    private ckpt: Checkpoint,
    private opts: ExpertCacheOptions,
  ) {
    const cfg = ckpt.config;
    this.N = cfg.numExperts;
    const S = opts.slots;
    if (S < 1 && cfg.numLayers > cfg.firstKDense) throw new K3Error("BUDGET", "the expert cache needs at least one slot");
    const slotBytes = expertSlotBytes(ckpt);
    for (let i = 0; i < S; i++) this.bufs.push(mem.alloc(slotBytes, `expert slot ${i}`, ALIGN));
    // A hedged read lands in a spare; the two buffers then swap (reader.ts): slots never share one.
    reader.addSpares(Array.from({ length: opts.spares ?? 0 }, (_, i) => mem.alloc(slotBytes, `hedge buffer ${i}`, ALIGN)));
    this.key = new Int32Array(S).fill(-1);
    this.state = new Uint8Array(S);
    this.inUse = new Uint8Array(S);
    this.issuedIn = new Float64Array(S).fill(-1);
    this.read = new Array(S).fill(null);
    this.candidates = new Int32Array(Math.max(1, S));
    this.policy = makePolicy(opts.policy, { slots: Math.max(1, S), keys: cfg.numLayers * this.N });
  }

  private plan(layer: number, e: number): ReadPlan {
    const key = layer * this.N + e;
    let p = this.plans.get(key);
    if (!p) this.plans.set(key, (p = expertReadPlan(this.ckpt, layer, e)));
    return p;
  }

  /** A slot for a new read: an EMPTY one, else the policy's victim among READY slots not in use. */
  private reserve(): number {
    const S = this.bufs.length;
    for (let i = 0; i < S; i++) if (this.state[i] === EMPTY) return i;
    let n = 0;
    for (let i = 0; i < S; i++) if (this.state[i] === READY && !this.inUse[i]) this.candidates[n++] = i;
    if (n === 0) {
      // Only lookahead reads still in flight are left: let one land, then it is a candidate.
      for (let i = 0; i < S; i++)
        if (this.state[i] === INFLIGHT && !this.inUse[i]) {
          this.land(i);
          this.candidates[n++] = i;
          break;
        }
      if (n === 0) return -1;
    }
    const v = this.policy.victim(this.candidates, n, this.t);
    this.keyToSlot.delete(this.key[v]!);
    return v;
  }

  private startRead(slot: number, layer: number, e: number): void {
    const key = layer * this.N + e;
    const plan = this.plan(layer, e);
    this.key[slot] = key;
    this.state[slot] = INFLIGHT;
    this.issuedIn[slot] = this.epoch;
    this.keyToSlot.set(key, slot);
    this.policy.onInsert(slot, key, this.t);
    try {
      this.read[slot] = this.reader.start(plan, this.bufs[slot]!.ptr, `expert ${e} of layer ${layer}`, this.bufs[slot]);
    } catch (err) {
      this.drop(slot);
      throw err;
    }
    this.counters.bytesRead += plan.payloadBytes;
  }

  private drop(slot: number): void {
    const read = this.read[slot];
    if (read) this.reader.drain(read);
    this.keyToSlot.delete(this.key[slot]!);
    this.key[slot] = -1;
    this.state[slot] = EMPTY;
    this.inUse[slot] = 0;
    this.read[slot] = null;
  }

  /** Wait for a slot's reads; publish it only if every byte arrived and passed the check. */
  private land(slot: number): void {
    const key = this.key[slot]!;
    const layer = Math.floor(key / this.N);
    const e = key % this.N;
    const read = this.read[slot]!;
    try {
      this.reader.finish(read);
      if (read.won) this.bufs[slot] = read.won; // a hedge answered first, into a spare
      this.opts.check?.(layer, e, read.plan, this.bufs[slot]!.ptr);
    } catch (err) {
      this.drop(slot);
      throw err;
    }
    this.read[slot] = null;
    this.state[slot] = READY;
  }

  /** Declare the experts layer L needs (distinct, first-use order): hits are kept, misses read. */
  request(L: number, experts: number[]): void {
    this.reqLayer = L;
    this.reqQueue = [];
    this.reqSlots = [];
    this.handedOut = -1;
    for (const e of experts) {
      this.t++;
      this.counters.requests++;
      const key = L * this.N + e;
      const s = this.keyToSlot.get(key);
      if (s !== undefined) {
        if (this.issuedIn[s] === this.epoch) this.counters.lookaheadUsed++; // read this token: a miss
        else this.counters.hits++;
        this.policy.onHit(s, key, this.t);
        this.inUse[s] = 1;
        this.reqSlots.push(s);
        continue;
      }
      this.reqQueue.push(e);
    }
    this.issueQueued();
  }

  /**
   * Give queued experts slots and start their reads, while slots are free and at most
   * EXPERT_READS_IN_FLIGHT reads are outstanding (reserve serially, read in parallel). The rest
   * wait for `next` to consume what landed. With nothing of this request in flight, one read
   * is always issued, so the request makes progress whatever the lookahead holds.
   */
  private issueQueued(): void {
    while (this.reqQueue.length > 0) {
      const e = this.reqQueue[0]!;
      const reads = this.plan(this.reqLayer, e).reads.length;
      const oursInFlight = this.reqSlots.some((s) => this.state[s] === INFLIGHT);
      if (oursInFlight && this.reader.outstanding + reads > EXPERT_READS_IN_FLIGHT) return;
      const slot = this.reserve();
      if (slot < 0) return;
      this.reqQueue.shift();
      this.startRead(slot, this.reqLayer, e);
      this.inUse[slot] = 1;
      this.reqSlots.push(slot);
    }
  }

  /** The next requested expert of layer L to be available (ready ones first, in request order). */
  next(L: number): { expert: number; ref: ExpertRef } {
    if (L !== this.reqLayer) throw new K3Error("INTERNAL", `nextExpert(${L}) without a request for that layer`);
    // The expert handed out last time has been computed: its slot may now serve the queue.
    if (this.handedOut >= 0) {
      this.inUse[this.handedOut] = 0;
      this.handedOut = -1;
    }
    this.issueQueued(); // slots or read budget freed since the last call
    if (this.reqSlots.length === 0) {
      if (this.reqQueue.length > 0) throw new K3Error("BUDGET", `layer ${L}: the expert cache has no slot free for the remaining ${this.reqQueue.length} experts`);
      throw new K3Error("INTERNAL", `layer ${L}: no expert pending`);
    }
    let i = this.reqSlots.findIndex((s) => this.state[s] === READY);
    if (i < 0) {
      i = this.reader.firstDone(this.reqSlots.map((s) => this.read[s]!));
      this.land(this.reqSlots[i]!);
    }
    const slot = this.reqSlots.splice(i, 1)[0]!;
    this.handedOut = slot;
    const e = this.key[slot]! % this.N;
    const plan = this.plan(L, e);
    const base = this.bufs[slot]!.ptr;
    const names = expertTensorNames(L, e);
    const tensor = (suffix: string) => at(base, plan.offsets.get(names.find((n) => n.endsWith(suffix))!)!);
    return {
      expert: e,
      ref: {
        w1p: tensor("w1.weight_packed"),
        w1s: tensor("w1.weight_scale"),
        w2p: tensor("w2.weight_packed"),
        w2s: tensor("w2.weight_scale"),
        w3p: tensor("w3.weight_packed"),
        w3s: tensor("w3.weight_scale"),
      },
    };
  }

  /** The layer is done with its experts: their slots may be reused. */
  release(): void {
    for (const s of this.reqSlots) {
      // Requested but never consumed (an error unwound the layer): drain reads before reuse.
      if (this.state[s] === INFLIGHT) {
        try {
          this.land(s);
        } catch {
          /* the error that unwound us is already on its way */
        }
      }
    }
    this.inUse.fill(0);
    this.reqSlots = [];
    this.reqQueue = [];
    this.handedOut = -1;
    this.reqLayer = -1;
  }

  /** Lookahead: start reading experts layer L's router is likely to pick. Exact: the real router
   *  still decides; a wrong guess costs bytes, never correctness. */
  hint(L: number, experts: number[]): void {
    for (const e of experts) {
      const key = L * this.N + e;
      if (this.keyToSlot.has(key)) continue;
      if (this.reader.outstanding + this.plan(L, e).reads.length > EXPERT_READS_IN_FLIGHT) return;
      const slot = this.reserve();
      if (slot < 0) return;
      this.startRead(slot, L, e);
      this.counters.lookaheadIssued++;
    }
  }

  close(): void {
    for (const read of this.read) if (read) this.reader.drain(read);
  }
}
