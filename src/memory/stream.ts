// StreamingWeights: the WeightProvider that reads the release in place within a RAM budget.
//
//  Trunk: "units" are the layers 0..N−1 plus the head (lm_head + final norms), walked cyclically
//   every token. Pinned units are read once at open. The rest stream through a ring of slots:
//   while unit u computes, the next streamed unit is read into another slot (prefetch). With a
//   single slot nothing runs ahead — the reader would overwrite the layer in use (STREAMING.md §2).
//   Never LRU for the trunk: the walk is cyclic, LRU would hit 0%.
//  Experts: a slot cache (EMPTY / INFLIGHT / key). All experts of a layer are requested at once
//   (reserve serially, read in parallel on the I/O pool, publish only what arrived) and handed to
//   the model in arrival order; the model sums them in router rank order, so bits do not depend on
//   arrival order. Slots in use by the current layer and pinned slots are never victims.
//  Counters (STREAMING.md §5): a hit is a demand request served without reading the disk during
//   this token; a lookahead read used this token is a miss that counts as lookaheadUsed.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import type { TensorEntry } from "../checkpoint/types.ts";
import { expertTensorNames, LM_HEAD_NAME, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import { CBuffers, type CBuf } from "../model/cmem.ts";
import { zeroStats, type ExpertRef, type LayerRef, type TensorRef, type WeightProvider, type WeightStats } from "../model/weights.ts";
import { makePolicy, type PolicyName } from "./policy/index.ts";
import type { EvictionPolicy } from "./policy/types.ts";
import { ALIGN, buildReadPlan, type ReadPlan } from "./readplan.ts";
import { trunkUnitEntries, unitName } from "./units.ts";
import { payloadCrc, type Checksums } from "./verify.ts";

export interface StreamOptions {
  /** Trunk units (layer indices; numLayers = the head) kept resident. */
  pinnedUnits: number[];
  /** Ring slots for streamed units (≥ 1 when any unit is streamed). */
  ringSlots: number;
  expertSlots: number;
  embedResident: boolean;
  /** Read the next streamed unit while the current one computes (needs ringSlots ≥ 2). */
  prefetch: boolean;
  /** Ask for O_DIRECT; the probe decides, and stats say what happened. */
  direct: boolean;
  ioThreads: number;
  policy: PolicyName;
  /** Recorded CRC-32s (`k3 verify --record`): every read is checked against them. */
  checksums?: Checksums;
  /** Progress of loading the pinned units at open. */
  onProgress?: (done: number, total: number) => void;
}

/** Requests the process-wide I/O pool can hold; shared by every engine in the process. */
const IO_QUEUE = 1024;
/** Expert reads one provider keeps in flight at most: far past what saturates a disk, and far
 *  below IO_QUEUE (a server-sized cache can need ~400 distinct experts in one prefill chunk). */
const EXPERT_READS_IN_FLIGHT = 128;

const EMPTY = 0;
const INFLIGHT = 1;
const READY = 2;

interface Unit {
  plan: ReadPlan;
  entries: Map<string, TensorEntry>;
}

interface RingSlot {
  buf: CBuf;
  unit: number; // −1 empty
  tickets: bigint[] | number[];
  ready: boolean;
  inUse: boolean;
}

export class StreamingWeights implements WeightProvider {
  private mem: CBuffers;
  private fds = new Map<string, number>();
  private units: Unit[] = [];
  private pinned = new Map<number, CBuf>();
  private ring: RingSlot[] = [];
  private streamedOrder: number[] = []; // streamed units in walk order
  private counters: WeightStats;
  private epoch = 0; // forward chunks so far ("this token" for hit accounting)
  private ioWaitBaseNs = 0;

  // embedding
  private embed: TensorEntry;
  private embedBuf?: CBuf; // whole table when resident
  private rowBuf: CBuf; // one aligned row read otherwise

  // expert slot cache
  private readonly N: number; // experts per layer
  private expertPlan: (layer: number, e: number) => ReadPlan;
  private slotBytes: number;
  private slots: CBuf[] = [];
  private slotKey: Int32Array;
  private slotState: Uint8Array;
  private slotInUse: Uint8Array;
  private slotEpoch: Float64Array;
  private slotTickets: number[][];
  private slotPlan: (ReadPlan | undefined)[];
  private keyToSlot = new Map<number, number>();
  private policy: EvictionPolicy;
  private t = 0; // request counter for the policy
  private candidates: Int32Array;
  // the current layer's request
  private reqLayer = -1;
  private reqQueue: number[] = []; // experts not yet given a slot (cache smaller than the chunk's set)
  private reqSlots: number[] = []; // slots of requested experts not yet handed out
  private handedOut = -1; // slot handed out by the last nextExpert (consumed at the next call)
  private ticketScratch = new BigInt64Array(64);

  constructor(
    private k: Kernels,
    private ckpt: Checkpoint,
    private opts: StreamOptions,
  ) {
    const cfg = ckpt.config;
    this.mem = new CBuffers(k);
    this.N = cfg.numExperts;
    const wantDirect = opts.direct && k.k3_direct_probe(ckpt.shards[0]!.file) === 1;
    this.counters = zeroStats(wantDirect);
    try {
      for (const s of ckpt.shards) {
        const fd = k.k3_file_open(s.file, wantDirect ? 1 : 0);
        if (fd < 0) throw new K3Error("IO", `cannot open ${s.file} (errno ${-fd})`);
        this.fds.set(s.file, fd);
        // A shard truncated or replaced after indexing must stop us, not feed wrong bytes.
        const size = Number(k.k3_file_size(fd));
        if (size !== s.bytes) throw new K3Error("CHECKPOINT", `${s.file}: size is ${size} bytes, the index was built for ${s.bytes}; re-run k3 verify`);
      }
      if (k.k3_io_init(Math.max(1, opts.ioThreads), IO_QUEUE) < 0) throw new K3Error("INTERNAL", "cannot start the I/O threads");
      this.ioWaitBaseNs = Number(k.k3_io_wait_ns());

      // Trunk units.
      const tensors = ckpt.tensors;
      const byUnit = trunkUnitEntries(ckpt);
      this.units = byUnit.map((list) => ({ plan: buildReadPlan(list), entries: new Map(list.map((e) => [e.name, e])) }));
      const pinned = new Set(opts.pinnedUnits);
      for (let u = 0; u <= cfg.numLayers; u++) if (!pinned.has(u)) this.streamedOrder.push(u);
      // Pinned units are read in parallel on the I/O pool (a few units in flight at a time).
      const inflight: { u: number; buf: CBuf; tickets: number[] }[] = [];
      const land = () => {
        const { u, buf, tickets } = inflight.shift()!;
        this.collect(this.units[u]!.plan, tickets, `trunk of ${unitName(u, cfg.numLayers)}`);
        this.verifyUnit(u, buf.ptr);
        this.pinned.set(u, buf);
        opts.onProgress?.(this.pinned.size, pinned.size);
      };
      try {
        for (const u of [...pinned].sort((a, b) => a - b)) {
          const plan = this.units[u]!.plan;
          const buf = this.mem.alloc(plan.slotBytes, `pinned unit ${u}`, ALIGN);
          while (inflight.length > 0 && inflight.reduce((n, x) => n + x.tickets.length, 0) + plan.reads.length > 128) land();
          inflight.push({ u, buf, tickets: this.submit(plan, buf.ptr, `trunk of ${unitName(u, cfg.numLayers)}`) });
          this.counters.trunkBytesRead += plan.payloadBytes;
        }
        while (inflight.length > 0) land();
      } catch (err) {
        // Never free a buffer an I/O thread is still writing into.
        for (const x of inflight) for (const t of x.tickets) this.k.k3_io_wait(t);
        throw err;
      }
      if (this.streamedOrder.length > 0) {
        if (opts.ringSlots < 1) throw new K3Error("BUDGET", "streaming the trunk needs at least one ring slot");
        const slotBytes = Math.max(...this.streamedOrder.map((u) => this.units[u]!.plan.slotBytes));
        for (let i = 0; i < opts.ringSlots; i++)
          this.ring.push({ buf: this.mem.alloc(slotBytes, `ring slot ${i}`, ALIGN), unit: -1, tickets: [], ready: false, inUse: false });
      }

      // Embedding: whole table resident, or one row read per token.
      const embed = tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`);
      if (!embed) throw new K3Error("CHECKPOINT", "embed_tokens.weight is missing");
      this.embed = embed;
      if (opts.embedResident) {
        const plan = buildReadPlan([embed]);
        this.embedBuf = this.mem.alloc(plan.slotBytes, "embedding", ALIGN);
        this.readNow(plan, this.embedBuf, "embedding", true);
        this.embedOffset = plan.offsets.get(embed.name)!;
      }
      this.rowBuf = this.mem.alloc(2 * ALIGN + cfg.hidden * 2, "embedding row", ALIGN);

      // Expert slots.
      const expertPlans = new Map<number, ReadPlan>();
      this.expertPlan = (layer, e) => {
        const key = layer * this.N + e;
        let p = expertPlans.get(key);
        if (!p) {
          p = buildReadPlan(expertTensorNames(layer, e).map((n) => tensors.get(n)!));
          expertPlans.set(key, p);
        }
        return p;
      };
      // Slot size: the largest read plan any expert needs (adjacent experts: bytes + ≤ 2 blocks).
      let maxSlot = 0;
      for (let L = cfg.firstKDense; L < cfg.numLayers; L++) {
        const adjacentAll = ckpt.layout.experts.adjacent;
        for (let e = 0; e < this.N; e++) {
          const s = (L - ckpt.layout.experts.firstMoeLayer) * this.N + e;
          // adjacent experts all need the same bound; only non-adjacent ones need a plan here
          // (an adjacent run of b bytes at any offset fits in ceil(b/4096)·4096 + 4096 aligned bytes)
          maxSlot = Math.max(maxSlot, adjacentAll[s] ? Math.ceil(ckpt.layout.experts.bytes / ALIGN) * ALIGN + ALIGN : this.expertPlan(L, e).slotBytes);
        }
      }
      this.slotBytes = Math.ceil(maxSlot / ALIGN) * ALIGN;
      const S = opts.expertSlots;
      if (S < 1 && cfg.numLayers > cfg.firstKDense) throw new K3Error("BUDGET", "the expert cache needs at least one slot");
      for (let i = 0; i < S; i++) this.slots.push(this.mem.alloc(this.slotBytes, `expert slot ${i}`, ALIGN));
      this.slotKey = new Int32Array(S).fill(-1);
      this.slotState = new Uint8Array(S);
      this.slotInUse = new Uint8Array(S);
      this.slotEpoch = new Float64Array(S).fill(-1);
      this.slotTickets = Array.from({ length: S }, () => []);
      this.slotPlan = new Array(S);
      this.candidates = new Int32Array(Math.max(1, S));
      this.policy = makePolicy(opts.policy, { slots: Math.max(1, S), keys: cfg.numLayers * this.N });
    } catch (err) {
      this.close();
      throw err;
    }
  }

  private embedOffset = 0;

  private fd(file: string): number {
    const fd = this.fds.get(file);
    if (fd === undefined) throw new K3Error("INTERNAL", `no open file for ${file}`);
    return fd;
  }

  private ioError(res: number, what: string, file: string, off: number): K3Error {
    if (res === -4) return new K3Error("IO", `short read of ${what}: ${file} ends before offset ${off} + payload (was the shard truncated after indexing?)`);
    return new K3Error("IO", `read of ${what} failed: ${file} at offset ${off} (errno ${-res})`);
  }

  /** Synchronous reads (pinned units, embedding, rows). */
  private readNow(plan: ReadPlan, buf: CBuf, what: string, trunk: boolean): void {
    for (const r of plan.reads) {
      const res = Number(this.k.k3_read_full(this.fd(r.file), (buf.ptr + r.dst) as any, r.len, r.off, r.need));
      if (res < r.need) throw this.ioError(res, what, r.file, r.off);
      this.counters.reads++;
      if (trunk) this.counters.trunkBytesRead += r.payload;
      else this.counters.expertBytesRead += r.payload;
    }
  }

  /** Tickets submitted and not yet waited for (this provider's share of the I/O pool). */
  private outstanding = 0;

  private submit(plan: ReadPlan, base: number, what: string): number[] {
    const tickets: number[] = [];
    for (const r of plan.reads) {
      const t = Number(this.k.k3_io_submit(this.fd(r.file), (base + r.dst) as any, r.len, r.off, r.need));
      if (t <= 0) {
        // Never leave a read of this plan running into a buffer we are about to give up on.
        for (const done of tickets) this.k.k3_io_wait(done);
        this.outstanding -= tickets.length;
        throw new K3Error("INTERNAL", `I/O queue full while reading ${what}`);
      }
      tickets.push(t);
      this.outstanding++;
      this.counters.reads++;
    }
    return tickets;
  }

  private collect(plan: ReadPlan, tickets: number[], what: string): void {
    let err: K3Error | undefined;
    tickets.forEach((t, i) => {
      const res = Number(this.k.k3_io_wait(t));
      this.outstanding--;
      const r = plan.reads[i]!;
      if (res < r.need && !err) err = this.ioError(res, what, r.file, r.off);
    });
    if (err) throw err;
  }

  /** Land a ring slot's reads (and verify them); on failure the slot is emptied, never reused stale. */
  private landRing(slot: RingSlot): void {
    if (slot.ready || slot.unit < 0) return;
    const u = slot.unit;
    try {
      this.collect(this.units[u]!.plan, slot.tickets as number[], `trunk of ${unitName(u, this.ckpt.config.numLayers)}`);
      slot.tickets = [];
      this.verifyUnit(u, slot.buf.ptr);
    } catch (err) {
      slot.unit = -1;
      slot.tickets = [];
      slot.ready = false;
      throw err;
    }
    slot.ready = true;
  }

  // ---- embedding ----

  embedRow(id: number, dst: number): void {
    const E = this.ckpt.config.hidden;
    if (this.embedBuf) {
      this.k.k3_bf16_to_f32((this.embedBuf.ptr + this.embedOffset + id * E * 2) as any, dst as any, E);
      return;
    }
    const start = this.embed.offset + id * E * 2;
    const off = Math.floor(start / ALIGN) * ALIGN;
    const need = start + E * 2 - off;
    const len = Math.ceil(need / ALIGN) * ALIGN;
    const res = Number(this.k.k3_read_full(this.fd(this.embed.file), this.rowBuf.ptr as any, len, off, need));
    if (res < need) throw this.ioError(res, `embedding row ${id}`, this.embed.file, off);
    this.counters.reads++;
    this.counters.trunkBytesRead += E * 2;
    this.k.k3_bf16_to_f32((this.rowBuf.ptr + (start - off)) as any, dst as any, E);
  }

  // ---- trunk ----

  private unitRef(u: number, base: number): LayerRef {
    const unit = this.units[u]!;
    const prefix = `${LM_MODEL_PREFIX}layers.${u}.`;
    return {
      layer: u,
      t: (suffix: string) => {
        const name = prefix + suffix;
        const off = unit.plan.offsets.get(name);
        const te = unit.entries.get(name);
        if (off === undefined || !te) throw new K3Error("CHECKPOINT", `tensor ${name} is not part of layer ${u}'s trunk`);
        return { ptr: base + off, dtype: te.dtype, shape: te.shape, bytes: te.bytes };
      },
    };
  }

  /** Start reading unit u into a free ring slot (not in use, not holding u). */
  private prefetchUnit(u: number): void {
    if (this.ring.some((s) => s.unit === u)) return;
    const slot = this.ring.find((s) => !s.inUse);
    if (!slot) return;
    if (slot.unit >= 0 && !slot.ready) this.landRing(slot); // its reads still write into the buffer
    slot.unit = -1;
    slot.ready = false;
    slot.tickets = this.submit(this.units[u]!.plan, slot.buf.ptr, `trunk of ${unitName(u, this.ckpt.config.numLayers)}`);
    slot.unit = u;
    this.counters.trunkBytesRead += this.units[u]!.plan.payloadBytes;
  }

  private acquireUnit(u: number): number {
    const pinned = this.pinned.get(u);
    if (pinned) return pinned.ptr;
    let slot = this.ring.find((s) => s.unit === u);
    if (!slot) {
      this.prefetchUnit(u); // a free slot always exists here: units are used one at a time
      slot = this.ring.find((s) => s.unit === u);
      if (!slot) throw new K3Error("INTERNAL", `no ring slot free for ${unitName(u, this.ckpt.config.numLayers)}`);
    }
    this.landRing(slot);
    slot.inUse = true;
    // Run ahead only into ANOTHER slot: with one slot the next read would overwrite this unit.
    if (this.opts.prefetch && this.ring.length >= 2) try {
      // The walk is cyclic, except that a prefill chunk that is not the last one goes from the
      // last layer straight back to layer 0 (no lm_head): skip the head then, or its read is wasted.
      const head = this.ckpt.config.numLayers;
      let i = this.streamedOrder.indexOf(u);
      let next = this.streamedOrder[++i % this.streamedOrder.length]!;
      if (next === head && !this.headNext && this.streamedOrder.length > 1) next = this.streamedOrder[++i % this.streamedOrder.length]!;
      if (next !== u) this.prefetchUnit(next);
    } catch (err) {
      slot.inUse = false; // the caller never gets this unit, so it will never release it
      throw err;
    }
    return slot.buf.ptr;
  }

  private verifyUnit(u: number, base: number): void {
    const sums = this.opts.checksums;
    if (!sums) return;
    const t0 = performance.now();
    const crc = payloadCrc(this.k, this.units[u]!.plan, base);
    this.counters.verifyMs += performance.now() - t0;
    const want = sums.trunk.get(u);
    if (want === undefined || crc !== want) {
      const names = [...this.units[u]!.entries.keys()];
      throw new K3Error("VERIFY", `the trunk of ${unitName(u, this.ckpt.config.numLayers)} (${names.length} tensors: ${names.slice(0, 3).join(", ")}, …) fails its checksum: read ${crc.toString(16)}, recorded ${want === undefined ? "nothing" : want.toString(16)}`);
    }
  }

  /** Whether the head follows the last layer in the current pass (false for non-final chunks). */
  private headNext = true;
  setHeadNext(yes: boolean): void {
    this.headNext = yes;
  }

  private releaseUnit(u: number): void {
    const slot = this.ring.find((s) => s.unit === u);
    if (slot) slot.inUse = false;
  }

  acquireLayer(L: number): LayerRef {
    if (L === 0) this.epoch++;
    return this.unitRef(L, this.acquireUnit(L));
  }

  releaseLayer(L: number): void {
    this.releaseUnit(L);
  }

  /** Layer L's trunk if it is in memory right now (pinned or landed), without waiting. */
  peekLayer(L: number): LayerRef | null {
    const pinned = this.pinned.get(L);
    if (pinned) return this.unitRef(L, pinned.ptr);
    const slot = this.ring.find((s) => s.unit === L);
    if (!slot) return null;
    if (!slot.ready) {
      if (!(slot.tickets as number[]).every((t) => this.k.k3_io_done(t) === 1)) return null;
      this.landRing(slot); // verified like any other landing (--verify)
    }
    return this.unitRef(L, slot.buf.ptr);
  }

  head() {
    const u = this.ckpt.config.numLayers;
    const base = this.acquireUnit(u);
    const unit = this.units[u]!;
    const ref = (name: string): TensorRef => {
      const te = unit.entries.get(name)!;
      return { ptr: base + unit.plan.offsets.get(name)!, dtype: te.dtype, shape: te.shape, bytes: te.bytes };
    };
    const out = {
      lmHead: ref(LM_HEAD_NAME),
      norm: ref(`${LM_MODEL_PREFIX}norm.weight`),
      outResProj: ref(`${LM_MODEL_PREFIX}output_attn_res_proj.weight`),
      outResNorm: ref(`${LM_MODEL_PREFIX}output_attn_res_norm.weight`),
    };
    return out;
  }

  /** The head's slot is released once the logits are computed. */
  releaseHead(): void {
    this.releaseUnit(this.ckpt.config.numLayers);
  }

  // ---- experts ----

  private reserveSlot(forLayer: number): number {
    const S = this.slots.length;
    for (let i = 0; i < S; i++) if (this.slotState[i] === EMPTY) return i;
    let n = 0;
    for (let i = 0; i < S; i++) if (this.slotState[i] === READY && !this.slotInUse[i]) this.candidates[n++] = i;
    if (n === 0) {
      // Only lookahead reads still in flight are left: let one land, then it is a candidate.
      for (let i = 0; i < S; i++)
        if (this.slotState[i] === INFLIGHT && !this.slotInUse[i]) {
          this.land(i);
          this.candidates[n++] = i;
          break;
        }
      if (n === 0) return -1;
    }
    const v = this.policy.victim(this.candidates, n, this.t);
    this.keyToSlot.delete(this.slotKey[v]!);
    void forLayer;
    return v;
  }

  private startRead(slot: number, layer: number, e: number): void {
    const key = layer * this.N + e;
    const plan = this.expertPlan(layer, e);
    this.slotKey[slot] = key;
    this.slotState[slot] = INFLIGHT;
    this.slotEpoch[slot] = this.epoch;
    this.slotPlan[slot] = plan;
    this.keyToSlot.set(key, slot);
    this.policy.onInsert(slot, key, this.t);
    try {
      this.slotTickets[slot] = this.submit(plan, this.slots[slot]!.ptr, `expert ${e} of layer ${layer}`);
    } catch (err) {
      this.dropSlot(slot);
      throw err;
    }
    this.counters.expertBytesRead += plan.payloadBytes;
  }

  private dropSlot(slot: number): void {
    this.keyToSlot.delete(this.slotKey[slot]!);
    this.slotKey[slot] = -1;
    this.slotState[slot] = EMPTY;
    this.slotInUse[slot] = 0;
    this.slotTickets[slot] = [];
  }

  /** Wait for a slot's reads; publish it only if every byte arrived (and its checksum matches). */
  private land(slot: number): void {
    const key = this.slotKey[slot]!;
    const layer = Math.floor(key / this.N);
    const e = key % this.N;
    const plan = this.slotPlan[slot]!;
    try {
      this.collect(plan, this.slotTickets[slot]!, `expert ${e} of layer ${layer}`);
    } catch (err) {
      this.dropSlot(slot);
      throw err;
    }
    this.slotTickets[slot] = [];
    const sums = this.opts.checksums;
    if (sums) {
      const t0 = performance.now();
      const want = sums.experts.get(`${layer}:${e}`);
      const crc = payloadCrc(this.k, plan, this.slots[slot]!.ptr);
      this.counters.verifyMs += performance.now() - t0;
      if (want === undefined || crc !== want) {
        this.dropSlot(slot);
        throw new K3Error("VERIFY", `expert ${e} of layer ${layer} (${expertTensorNames(layer, e).join(", ")}) fails its checksum: read ${crc.toString(16)}, recorded ${want === undefined ? "nothing" : want.toString(16)}`);
      }
    }
    this.slotState[slot] = READY;
  }

  requestExperts(L: number, experts: number[]): void {
    this.reqLayer = L;
    this.reqQueue = [];
    this.reqSlots = [];
    this.handedOut = -1;
    for (const e of experts) {
      this.t++;
      this.counters.expertRequests++;
      const key = L * this.N + e;
      const s = this.keyToSlot.get(key);
      if (s !== undefined) {
        if (this.slotEpoch[s] === this.epoch) this.counters.lookaheadUsed++; // read this token: a miss
        else this.counters.expertHits++;
        this.policy.onHit(s, key, this.t);
        this.slotInUse[s] = 1;
        this.reqSlots.push(s);
        continue;
      }
      this.reqQueue.push(e);
    }
    this.issueQueued();
  }

  /** Give queued experts slots while any are free (reserve serially, read in parallel). */
  /**
   * Give queued experts slots and start their reads, while slots are free and at most
   * EXPERT_READS_IN_FLIGHT reads are outstanding (reserve serially, read in parallel). The rest
   * wait for nextExpert to consume what landed. With nothing of this request in flight, one read
   * is always issued, so the request makes progress whatever the lookahead holds.
   */
  private issueQueued(): void {
    while (this.reqQueue.length > 0) {
      const e = this.reqQueue[0]!;
      const reads = this.expertPlan(this.reqLayer, e).reads.length;
      const oursInFlight = this.reqSlots.some((s) => this.slotState[s] === INFLIGHT);
      if (oursInFlight && this.outstanding + reads > EXPERT_READS_IN_FLIGHT) return;
      const slot = this.reserveSlot(this.reqLayer);
      if (slot < 0) return;
      this.reqQueue.shift();
      this.startRead(slot, this.reqLayer, e);
      this.slotInUse[slot] = 1;
      this.reqSlots.push(slot);
    }
  }

  nextExpert(L: number): { expert: number; ref: ExpertRef } {
    if (L !== this.reqLayer) throw new K3Error("INTERNAL", `nextExpert(${L}) without a request for that layer`);
    // The expert handed out last time has been computed: its slot may now serve the queue.
    if (this.handedOut >= 0) {
      this.slotInUse[this.handedOut] = 0;
      this.handedOut = -1;
    }
    this.issueQueued(); // slots or read budget freed since the last call
    if (this.reqSlots.length === 0) {
      if (this.reqQueue.length > 0) throw new K3Error("BUDGET", `layer ${L}: the expert cache has no slot free for the remaining ${this.reqQueue.length} experts`);
      throw new K3Error("INTERNAL", `layer ${L}: no expert pending`);
    }
    // Ready ones first (request order), else the first of the in-flight ones to land.
    let i = this.reqSlots.findIndex((s) => this.slotState[s] === READY);
    if (i < 0) {
      const n = this.reqSlots.length;
      if (this.ticketScratch.length < n) this.ticketScratch = new BigInt64Array(n);
      for (let j = 0; j < n; j++) {
        const tk = this.slotTickets[this.reqSlots[j]!]!;
        this.ticketScratch[j] = BigInt(tk.at(-1) ?? 0); // the last read of a slot lands last (FIFO pool)
      }
      i = this.k.k3_io_wait_any(this.ticketScratch as any, n);
      if (i < 0) i = 0;
      this.land(this.reqSlots[i]!);
    }
    const slot = this.reqSlots.splice(i, 1)[0]!;
    this.handedOut = slot;
    const key = this.slotKey[slot]!;
    const e = key % this.N;
    const plan = this.slotPlan[slot] ?? this.expertPlan(L, e);
    const base = this.slots[slot]!.ptr;
    const names = expertTensorNames(L, e);
    const at = (suffix: string) => base + plan.offsets.get(names.find((n) => n.endsWith(suffix))!)!;
    return {
      expert: e,
      ref: {
        w1p: at("w1.weight_packed"),
        w1s: at("w1.weight_scale"),
        w2p: at("w2.weight_packed"),
        w2s: at("w2.weight_scale"),
        w3p: at("w3.weight_packed"),
        w3s: at("w3.weight_scale"),
      },
    };
  }

  releaseExperts(_L: number): void {
    for (const s of this.reqSlots) {
      // Requested but never consumed (an error unwound the layer): drain reads before reuse.
      if (this.slotState[s] === INFLIGHT) {
        try {
          this.land(s);
        } catch {
          /* the error that unwound us is already on its way */
        }
      }
    }
    this.slotInUse.fill(0);
    this.reqSlots = [];
    this.reqQueue = [];
    this.handedOut = -1;
    this.reqLayer = -1;
  }

  /** Lookahead: start reading experts the next layer's router is likely to pick. Exact: the real
   * router still decides; a wrong guess costs bytes, never correctness. */
  hintExperts(L: number, experts: number[]): void {
    for (const e of experts) {
      const key = L * this.N + e;
      if (this.keyToSlot.has(key)) continue;
      if (this.outstanding + this.expertPlan(L, e).reads.length > EXPERT_READS_IN_FLIGHT) return;
      const slot = this.reserveSlot(L);
      if (slot < 0) return;
      this.startRead(slot, L, e);
      this.counters.lookaheadIssued++;
    }
  }

  stats(): WeightStats {
    return { ...this.counters, ioWaitMs: (Number(this.k.k3_io_wait_ns()) - this.ioWaitBaseNs) / 1e6 };
  }

  close(): void {
    // Drain every read in flight before freeing the buffers they write into.
    for (const s of this.ring) for (const t of s.tickets as number[]) if (!s.ready) this.k.k3_io_wait(t);
    if (this.slotTickets) for (const ts of this.slotTickets) for (const t of ts) this.k.k3_io_wait(t);
    for (const fd of this.fds.values()) this.k.k3_file_close(fd);
    this.fds.clear();
    this.mem.free();
  }
}
