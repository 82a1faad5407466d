// The planner with several sessions (`--parallel`) and the prefix cache's RAM tier, on the real
// release metadata: every session's state and the wider pass are summed, the defaults keep the
// trunk ring's second slot, the prefix cache's default comes out of expert slots (never pins), and
// a model built for P sessions allocates no more scratch than planned.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { catalogueFromMetadata, type MetadataCatalogue } from "../src/checkpoint/catalogue.ts";
import { K3Error } from "../src/errors.ts";
import { loadKernels } from "../src/kernels.ts";
import { censusSlots, defaultParallel, defaultPrefixCacheBytes, maxParallelAt, planMemory, sessionStateBytes, type PlanInput } from "../src/memory/plan.ts";
import { metadataSlots } from "../src/memory/slots.ts";
import { PRESETS } from "../src/memory/ram.ts";
import { Model } from "../src/model/forward.ts";
import type { WeightProvider } from "../src/model/weights.ts";

setDefaultTimeout(120_000); // reading the release's metadata takes seconds on a busy machine

const REF = join(import.meta.dir, "../reference/k3");
const GiB = 2 ** 30;
let release: MetadataCatalogue;
beforeAll(() => {
  release = catalogueFromMetadata(`${REF}/config.json`, `${REF}/model.safetensors.index.json.gz`);
});
/** The release as the engine plans it (the trunk in pieces: two ring slots at every budget). */
const input = (budgetBytes: number, more: Partial<PlanInput> = {}): PlanInput => ({ cfg: release.config, ...release.census, budgetBytes, contextTokens: 4096, threads: 16, slots: metadataSlots(release.config), ...more });
/** Whole units (one piece per unit): a budget may get one ring slot only. */
const wholeUnits = (budgetBytes: number, more: Partial<PlanInput> = {}): PlanInput => input(budgetBytes, { slots: censusSlots(release.census), ...more });
const item = (p: ReturnType<typeof planMemory>, name: string) => p.items.find((i) => i.name === name)?.bytes ?? 0;

describe("parallel sessions in the plan", () => {
  test("P sessions: P × (KDA state + MLA cache), the pass P − 1 rows wider; items still add up", () => {
    const one = planMemory(input(PRESETS.desktop!, { parallel: 1, drafts: 0 }));
    const four = planMemory(input(PRESETS.desktop!, { parallel: 4, drafts: 0 }));
    expect(item(four, "KDA state")).toBe(4 * item(one, "KDA state"));
    expect(item(four, "MLA cache")).toBe(4 * item(one, "MLA cache"));
    expect(item(four, "KDA state") + item(four, "MLA cache")).toBe(4 * sessionStateBytes(release.config, 4096));
    // 3 more rows of activations and 3 more logit rows.
    expect(item(four, "scratch")).toBeGreaterThan(item(one, "scratch"));
    expect(item(four, "scratch") - item(one, "scratch")).toBeLessThan(40e6);
    expect(four.items.reduce((a, i) => a + i.bytes, 0)).toBe(four.totalBytes);
    expect(four.totalBytes).toBeLessThanOrEqual(PRESETS.desktop!);
    expect(four.parallel).toBe(4);
    // Sessions come before the trunk: fewer pinned bytes than with one session.
    const pinned = (p: typeof one) => item(p, "pinned trunk") + item(p, "head");
    expect(pinned(four)).toBeLessThan(pinned(one));
  });

  test("with speculation every session has a rollback slot (batched steps verify several sessions' drafts): P slots of verify records", () => {
    const spec = (parallel: number, drafts: number) => item(planMemory(input(PRESETS.desktop!, { parallel, drafts, prefillChunk: 32 })), "scratch");
    const slot = spec(1, 8) - spec(1, 0); // one slot's records, the scratch state, 8 more logit rows
    const four = spec(4, 8) - spec(4, 0);
    // Four slots of records (the scratch state once), up to 4 × 9 logit rows: close to 4 slots.
    expect(four).toBeGreaterThan(3.5 * slot);
    expect(four).toBeLessThan(4.5 * slot);
  });

  test("laptop: a sessions' count that does not fit is refused naming --parallel and how many fit; the default is 4", () => {
    const i = input(PRESETS.laptop!);
    const most = maxParallelAt(i);
    expect(most).toBeGreaterThanOrEqual(4);
    expect(defaultParallel(i)).toBe(4);
    expect(planMemory({ ...i, parallel: most }).ringSlots).toBe(2);
    try {
      planMemory({ ...i, parallel: most + 1 });
      throw new Error("expected a BUDGET error");
    } catch (e) {
      expect((e as K3Error).code).toBe("BUDGET");
      expect(String((e as K3Error).problems)).toContain(`at most ${most} fit this budget (--parallel)`);
    }
  });

  test("whole units: the default never takes the ring's second slot; just below 4 sessions' two-slot floor it picks fewer", () => {
    const i = wholeUnits(PRESETS.laptop!);
    expect(planMemory({ ...i, parallel: 1 }).ringSlots).toBe(2);
    // Shrink the budget until 4 sessions would only get one ring slot.
    let budget = PRESETS.laptop!;
    while (planMemory({ ...i, budgetBytes: budget, parallel: 4 }).ringSlots === 2) budget -= 64 * 2 ** 20;
    const p = defaultParallel({ ...i, budgetBytes: budget });
    expect(p).toBeLessThan(4);
    expect(planMemory({ ...i, budgetBytes: budget, parallel: p }).ringSlots).toBe(2);
  });

  test("the prefix cache's default RAM tier comes out of expert slots: same pins, same ring, top-k slots left", () => {
    for (const preset of ["laptop", "desktop", "workstation", "server"]) {
      const i = input(PRESETS[preset]!, { parallel: preset === "laptop" ? 4 : 2 });
      const bytes = defaultPrefixCacheBytes(i);
      const without = planMemory(i);
      const withIt = planMemory({ ...i, prefixCacheBytes: bytes });
      expect(item(withIt, "prefix cache")).toBe(bytes);
      expect(withIt.pinnedLayers).toEqual(without.pinnedLayers);
      expect(withIt.head).toBe(without.head);
      expect(withIt.ringSlots).toBe(without.ringSlots);
      expect(withIt.expertSlots).toBeGreaterThanOrEqual(release.config.topK);
      expect(bytes).toBeLessThanOrEqual(0.1 * PRESETS[preset]!);
    }
    // At the server preset the expert cache is big: the tier gets one full-context session per slot.
    expect(defaultPrefixCacheBytes(input(PRESETS.server!, { parallel: 4 }))).toBe(4 * sessionStateBytes(release.config, 4096));
    expect(defaultPrefixCacheBytes(input(PRESETS.server!, { parallel: 4 })) / GiB).toBeGreaterThan(2.5);
  });

  test("a model built for P sessions allocates no more scratch than the plan of P sessions says", () => {
    const NO_WEIGHTS = new Proxy({}, { get: () => () => { throw new Error("no pass"); } }) as WeightProvider;
    for (const P of [1, 2, 4]) {
      const m = new Model(loadKernels(), release.config, NO_WEIGHTS, 32, 4096, 0, P);
      const allocated = m.allocatedBytes;
      m.free();
      expect(item(planMemory(input(2 ** 50, { parallel: P, drafts: 0, prefillChunk: 32 })), "scratch")).toBeGreaterThanOrEqual(allocated);
    }
  });
});
