// S3-FIFO (Yang et al., SOSP '23): a small FIFO (10% of slots) filters one-hit keys, a main FIFO
// with a 2-bit use counter (reinserted while the counter is > 0) keeps the rest, and a ghost FIFO
// of recently evicted keys sends a returning key straight to main.
// Adapted to a slot cache with non-evictable slots: the queues are virtual (per-slot queue tag and
// insertion order), and the "head" of a queue is its oldest slot among the candidates.
// A small-queue key moves to main if it was hit at least once since insertion (freq > 0).
import type { EvictionPolicy, PolicySizes } from "./types.ts";

const SMALL = 0;
const MAIN = 1;

export class S3FifoPolicy implements EvictionPolicy {
  readonly name = "s3fifo";
  private readonly queue: Uint8Array; // [slots] SMALL | MAIN
  private readonly order: Float64Array; // [slots] position in its FIFO (larger = newer)
  private readonly freq: Uint8Array; // [slots] 0..3
  private readonly slotKey: Int32Array; // [slots]
  private readonly ghostStamp: Float64Array; // [keys] ghostSeq when evicted from small; 0 = never
  private readonly smallTarget: number;
  private readonly ghostCapacity: number;
  private smallCount = 0;
  private seq = 0;
  private ghostSeq = 0;

  constructor(sizes: PolicySizes) {
    this.queue = new Uint8Array(sizes.slots);
    this.order = new Float64Array(sizes.slots);
    this.freq = new Uint8Array(sizes.slots);
    this.slotKey = new Int32Array(sizes.slots).fill(-1);
    this.ghostStamp = new Float64Array(sizes.keys);
    this.smallTarget = Math.max(1, Math.round(sizes.slots * 0.1));
    this.ghostCapacity = Math.max(1, sizes.slots - this.smallTarget);
  }

  private inGhost(key: number): boolean {
    const stamp = this.ghostStamp[key]!;
    return stamp > 0 && this.ghostSeq - stamp < this.ghostCapacity;
  }
  onHit(slot: number): void {
    if (this.freq[slot]! < 3) this.freq[slot]!++;
  }
  onInsert(slot: number, key: number): void {
    const toMain = this.inGhost(key);
    if (toMain) this.ghostStamp[key] = 0;
    else this.smallCount++;
    this.queue[slot] = toMain ? MAIN : SMALL;
    this.order[slot] = ++this.seq;
    this.freq[slot] = 0;
    this.slotKey[slot] = key;
  }

  /** Oldest candidate of queue q, or -1. */
  private oldest(candidates: Int32Array, count: number, q: number): number {
    let best = -1;
    for (let i = 0; i < count; i++) {
      const s = candidates[i]!;
      if (this.queue[s] === q && (best < 0 || this.order[s]! < this.order[best]!)) best = s;
    }
    return best;
  }

  victim(candidates: Int32Array, count: number): number {
    // Terminates: each pass either evicts, moves a slot small→main (smallCount falls), or
    // decrements a main slot's freq; all are bounded.
    for (;;) {
      const small = this.oldest(candidates, count, SMALL);
      const main = this.oldest(candidates, count, MAIN);
      if (small >= 0 && (this.smallCount > this.smallTarget || main < 0)) {
        if (this.freq[small]! > 0) {
          this.queue[small] = MAIN;
          this.order[small] = ++this.seq;
          this.freq[small] = 0;
          this.smallCount--;
          continue;
        }
        this.smallCount--;
        this.ghostStamp[this.slotKey[small]!] = ++this.ghostSeq; // ≥ 1: 0 means "never evicted"
        return small;
      }
      if (this.freq[main]! > 0) {
        this.freq[main]!--;
        this.order[main] = ++this.seq;
        continue;
      }
      return main;
    }
  }
}
