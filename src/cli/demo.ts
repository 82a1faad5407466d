// The embedded demo model: what `k3 run` and `k3 chat` use when given no model directory and no
// $K3_MODEL, so the main job works out of the box. It is a TINY model with K3's exact architecture
// (4 layers, hidden 192, 16 experts, vocabulary 4096; ~4M parameters) trained by tools/train on the
// Brown corpus (one million words of 1961 American English): it writes English-like text, it is
// NOT Kimi K3 and knows nothing. docs/TEST-MODELS.md ("The trained demo") says how it was made.
//
// It ships inside the binary as one zstd-compressed pack (assets/demo/k3-demo.pack.zst, written by
// tools/train/pack.ts) and is unpacked on first use into $XDG_CACHE_HOME/k3/demo-<id>, where <id>
// is the first 16 hex digits of the pack's SHA-256: a new model gets a new folder, so a cached
// older demo is never opened in its place.
//
// Invariant: the cache folder either does not exist or holds a complete, verified model. The pack
// is unpacked into a fresh temp folder beside it (every file's SHA-256 checked) and renamed into
// place (rename is atomic on one filesystem), so two processes starting at once both unpack, one
// rename wins, the loser deletes its copy, and neither can see a half-written model.
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { basename, join } from "node:path";
import demoPackPath from "../../assets/demo/k3-demo.pack.zst" with { type: "file" }; // real path in dev, /$bunfs/... when compiled
import demoDraftPackPath from "../../assets/demo/k3-demo-draft.pack.zst" with { type: "file" }; // its trained EAGLE-3 draft
import { cachePath, ensureCacheDir } from "../cache-dir.ts";
import { log } from "../log.ts";
import { sha256Hex, unpackDemo } from "./demo-pack.ts";

/** What every run on the demo says on stderr (tests look for "NOT Kimi K3"). */
export const DEMO_NOTICE =
  "a TINY model with K3's architecture (~4M parameters) trained on a small English corpus (the Brown corpus), NOT Kimi K3: expect English-like text, not knowledge";

const packs = new Map<string, { bytes: Uint8Array; id: string }>();

function pack(path: string): { bytes: Uint8Array; id: string } {
  let p = packs.get(path);
  if (!p) {
    const bytes = new Uint8Array(readFileSync(path));
    packs.set(path, (p = { bytes, id: sha256Hex(bytes).slice(0, 16) }));
  }
  return p;
}
const demoPack = () => pack(demoPackPath);

/** The demo's cache folder; its name changes with the embedded model's content. */
export function demoDir(env: NodeJS.ProcessEnv = process.env): string {
  return cachePath(`demo-${demoPack().id}`, env);
}

/** The model id `k3 serve` gives the demo (its folder's name is an id of the pack's content). */
export const DEMO_MODEL_NAME = "k3-demo";

/** Whether a command given `arg` (or nothing) runs the demo: no model named, no $K3_MODEL. */
export function usesDemo(arg: string | undefined): boolean {
  return !(arg || process.env.K3_MODEL);
}

/** Model directory to open: the argument, else $K3_MODEL, else the demo model (unpacked if missing). */
export async function modelDirOrDemo(arg: string | undefined): Promise<string> {
  const dir = arg || process.env.K3_MODEL;
  if (dir) return dir;
  return ensureDemoModel();
}

export function ensureDemoModel(env: NodeJS.ProcessEnv = process.env): string {
  const dir = demoDir(env);
  log.warn(`no model given (argument or $K3_MODEL): using the built-in demo model in ${dir} — ${DEMO_NOTICE}`);
  return unpackOnce(demoPack(), dir, "the demo model", env);
}

/** The demo's trained EAGLE-3 draft (assets/demo/k3-demo-draft.pack.zst; docs/DRAFT.md "The demo
 *  draft"), unpacked once into $XDG_CACHE_HOME/k3/demo-draft-<id>: `k3 run` and `k3 chat` draft
 *  with it by default on the demo (--draft none turns it off; output never changes). */
export function ensureDemoDraft(env: NodeJS.ProcessEnv = process.env): string {
  const p = pack(demoDraftPackPath);
  return unpackOnce(p, cachePath(`demo-draft-${p.id}`, env), "the demo's draft", env);
}

/** Whether `dir` is the demo model's cache folder (the demo's draft then applies by default). */
export function isDemoDir(dir: string, env: NodeJS.ProcessEnv = process.env): boolean {
  return dir === demoDir(env);
}

/** The engine options for `dir`: on the demo, its draft unless --draft was given (or speculation
 *  is off, which leaves nothing for a draft to do). */
export function withDemoDraft<T extends { draft?: string; speculate?: unknown }>(dir: string, opts: T, env: NodeJS.ProcessEnv = process.env): T {
  if (opts.draft !== undefined || opts.speculate === "off" || !isDemoDir(dir, env)) return opts;
  return { ...opts, draft: ensureDemoDraft(env) };
}

/** Unpack a pack into `dir` unless it holds a complete copy (see the invariant above). */
function unpackOnce(p: { bytes: Uint8Array }, dir: string, what: string, env: NodeJS.ProcessEnv): string {
  if (existsSync(join(dir, "config.json"))) return dir;
  const root = ensureCacheDir("", env); // a clear error (set XDG_CACHE_HOME) when it cannot be made
  const tmp = mkdtempSync(join(root, `.${basename(dir)}-tmp-`));
  try {
    const t0 = performance.now();
    unpackDemo(p.bytes, tmp);
    try {
      renameSync(tmp, dir);
    } catch (err) {
      // Another process renamed its copy first: use that one.
      if (!existsSync(join(dir, "config.json"))) throw err;
    }
    log.info(`unpacked ${what} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}
