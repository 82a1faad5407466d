// Checks the exported demo against the PyTorch model it came from (dev-only):
//   1. tools/reference (float64, written from MODEL.md independently of model.py) vs PyTorch's
//      float64 logits on the same rounded weights: two readings of the spec must agree to ~1e-9;
//   2. k3's engine (f32) vs the same float64 logits, within the tolerance of docs/NUMERICS.md §4
//      (tol = 12·L·n_max·2⁻²⁴·max(1, max|logit|)), and greedy ids identical.
// Writes OUT/export/check.json.
//
//   bun tools/train/check.ts [OUT=tools/train/out] [MODEL_DIR=OUT/model]
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Engine } from "../../src/engine.ts";
import { ReferenceModel } from "../reference/model.ts";

export interface ReferencePrompt {
  text: string;
  ids: number[];
  logits: number[];
  greedy: number[];
  continuation: string;
  top1_top2_gap: number;
}

/** docs/NUMERICS.md §4: f32 rounding of the engine against a float64 reference on the same weights. */
export function logitTolerance(cfg: Engine["config"], maxLogit: number): number {
  const nMax = Math.max(cfg.hidden, cfg.kdaHeads * cfg.kdaHeadDim, cfg.denseInter, cfg.numSharedExperts * cfg.moeInter, cfg.numExperts);
  return 12 * cfg.numLayers * nMax * 2 ** -24 * Math.max(1, maxLogit);
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

export function engineGreedy(engine: Engine, prompt: number[], n: number): number[] {
  const s = engine.createSession();
  const out: number[] = [];
  const it = engine.generate(s, prompt, { maxTokens: n });
  for (let r = it.next(); !r.done; r = it.next()) out.push(r.value.id);
  return out;
}

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
  const dir = resolve(process.argv[3] ?? join(out, "model"));
  const refs = (JSON.parse(readFileSync(join(out, "export", "reference.json"), "utf8")) as { prompts: ReferencePrompt[] }).prompts;
  const ref = ReferenceModel.open(dir);
  const engine = Engine.open(dir, { threads: 1 });
  const rows = [];
  let ok = true;
  for (const p of refs) {
    const torch64 = p.logits;
    const refLogits = ref.forward(p.ids);
    const got = Float32Array.from(engine.prefill(engine.createSession(), p.ids));
    const maxLogit = torch64.reduce((a, v) => Math.max(a, Math.abs(v)), 0);
    const tol = logitTolerance(engine.config, maxLogit);
    const refVsTorch = maxAbsDiff(refLogits, torch64);
    const k3VsTorch = maxAbsDiff(got, torch64);
    const ids = engineGreedy(engine, p.ids, p.greedy.length);
    const greedyOk = ids.join(",") === p.greedy.join(",");
    ok &&= refVsTorch < 1e-6 && k3VsTorch <= tol && greedyOk;
    rows.push({ prompt: p.text, maxLogit, tol, refVsTorch, k3VsTorch, gap: p.top1_top2_gap, greedyOk, k3Greedy: ids });
    process.stderr.write(`${JSON.stringify(p.text)}: max|logit| ${maxLogit.toFixed(2)}, reference−torch ${refVsTorch.toExponential(2)}, k3−torch ${k3VsTorch.toExponential(2)} (tol ${tol.toExponential(2)}), greedy ${greedyOk ? "identical" : `DIFFERENT: ${ids} vs ${p.greedy}`}\n`);
  }
  engine.close();
  writeFileSync(join(out, "export", "check.json"), JSON.stringify(rows, null, 1) + "\n");
  if (!ok) {
    process.stderr.write("check FAILED\n");
    process.exit(1);
  }
  process.stderr.write("check passed\n");
}
