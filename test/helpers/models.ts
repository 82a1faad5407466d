// Tiny test models, generated once per test process into a temp folder (deterministic: same
// preset and seed give the same bytes, so every test file sees identical models).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateModel } from "../../tools/gen/generate.ts";

export const TINY_PRESETS = ["tiny-a", "tiny-b", "tiny-c"] as const;

let root: string | undefined;
const made = new Map<string, Promise<string>>();

/** Directory of a generated model (preset, seed, optional broken layout). */
export function tinyModel(preset: string, opts: { seed?: number; breakLayout?: boolean } = {}): Promise<string> {
  const key = `${preset}-${opts.seed ?? 1}${opts.breakLayout ? "-broken" : ""}`;
  let p = made.get(key);
  if (!p) {
    if (!root) {
      root = mkdtempSync(join(tmpdir(), "k3-models-"));
      process.on("exit", () => rmSync(root!, { recursive: true, force: true }));
    }
    const dir = join(root, key);
    p = generateModel(dir, { preset, seed: opts.seed ?? 1, breakLayout: opts.breakLayout }).then(() => dir);
    made.set(key, p);
  }
  return p;
}

/** A copy of a model directory that a test may damage. */
export function scratchDir(name: string): string {
  if (!root) {
    root = mkdtempSync(join(tmpdir(), "k3-models-"));
    process.on("exit", () => rmSync(root!, { recursive: true, force: true }));
  }
  return mkdtempSync(join(root, `${name}-`));
}
