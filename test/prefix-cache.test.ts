// The prefix cache (src/batch/prefix-cache.ts): snapshots keyed by the token prefix, a RAM tier
// and a disk tier, LRU within their caps; a restored prefix gives the same bits as feeding it; a
// bad entry (a flipped byte, a truncated or foreign file) is dropped with a warning and never
// used; a directory or FIFO in the folder is left alone. (A full disk and a read-only folder, on
// real mounts: test/prefix-cache-disk.test.ts.)
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PREFIX_FILE_SUFFIX, PrefixCache, prefixFilePrefix, prefixKey } from "../src/batch/prefix-cache.ts";
import { Engine } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { captureState, snapshotBytes } from "../src/model/snapshot.ts";
import type { SessionState } from "../src/model/state.ts";
import { flipByte, scratchDir, tinyModel } from "./helpers/models.ts";

const hex = (a: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("hex");

let engine: Engine;
beforeAll(async () => {
  engine = Engine.open(await tinyModel("tiny-a"), { threads: 1, context: 128 });
});
afterAll(() => engine.close());

const A = [5, 17, 300, 42, 7, 99, 3, 250, 11, 12];
const B = [9, 8, 7, 6, 5, 4, 3, 2];

/** A session that has been fed `ids` (prefill only). */
function fed(ids: number[]) {
  const s = engine.createSession();
  engine.prefill(s, ids);
  return s;
}

function cache(opts: { ramBytes?: number; dir?: string; diskBytes?: number } = {}) {
  return new PrefixCache({ k: loadKernels(), identity: engine.identity, modelName: engine.name, vocab: engine.config.vocab, ramBytes: opts.ramBytes ?? 0, dir: opts.dir, diskBytes: opts.diskBytes ?? 2 ** 30 });
}

const stateHex = (s: SessionState) => hex(captureState(s).data);

/** Warnings logged while `f` runs (the cache warns on stderr through consola). */
async function warnings(f: () => void): Promise<string[]> {
  const { log } = await import("../src/log.ts");
  const seen: string[] = [];
  const orig = log.warn;
  log.warn = ((m: string) => void seen.push(String(m))) as unknown as typeof log.warn;
  try {
    f();
  } finally {
    log.warn = orig;
  }
  return seen;
}

describe("RAM tier", () => {
  test("the longest cached proper prefix is restored: state and next logits bit-identical to feeding it", () => {
    const c = cache({ ramBytes: 2 ** 26 });
    const src = fed(A.slice(0, 6));
    c.store(src.state);
    const longer = fed(A.slice(0, 8));
    c.store(longer.state);
    const s = engine.createSession();
    // ids = A: both are prefixes, the longer one wins; at most ids.length − 1 tokens.
    expect(c.restoreLongest(s.state, A, A.length - 1)).toBe(8);
    expect(stateHex(s.state)).toBe(stateHex(longer.state));
    expect(s.state.history).toEqual(A.slice(0, 8));
    const a = engine.prefill(s, A.slice(8)).slice();
    const b = engine.prefill(engine.createSession(), A).slice();
    expect(hex(new Uint8Array(a.buffer))).toBe(hex(new Uint8Array(b.buffer)));
    // maxLen below the longer entry: the shorter one; nothing for an unrelated prompt.
    expect(c.restoreLongest(engine.createSession().state, A, 7)).toBe(6);
    expect(c.restoreLongest(engine.createSession().state, B, B.length - 1)).toBe(0);
    expect(c.stats()).toMatchObject({ hits: 2, ramHits: 2, tokensSaved: 14, stores: 2, ramEntries: 2 });
  });

  test("LRU within the cap: the least recently used entry leaves first", () => {
    const one = snapshotBytes(fed(A.slice(0, 4)).state);
    const c = cache({ ramBytes: 2 * one + 100 }); // two snapshots of 4 tokens fit, not three
    const p1 = fed(A.slice(0, 4));
    const p2 = fed(B.slice(0, 4));
    c.store(p1.state);
    c.store(p2.state);
    expect(c.restoreLongest(engine.createSession().state, A, 9)).toBe(4); // p1 used: p2 is now oldest
    c.store(fed([1, 2, 3, 4]).state);
    expect(c.has(A.slice(0, 4))).toBe(true);
    expect(c.has(B.slice(0, 4))).toBe(false);
    expect(c.stats().ramBytes).toBeLessThanOrEqual(2 * one + 100);
    expect(c.stats().evictedRam).toBe(1);
  });
});

describe("disk tier", () => {
  test("RAM evictions spill to disk; a new cache on the same folder finds them; restore is exact", () => {
    const dir = scratchDir("prefix-disk");
    const c = cache({ ramBytes: 1, dir }); // nothing fits in RAM: straight to disk
    const src = fed(A.slice(0, 8));
    c.store(src.state);
    expect(readdirSync(dir).filter((n) => n.endsWith(PREFIX_FILE_SUFFIX))).toHaveLength(1);
    const again = cache({ ramBytes: 0, dir });
    const s = engine.createSession();
    expect(again.restoreLongest(s.state, A, A.length - 1)).toBe(8);
    expect(stateHex(s.state)).toBe(stateHex(src.state));
    expect(again.stats()).toMatchObject({ diskHits: 1, diskEntries: 1 });
  });

  test("persist() writes RAM-only entries to the disk tier (the engine does it when it closes)", () => {
    const dir = scratchDir("prefix-persist");
    const c = cache({ ramBytes: 2 ** 26, dir });
    const src = fed(B.slice(0, 6));
    c.store(src.state);
    expect(c.stats()).toMatchObject({ ramEntries: 1, diskEntries: 0 });
    c.persist();
    const s = engine.createSession();
    expect(cache({ dir }).restoreLongest(s.state, B, B.length - 1)).toBe(6);
    expect(stateHex(s.state)).toBe(stateHex(src.state));
  });

  test("the size cap evicts the least recently used files", () => {
    const dir = scratchDir("prefix-cap");
    const first = cache({ dir });
    first.store(fed(A.slice(0, 4)).state);
    const fileBytes = first.stats().diskBytes;
    const c = cache({ dir, diskBytes: 2 * fileBytes + 10 });
    c.store(fed(B.slice(0, 4)).state);
    expect(c.restoreLongest(engine.createSession().state, A, 9)).toBe(4); // A used: B is the oldest
    c.store(fed([1, 2, 3, 4]).state);
    expect(c.has(A.slice(0, 4))).toBe(true);
    expect(c.has(B.slice(0, 4))).toBe(false);
    expect(readdirSync(dir).filter((n) => n.endsWith(PREFIX_FILE_SUFFIX))).toHaveLength(2);
    expect(c.stats().diskBytes).toBeLessThanOrEqual(2 * fileBytes + 10);
  });

  test("a flipped byte: the entry is dropped with a warning, never used; the next longest prefix serves", async () => {
    const dir = scratchDir("prefix-flip");
    const c = cache({ dir });
    c.store(fed(A.slice(0, 4)).state);
    c.store(fed(A.slice(0, 8)).state);
    const bad = join(dir, readdirSync(dir).find((n) => n.includes(prefixKey(A.slice(0, 8))))!);
    flipByte(bad, statSync(bad).size - 100); // inside the payload: only the checksum can see it
    const s = engine.createSession();
    let got = 0;
    const warned = await warnings(() => (got = c.restoreLongest(s.state, A, 9)));
    expect(got).toBe(4);
    expect(stateHex(s.state)).toBe(stateHex(fed(A.slice(0, 4)).state));
    expect(warned.join("\n")).toMatch(/dropping a bad entry.*checksum mismatch/);
    expect(existsSync(bad)).toBe(false);
    expect(c.stats()).toMatchObject({ dropped: 1, hits: 1 });
  });

  test("truncated, foreign or garbage files: dropped at scan or at use, with a warning", async () => {
    const dir = scratchDir("prefix-bad");
    const c = cache({ dir });
    c.store(fed(A.slice(0, 4)).state);
    c.store(fed(B.slice(0, 4)).state);
    const names = readdirSync(dir);
    const fa = join(dir, names.find((n) => n.includes(prefixKey(A.slice(0, 4))))!);
    truncateSync(fa, statSync(fa).size - 1);
    const garbage = join(dir, `${prefixFilePrefix(engine.identity)}0000000000000000${PREFIX_FILE_SUFFIX}`);
    writeFileSync(garbage, "not a session file");
    let again!: PrefixCache;
    const atScan = await warnings(() => (again = cache({ dir })));
    expect(atScan.join("\n")).toMatch(/not a k3 session file/);
    expect(existsSync(garbage)).toBe(false);
    const s = engine.createSession();
    let got = -1;
    const atUse = await warnings(() => (got = again.restoreLongest(s.state, A, 9)));
    expect(got).toBe(0);
    expect(s.state.pos).toBe(0);
    expect(atUse.join("\n")).toMatch(/truncated/);
    expect(again.restoreLongest(engine.createSession().state, B, 7)).toBe(4);
  });

  test("a file replaced after the scan by another prefix's (valid, same model and weights): dropped at use, never restored", async () => {
    const dir = scratchDir("prefix-swapped");
    const c = cache({ dir });
    c.store(fed(A.slice(0, 4)).state);
    c.store(fed(B.slice(0, 4)).state);
    const again = cache({ dir }); // indexes both files by their headers
    const name = (t: number[]) => join(dir, `${prefixFilePrefix(engine.identity)}${prefixKey(t)}${PREFIX_FILE_SUFFIX}`);
    copyFileSync(name(B.slice(0, 4)), name(A.slice(0, 4))); // A's file now holds B's state: checksum and identity fine
    const s = engine.createSession();
    let got = -1;
    const warned = await warnings(() => (got = again.restoreLongest(s.state, A, 9)));
    expect(got).toBe(0);
    expect(s.state.pos).toBe(0);
    expect(warned.join("\n")).toMatch(/holds another prefix than its index entry/);
    expect(existsSync(name(A.slice(0, 4)))).toBe(false);
    expect(again.restoreLongest(engine.createSession().state, B, 7)).toBe(4); // B's own file is still good
  });

  test("another model's files in the folder are never used (nor deleted)", async () => {
    const dir = scratchDir("prefix-other");
    cache({ dir }).store(fed(A.slice(0, 4)).state);
    const other = Engine.open(await tinyModel("tiny-b"), { threads: 1, context: 128 });
    try {
      const c = new PrefixCache({ k: loadKernels(), identity: other.identity, modelName: other.name, vocab: other.config.vocab, ramBytes: 0, dir, diskBytes: 2 ** 30 });
      const s = other.createSession();
      expect(c.restoreLongest(s.state, A, 9)).toBe(0);
      expect(readdirSync(dir).filter((n) => n.endsWith(PREFIX_FILE_SUFFIX))).toHaveLength(1);
      s.close();
    } finally {
      other.close();
    }
  });

  test("a directory or FIFO named like an entry or its temp file: left alone with a warning, never an error; the cache goes on", async () => {
    const dir = scratchDir("prefix-odd");
    const name = (ids: number[]) => `${prefixFilePrefix(engine.identity)}${prefixKey(ids)}${PREFIX_FILE_SUFFIX}`;
    const odd = [name(A.slice(0, 4)), `${name(A.slice(0, 6))}.${process.pid}.tmp`, `${name(B.slice(0, 4))}.99999999.tmp`];
    mkdirSync(join(dir, odd[0]!));
    mkdirSync(join(dir, odd[1]!));
    expect(Bun.spawnSync(["mkfifo", join(dir, odd[2]!)]).exitCode).toBe(0);
    let c!: PrefixCache;
    const atScan = await warnings(() => (c = cache({ dir }))); // used to be "internal error … EISDIR"
    expect(atScan.join("\n")).toContain(`${join(dir, odd[0]!)} is a directory, not a cache file: left alone`);
    expect(atScan.join("\n")).toContain(`${join(dir, odd[2]!)} is a FIFO (named pipe), not a cache file: left alone`);
    // The entry whose path is a directory, and the one whose temp path is: each costs only itself.
    const atStore = await warnings(() => {
      c.store(fed(A.slice(0, 4)).state);
      c.store(fed(A.slice(0, 6)).state);
    });
    expect(atStore.join("\n")).toContain(`${join(dir, odd[0]!)}: cannot write session file there: it is a directory`);
    expect(atStore.join("\n")).toContain(`${join(dir, odd[1]!)} is in the way (a directory)`);
    expect(c.stats()).toMatchObject({ writeFailures: 2, diskEntries: 0, diskWritable: true });
    c.store(fed(B.slice(0, 4)).state); // the next write works
    expect(c.restoreLongest(engine.createSession().state, B, 7)).toBe(4);
    expect(readdirSync(dir).sort()).toEqual([...odd, name(B.slice(0, 4))].sort()); // nothing of theirs deleted
  });
});
