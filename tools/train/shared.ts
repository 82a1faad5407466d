// What the training tool's TypeScript scripts share: the model's dimensions (model-config.json,
// also read by train.py) as a tools/gen preset, the held-out rule and the evaluation prompts.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { GenPreset } from "../gen/presets.ts";
import { validatePreset } from "../gen/presets.ts";

/** Every HELD_OUT_EVERY-th Brown sample (0, 20, 40, …) is held out of training. */
export const HELD_OUT_EVERY = 20;

/** Prompts whose logits and greedy ids are recorded (reference values, pinned in the test). */
export const EVAL_PROMPTS = [
  "The capital of France is",
  "In the morning, the old man",
  "The committee said that the",
  // copy-style: a repeated span, for in-context copying / n-gram speculation
  "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown",
] as const;

export function loadModelConfig(): GenPreset {
  const raw = JSON.parse(readFileSync(join(import.meta.dir, "model-config.json"), "utf8")) as GenPreset & { comment?: string };
  const { comment: _c, ...p } = raw;
  validatePreset("trained demo", p);
  return p;
}
