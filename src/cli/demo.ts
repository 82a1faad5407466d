// The embedded demo model: what `k3 run` and `k3 chat` use when given no model directory and no
// $K3_MODEL, so the main job works out of the box. It is the tools/gen `demo` preset (release
// format, ~12 MB, RANDOM weights), generated deterministically on first use into
// $XDG_CACHE_HOME/k3/demo-<version> (default ~/.cache/k3/demo-<version>).
//
// Invariant: the cache folder either does not exist or holds a complete model. The model is
// written into a fresh temp folder beside it and renamed into place (rename is atomic on one
// filesystem), so two processes starting at once both generate, one rename wins, the loser
// deletes its copy, and neither can see a half-written model.
import { existsSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cachePath, ensureCacheDir } from "../cache-dir.ts";
import { log } from "../log.ts";
import { VERSION } from "../version.ts";

export const DEMO_PRESET = "demo";
/** Same seed forever: the demo's text is part of what users (and tests) see. */
export const DEMO_SEED = 1;

export function demoDir(env: NodeJS.ProcessEnv = process.env): string {
  return cachePath(`demo-${VERSION}`, env);
}

/** Model directory to open: the argument, else $K3_MODEL, else the demo model (made if missing). */
export async function modelDirOrDemo(arg: string | undefined): Promise<string> {
  const dir = arg || process.env.K3_MODEL;
  if (dir) return dir;
  return await ensureDemoModel();
}

export async function ensureDemoModel(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const dir = demoDir(env);
  log.warn(`no model given (argument or $K3_MODEL): using the built-in demo model in ${dir} — its weights are RANDOM, so its text is gibberish`);
  if (existsSync(join(dir, "config.json"))) return dir;
  const root = ensureCacheDir("", env); // a clear error (set XDG_CACHE_HOME) when it cannot be made
  const tmp = mkdtempSync(join(root, `.demo-${VERSION}-tmp-`));
  try {
    // Loaded only here: the generator (and its bundled BPE table) is not needed by other commands.
    const { generateModel } = await import("../../tools/gen/generate.ts");
    const t0 = performance.now();
    await generateModel(tmp, { preset: DEMO_PRESET, seed: DEMO_SEED });
    try {
      renameSync(tmp, dir);
    } catch (err) {
      // Another process renamed its copy first: use that one.
      if (!existsSync(join(dir, "config.json"))) throw err;
    }
    log.info(`generated the demo model in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}
