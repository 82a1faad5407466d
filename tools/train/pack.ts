// Packs an exported demo model folder into the asset the binary embeds (format and unpacking:
// src/cli/demo-pack.ts; src/cli/demo.ts unpacks it into the cache on first use).
//
//   bun tools/train/pack.ts [MODEL_DIR=tools/train/out/model] [OUT=assets/demo/k3-demo.pack.zst]
// Also writes assets/demo/reference.json (next to OUT) from MODEL_DIR/../export/reference.json.
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { packDemo } from "../../src/cli/demo-pack.ts";
import type { ReferencePrompt } from "./check.ts";

if (import.meta.main) {
  const root = resolve(import.meta.dir, "../..");
  const modelDir = resolve(process.argv[2] ?? join(import.meta.dir, "out", "model"));
  const out = resolve(process.argv[3] ?? join(root, "assets", "demo", "k3-demo.pack.zst"));
  const packed = packDemo(modelDir);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, packed);
  const raw = readdirSync(modelDir).reduce((a, f) => a + statSync(join(modelDir, f)).size, 0);
  process.stderr.write(`${modelDir} (${(raw / 1e6).toFixed(2)} MB on disk) → ${out} (${(packed.length / 1e6).toFixed(2)} MB)\n`);
  const exportDir = join(modelDir, "..", "export");
  if (existsSync(join(exportDir, "reference.json"))) {
    writeFileSync(join(dirname(out), "reference.json"), JSON.stringify(referenceValues(exportDir), null, 1) + "\n");
    process.stderr.write(`reference values → ${join(dirname(out), "reference.json")}\n`);
  }
}

/**
 * The small reference file the test pins (assets/demo/reference.json): for the first three
 * evaluation prompts, PyTorch's float64 last-position logits on the exported weights (as f32,
 * base64: the f64→f32 rounding, ≤ 2⁻²⁴ relative, is far inside the tolerance) and 16 greedy ids.
 */
export function referenceValues(exportDir: string): unknown {
  const refs = (JSON.parse(readFileSync(join(exportDir, "reference.json"), "utf8")) as { prompts: ReferencePrompt[] }).prompts;
  return {
    comment: "written by tools/train/pack.ts from train.py's float64 forward (model.py, per-token KDA recurrence) on the rounded weights that ship; checked by test/demo-model.test.ts",
    prompts: refs.slice(0, 3).map((p) => ({
      text: p.text,
      ids: p.ids,
      greedy: p.greedy.slice(0, 16),
      top1_top2_gap: p.top1_top2_gap,
      logits_f32_base64: Buffer.from(Float32Array.from(p.logits).buffer).toString("base64"),
    })),
  };
}
