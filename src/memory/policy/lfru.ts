// LFRU: frequency first, recency second. Each key (layer, expert) keeps a request count that
// survives eviction, so an expert that keeps coming back wins over one seen once; ties (common:
// K3's router balances use on purpose) go to the least recently used slot.
// Aging: every `agingInterval` requests the counts halve, so yesterday's favourites fade. The
// halving is lazy (count >> epochs since the key's last touch), so aging costs O(1) per access
// and no sweep over all keys.
import type { EvictionPolicy, PolicySizes } from "./types.ts";

export interface LfruOptions {
  /** Requests per halving of every count. Default 8 × slots: on both reference traces 6–10× beat
   *  1× and 64× (docs/CACHE.md); two ~300-token traces are thin evidence, so it is an option. */
  agingInterval?: number;
}

export class LfruPolicy implements EvictionPolicy {
  readonly name = "lfru";
  private readonly count: Uint32Array; // [keys] requests of the key, as of epochOf[key]
  private readonly epochOf: Float64Array; // [keys] epoch when count was last normalized
  private readonly slotKey: Int32Array; // [slots]
  private readonly lastUse: Float64Array; // [slots]
  private readonly agingInterval: number;

  constructor(sizes: PolicySizes, opts: LfruOptions = {}) {
    this.count = new Uint32Array(sizes.keys);
    this.epochOf = new Float64Array(sizes.keys);
    this.slotKey = new Int32Array(sizes.slots);
    this.lastUse = new Float64Array(sizes.slots);
    this.agingInterval = Math.max(1, opts.agingInterval ?? 8 * sizes.slots);
  }

  /** The aged count of `key` at time t. */
  private freq(key: number, t: number): number {
    const age = Math.floor(t / this.agingInterval) - this.epochOf[key]!;
    return age >= 32 ? 0 : this.count[key]! >>> age;
  }
  private touch(slot: number, key: number, t: number): void {
    this.count[key] = this.freq(key, t) + 1;
    this.epochOf[key] = Math.floor(t / this.agingInterval);
    this.slotKey[slot] = key;
    this.lastUse[slot] = t;
  }
  onHit(slot: number, key: number, t: number): void {
    this.touch(slot, key, t);
  }
  onInsert(slot: number, key: number, t: number): void {
    this.touch(slot, key, t);
  }
  victim(candidates: Int32Array, count: number, t: number): number {
    let best = candidates[0]!;
    let bestFreq = this.freq(this.slotKey[best]!, t);
    for (let i = 1; i < count; i++) {
      const s = candidates[i]!;
      const f = this.freq(this.slotKey[s]!, t);
      if (f < bestFreq || (f === bestFreq && this.lastUse[s]! < this.lastUse[best]!)) {
        best = s;
        bestFreq = f;
      }
    }
    return best;
  }
}
