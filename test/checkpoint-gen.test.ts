// Round trip with the test-model generator (tools/gen): what it writes is what the catalogue
// finds, byte for byte; its release-like layout reads as contiguous, and --break-layout as not.
import { describe, expect, test } from "bun:test";
import { closeSync, openSync, readSync } from "node:fs";
import { basename, join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { expertExtent } from "../src/checkpoint/layout.ts";
import { generateModel } from "../tools/gen/generate.ts";
import { tempDir } from "./helpers/checkpoint-fixture.ts";

function readAt(file: string, offset: number, bytes: number): Uint8Array {
  const fd = openSync(file, "r");
  try {
    const buf = new Uint8Array(bytes);
    expect(readSync(fd, buf, 0, bytes, offset)).toBe(bytes);
    return buf;
  } finally {
    closeSync(fd);
  }
}

describe("generator round trip (tiny-a)", async () => {
  const dir = join(tempDir("gen"), "tiny-a");
  const gen = await generateModel(dir, { preset: "tiny-a", seed: 7 });
  const ck = openCheckpoint(dir);

  test("every generated tensor is catalogued (LM) or ignored (vision), with its metadata", () => {
    const ignored = new Set(ck.ignored);
    expect(ck.tensors.size + ignored.size).toBe(gen.tensors.size);
    for (const [name, g] of gen.tensors) {
      const t = ck.tensors.get(name);
      if (!t) {
        expect(ignored.has(name)).toBe(true);
        expect(name.startsWith("language_model.")).toBe(false);
        continue;
      }
      expect([basename(t.file), t.dtype, t.shape]).toEqual([g.file, g.dtype, g.shape]);
    }
  });
  test("every LM tensor's bytes at the catalogued offset are what the generator wrote", () => {
    let checked = 0;
    for (const [name, t] of ck.tensors) {
      const want = gen.tensors.get(name)!.data;
      expect(want).toBeDefined();
      expect(t.bytes).toBe(want!.length);
      expect(Buffer.compare(readAt(t.file, t.offset, t.bytes), want!)).toBe(0);
      checked++;
    }
    expect(checked).toBe(ck.tensors.size);
  });
  test("layout facts: every trunk one run, every expert one read", () => {
    expect(ck.layout.contiguousLayers).toBe(ck.config.numLayers);
    expect(ck.layout.adjacentExperts).toBe(ck.layout.census.expertCount);
    expect(ck.layout.census.expertCount).toBe((ck.config.numLayers - 1) * ck.config.numExperts);
  });
});

describe("generator round trip (tiny-a, breakLayout)", async () => {
  const dir = join(tempDir("gen-broken"), "tiny-a");
  await generateModel(dir, { preset: "tiny-a", seed: 7, breakLayout: true });
  const ck = openCheckpoint(dir);
  test("the facts say not contiguous where the layout was broken", () => {
    const moe = ck.config.numLayers - ck.config.firstKDense;
    // MoE layers lose trunk contiguity and expert 0's adjacency; layer 0 (dense) keeps its run.
    expect(ck.layout.layers.filter((l) => l.trunkExtent).map((l) => l.layer)).toEqual([0]);
    expect(ck.layout.adjacentExperts).toBe(ck.layout.census.expertCount - moe);
    expect(expertExtent(ck.layout, 1, 0)).toBeNull();
    expect(expertExtent(ck.layout, 1, 1)).not.toBeNull();
  });
});
