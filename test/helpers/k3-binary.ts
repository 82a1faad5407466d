// The compiled binary, for tests that run k3 as a user does (spawned, reading stdout / stderr /
// exit code).
//
// Which binary: dist/k3 when it is newer than every source file (`npm test` builds it first, in
// pretest); otherwise a fresh build into a temp folder, so a stale dist/k3 is never what passes,
// and no test writes dist/ (other test files may be reading it). One build per test process.
import { existsSync, mkdtempSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const ROOT = resolve(import.meta.dir, "../..");

function newestSource(): number {
  let newest = 0;
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|json)$/.test(e.name)) newest = Math.max(newest, statSync(p).mtimeMs);
    }
  };
  walk(join(ROOT, "src"));
  walk(join(ROOT, "tools", "gen"));
  newest = Math.max(newest, statSync(join(ROOT, "zig-out", "lib", "libkernels.so")).mtimeMs);
  return newest;
}

let built: string | undefined;

/** Path of a compiled k3 that is current with the sources (builds one when dist/k3 is stale).
 *  $K3_TEST_BIN overrides it: run tests against another build (e.g. main's) to show which of them
 *  fail without a change. */
export function compiledK3(): string {
  if (process.env.K3_TEST_BIN) return process.env.K3_TEST_BIN;
  if (built) return built;
  const dist = join(ROOT, "dist", "k3");
  if (existsSync(dist) && statSync(dist).mtimeMs >= newestSource()) return (built = dist);
  const out = join(mkdtempSync(join(tmpdir(), "k3-build-")), "k3");
  const b = Bun.spawnSync(
    [process.execPath, "build", "--compile", "--minify", "--bytecode", "--format=esm", "./src/cli/main.ts", "--outfile", out],
    { cwd: ROOT, stdout: "pipe", stderr: "pipe" },
  );
  if (b.exitCode !== 0) throw new Error(`building the binary failed:\n${b.stderr.toString()}`);
  return (built = out);
}

/** A user's environment: this HOME and its cache, no $K3_MODEL, no colour; `extra` adds or (with
 *  undefined) removes variables. */
export function userEnv(home: string, extra: Record<string, string | undefined> = {}): Record<string, string> {
  const e: Record<string, string | undefined> = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, XDG_CACHE_HOME: join(home, ".cache"), NO_COLOR: "1", ...extra };
  for (const k of Object.keys(e)) if (e[k] === undefined) delete e[k];
  return e as Record<string, string>;
}

/** Wait until a `k3 serve` process logs the URL it listens on (matched by `pattern`'s group 1,
 *  or the whole match); throws with its stderr if it exits first. */
export async function serveUrl(p: { stderr: ReadableStream<Uint8Array> }, pattern = /http:\/\/127\.0\.0\.1:\d+/): Promise<string> {
  const reader = p.stderr.getReader();
  let text = "";
  try {
    for (;;) {
      const r = await reader.read();
      if (r.done) throw new Error(`k3 serve exited:\n${text}`);
      text += new TextDecoder().decode(r.value);
      const m = pattern.exec(text);
      if (m) return m[1] ?? m[0];
    }
  } finally {
    reader.releaseLock();
  }
}

/** A JavaScript stack frame on stderr ("    at fn (file:line:col)"): what a user must never see. */
export const STACK_FRAME = /^\s+at .+[:(]/m;
