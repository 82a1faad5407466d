// The prefix cache: session-state snapshots keyed by the token prefix they hold, so a request
// whose prompt starts with a cached prefix restores that state and feeds only the rest (chat
// clients resend the whole conversation every turn; K3 prompt tokens cost seconds each).
//
// Two tiers, both LRU by last use:
//   - RAM: snapshots (src/model/snapshot.ts) up to `ramBytes`, inside the memory plan's budget
//     (the planner's "prefix cache" item);
//   - disk (optional, `dir`): session files (src/model/session-file.ts: tied to what produced
//     them — the model, the trunk format and pack, the exact shard bytes — and a CRC-32 over
//     tokens and payload) up to `diskBytes`. A snapshot leaving RAM is written here; one bigger
//     than the RAM tier goes straight here. Files survive restarts (last use = mtime). Named
//     `<model>-<weights>-<prefix>.k3prefix`: engines of other models, other trunks (a bf16 and an
//     int4 server sharing the folder) or other shard bytes never use each other's files, nor
//     delete them (another engine may be using them); a scan logs how many it left alone and why.
//
// Invariants:
//   - an entry is used only after its bytes are checked: a RAM snapshot is checked against the
//     session it is restored into (it was taken by this engine, from these weights); a file
//     against its identity (model and weights) and its checksum first.
//     A bad entry is dropped (its file deleted) with a warning and the lookup goes on to the next
//     longest prefix; nothing wrong is ever restored;
//   - a failed write (a vanished folder, a directory in the way) leaves no file behind and only
//     costs the entry (a warning, counted); the server goes on. A full disk (ENOSPC, EDQUOT)
//     evicts this cache's oldest files and retries; when nothing is left to evict, the disk tier
//     stops writing, with one warning (its files are still read). A read-only folder is said at
//     start (its files are read, none written);
//   - only regular files are read, written or deleted: a directory or FIFO named like an entry
//     (or its temp file) is left alone with a warning, never opened blocking, never an error;
//   - an entry's tokens are exactly the state's history: restoring it and feeding the rest of the
//     prompt is the same computation as feeding the whole prompt (incremental == recompute);
//   - the cache never holds more than its caps (the RAM figure counts snapshot data bytes).
import { mkdirSync, readdirSync, statSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { K3Error } from "../errors.ts";
import { isDiskFull, notRegular, removeFile, writableDir } from "../files.ts";
import type { Kernels } from "../kernels.ts";
import { log } from "../log.ts";
import { identityHash, identityMismatch, readSessionHeader, readSnapshot, saveSession, saveSnapshot, type StateIdentity } from "../model/session-file.ts";
import { captureState, restoreState, snapshotBytes, type StateSnapshot } from "../model/snapshot.ts";
import type { SessionState } from "../model/state.ts";

export const PREFIX_FILE_SUFFIX = ".k3prefix";

export interface PrefixCacheOptions {
  k: Kernels;
  /** What this engine's states are computed with (Engine.identity): files of another model or of
   *  other weights are never used. */
  identity: StateIdentity;
  modelName: string;
  vocab: number;
  /** RAM tier size in bytes (0: no RAM tier). */
  ramBytes: number;
  /** Disk tier folder (created if missing); absent: no disk tier. */
  dir?: string;
  /** Disk tier size cap in bytes (files, headers included). */
  diskBytes?: number;
}

export interface PrefixCacheStats {
  lookups: number;
  hits: number;
  ramHits: number;
  diskHits: number;
  /** Prompt tokens restored instead of fed. */
  tokensSaved: number;
  /** State bytes copied in by hits. */
  bytesRestored: number;
  stores: number;
  /** Entries dropped because they failed a check (bad file, wrong layout). */
  dropped: number;
  /** Files in the disk tier's folder of this model but other weights (another trunk, other shard
   *  bytes, an older k3): seen at the scan, never used, left in place. */
  otherWeights: number;
  /** Disk writes that failed (full disk, …): the entry was lost, nothing else. */
  writeFailures: number;
  /** Whether the disk tier still writes: false for a read-only folder, or once a full disk left
   *  nothing of this cache's to evict (its files are still read). */
  diskWritable: boolean;
  evictedRam: number;
  evictedDisk: number;
  ramEntries: number;
  ramBytes: number;
  ramCapBytes: number;
  diskEntries: number;
  diskBytes: number;
  diskCapBytes: number;
}

interface Entry {
  key: string;
  tokens: number[];
  lastUse: number;
  /** In RAM: the snapshot (data bytes count against the RAM cap). */
  ram?: StateSnapshot;
  /** On disk: the file and its size. */
  file?: { path: string; bytes: number };
}

/** The cache key of a token prefix (hash of the ids; entries also keep the ids, compared whole). */
export function prefixKey(tokens: number[]): string {
  return Bun.hash(new Int32Array(tokens).buffer).toString(16).padStart(16, "0");
}

/** The start of the disk tier's file names for an engine: `<model>-<weights>-` (16 + 8 hex digits:
 *  the model's fingerprint, then a hash of the whole identity). */
export function prefixFilePrefix(identity: StateIdentity): string {
  return `${identity.model.slice(0, 16)}-${identityHash(identity).slice(0, 8)}-`;
}

export class PrefixCache {
  private readonly entries = new Map<string, Entry>();
  private clock = 0;
  /** The disk tier writes new entries (a disk tier, not read-only, not stopped by a full disk). */
  private diskWritable: boolean;
  private readonly counters = { lookups: 0, hits: 0, ramHits: 0, diskHits: 0, tokensSaved: 0, bytesRestored: 0, stores: 0, dropped: 0, otherWeights: 0, writeFailures: 0, evictedRam: 0, evictedDisk: 0 };
  /** File names of this model start with `model-`; this engine's with `model-weights-`. */
  private readonly modelPrefix: string;
  private readonly ownPrefix: string;

  constructor(private readonly o: PrefixCacheOptions) {
    this.modelPrefix = `${o.identity.model.slice(0, 16)}-`;
    this.ownPrefix = prefixFilePrefix(o.identity);
    if (!Number.isSafeInteger(o.ramBytes) || o.ramBytes < 0) throw new K3Error("USAGE", `prefix cache RAM size must be ≥ 0 bytes, got ${o.ramBytes}`);
    if (o.dir !== undefined) {
      if (!Number.isSafeInteger(o.diskBytes) || o.diskBytes! < 1) throw new K3Error("USAGE", `prefix cache disk size must be ≥ 1 byte, got ${o.diskBytes}`);
      try {
        mkdirSync(o.dir, { recursive: true });
      } catch (e) {
        throw new K3Error("USAGE", `cannot use ${o.dir} as the prefix cache folder: ${(e as Error).message}`);
      }
      this.diskWritable = writableDir(o.dir); // a read-only mount says EROFS even to root
      if (!this.diskWritable) log.warn(`prefix cache: ${o.dir} is read-only: the entries in it are used, but no new ones are written there`);
      this.scanDisk();
    } else this.diskWritable = false;
  }

  get enabled(): boolean {
    return this.o.ramBytes > 0 || this.o.dir !== undefined;
  }

  /** The longest cached prefix of `ids` no longer than `maxLen` tokens (undefined: none). */
  longest(ids: number[], maxLen: number): { tokens: number; key: string } | undefined {
    let best: Entry | undefined;
    for (const e of this.entries.values()) {
      const n = e.tokens.length;
      if (n > maxLen || n === 0 || (best && n <= best.tokens.length)) continue;
      if (isPrefix(e.tokens, ids)) best = e;
    }
    return best && { tokens: best.tokens.length, key: best.key };
  }

  /**
   * Restore the longest usable cached prefix of `ids` (at most `maxLen` tokens, and longer than
   * `minLen`) into `state`. Returns the tokens restored, or 0 (state untouched) when nothing
   * usable is cached. A bad entry is dropped and the next longest tried.
   */
  restoreLongest(state: SessionState, ids: number[], maxLen: number, minLen = 0): number {
    if (!this.enabled) return 0;
    this.counters.lookups++;
    for (;;) {
      const hit = this.longest(ids, maxLen);
      if (!hit || hit.tokens <= minLen) return 0;
      const e = this.entries.get(hit.key)!;
      const from = e.ram ? "ram" : "disk";
      const snap = this.load(e, state);
      if (!snap) continue;
      try {
        restoreState(state, snap, `prefix cache entry ${e.key}`);
      } catch (err) {
        this.drop(e, (err as Error).message);
        continue;
      }
      e.lastUse = this.tick();
      if (e.file) touch(e.file.path);
      this.counters.hits++;
      this.counters[from === "ram" ? "ramHits" : "diskHits"]++;
      this.counters.tokensSaved += snap.pos;
      this.counters.bytesRestored += snap.data.byteLength;
      return snap.pos;
    }
  }

  /** True when exactly this prefix is cached. */
  has(tokens: number[]): boolean {
    const e = this.entries.get(prefixKey(tokens));
    return !!e && sameTokens(e.tokens, tokens);
  }

  /** Keep a snapshot of `state` (its whole history) unless that prefix is already cached. */
  store(state: SessionState): void {
    if (!this.enabled || state.pos === 0 || state.dirty || state.freed) return;
    if (this.has(state.history)) {
      this.entries.get(prefixKey(state.history))!.lastUse = this.tick();
      return;
    }
    const key = prefixKey(state.history);
    const bytes = snapshotBytes(state);
    if (bytes > this.o.ramBytes && this.o.dir === undefined) return; // nowhere to keep it: no copy made
    const e: Entry = { key, tokens: state.history.slice(), lastUse: this.tick() };
    this.counters.stores++;
    this.entries.set(key, e);
    if (bytes <= this.o.ramBytes) {
      e.ram = captureState(state);
      this.fitRam();
    } else this.spill(e, state); // straight from the session's buffers: no copy in RAM
  }

  /** Write every entry that is only in RAM to the disk tier (the engine closes: a restarted
   *  server keeps its prefixes). Nothing without a disk tier; failures are warnings as always. */
  persist(): void {
    if (this.o.dir === undefined) return;
    for (const e of this.lru((x) => !!x.ram && !x.file).reverse()) this.spill(e, e.ram!);
  }

  stats(): PrefixCacheStats {
    let ramEntries = 0;
    let diskEntries = 0;
    for (const e of this.entries.values()) {
      if (e.ram) ramEntries++;
      if (e.file) diskEntries++;
    }
    return { ...this.counters, diskWritable: this.diskWritable, ramEntries, ramBytes: this.ramUsed(), ramCapBytes: this.o.ramBytes, diskEntries, diskBytes: this.diskUsed(), diskCapBytes: this.o.dir === undefined ? 0 : this.o.diskBytes! };
  }

  // ---- tiers ----

  private tick(): number {
    return (this.clock = Math.max(this.clock + 1, Date.now()));
  }

  private ramUsed(): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.ram) n += e.ram.data.byteLength;
    return n;
  }

  private diskUsed(): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.file) n += e.file.bytes;
    return n;
  }

  /** Oldest first. */
  private lru(pred: (e: Entry) => boolean): Entry[] {
    return [...this.entries.values()].filter(pred).sort((a, b) => a.lastUse - b.lastUse);
  }

  /** Evict RAM entries (least recently used first) until the tier fits its cap; each goes to disk
   *  when there is a disk tier and it is not there already. */
  private fitRam(): void {
    let used = this.ramUsed();
    for (const e of this.lru((x) => !!x.ram)) {
      if (used <= this.o.ramBytes) break;
      const snap = e.ram!;
      used -= snap.data.byteLength;
      e.ram = undefined;
      this.counters.evictedRam++;
      if (!e.file && this.o.dir !== undefined) this.spill(e, snap);
      else if (!e.file) this.entries.delete(e.key);
    }
  }

  /** Write an entry's snapshot to the disk tier (making room first); a failure loses the entry.
   *  A full disk evicts this cache's oldest files (about the entry's size first, then one at a
   *  time) and retries; with none left the tier stops writing, said once. */
  private spill(e: Entry, from: StateSnapshot | SessionState): void {
    if (!this.diskWritable) {
      if (!e.ram) this.entries.delete(e.key); // read-only or full: said once already
      return;
    }
    const path = join(this.o.dir!, `${this.ownPrefix}${e.key}${PREFIX_FILE_SUFFIX}`);
    let need = "data" in from ? from.data.byteLength : snapshotBytes(from);
    for (;;) {
      try {
        if ("data" in from) saveSnapshot(this.o.k, from, this.o.identity, this.o.modelName, path, { prefixCache: 1 });
        else saveSession(this.o.k, from, [], this.o.identity, this.o.modelName, path, { prefixCache: 1 });
        e.file = { path, bytes: statSync(path).size };
        break;
      } catch (err) {
        if (isDiskFull(err) && this.evictForRoom(e, need)) {
          need = 1; // then one file at a time
          continue;
        }
        this.counters.writeFailures++;
        if (isDiskFull(err)) {
          this.diskWritable = false;
          log.warn(`prefix cache: ${this.o.dir} is full (${(err as Error).message}) and holds no more of this cache's files to evict: no new entries are written there until k3 restarts (the ${this.lru((x) => !!x.file).length} there are still used)`);
        } else log.warn(`prefix cache: could not write ${path} (${(err as Error).message}); that prefix is not kept`);
        if (!e.ram) this.entries.delete(e.key);
        return;
      }
    }
    this.fitDisk();
  }

  /** Evict disk files (oldest first, never `keep`'s) until `bytes` are freed; false when there
   *  was nothing to evict. */
  private evictForRoom(keep: Entry, bytes: number): boolean {
    let freed = 0;
    for (const e of this.lru((x) => !!x.file && x !== keep)) {
      if (freed >= bytes) break;
      freed += e.file!.bytes;
      this.evictFile(e);
    }
    return freed > 0;
  }

  private fitDisk(): void {
    let used = this.diskUsed();
    for (const e of this.lru((x) => !!x.file)) {
      if (used <= this.o.diskBytes!) break;
      used -= e.file!.bytes;
      this.evictFile(e);
    }
  }

  private evictFile(e: Entry): void {
    removeFile(e.file!.path);
    e.file = undefined;
    this.counters.evictedDisk++;
    if (!e.ram) this.entries.delete(e.key);
  }

  /** The entry's snapshot: from RAM, or read from its file and checked whole. Undefined (and the
   *  entry dropped, with a warning) when the file is bad. */
  private load(e: Entry, state: SessionState): StateSnapshot | undefined {
    if (e.ram) return e.ram;
    try {
      const { snap } = readSnapshot(this.o.k, this.o.vocab, this.o.identity, e.file!.path);
      if (!sameTokens(snap.history, e.tokens)) throw new K3Error("SESSION", `${e.file!.path} holds another prefix than its index entry`);
      if (snap.pos > state.maxContext) throw new K3Error("SESSION", `${e.file!.path} holds ${snap.pos} tokens, more than the context`);
      return snap;
    } catch (err) {
      this.drop(e, (err as Error).message);
      return undefined;
    }
  }

  private drop(e: Entry, why: string): void {
    this.counters.dropped++;
    log.warn(`prefix cache: dropping a bad entry (${why}); its prefix will be computed again`);
    if (e.file) removeFile(e.file.path);
    this.entries.delete(e.key);
  }

  /** Index the disk tier: this engine's files by header (a bad one is deleted with a warning),
   *  this model's files of other weights counted and left alone, leftovers of interrupted writes
   *  removed, then the cap applied. */
  private scanDisk(): void {
    const dir = this.o.dir!;
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch (e) {
      throw new K3Error("USAGE", `cannot read the prefix cache folder ${dir}: ${(e as Error).message}`);
    }
    let otherWhy: string | undefined;
    for (const name of names) {
      const path = join(dir, name);
      const ofModel = name.startsWith(this.modelPrefix) && name.endsWith(PREFIX_FILE_SUFFIX);
      const debris = name.endsWith(".tmp") && name.includes(PREFIX_FILE_SUFFIX);
      if (!ofModel && !debris) continue; // another model's, or not a cache file
      // Named like an entry or a temp file but a directory, FIFO, …: not ours to open or delete.
      const what = notRegular(path);
      if (what) {
        log.warn(`prefix cache: ${path} is ${what}, not a cache file: left alone`);
        continue;
      }
      if (debris) {
        if (!writerAlive(name)) removeFile(path);
        continue;
      }
      if (!name.startsWith(this.ownPrefix)) {
        this.counters.otherWeights++;
        otherWhy ??= this.otherReason(path);
        continue;
      }
      try {
        const { header, fileBytes } = readSessionHeader(path);
        const mismatch = identityMismatch(header, this.o.identity, path);
        if (mismatch) throw mismatch; // named as ours, holds another's state: not trusted
        const key = prefixKey(header.history);
        if (name !== `${this.ownPrefix}${key}${PREFIX_FILE_SUFFIX}`) throw new K3Error("SESSION", `${path}: its name does not match the prefix it holds`);
        this.entries.set(key, { key, tokens: header.history, lastUse: statSync(path).mtimeMs, file: { path, bytes: fileBytes } });
      } catch (err) {
        this.counters.dropped++;
        log.warn(`prefix cache: dropping ${path} (${(err as Error).message})`);
        removeFile(path);
      }
    }
    if (this.counters.otherWeights > 0)
      log.warn(`prefix cache: ${this.counters.otherWeights} entries in ${dir} were written for other weights of this model (${otherWhy}): not used, and left in place (another engine may use them; delete them when none does)`);
    this.clock = Math.max(this.clock, ...[...this.entries.values()].map((e) => e.lastUse));
    this.fitDisk();
  }

  /** Why a file of this model but not of this engine's weights is not ours (for the scan's log). */
  private otherReason(path: string): string {
    try {
      const why = identityMismatch(readSessionHeader(path).header, this.o.identity, path)?.message ?? `${path} is named for other weights`;
      return why.split("\n")[0]!; // the reason, without the advice meant for a session's owner
    } catch (err) {
      return (err as Error).message.split("\n")[0]!;
    }
  }
}

function isPrefix(p: number[], ids: number[]): boolean {
  if (p.length > ids.length) return false;
  for (let i = 0; i < p.length; i++) if (p[i] !== ids[i]) return false;
  return true;
}

const sameTokens = (a: number[], b: number[]) => a.length === b.length && isPrefix(a, b);

/** Mark a file used now (its mtime is its last use across restarts); best effort. */
function touch(path: string): void {
  try {
    const now = new Date();
    utimesSync(path, now, now);
  } catch {
    // a file that vanished is found bad on its next use
  }
}

/** A temporary file `NAME.PID.tmp` whose writer process still runs (its file is not debris). */
function writerAlive(name: string): boolean {
  const pid = Number(/\.(\d+)\.tmp$/.exec(name)?.[1]);
  if (!Number.isInteger(pid) || pid === process.pid) return pid === process.pid;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
