// k3's cache folder: the one place that says where k3 keeps what it writes for itself (the demo
// model, catalogue and checksum caches, a copy of the kernel library). Below every other layer
// (it knows only node and K3Error), so the kernel loader, the checkpoint reader, the memory layer
// and the CLI all use it.
//
// Root: $XDG_CACHE_HOME/k3 when XDG_CACHE_HOME is an absolute path (the XDG spec says to ignore
// a relative one), else $HOME/.cache/k3, else the password database's home. Read on every call,
// so a test or a caller may change the environment.
import { accessSync, constants, mkdirSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import { K3Error } from "./errors.ts";

/** The cache root (not created): $XDG_CACHE_HOME/k3, else $HOME/.cache/k3. */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_CACHE_HOME;
  if (xdg && isAbsolute(xdg)) return join(xdg, "k3");
  return join(env.HOME || homedir(), ".cache", "k3");
}

/** A folder under the cache root (`sub` may be "" for the root itself), not created. */
export function cachePath(sub: string, env: NodeJS.ProcessEnv = process.env): string {
  return sub ? join(cacheRoot(env), sub) : cacheRoot(env);
}

/**
 * A folder under the cache root, created if missing and writable. A folder that cannot be created (HOME
 * points nowhere, a read-only home, a file in the way) is a clear K3Error USAGE that says how to
 * fix it, never a stack trace.
 */
export function ensureCacheDir(sub: string, env: NodeJS.ProcessEnv = process.env): string {
  const dir = cachePath(sub, env);
  try {
    mkdirSync(dir, { recursive: true });
    if (!statSync(dir).isDirectory()) throw new Error("not a directory");
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new K3Error("USAGE", `cannot create k3's cache folder ${dir}: ${(err as Error).message}`, [
      "set XDG_CACHE_HOME to a writable folder (k3 keeps its caches in $XDG_CACHE_HOME/k3, else $HOME/.cache/k3)",
    ]);
  }
  return dir;
}
