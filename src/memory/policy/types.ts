// The eviction-policy contract shared by the cache simulator (src/memory/simulate.ts) and the
// engine's real expert slot cache. A policy only ranks slots; the cache owns the key↔slot map,
// the slot states (EMPTY / INFLIGHT / key, STREAMING.md §4) and decides which slots may be victims.
//
// Invariants the caller keeps (each policy relies on them):
//  - `t` is a request counter that never decreases (the simulator passes the request index in the
//    trace; Belady's policy indexes its future-knowledge table with it).
//  - Empty slots are filled before `victim` is ever asked: a policy never sees an empty slot.
//  - `victim` is only called with slots that hold a key and are evictable (not pinned, not INFLIGHT,
//    not part of the layer being computed); `count` ≥ 1. The returned slot is refilled with
//    `onInsert` before the next `victim` call.
// Per-access calls allocate nothing: state lives in typed arrays sized at construction.

export interface EvictionPolicy {
  readonly name: string;
  /** `key` was requested and found in `slot`. */
  onHit(slot: number, key: number, t: number): void;
  /** `key` was just placed in `slot` (a miss: the bytes are being read from disk). */
  onInsert(slot: number, key: number, t: number): void;
  /** Choose the slot to evict among candidates[0..count). */
  victim(candidates: Int32Array, count: number, t: number): number;
}

/** What every policy is built from. `keys` bounds the key space: 0 ≤ key < keys. */
export interface PolicySizes {
  slots: number;
  keys: number;
}
