// Tiny test models, generated once per test process into a temp folder (deterministic: same
// preset and seed give the same bytes, so every test file sees identical models).
import { closeSync, mkdtempSync, openSync, readSync, rmSync, statSync, utimesSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type DraftOptions, generateDraft } from "../../tools/gen/draft.ts";
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

/**
 * Directory of a generated EAGLE-3 draft (tools/gen/draft.ts) for the tiny target `preset` made
 * with `targetSeed` (default 1): `opts` as generateDraft takes them (variant, rope, embedding,
 * break, seed, layerIds). Generated once per process and key.
 */
export function tinyDraft(preset: string, opts: Omit<DraftOptions, "target"> & { targetSeed?: number } = {}): Promise<string> {
  const { targetSeed, ...rest } = opts;
  const key = `draft-${preset}-${targetSeed ?? 1}-${JSON.stringify(rest)}`.replace(/[^\w.-]+/g, "_");
  let p = made.get(key);
  if (!p) {
    const dir = join(scratchDir("drafts"), key);
    p = generateDraft(dir, { ...rest, target: { preset, seed: targetSeed ?? 1 } }).then(() => dir);
    made.set(key, p);
  }
  return p;
}

/** Flip one byte of a file in place and put its mtime back: silent corruption (bit rot, a bad
 *  copy that kept the times) that only checksums can see. */
export function flipByte(file: string, at: number): void {
  const st = statSync(file);
  const fd = openSync(file, "r+");
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, at);
  b[0] = b[0]! ^ 0x5a;
  writeSync(fd, b, 0, 1, at);
  closeSync(fd);
  utimesSync(file, st.atime, st.mtime);
}

/** A copy of a model directory that a test may damage. */
export function scratchDir(name: string): string {
  if (!root) {
    root = mkdtempSync(join(tmpdir(), "k3-models-"));
    process.on("exit", () => rmSync(root!, { recursive: true, force: true }));
  }
  return mkdtempSync(join(root, `${name}-`));
}
