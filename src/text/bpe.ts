// Byte-level BPE in the tiktoken style: no merges list, only a rank per token byte string.
// A piece's bytes start as single bytes; repeatedly the adjacent pair whose concatenation has the
// LOWEST rank is merged (leftmost on ties), until no adjacent concatenation has a rank. A piece
// that is itself a token is emitted directly (tiktoken's shortcut; it matters for tables where
// a token is not reachable by merges, e.g. truncated ones).

/** Token byte strings by id, plus a byte-keyed hash index for rank lookups without allocating. */
export class RankTable {
  /** all token bytes back to back; token id's bytes are store[offsets[id] .. offsets[id+1]) */
  private readonly store: Uint8Array;
  /** [ids + 1]; an id with offsets[id] === offsets[id+1] has no token (a gap) */
  private readonly offsets: Uint32Array;
  /** open addressing, power-of-two size, -1 = empty, else a token id */
  private readonly slots: Int32Array;
  private readonly mask: number;

  /** `tokens[id]` = bytes of token id (undefined = unused id). Duplicate byte strings are a bug of the caller. */
  constructor(tokens: ReadonlyArray<Uint8Array | undefined>) {
    let total = 0;
    let count = 0;
    for (const t of tokens) if (t) (total += t.length), count++;
    this.store = new Uint8Array(total);
    this.offsets = new Uint32Array(tokens.length + 1);
    let at = 0;
    for (let id = 0; id < tokens.length; id++) {
      this.offsets[id] = at;
      const t = tokens[id];
      if (t) {
        this.store.set(t, at);
        at += t.length;
      }
    }
    this.offsets[tokens.length] = at;
    let size = 1024;
    while (size < count * 2) size *= 2;
    this.slots = new Int32Array(size).fill(-1);
    this.mask = size - 1;
    for (let id = 0; id < tokens.length; id++) {
      const t = tokens[id];
      if (!t) continue;
      let h = hashBytes(t, 0, t.length) & this.mask;
      while (this.slots[h] !== -1) h = (h + 1) & this.mask;
      this.slots[h] = id;
    }
  }

  get size(): number {
    return this.offsets.length - 1;
  }

  /** Bytes of token `id` (a view into the store; do not modify), or undefined for a gap / out of range. */
  bytes(id: number): Uint8Array | undefined {
    if (!(id >= 0 && id < this.size)) return undefined;
    const a = this.offsets[id]!;
    const b = this.offsets[id + 1]!;
    return a === b ? undefined : this.store.subarray(a, b);
  }

  /** Rank of buf[a..b), or -1 when that byte string is not a token. */
  rank(buf: Uint8Array, a: number, b: number): number {
    const len = b - a;
    let h = hashBytes(buf, a, b) & this.mask;
    for (;;) {
      const id = this.slots[h]!;
      if (id === -1) return -1;
      const s = this.offsets[id]!;
      if (this.offsets[id + 1]! - s === len) {
        let i = 0;
        while (i < len && this.store[s + i] === buf[a + i]) i++;
        if (i === len) return id;
      }
      h = (h + 1) & this.mask;
    }
  }
}

/** FNV-1a over buf[a..b) (32-bit). */
function hashBytes(buf: Uint8Array, a: number, b: number): number {
  let h = 0x811c9dc5;
  for (let i = a; i < b; i++) h = Math.imul(h ^ buf[i]!, 0x01000193);
  return h >>> 0;
}

const NONE = 0x7fffffff; // "no rank": larger than any real rank

/** Above this many bytes the heap merge is used (the scan merge is O(n^2)). */
export const HEAP_THRESHOLD = 64;

/**
 * Token ids of one piece's bytes buf[0..n). Appends to `out`. Requires every single byte to have
 * a rank (RankTable users check this at load), so the result always covers the piece exactly.
 */
export function bytePairEncode(table: RankTable, buf: Uint8Array, n: number, out: number[], forceHeap = false): void {
  if (n === 0) return;
  const whole = table.rank(buf, 0, n);
  if (whole >= 0) {
    out.push(whole);
    return;
  }
  if (n > HEAP_THRESHOLD || forceHeap) heapMerge(table, buf, n, out);
  else scanMerge(table, buf, n, out);
}

/**
 * tiktoken's own algorithm: starts[i] = byte offset of part i (starts[count] = n);
 * pair[i] = rank of parts i and i+1 joined. Each step merges the first minimum.
 */
function scanMerge(table: RankTable, buf: Uint8Array, n: number, out: number[]): void {
  const starts = new Int32Array(n + 1);
  const pair = new Int32Array(n);
  for (let i = 0; i <= n; i++) starts[i] = i;
  let count = n; // parts
  const pairRank = (i: number): number => {
    if (i + 2 > count) return NONE;
    const r = table.rank(buf, starts[i]!, starts[i + 2]!);
    return r < 0 ? NONE : r;
  };
  for (let i = 0; i < count - 1; i++) pair[i] = pairRank(i);
  pair[count - 1] = NONE;
  for (;;) {
    let best = NONE;
    let at = -1;
    for (let i = 0; i < count - 1; i++) {
      if (pair[i]! < best) {
        best = pair[i]!;
        at = i;
      }
    }
    if (at < 0) break;
    // remove part at+1: shift starts/pair left by one from at+1
    starts.copyWithin(at + 1, at + 2, count + 1);
    pair.copyWithin(at + 1, at + 2, count);
    count--;
    pair[at] = pairRank(at);
    if (at > 0) pair[at - 1] = pairRank(at - 1);
  }
  for (let i = 0; i < count; i++) out.push(table.rank(buf, starts[i]!, starts[i + 1]!));
}

/**
 * Same result as scanMerge in O(n log n): parts form a linked list over byte offsets; a binary
 * min-heap holds (rank, start) of candidate pairs, ordered by rank then start, so ties go to the
 * leftmost pair exactly as in the scan. Entries go stale when a neighbour merges; an entry is
 * valid iff its part is alive and the pair's current rank still equals the stored rank (equal
 * rank means equal bytes from the same start, so the same pair).
 */
function heapMerge(table: RankTable, buf: Uint8Array, n: number, out: number[]): void {
  const next = new Int32Array(n); // next part start, n = end
  const prev = new Int32Array(n); // previous part start, -1 = none
  const alive = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    next[i] = i + 1;
    prev[i] = i - 1;
    alive[i] = 1;
  }
  const heapRank: number[] = [];
  const heapStart: number[] = [];
  const less = (a: number, b: number) =>
    heapRank[a]! < heapRank[b]! || (heapRank[a] === heapRank[b] && heapStart[a]! < heapStart[b]!);
  const swap = (a: number, b: number) => {
    const r = heapRank[a]!;
    heapRank[a] = heapRank[b]!;
    heapRank[b] = r;
    const s = heapStart[a]!;
    heapStart[a] = heapStart[b]!;
    heapStart[b] = s;
  };
  const push = (rank: number, start: number) => {
    heapRank.push(rank);
    heapStart.push(start);
    let i = heapRank.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(i, p)) break;
      swap(i, p);
      i = p;
    }
  };
  const pop = () => {
    const last = heapRank.length - 1;
    swap(0, last);
    heapRank.pop();
    heapStart.pop();
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heapRank.length && less(l, m)) m = l;
      if (r < heapRank.length && less(r, m)) m = r;
      if (m === i) break;
      swap(i, m);
      i = m;
    }
  };
  const pairRank = (start: number): number => {
    const mid = next[start]!;
    if (mid >= n) return -1;
    return table.rank(buf, start, next[mid]!);
  };
  for (let i = 0; i + 1 < n; i++) {
    const r = pairRank(i);
    if (r >= 0) push(r, i);
  }
  while (heapRank.length > 0) {
    const rank = heapRank[0]!;
    const start = heapStart[0]!;
    pop();
    if (!alive[start] || pairRank(start) !== rank) continue; // stale
    const mid = next[start]!;
    alive[mid] = 0;
    next[start] = next[mid]!;
    if (next[start]! < n) prev[next[start]!] = start;
    const r = pairRank(start);
    if (r >= 0) push(r, start);
    const p = prev[start]!;
    if (p >= 0) {
      const pr = pairRank(p);
      if (pr >= 0) push(pr, p);
    }
  }
  for (let s = 0; s < n; s = next[s]!) out.push(table.rank(buf, s, next[s]!));
}
