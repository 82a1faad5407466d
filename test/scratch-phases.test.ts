// The forward pass's scratch (src/model/buffers.ts): the four phases of a layer (KDA, MLA, dense
// FFN, MoE) share one region, each phase's buffers end to end from its start, so a pass's scratch
// is the largest phase, not their sum. What this checks on the model as it allocates: buffers of
// one phase never overlap (the float64 reference tests would see that as wrong logits), phases
// do overlap each other, buffers of no phase overlap nothing, and the slice model's scratch per
// row is what the sharing promises (its prefill chunk and pinned trunk at 8G depend on it:
// docs/BENCH-KERNELS.md, "Streamed prefill").
import { describe, expect, test } from "bun:test";
import { parseConfig } from "../src/checkpoint/config.ts";
import type { ModelConfig } from "../src/checkpoint/types.ts";
import { loadKernels } from "../src/kernels.ts";
import { FORWARD_BUFFERS, forwardBufferBytes, passShape, type ForwardBufferName, type ForwardBuffers } from "../src/model/buffers.ts";
import { Model } from "../src/model/forward.ts";
import type { WeightProvider } from "../src/model/weights.ts";
import { buildConfigJson } from "../tools/gen/config-json.ts";
import { PRESETS } from "../tools/gen/presets.ts";

const NO_WEIGHTS = new Proxy({}, { get: () => () => { throw new Error("no forward pass in this test"); } }) as WeightProvider;
const phaseOf = (n: ForwardBufferName): string | undefined => (FORWARD_BUFFERS[n] as { phase?: string }).phase;

function buffersOf(cfg: ModelConfig, chunk: number): { b: ForwardBuffers; bytes: number } {
  const model = new Model(loadKernels(), cfg, NO_WEIGHTS, chunk, 300, 0);
  const b = (model as unknown as { b: ForwardBuffers }).b;
  const view = Object.fromEntries(Object.entries(b).map(([n, x]) => [n, { ...x }])) as unknown as ForwardBuffers;
  const bytes = model.allocatedBytes;
  model.free();
  return { b: view, bytes };
}

const overlap = (a: { ptr: number; bytes: number }, b: { ptr: number; bytes: number }) => a.ptr < b.ptr + b.bytes && b.ptr < a.ptr + a.bytes;

describe("the forward pass's phase scratch", () => {
  for (const preset of ["tiny-a", "slice"])
    test(`${preset}: one phase's buffers are disjoint, phases share memory, the rest overlaps nothing`, () => {
      const cfg = parseConfig(buildConfigJson(PRESETS[preset]!), preset);
      const { b } = buffersOf(cfg, 8);
      const names = Object.keys(b) as ForwardBufferName[];
      const same: string[] = [];
      let shared = 0;
      for (let i = 0; i < names.length; i++)
        for (let j = i + 1; j < names.length; j++) {
          const [x, y] = [names[i]!, names[j]!];
          const [px, py] = [phaseOf(x), phaseOf(y)];
          const hit = overlap(b[x], b[y]);
          if (hit && (px === undefined || py === undefined || px === py)) same.push(`${x} / ${y}`);
          if (hit && px !== undefined && py !== undefined && px !== py) shared++;
        }
      expect(same).toEqual([]);
      expect(shared).toBeGreaterThan(0);
      for (const p of ["kda", "mla", "dense", "moe"]) expect(names.some((n) => phaseOf(n) === p)).toBe(true);
    });

  test("slice: 128 rows of scratch take the largest phase (MoE), under 0.6 MiB per row, as planned", () => {
    const cfg = parseConfig(buildConfigJson(PRESETS.slice!), "slice");
    const { bytes } = buffersOf(cfg, 128);
    expect(bytes).toBe(forwardBufferBytes(cfg, passShape(128, 1, 300, 0)));
    // The phases one after another took 1.34 MB per row (KDA 0.30, MLA 0.18, dense 0.27, MoE 0.39).
    expect(bytes / 128).toBeLessThan(0.6 * 2 ** 20);
  });
});
