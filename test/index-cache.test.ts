// The catalogue cache: used when nothing changed, rebuilt when config, index or a shard changes,
// and written to the user's cache folder when the model folder is read-only.
import { describe, expect, test } from "bun:test";
import { cpSync, mkdirSync, readdirSync, utimesSync } from "node:fs";
import { basename, join } from "node:path";
import { openCheckpointCached, INDEX_CACHE_FILE, INDEX_CACHE_FORMAT } from "../src/checkpoint/index-cache.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

/** A copy of tiny-c without its catalogue cache (an earlier test file may have opened tiny-c). */
async function fresh(name: string): Promise<string> {
  const d = scratchDir(name);
  cpSync(await tinyModel("tiny-c"), d, { recursive: true, filter: (src) => basename(src) !== INDEX_CACHE_FILE });
  return d;
}

describe("catalogue cache", () => {
  test("second open comes from the cache and equals the full read", async () => {
    const d = await fresh("idx");
    const a = openCheckpointCached(d);
    expect(a.fromCache).toBe(false);
    expect(a.cachePath).toBe(join(d, INDEX_CACHE_FILE));
    const b = openCheckpointCached(d);
    expect(b.fromCache).toBe(true);
    expect([...b.tensors.entries()]).toEqual([...a.tensors.entries()]);
    expect(b.layout.contiguousLayers).toBe(a.layout.contiguousLayers);
    expect(b.shards).toEqual(a.shards);
  });

  test("a shard whose mtime or size changed invalidates the cache", async () => {
    const d = await fresh("idx-touch");
    openCheckpointCached(d);
    const shard = readdirSync(d).filter((f) => f.endsWith(".safetensors")).sort()[1]!;
    utimesSync(join(d, shard), new Date(), new Date(Date.now() + 5000));
    expect(openCheckpointCached(d).fromCache).toBe(false);
    expect(openCheckpointCached(d).fromCache).toBe(true);
  });

  test("when the model folder cannot take the cache file, it goes to XDG_CACHE_HOME", async () => {
    const d = await fresh("idx-ro");
    const cache = scratchDir("xdg");
    const old = process.env.XDG_CACHE_HOME;
    process.env.XDG_CACHE_HOME = cache;
    // chmod does not stop root (CI runs as root), so block the local path with a directory.
    mkdirSync(join(d, INDEX_CACHE_FILE));
    try {
      const a = openCheckpointCached(d);
      expect(a.fromCache).toBe(false);
      expect(a.cachePath!.startsWith(cache)).toBe(true);
      const b = openCheckpointCached(d);
      expect(b.fromCache).toBe(true);
      expect(b.cachePath).toBe(a.cachePath);
    } finally {
      if (old === undefined) delete process.env.XDG_CACHE_HOME;
      else process.env.XDG_CACHE_HOME = old;
    }
  });
});

describe("a damaged cache file", () => {
  test("valid JSON with missing fields costs a re-read, never the run", async () => {
    const d = await fresh("idx-damaged");
    const { writeFileSync } = await import("node:fs");
    writeFileSync(join(d, INDEX_CACHE_FILE), JSON.stringify({ format: INDEX_CACHE_FORMAT, root: d, index: "x" }));
    const a = openCheckpointCached(d);
    expect(a.fromCache).toBe(false);
    expect(a.tensors.size).toBeGreaterThan(0);
    expect(openCheckpointCached(d).fromCache).toBe(true); // rewritten intact
  });
});
