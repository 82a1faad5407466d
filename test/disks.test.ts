// `k3 disks` (issue 26 item 3): which drive holds what, what each serves per token under the plan,
// and what moving shards to the fastest drive would save. The placement model is checked with
// injected devices and rates (no timing); the command itself runs through the binary.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, realpathSync, statSync, symlinkSync, utimesSync } from "node:fs";
import { basename, join } from "node:path";
import { openCheckpoint, type Checkpoint } from "../src/checkpoint/catalogue.ts";
import { Engine } from "../src/engine.ts";
import { placementReport, type DeviceRates } from "../src/memory/placement.ts";
import { planInputFromCensus, planMemory, type MemoryPlan } from "../src/memory/plan.ts";
import { streamSlots } from "../src/memory/slots.ts";
import { parseTrace } from "../src/memory/trace.ts";
import { streamingBudget } from "./helpers/budgets.ts";
import { compiledK3, STACK_FRAME } from "./helpers/k3-binary.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);
let model = "";
let ckpt: Checkpoint;
const deviceOf = (f: string) => /\/(drive-[a-z])\//.exec(f)?.[1] ?? "model";
// drive-a reads 10× faster than drive-b (bytes per second).
const rates = new Map<string, DeviceRates>([
  ["hook:drive-a", { expert: 2e9, trunk: 3e9, direct: true }],
  ["hook:drive-b", { expert: 2e8, trunk: 3e8, direct: true }],
]);

beforeAll(async () => {
  const src = await tinyModel("tiny-a");
  const root = realpathSync(scratchDir("disks"));
  model = join(root, "model");
  for (const d of ["model", "drive-a", "drive-b"]) mkdirSync(join(root, d));
  readdirSync(src).forEach((f, i) => {
    if (!f.endsWith(".safetensors")) return copyFileSync(join(src, f), join(model, f));
    const at = join(root, i % 3 === 0 ? "drive-a" : "drive-b", f);
    copyFileSync(join(src, f), at);
    utimesSync(at, statSync(join(src, f)).atime, statSync(join(src, f)).mtime);
    symlinkSync(at, join(model, f));
  });
  ckpt = openCheckpoint(model);
});

const planAt = (bytes: number): MemoryPlan => planMemory(planInputFromCensus(ckpt.config, ckpt.layout.census, bytes, 4096, 1, 32, streamSlots(ckpt)));

describe("the placement model", () => {
  test("at the floor: each shard's per-token bytes on its drive; moves to the fast drive, best first, each saving bytes × (1/slow − 1/fast)", () => {
    const plan = planAt(streamingBudget(model));
    const r = placementReport(ckpt, plan, { deviceOf, rates });
    expect(r.drives.map((d) => d.device.name).sort()).toEqual(["drive-a", "drive-b"]);
    expect(r.drives.reduce((a, d) => a + d.shards.length, 0)).toBe(ckpt.shards.length);
    // Nothing is pinned at the floor: every trunk byte is read per token, plus one embedding row.
    const trunk = r.shards.reduce((a, s) => a + s.trunkBytesPerToken, 0);
    expect(trunk).toBe(ckpt.layout.census.trunkBytes + ckpt.layout.census.headBytes + ckpt.layout.census.finalBytes + ckpt.config.hidden * 2);
    expect(r.fastest).toBe("drive-a");
    expect(r.moves.length).toBeGreaterThan(0);
    for (const m of r.moves) {
      const s = r.shards.find((x) => x.file === m.file)!;
      expect(m.from).toBe("drive-b");
      expect(m.savesSecondsPerToken).toBeCloseTo(s.trunkBytesPerToken * (1 / 3e8 - 1 / 3e9) + s.expertBytesPerToken * (1 / 2e8 - 1 / 2e9), 12);
    }
    const saves = r.moves.map((m) => m.savesSecondsPerToken);
    expect(saves).toEqual([...saves].sort((a, b) => b - a));
    const total = r.shards.reduce((a, s) => a + s.trunkBytesPerToken / rates.get(`hook:${deviceOf(realpathSync(join(model, s.file)))}`)!.trunk + s.expertBytesPerToken / rates.get(`hook:${deviceOf(realpathSync(join(model, s.file)))}`)!.expert, 0);
    expect(r.secondsPerToken).toBeCloseTo(total, 12);
    expect(r.secondsPerTokenAfter).toBeCloseTo(total - saves.reduce((a, b) => a + b, 0), 12);
  });

  test("with everything resident only the experts' misses and the embedding rows are per-token bytes", () => {
    const c = ckpt.layout.census;
    const everything = c.trunkBytes + c.headBytes + c.expertBytes * c.expertCount + 64 * 4096 * (c.expertCount + c.trunkBytesPerLayer.length + 2);
    const r = placementReport(ckpt, planAt(streamingBudget(model) + everything), { deviceOf, rates });
    expect(r.shards.reduce((a, s) => a + s.trunkBytesPerToken, 0)).toBe(ckpt.config.hidden * 2);
    expect(r.expertHitRate).toBe(1);
    expect(r.shards.every((s) => s.expertBytesPerToken === 0)).toBe(true);
  });

  test("a routing trace weighs each layer's experts by its misses; a trace of another model is refused", () => {
    const trace = join(scratchDir("disks-trace"), "t.jsonl");
    const e = Engine.open(model, { threads: 1, ram: String(streamingBudget(model)), trace });
    for (const _ of e.generate(e.createSession(), [5, 17, 300, 42], { maxTokens: 6 }));
    e.close();
    const t = parseTrace(readFileSync(trace, "utf8"));
    const r = placementReport(ckpt, planAt(streamingBudget(model)), { deviceOf, rates, trace: t });
    expect(r.experts).toBe("trace");
    // At the floor (top-k slots) every request of a new token misses: k reads per MoE layer per token.
    const expertBytes = r.shards.reduce((a, s) => a + s.expertBytesPerToken, 0);
    expect(expertBytes).toBeCloseTo((1 - r.expertHitRate) * ckpt.config.topK * (ckpt.config.numLayers - ckpt.config.firstKDense) * ckpt.layout.census.expertBytes, 6);
    const other = parseTrace('{"tok":0,"layers":[[1,2],[3,4]]}\n');
    expect(() => placementReport(ckpt, planAt(streamingBudget(model)), { trace: other })).toThrow(/the routing trace has 2 MoE layers/);
  });
});

describe("k3 disks", () => {
  test("measures each drive briefly and reports holdings, rates and per-token bytes (--json); --no-measure reports no times", () => {
    const run = (...args: string[]) => {
      const p = Bun.spawnSync([compiledK3(), "disks", model, "--ram", "1G", ...args], { stdin: "ignore" });
      expect(p.stderr.toString()).not.toMatch(STACK_FRAME);
      expect(p.exitCode).toBe(0);
      return p.stdout.toString();
    };
    const j = JSON.parse(run("--json", "--seconds", "0.05"));
    expect(j.drives.length).toBe(1); // one real disk here
    expect(j.drives[0].shards.length).toBe(ckpt.shards.length);
    expect(j.drives[0].rates.expert).toBeGreaterThan(0);
    expect(j.seconds_per_token).toBeGreaterThan(0);
    expect(j.shards.map((s: { file: string }) => s.file)).toEqual(ckpt.shards.map((s) => basename(s.file)));
    const text = run("--no-measure");
    expect(text).toContain("per token: trunk");
    expect(text).toContain("--no-measure: no read rates");
    const bad = Bun.spawnSync([compiledK3(), "disks", model, "--seconds", "0"], { stdin: "ignore" });
    expect([bad.exitCode, bad.stderr.toString()]).toEqual([2, expect.stringContaining("--seconds must be")]);
  });
});
