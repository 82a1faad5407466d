// Belady's MIN: evict the slot whose key is next requested farthest in the future. With demand
// paging (every requested key must be loaded) it gives the fewest misses of any policy, so it is
// the ceiling the others are measured against. Needs the whole request sequence: simulation only.
// With the "one layer's k experts are in use together" rule the current layer's slots are not
// candidates; they behave as if requested again right now, so MIN's exchange argument carries
// over (test/policy-real.test.ts checks Belady ≥ every policy on the real traces).
import type { EvictionPolicy, PolicySizes } from "./types.ts";

/** nextUse[t] = index of the next request for the same key after request t, or Infinity. */
export function nextUseTable(requests: Int32Array, keys: number): Float64Array {
  const next = new Float64Array(requests.length);
  const seen = new Float64Array(keys).fill(Infinity); // [keys] earliest later request
  for (let t = requests.length - 1; t >= 0; t--) {
    const key = requests[t]!;
    next[t] = seen[key]!;
    seen[key] = t;
  }
  return next;
}

export class BeladyPolicy implements EvictionPolicy {
  readonly name = "belady";
  private readonly slotNext: Float64Array; // [slots] next request index of the slot's key

  constructor(
    sizes: PolicySizes,
    private readonly nextUse: Float64Array,
  ) {
    this.slotNext = new Float64Array(sizes.slots);
  }
  onHit(slot: number, _key: number, t: number): void {
    this.slotNext[slot] = this.nextUse[t]!;
  }
  onInsert(slot: number, _key: number, t: number): void {
    this.slotNext[slot] = this.nextUse[t]!;
  }
  victim(candidates: Int32Array, count: number): number {
    let best = candidates[0]!;
    for (let i = 1; i < count; i++) {
      const s = candidates[i]!;
      if (this.slotNext[s]! > this.slotNext[best]!) best = s;
    }
    return best;
  }
}
