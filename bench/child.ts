// One measured run in its own process (bench/prefill.ts, bench/rows.ts): the parent writes the
// run's spec to a file and spawns `bun SCRIPT --child SPEC OUT` (with K3_KERNELS when the run
// loads another kernel library); the child writes its result, `{ ok: false, error }` on a throw.
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";

export interface ChildResult {
  ok: boolean;
  error?: string;
}

/** The child's side: run `fn` on the spec file's contents, write its result, exit 1 unless ok. */
export async function childMain<S, R extends ChildResult>(fn: (spec: S) => R | Promise<R>): Promise<never> {
  const [specPath, outPath] = process.argv.slice(3);
  let r: R | ChildResult;
  try {
    r = await fn(JSON.parse(readFileSync(specPath!, "utf8")) as S);
  } catch (err) {
    r = { ok: false, error: String((err as Error).message ?? err).split("\n")[0] };
  }
  writeFileSync(outPath!, JSON.stringify(r));
  process.exit(r.ok ? 0 : 1);
}

/** The parent's side: `script --child` on `spec`, with `lib` as K3_KERNELS when given. */
export function spawnChild<R extends ChildResult>(script: string, spec: unknown, lib?: string): R {
  const specPath = join(tmpdir(), `k3-child-spec-${process.pid}.json`), outPath = specPath.replace("spec", "out");
  writeFileSync(specPath, JSON.stringify(spec));
  rmSync(outPath, { force: true }); // never read a previous run's result
  const env = { ...process.env, ...(lib ? { K3_KERNELS: lib } : {}) };
  const p = Bun.spawnSync([process.execPath, script, "--child", specPath, outPath], { env, stdout: "inherit", stderr: "inherit" });
  return existsSync(outPath) ? (JSON.parse(readFileSync(outPath, "utf8")) as R) : ({ ok: false, error: `child exited ${p.exitCode}` } as R);
}
