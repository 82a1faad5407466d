// Run a command on a pseudo-terminal (Python's pty module) and return all it wrote there: what a
// person at a terminal sees. Without python3 the caller skips and says so.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const python = Bun.which("python3");

const DRIVER = `
import json, os, pty, select, sys, time
spec = json.load(open(sys.argv[1]))
pid, fd = pty.fork()
if pid == 0:
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
out = b""
def pump(until, timeout):
    global out
    end = time.time() + timeout
    while time.time() < end:
        if until is not None and until():
            return
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                d = os.read(fd, 65536)
            except OSError:
                return
            if not d:
                return
            out += d
if spec.get("start"):
    pump(lambda: spec["start"].encode() in out, 60)
for s in spec["steps"]:
    if s.get("afterBytes"):
        mark = len(out)
        pump(lambda: len(out) >= mark + s["afterBytes"], 60)
    then = s.get("then", "").encode()
    seen = out.count(then) if then else 0
    os.write(fd, s["text"].encode())
    if then:
        pump(lambda: out.count(then) > seen, 60)
pump(None, 60)
_, status = os.waitpid(pid, 0)
open(sys.argv[2], "wb").write(out)
print(os.waitstatus_to_exitcode(status))
`;

export interface PtyStep {
  /** Before typing: wait until this many more bytes have been written to the terminal. */
  afterBytes?: number;
  /** What to type. */
  text: string;
  /** After typing: wait until this appears once more than it had (e.g. the next "> " prompt). */
  then?: string;
}

/** Run argv on a terminal: wait for `start` to appear (if given), type the steps, wait for the
 *  exit; returns the exit code and everything the terminal showed. */
export function runInPty(argv: string[], env: Record<string, string>, steps: PtyStep[] = [], start?: string): { code: number; out: string } {
  const dir = mkdtempSync(join(tmpdir(), "k3-pty-"));
  writeFileSync(join(dir, "driver.py"), DRIVER);
  writeFileSync(join(dir, "spec.json"), JSON.stringify({ argv, env: { TERM: "xterm", ...env }, steps, start }));
  const p = Bun.spawnSync([python!, join(dir, "driver.py"), join(dir, "spec.json"), join(dir, "out.bin")], { env: process.env as Record<string, string> });
  if (p.exitCode !== 0) throw new Error(`pty driver failed: ${p.stderr.toString()}`);
  return { code: Number(p.stdout.toString().trim()), out: readFileSync(join(dir, "out.bin"), "utf8") };
}
