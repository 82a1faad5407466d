// The planner promises to sum every allocation before any is made (src/memory/plan.ts). These
// tests hold it to that against what the code really allocates in C memory: the forward pass's
// scratch and a session's state for every generator preset and the released config, at several
// prefill chunk sizes and contexts; and, on generated checkpoints (contiguous and broken layouts),
// everything an open engine allocates against the plan it follows.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { parseConfig, readConfig } from "../src/checkpoint/config.ts";
import { computeCensus } from "../src/checkpoint/census.ts";
import type { ModelConfig } from "../src/checkpoint/types.ts";
import { Engine } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { planInputFromCensus, planMemory, type MemoryPlan } from "../src/memory/plan.ts";
import { Model } from "../src/model/forward.ts";
import { autoDrafts } from "../src/model/buffers.ts";
import { SessionState } from "../src/model/state.ts";
import type { WeightProvider } from "../src/model/weights.ts";
import { buildConfigJson } from "../tools/gen/config-json.ts";
import { PRESETS } from "../tools/gen/presets.ts";
import { snakeKeys } from "../src/report.ts";
import { SPLIT_PIECES, streamingBudget } from "./helpers/budgets.ts";
import { WHOLE_UNITS } from "../src/memory/pieces.ts";
import { tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);

const CONFIGS: [string, ModelConfig][] = [
  ...Object.keys(PRESETS).map((p): [string, ModelConfig] => [p, parseConfig(buildConfigJson(PRESETS[p]!), p)]),
  ["release", readConfig(`${import.meta.dir}/../reference/k3/config.json`)],
];
const CHUNKS = [1, 2, 3, 8, 32, 64];

/** A provider the constructor may hold but the test never runs a pass through. */
const NO_WEIGHTS = new Proxy({}, { get: () => () => { throw new Error("no forward pass in this test"); } }) as WeightProvider;

const item = (p: MemoryPlan, name: string) => {
  const it = p.items.find((i) => i.name === name);
  if (!it) throw new Error(`plan has no item "${name}"`);
  return it.bytes;
};

/** The plan of a config with every unit pinned and every expert cached (nothing depends on it here). */
function planFor(cfg: ModelConfig, chunk: number, context: number): MemoryPlan {
  return planMemory(planInputFromCensus(cfg, computeCensus(cfg), 2 ** 50, context, 2, chunk));
}

describe("the planner covers the forward pass's scratch", () => {
  for (const [name, cfg] of CONFIGS)
    test(`${name}: chunk ${CHUNKS.join(", ")} × context 1, 300, 4096`, () => {
      const k = loadKernels();
      const under: string[] = [];
      for (const chunk of CHUNKS)
        for (const context of [1, 300, 4096]) {
          // As the engine opens it by default (--speculate auto): room for a verify pass.
          const model = new Model(k, cfg, NO_WEIGHTS, chunk, context, autoDrafts(chunk));
          const allocated = model.allocatedBytes;
          model.free();
          const planned = item(planFor(cfg, chunk, context), "scratch");
          expect(allocated).toBeGreaterThan(0);
          if (planned < allocated) under.push(`chunk ${chunk}, context ${context}: planned ${planned} < allocated ${allocated}`);
        }
      expect(under).toEqual([]);
    });
});

describe("the planner covers a session's state", () => {
  for (const [name, cfg] of CONFIGS)
    test(`${name}: context 1, 300`, () => {
      for (const context of [1, 300]) {
        const state = new SessionState(loadKernels(), cfg, context);
        const allocated = state.bytes;
        state.free();
        const p = planFor(cfg, 1, context);
        expect(item(p, "KDA state") + item(p, "MLA cache")).toBeGreaterThanOrEqual(allocated);
      }
    });
});

describe("an open engine allocates no more than its plan", () => {
  for (const broken of [false, true])
    test(`tiny-a${broken ? " (broken layout: several reads per unit)" : ""}: floor, two ring slots, everything × chunk 1, 8, 32 × default, split and whole-unit pieces`, async () => {
      const dir = await tinyModel("tiny-a", { breakLayout: broken });
      const over: string[] = [];
      for (const pieces of [undefined, SPLIT_PIECES, { pieceBytes: WHOLE_UNITS }])
      for (const chunk of [1, 8, 32]) {
        const floor = streamingBudget(dir, { chunk, context: 256, pieces });
        const twoSlots = streamingBudget(dir, { chunk, context: 256, ringSlots: 2, pieces });
        for (const ram of [floor, twoSlots, 2 ** 30]) {
          const e = Engine.open(dir, { ram: String(ram), context: 256, chunk, threads: 1, trunkPieces: pieces });
          try {
            const s = e.createSession();
            const plan = e.plan!;
            const allocated = e.allocatedBytes();
            const used = allocated.forward + allocated.weights + s.allocatedBytes;
            const planned = plan.totalBytes - item(plan, "runtime");
            if (used > planned) over.push(`chunk ${chunk}, ram ${ram}: allocated ${used} (forward ${allocated.forward}, weights ${allocated.weights}, session ${s.allocatedBytes}) > planned ${planned}`);
            s.close();
          } finally {
            e.close();
          }
        }
      }
      expect(over).toEqual([]);
    });
});

describe("k3 plan DIR prints the plan Engine.open follows", () => {
  test("the same plan on the release-like and the broken layout (exact read-plan buffers, context, threads)", async () => {
    for (const broken of [false, true]) {
      const dir = await tinyModel("tiny-a", { breakLayout: broken });
      const ram = String(streamingBudget(dir, { context: 256, ringSlots: 2 }));
      const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", "plan", dir, "--ram", ram, "--context", "256", "--threads", "1", "--json"], { env: { ...process.env, NO_COLOR: "1" } });
      expect(p.exitCode).toBe(0);
      // (the default trunk is auto: the plan printed is the chosen trunk's, with both side by side)
      const { trunk_choice: choice, ...printed } = JSON.parse(p.stdout.toString());
      const e = Engine.open(dir, { ram, context: 256, threads: 1 });
      try {
        expect({ broken, plan: printed }).toEqual({ broken, plan: snakeKeys({ model: dir, budgetSource: `--ram ${ram}`, trunk: e.trunk, ...e.plan! }) });
        expect([choice.chosen, choice.options.map((o: { trunk: string }) => o.trunk)]).toEqual([e.trunk, ["bf16", "exact"]]);
      } finally {
        e.close();
      }
    }
  });
});
