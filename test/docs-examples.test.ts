// The examples people copy must work: every command line in the ```sh blocks of README.md and
// docs/CLI.md, and every example in `k3 COMMAND --help`, that needs no real model download runs
// through the compiled binary and exits 0. Lines naming /models/… (a real download) are skipped
// and counted; an interactive `k3 chat` runs on a terminal and is left with /exit.
import { beforeAll, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MAIN_EXAMPLES } from "../src/cli/help.ts";
import { allCommands } from "../src/cli/registry.ts";
import { compiledK3, ROOT, serveUrl, userEnv } from "./helpers/k3-binary.ts";
import { python, runInPty } from "./helpers/pty.ts";

let work: string;
let env: Record<string, string>;

beforeAll(() => {
  const bin = compiledK3();
  work = mkdtempSync(join(tmpdir(), "k3-examples-"));
  // `dist/k3 …` (README) and `k3 …` (docs, help) both run the binary under test; paths such as
  // reference/k3/config.json resolve as in a checkout.
  mkdirSync(join(work, "dist"));
  symlinkSync(bin, join(work, "dist", "k3"));
  mkdirSync(join(work, "bin"));
  symlinkSync(bin, join(work, "bin", "k3"));
  symlinkSync(join(ROOT, "reference"), join(work, "reference"));
  const home = join(work, "home");
  for (const d of [".zfunc", ".config/fish/completions"]) mkdirSync(join(home, d), { recursive: true });
  env = userEnv(home, { PATH: `${join(work, "bin")}:${process.env.PATH ?? "/usr/bin:/bin"}` });
}, 120_000);

/** Command lines in the ```sh blocks of a markdown file, trailing `# comments` removed. A line
 *  after `export K3_MODEL=/models/…` in the same block uses that download: marked as needing it. */
function shellLines(markdown: string): string[] {
  const out: string[] = [];
  for (const block of markdown.matchAll(/```sh\n([\s\S]*?)```/g)) {
    let download = false;
    for (const raw of block[1]!.split("\n")) {
      const line = raw.replace(/\s{2,}#\s.*$/, "").trim();
      if (/^export K3_MODEL=\/models\//.test(line)) download = true;
      if (/(^|[|(]\s*)(dist\/)?k3\s/.test(line)) out.push(download ? `K3_MODEL=/models/… ${line}` : line);
    }
  }
  return out;
}

const needsDownload = (line: string) => /\/models\//.test(line);
/** `k3 chat` with nothing piped in and no --json: the REPL. */
const interactive = (line: string) => /^(dist\/)?k3 chat\b/.test(line) && !line.includes("--json");

/** `k3 serve …`: a server, run until it answers. */
const serving = (line: string) => /^(dist\/)?k3 serve\b/.test(line);

/** A `k3 serve` example: started on a free port (8080 may be taken on a test machine: `--port 0`
 *  is added or replaces the example's port), its chat page and /v1/models must answer 200, and a
 *  SIGTERM must stop it with exit 0. */
async function runServe(line: string): Promise<{ line: string; code: number; err: string }> {
  const free = /--port\s+\d+/.test(line) ? line.replace(/--port\s+\d+/, "--port 0") : `${line} --port 0`;
  const p = Bun.spawn(["bash", "-c", `exec ${free}`], { cwd: work, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  try {
    const url = await serveUrl(p);
    const answers = await Promise.all([fetch(`${url}/`), fetch(`${url}/v1/models`)]);
    p.kill("SIGTERM");
    const code = await p.exited;
    return { line, code: answers.every((a) => a.status === 200) ? code : -1, err: answers.map((a) => a.status).join(" ") };
  } catch (err) {
    p.kill("SIGKILL");
    return { line, code: -1, err: (err as Error).message.slice(-400) };
  }
}

function run(line: string): { line: string; code: number; err: string } {
  if (interactive(line)) {
    const r = runInPty(["bash", "-c", line], env, [{ text: "/exit\r" }], "> ");
    return { line, code: r.code, err: r.out.slice(-400) };
  }
  const p = Bun.spawnSync(["bash", "-c", line], { cwd: work, env, stdin: "ignore", timeout: 120_000 });
  return { line, code: p.exitCode ?? -1, err: p.stderr.toString().slice(-400) };
}

async function examples(): Promise<{ where: string; line: string }[]> {
  const docs = ["README.md", "docs/CLI.md"].flatMap((f) => shellLines(readFileSync(join(ROOT, f), "utf8")).map((line) => ({ where: f, line })));
  const help = (await allCommands()).flatMap(([name, c]) => (c.help?.examples ?? []).map(([line]) => ({ where: `k3 ${name} --help`, line })));
  help.push(...MAIN_EXAMPLES.map(([line]) => ({ where: "k3 --help", line })));
  return [...docs, ...help];
}

test(`README.md, docs/CLI.md and --help examples that need no download exit 0${python ? "" : " (interactive ones SKIPPED: no python3 for a pty)"}`, async () => {
  const all = await examples();
  expect(all.filter((e) => e.where === "README.md").length).toBeGreaterThan(8);
  const seen = new Set<string>();
  const skipped: string[] = [];
  const results: { line: string; code: number; err: string }[] = [];
  for (const { line } of all) {
    // The same command in several places runs once (`dist/k3 x` in the README is `k3 x` elsewhere).
    const key = line.replace(/(^|[|(]\s*)dist\/k3\s/g, "$1k3 ");
    if (seen.has(key)) continue;
    seen.add(key);
    if (needsDownload(line) || (interactive(line) && !python)) {
      skipped.push(line);
      continue;
    }
    const t0 = performance.now();
    results.push(serving(line) ? await runServe(line) : run(line));
    if (process.env.K3_TEST_VERBOSE) console.log(`${((performance.now() - t0) / 1000).toFixed(1)} s  ${line}`);
  }
  const failed = results.filter((r) => r.code !== 0);
  expect(failed).toEqual([]);
  expect(results.length).toBeGreaterThan(12);
  console.log(`docs examples: ${results.length} run, ${skipped.length} skipped (need a real model download${python ? "" : " or a terminal"})`);
}, 300_000);
