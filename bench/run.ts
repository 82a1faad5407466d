// `npm run bench`: the streaming benchmark on the `slice` model (issue 4's proof). Opt-in, never
// part of `npm test`. docs/BENCH.md says what each number means and how it was measured.
//
//   bun run bench/run.ts [--quick] [--runs N] [--tokens N] [--model DIR] [--no-docs]
//   bun run bench/run.ts --render bench/out/stream-….json [--no-docs]   (re-render a saved run)
//   bun run bench/run.ts --speculation [...]   (the speculation arms: bench/speculate.ts)
//   bun run bench/run.ts --exact [...]         (the exact trunk against bf16: bench/exact.ts)
//
//  1. Generates models/slice if missing (~40–60 s, 13.9 GB).
//  2. Disk read bandwidth of the same shard files (O_DIRECT, parallel; bench/disk.ts), before
//     every round of arm runs and after the last, each in its own process.
//  3. Decode arms, each run in its own `bun` process (peak RSS from the OS is per arm), runs
//     interleaved (arm A run 1, arm B run 1, …, arm A run 2, …) so drift hits every arm alike.
//  4. Identity: every successful run must produce the same ids and bit-identical last logits.
//  5. Peak RSS vs budget at every budgeted arm; loud if over.
//  6. bench/out/stream-<stamp>.json (every raw number) + .md; the table goes into docs/BENCH.md
//     between its markers (full runs only, unless --no-docs).
// A failing arm is reported and the others continue; the exit code is 1 if any arm failed, an
// identity check failed or a budget was exceeded.
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { tmpdir } from "node:os";
import type { ArmSpec } from "./stream.ts";
import type { DiskResult } from "./disk.ts";
import { machineInfo } from "./machine.ts";
import { renderMarkdown, summarize, type BenchReport, type RunResult } from "./report.ts";
import { freezeKernels, parseCommonArgs, ROOT, runArmChild, runDisk, updateDocSection, writeReport, type CommonArgs } from "./common.ts";

const BUN = process.execPath;

interface Args extends CommonArgs {
  render?: string; // re-render a saved JSON report (summary recomputed), run nothing
}

function parseArgs(argv: string[]): Args {
  let render: string | undefined;
  const common = parseCommonArgs(argv, { tokens: 9, minTokens: 2, quickTokens: 5 }, "bench/run.ts [--quick] [--runs N] [--tokens N] [--model DIR] [--no-docs] [--render OUT.json]", (flag, value) => {
    if (flag !== "--render") return false;
    render = resolve(value());
    return true;
  });
  return { ...common, render };
}

const say = (s: string) => process.stderr.write(`[bench] ${s}\n`);

async function ensureModel(dir: string): Promise<void> {
  if (existsSync(join(dir, "config.json")) && existsSync(join(dir, "model.safetensors.index.json"))) return;
  say(`${dir} has no model: generating the slice preset (13.9 GB, about 40–60 s)…`);
  const p = Bun.spawn([BUN, join(ROOT, "tools/gen/generate.ts"), "--preset", "slice", "--out", dir], { stdout: "inherit", stderr: "inherit", cwd: ROOT });
  if ((await p.exited) !== 0) throw new Error(`generating the slice model into ${dir} failed`);
}

async function runChild(spec: ArmSpec, run: number, scratch: string): Promise<RunResult> {
  return { ...(await runArmChild(spec, scratch, `${run}-${spec.name.replace(/\W+/g, "_")}`, 15 * 60_000)), run };
}

function armSpecs(args: Args, threads: number): { spec: ArmSpec; runs: number; timed: boolean }[] {
  const prompt = [5, 17, 300, 42]; // a few ids: 4-token prefill
  const base = { model: args.model, prompt, maxTokens: args.tokens, threads };
  const timed = args.runs;
  return [
    // (a) the trunk streams: 5 of 6 layers through a 2-slot ring, 34 expert slots
    { spec: { ...base, name: "stream 6G", ram: "6G" }, runs: timed, timed: true },
    // (b) the trunk pinned; the expert cache (136 slots) is smaller than the 320 experts
    { spec: { ...base, name: "trunk pinned 10G", ram: "10G" }, runs: timed, timed: true },
    // (b') everything fits: trunk pinned and every expert slot-cached after first use
    { spec: { ...base, name: "all fits 16G", ram: "16G" }, runs: timed, timed: true },
    // (c) the streaming budget without the overlaps
    { spec: { ...base, name: "stream 6G, prefetch off", ram: "6G", prefetch: false }, runs: timed, timed: true },
    { spec: { ...base, name: "stream 6G, lookahead off", ram: "6G", lookahead: false }, runs: timed, timed: true },
    // identity-only arms (one run): a middle budget, one compute thread, every weight resident
    { spec: { ...base, name: "middle 8G", ram: "8G" }, runs: 1, timed: false },
    { spec: { ...base, name: "stream 6G, 1 thread", ram: "6G", threads: 1 }, runs: 1, timed: false },
    { spec: { ...base, name: "resident (no planner)", resident: true }, runs: 1, timed: false },
  ];
}

/** Replace the generated section of docs/BENCH.md (between the markers) with `md`. */
function updateDocs(md: string): void {
  updateDocSection("docs/BENCH.md", "stream-bench", md, say);
}

function render(path: string, docs: boolean): never {
  const rep = JSON.parse(readFileSync(path, "utf8")) as BenchReport;
  const arms = rep.arms.map((a) => ({ spec: { name: a.name } }));
  rep.summary = summarize(rep.disk, rep.results, arms);
  const md = renderMarkdown(rep);
  process.stdout.write(md);
  if (docs) updateDocs(md);
  process.exit(rep.summary.problems.length ? 1 : 0);
}

async function main() {
  // `npm run bench -- --speculation`: the speculation arms (bench/speculate.ts), not these;
  // `npm run bench -- --trunk`: the small-budget and compact-trunk arms (bench/trunk.ts);
  // `npm run bench -- --exact`: the exact compact trunk against bf16 (bench/exact.ts);
  // `npm run bench -- --draft --demo|--slice`: the draft-model arms (bench/draft.ts).
  for (const [flag, file] of [["--speculation", "bench/speculate.ts"], ["--trunk", "bench/trunk.ts"], ["--exact", "bench/exact.ts"], ["--draft", "bench/draft.ts"]])
    if (process.argv.includes(flag)) {
      const p = Bun.spawn([BUN, join(ROOT, file), ...process.argv.slice(2)], { stdout: "inherit", stderr: "inherit", cwd: ROOT });
      process.exit(await p.exited);
    }
  const args = parseArgs(process.argv.slice(2));
  if (args.render) render(args.render, args.docs);
  const started = new Date();
  const stamp = started.toISOString().replace(/[:.]/g, "-").slice(0, 19);
  await ensureModel(args.model);
  const threads = navigator.hardwareConcurrency;
  const machine = machineInfo(args.model);
  say(`${machine.cpu}, ${machine.cores} cores, ${(machine.memTotalBytes / 2 ** 30).toFixed(1)} GiB RAM, ${machine.disk.device} (${machine.disk.fsType})`);

  const scratch = join(tmpdir(), `k3-bench-${process.pid}`);
  mkdirSync(scratch, { recursive: true });
  const kernels = freezeKernels(scratch);
  say(`kernels: ${kernels.source} (sha256 ${kernels.sha256.slice(0, 16)}…), frozen for this run`);
  // The disk is measured before every round of runs and once after the last: on a shared or
  // virtual disk the rate drifts by tens of percent within minutes, so the floor uses the mean.
  const disk: (DiskResult | { error: string; when?: string })[] = [];
  const measureDisk = async (when: string) => {
    say(`disk read bandwidth (O_DIRECT, parallel) — ${when}…`);
    const d = await runDisk(args.model, args.quick);
    disk.push({ ...d, when });
    if (!("error" in d)) say(`  best ${d.bestGbps.toFixed(2)} GB/s (${d.patterns.map((p) => p.gbps.toFixed(2)).join(", ")})${d.direct ? "" : " — O_DIRECT UNAVAILABLE"}`);
  };

  const arms = armSpecs(args, threads);
  const results: RunResult[] = [];
  const maxRuns = Math.max(...arms.map((a) => a.runs));
  for (let run = 1; run <= maxRuns; run++) {
    await measureDisk(`before round ${run}`);
    for (const a of arms) {
      if (run > a.runs) continue;
      say(`run ${run}/${a.runs}: ${a.spec.name}…`);
      const r = await runChild(a.spec, run, scratch);
      results.push(r);
      if (r.ok) say(`  ${r.sPerToken!.toFixed(2)} s/token, ${(r.perToken!.bytes / 1e9).toFixed(2)} GB read/token, peak RSS ${(r.vmHwmBytes! / 2 ** 30).toFixed(2)} GiB, ids ${r.ids!.join(" ")}`);
      else say(`  FAILED: ${r.error}`);
    }
  }
  if (!args.quick) await measureDisk("after the last round");
  rmSync(scratch, { recursive: true, force: true });

  const report: BenchReport = {
    command: `npm run bench${args.quick ? " -- --quick" : ""}`,
    started: started.toISOString(),
    finished: new Date().toISOString(),
    args,
    machine,
    kernels,
    disk,
    arms: arms.map((a) => ({ name: a.spec.name, runs: a.runs, timed: a.timed })),
    results,
    summary: summarize(disk, results, arms),
  };
  const md = renderMarkdown(report);
  writeReport("stream", stamp, report, md, say);
  if (args.docs && !args.quick) updateDocs(md);
  const s = report.summary;
  for (const line of s.problems) say(`PROBLEM: ${line}`);
  process.exit(s.problems.length ? 1 : 0);
}

await main();
