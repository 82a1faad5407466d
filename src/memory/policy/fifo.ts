// First in, first out: evicts the slot filled longest ago, ignoring hits. A floor for the others.
import type { EvictionPolicy, PolicySizes } from "./types.ts";

export class FifoPolicy implements EvictionPolicy {
  readonly name = "fifo";
  private readonly insertedAt: Float64Array; // [slots] t of the insert

  constructor(sizes: PolicySizes) {
    this.insertedAt = new Float64Array(sizes.slots);
  }
  onHit(): void {}
  onInsert(slot: number, _key: number, t: number): void {
    this.insertedAt[slot] = t;
  }
  victim(candidates: Int32Array, count: number): number {
    let best = candidates[0]!;
    for (let i = 1; i < count; i++) {
      const s = candidates[i]!;
      if (this.insertedAt[s]! < this.insertedAt[best]!) best = s;
    }
    return best;
  }
}
