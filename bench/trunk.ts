// The small-budget benchmark (issue 16): the trunk in pieces and the compact trunk, on the `slice`
// model, in one run, arms interleaved. Opt-in (`npm run bench -- --trunk`), never part of
// `npm test`; on a shared machine run it alone (it times, and holds GBs). docs/BENCH.md holds the
// last full report (between its trunk-bench markers) and docs/TRUNK.md reads it.
//
//   bun run bench/trunk.ts [--quick] [--runs N] [--tokens N] [--ram SIZE] [--positions N] [--model DIR] [--no-docs]
//                          [--no-error | --error-only]
//   bun run bench/trunk.ts --merge bench/out/trunk-A.json bench/out/trunk-B.json … [--no-docs]
//
// On a shared machine one full run holds the big-memory lock too long: run it in parts, each
// under its own `flock` (`--runs 1 --no-error` per round, then `--error-only`), and --merge their
// saved reports into one (rounds renumbered in the order given; the disk figures of every part
// form the floor rate; the error tables from the part that has them). The docs are written by
// full runs and by --merge only.
//
// Arms (each run its own `bun bench/stream.ts` process; round r runs every arm once, the disk is
// measured before every round and after the last):
//   exact, pieces        the exact trunk at the tightest budget asked (--ram, default 3G), cut in pieces
//   exact, whole units   the same budget with one piece per unit: the layout before the split
//   int4                 the compact int4 trunk (k3 pack) at the same budget
//   exact, resident      every weight in RAM, no planner: the speed the int4 arm is held to
// Then the error tables (bench/trunk-error.ts in a child): int8 and int4 against the exact engine,
// teacher-forced over --positions positions, on the slice and on the trained demo model.
// The packs go into `<model>-packed/`, a folder of links to the model's files (the model folder
// itself is never written to), made once.
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { tmpdir } from "node:os";
import { packTrunk, type TrunkFormat } from "../src/engine.ts";
import { ensureDemoModel } from "../src/cli/demo.ts";
import type { ArmResult, ArmSpec } from "./stream.ts";
import type { DiskResult } from "./disk.ts";
import { machineInfo, type MachineInfo } from "./machine.ts";
import { freezeKernels, isDisk, median, parseCommonArgs, ROOT, runArmChild, runDisk, updateDocSection, writeReport, type CommonArgs } from "./common.ts";
import { renderErrorTable, type ErrorReport } from "./trunk-error.ts";
import { diskSummary } from "./report.ts";

const PROMPT = [5, 17, 300, 42];
const BUN = process.execPath;
const say = (s: string) => process.stderr.write(`[bench:trunk] ${s}\n`);

interface Args extends CommonArgs {
  ram: string;
  positions: number;
  timing: boolean; // the timed arms (off with --error-only)
  errors: boolean; // the error tables (off with --no-error)
  merge: string[]; // saved reports to merge (--merge): nothing is run
}

function parseArgs(argv: string[]): Args {
  let ram = "3G";
  let positions = 256;
  let timing = true;
  let errors = true;
  const merge: string[] = [];
  const usage = "bench/trunk.ts [--quick] [--runs N] [--tokens N] [--ram SIZE] [--positions N] [--model DIR] [--no-docs] [--no-error | --error-only] | --merge A.json B.json …";
  const common = parseCommonArgs(argv, { tokens: 9, minTokens: 3, quickTokens: 5 }, usage, (flag, value) => {
    if (flag === "--ram") ram = value();
    else if (flag === "--positions") positions = Number(value());
    else if (flag === "--no-error") errors = false;
    else if (flag === "--error-only") timing = false;
    else if (flag === "--merge") {
      // every following argument that is not a flag
      merge.push(resolve(value()));
      return true;
    } else if (merge.length && !flag.startsWith("--")) merge.push(resolve(flag));
    else if (flag !== "--trunk") return false; // (as forwarded by bench/run.ts)
    return true;
  });
  if (common.quick && !argv.includes("--positions")) positions = 64;
  if (!timing && !errors) throw new Error(`--no-error with --error-only leaves nothing to run (${usage})`);
  return { ...common, ram, positions, timing, errors, merge };
}

type Key = "pieces" | "whole" | "int4" | "resident";
interface Arm {
  key: Key;
  name: string;
  trunk: TrunkFormat;
  spec: (base: Omit<ArmSpec, "name">, packed: string) => ArmSpec;
}
const ARMS: Arm[] = [
  { key: "pieces", name: "exact, pieces", trunk: "bf16", spec: (b) => ({ ...b, name: "exact, pieces" }) },
  { key: "whole", name: "exact, whole units (before the split)", trunk: "bf16", spec: (b) => ({ ...b, name: "exact, whole units", wholeUnits: true }) },
  { key: "int4", name: "int4", trunk: "int4", spec: (b, packed) => ({ ...b, name: "int4", model: packed, trunk: "int4" }) },
  { key: "resident", name: "exact, resident", trunk: "bf16", spec: (b) => ({ ...b, name: "exact, resident", ram: undefined, resident: true }) },
];

type Result = ArmResult & { key: Key; run: number; wallMs: number; loadavg: number[] };

interface Report {
  command: string;
  started: string;
  finished: string;
  args: Args;
  machine: MachineInfo;
  kernels: { source: string; sha256: string };
  packed: string;
  disk: (DiskResult | { error: string; when: string })[];
  results: Result[];
  error?: ErrorReport | { error: string };
  /** The same on the trained demo model (src/cli/demo.ts), copied to a scratch folder for its packs. */
  demoError?: ErrorReport | { error: string };
  /** A merged report: the commands of its parts. */
  parts?: string[];
}

/** `<model>-packed/`: links to every model file (not k3's own), plus the packs made from them. */
function ensurePacked(model: string): string {
  const dir = `${model.replace(/\/+$/, "")}-packed`;
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(model)) if (!f.startsWith("k3-") && !existsSync(join(dir, f))) symlinkSync(join(model, f), join(dir, f));
  for (const f of ["int4", "int8"] as const)
    if (!existsSync(join(dir, `k3-trunk-${f}.k3pack`))) {
      say(`packing the ${f} trunk into ${dir} (reads the trunk once)…`);
      const r = packTrunk(dir, f);
      say(`  ${(r.fileBytes / 1e9).toFixed(2)} GB in ${(r.ms / 1000).toFixed(0)} s; weight error ${(100 * r.weightError.rms).toFixed(2)}% RMS, worst row ${(100 * r.weightError.worstRow).toFixed(2)}%`);
    }
  return dir;
}


function summarize(rep: Report) {
  const problems: string[] = [];
  const disks = rep.disk.filter(isDisk);
  const rate = disks.length ? disks.reduce((a, d) => a + d.bestGbps, 0) / disks.length : NaN; // GB/s, the floor's rate
  // Size-matched (as bench/report.ts): trunk bytes at the best 1 GiB-read rate, expert bytes at
  // the best 17.5 MB random-read rate, each the mean over the disk measurements.
  const ds = diskSummary(rep.disk);
  const matchedFloor = (r: Result) => (ds ? r.perToken!.trunkBytes / (ds.trunkGbps * 1e9) + r.perToken!.expertBytes / (ds.expertGbps * 1e9) : NaN);
  const rows = ARMS.map((arm) => {
    const runs = rep.results.filter((r) => r.key === arm.key);
    const ok = runs.filter((r) => r.ok);
    for (const r of runs) if (!r.ok) problems.push(`${arm.name} run ${r.run} failed: ${r.error}`);
    for (const r of ok) if (r.plan && r.vmHwmBytes! > r.plan.budgetBytes) problems.push(`PEAK RSS OVER BUDGET: ${arm.name} run ${r.run}: ${(r.vmHwmBytes! / 2 ** 30).toFixed(2)} GiB`);
    const ratios = ok.map((r) => r.sPerToken! / (r.perToken!.bytes / (rate * 1e9)));
    const matched = ok.map((r) => r.sPerToken! / matchedFloor(r));
    return { arm, runs: runs.length, ok, s: median(ok.map((r) => r.sPerToken!)), gb: median(ok.map((r) => r.perToken!.bytes / 1e9)), ratio: median(ratios), ratios, matched: median(matched) };
  });
  // Identity: every exact run has the same ids and last logits; every int4 run the same as the others.
  for (const trunk of ["bf16", "int4"] as TrunkFormat[]) {
    const runs = rep.results.filter((r) => r.ok && ARMS.find((a) => a.key === r.key)!.trunk === trunk);
    const ref = runs.find((r) => r.key === "resident") ?? runs[0];
    for (const r of runs)
      if (r.ids!.join(" ") !== ref!.ids!.join(" ") || r.lastLogitsSha256 !== ref!.lastLogitsSha256) problems.push(`${r.spec.name} run ${r.run}: ids or last logits differ from ${ref!.spec.name} run ${ref!.run}`);
  }
  const row = (k: Key) => rows.find((r) => r.arm.key === k)!;
  const targets = {
    pieces: row("pieces").ratio, // target ≤ 1.15
    piecesMatched: row("pieces").matched,
    int4VsResident: row("int4").s / row("resident").s, // target ≤ 1.25
    splitSpeedup: row("whole").s / row("pieces").s,
  };
  if (!(targets.pieces <= 1.15)) problems.push(`target missed: exact with pieces at ${rep.args.ram}: ${targets.pieces.toFixed(2)}× the disk floor (target ≤ 1.15)`);
  if (!(targets.int4VsResident <= 1.25)) problems.push(`target missed: int4 at ${rep.args.ram}: ${targets.int4VsResident.toFixed(2)}× the resident exact engine's s/token (target ≤ 1.25)`);
  return { rate, ds, matchedFloor, rows, targets, problems };
}

function renderMarkdown(rep: Report): string {
  const { rate, ds, matchedFloor, rows, targets, problems } = summarize(rep);
  const m = rep.machine;
  const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "—");
  const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
  const L: string[] = [];
  L.push(`### Small budgets and the compact trunk, ${rep.started.slice(0, 10)} (\`${rep.command}\`)`, "");
  L.push(
    `Machine: ${m.cpu}, ${m.cores} cores, ${(m.memTotalBytes / 2 ** 30).toFixed(2)} GiB RAM; model ${rep.args.model} on ${m.disk.device} (${m.disk.fsType}); packs in ${rep.packed}. ` +
      `Budget ${rep.args.ram}, prompt ids \`${PROMPT.join(" ")}\`, ${rep.args.tokens} generated tokens (${rep.args.tokens - 1} decode steps), ${rep.args.runs} interleaved run(s) per arm. ` +
      `Started ${rep.started}, finished ${rep.finished}. Kernels sha256 ${rep.kernels.sha256.slice(0, 16)}….`,
    "",
  );
  L.push(`**Disk** (bench/disk.ts before every round and after the last; best pattern's median each time): ${rep.disk.map((d) => (isDisk(d) ? d.bestGbps.toFixed(2) : "failed")).join(" / ")} GB/s; floor rate = their mean, **${f2(rate)} GB/s**.`, "");
  if (ds) L.push(`Size-matched rates (mean of the best per kind): 1 GiB trunk reads ${f2(ds.trunkGbps)} GB/s, 17.5 MB expert reads ${f2(ds.expertGbps)} GB/s.`, "");
  if (rep.parts) L.push(`Parts merged: ${rep.parts.map((c) => `\`${c}\``).join("; ")}.`, "");
  L.push("**Every run** (decode only; floor = bytes read per token ÷ floor rate; ratio = s/token ÷ floor; matched = s/token ÷ (trunk bytes ÷ the 1 GiB rate + expert bytes ÷ the expert rate)):", "");
  L.push("| arm | run | s/token | GB read/token (trunk + experts) | reads/token | I/O wait s/token | plan | peak RSS / budget | floor s | ratio | matched ratio | load 1m |");
  L.push("|---|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of rep.results) {
    const arm = ARMS.find((a) => a.key === r.key)!;
    if (!r.ok) {
      L.push(`| ${arm.name} | ${r.run} | FAILED: ${r.error} |||||||||||`);
      continue;
    }
    const p = r.perToken!;
    const floor = p.bytes / (rate * 1e9);
    const plan = r.plan
      ? `${r.plan.pinnedPieces}/${r.plan.pieces} pieces pinned, ${r.plan.ringSlots ? `ring ${r.plan.ringSlots} × ${gib(r.plan.ringSlotBytes ?? 0)}${r.plan.readerMayRunAhead ? "" : " (no read-ahead)"}` : "nothing streamed"}, ${r.plan.expertSlots} expert slots`
      : "resident (no planner)";
    L.push(
      `| ${arm.name} | ${r.run} | ${f2(r.sPerToken!)} | ${f2(p.bytes / 1e9)} (${f2(p.trunkBytes / 1e9)} + ${f2(p.expertBytes / 1e9)}) | ${p.reads.toFixed(1)} | ${f2(p.ioWaitMs / 1000)} | ${plan} | ${gib(r.vmHwmBytes!)} / ${r.plan ? gib(r.plan.budgetBytes) : "none"} | ${floor >= 0.05 ? f2(floor) : "—"} | ${floor >= 0.05 ? f2(r.sPerToken! / floor) : "—"} | ${floor >= 0.05 ? f2(r.sPerToken! / matchedFloor(r)) : "—"} | ${f2(r.loadavg[0]!)} |`,
    );
  }
  L.push("", "**Per arm** (medians over runs):", "");
  L.push("| arm | runs ok | s/token (each run) | median s/token | GB read/token | median ratio to the disk floor | median matched ratio |", "|---|---|---|---|---|---|---|");
  for (const r of rows) L.push(`| ${r.arm.name} | ${r.ok.length}/${r.runs} | ${r.ok.map((x) => f2(x.sPerToken!)).join(" / ")} | ${f2(r.s)} | ${f2(r.gb)} | ${r.arm.key === "resident" ? "— (no disk reads)" : f2(r.ratio)} | ${r.arm.key === "resident" ? "—" : f2(r.matched)} |`);
  L.push(
    "",
    `**Targets**: exact with pieces at ${rep.args.ram}: **${f2(targets.pieces)}×** the disk floor (target ≤ 1.15; ${f2(targets.piecesMatched)}× the size-matched floor); the split made that budget **${f2(targets.splitSpeedup)}×** faster than whole units; ` +
      `int4 at ${rep.args.ram}: **${f2(targets.int4VsResident)}×** the s/token of the exact engine with everything resident (target ≤ 1.25).`,
    "",
  );
  L.push("**Identity**: every exact run (pieces, whole units, resident) must give the same ids and bit-identical last logits; every int4 run the same as the other int4 runs.", "");
  L.push("**Error of the compact trunk** (bench/trunk-error.ts), on the slice (real widths, random weights) and on the trained demo model:", "");
  for (const e of [rep.error, rep.demoError]) {
    if (!e) L.push("not measured.");
    else if ("error" in e) L.push(`FAILED: ${e.error}`);
    else L.push(renderErrorTable(e));
    L.push("");
  }
  L.push("", `**Problems**: ${problems.length ? problems.join("; ") : "none"}.`, "");
  return L.join("\n");
}

async function measureError(model: string, args: Args, scratch: string, ram: string): Promise<ErrorReport | { error: string }> {
  const out = join(scratch, `trunk-error-${basename(model)}.json`);
  const p = Bun.spawn([BUN, join(ROOT, "bench/trunk-error.ts"), "--model", model, "--positions", String(args.positions), "--ram", ram, "--json", out], { stdout: "ignore", stderr: "inherit", cwd: ROOT, env: { ...process.env } });
  const code = await p.exited;
  if (code !== 0 || !existsSync(out)) return { error: `bench/trunk-error.ts exited ${code}` };
  return JSON.parse(readFileSync(out, "utf8")) as ErrorReport;
}

/** Several saved reports (parts of one benchmark, run under separate locks) as one. */
function mergeReports(parts: Report[], files: string[]): Report {
  const timed = parts.filter((p) => p.results.length > 0);
  if (!timed.length) throw new Error("--merge: none of the reports has timed runs");
  const first = timed[0]!;
  for (const p of timed) {
    if (p.args.ram !== first.args.ram || p.args.tokens !== first.args.tokens || p.args.model !== first.args.model)
      throw new Error(`--merge: parts measured different things (--ram ${p.args.ram} / ${first.args.ram}, --tokens ${p.args.tokens} / ${first.args.tokens}, model ${p.args.model} / ${first.args.model})`);
    if (p.kernels.sha256 !== first.kernels.sha256) throw new Error(`--merge: parts ran different kernel libraries (${p.kernels.sha256.slice(0, 16)}… / ${first.kernels.sha256.slice(0, 16)}…): rerun them on one build`);
  }
  let offset = 0;
  const results: Result[] = [];
  const disk: Report["disk"] = [];
  for (const p of timed) {
    for (const r of p.results) results.push({ ...r, run: r.run + offset });
    disk.push(...p.disk.map((d) => ({ ...d, when: `${d.when} (part ${timed.indexOf(p) + 1})` })));
    offset += Math.max(...p.results.map((r) => r.run));
  }
  const withError = [...parts].reverse().find((p) => p.error);
  const withDemo = [...parts].reverse().find((p) => p.demoError);
  const times = parts.flatMap((p) => [p.started, p.finished]).sort();
  return {
    ...first,
    command: `bun bench/trunk.ts --merge ${files.map((f) => basename(f)).join(" ")}`,
    parts: parts.map((p) => p.command),
    started: times[0]!,
    finished: times.at(-1)!,
    args: { ...first.args, runs: offset, positions: withError?.args.positions ?? first.args.positions },
    disk,
    results,
    error: withError?.error,
    demoError: withDemo?.demoError,
  };
}

/** The docs: BENCH.md's full report, TRUNK.md's error tables. */
function writeDocs(rep: Report, md: string) {
  updateDocSection("docs/BENCH.md", "trunk-bench", md, say);
  const L = [`Measured ${rep.finished.slice(0, 10)} by \`${rep.command}\` (docs/BENCH.md has the whole report: speeds, bytes, the plan, load):`, ""];
  for (const e of [rep.error, rep.demoError]) {
    if (!e) continue;
    L.push("error" in e ? `FAILED: ${e.error}` : renderErrorTable(e), "");
  }
  updateDocSection("docs/TRUNK.md", "trunk-error", L.join("\n"), say);
}

async function main() {
  const argv = process.argv.slice(2);
  const args = parseArgs(argv);
  if (args.merge.length) {
    const report = mergeReports(args.merge.map((f) => JSON.parse(readFileSync(f, "utf8")) as Report), args.merge);
    const md = renderMarkdown(report);
    writeReport("trunk-merged", report.finished.replace(/[:.]/g, "-").slice(0, 19), report, md, say);
    if (args.docs) writeDocs(report, md);
    const { problems } = summarize(report);
    for (const p of problems) say(`PROBLEM: ${p}`);
    process.exit(problems.some((p) => !p.startsWith("target missed")) ? 1 : 0);
  }
  if (!existsSync(join(args.model, "config.json"))) throw new Error(`${args.model} has no model (npm run bench generates the slice)`);
  const started = new Date();
  const stamp = started.toISOString().replace(/[:.]/g, "-").slice(0, 19);
  const machine = machineInfo(args.model);
  const scratch = join(tmpdir(), `k3-bench-trunk-${process.pid}`);
  mkdirSync(scratch, { recursive: true });
  const kernels = freezeKernels(scratch);
  const packed = ensurePacked(args.model);
  const threads = navigator.hardwareConcurrency;
  const base = { model: args.model, prompt: PROMPT, maxTokens: args.tokens, threads, ram: args.ram };
  const disk: Report["disk"] = [];
  const measureDisk = async (when: string) => {
    const d = await runDisk(args.model, args.quick);
    disk.push({ ...d, when });
    say(`disk ${when}: ${isDisk(d) ? `${d.bestGbps.toFixed(2)} GB/s` : d.error}`);
  };
  const results: Result[] = [];
  if (args.timing) {
    for (let run = 1; run <= args.runs; run++) {
      await measureDisk(`before round ${run}`);
      for (const arm of ARMS) {
        say(`run ${run}/${args.runs}: ${arm.name}…`);
        const spec = arm.spec(base, packed);
        const r = { ...(await runArmChild(spec, scratch, `${run}-${arm.key}`, 20 * 60_000)), key: arm.key, run };
        results.push(r);
        if (!r.ok) say(`  FAILED: ${r.error}`);
        else say(`  ${r.sPerToken!.toFixed(2)} s/token, ${(r.perToken!.bytes / 1e9).toFixed(2)} GB/token, peak RSS ${(r.vmHwmBytes! / 2 ** 30).toFixed(2)} GiB, ids ${r.ids!.join(" ")}`);
      }
    }
    await measureDisk("after the last round");
  }
  let error: Report["error"];
  let demoError: Report["demoError"];
  if (args.errors) {
    say(`error table: ${args.positions} positions, int8 and int4 against the exact engine…`);
    error = await measureError(packed, args, scratch, "12G");
    say("error table on the trained demo model…");
    const demoSrc = ensureDemoModel();
    const demo = join(scratch, basename(demoSrc)); // a copy: its packs must not go into k3's cache of the demo
    cpSync(demoSrc, demo, { recursive: true, preserveTimestamps: true });
    demoError = await measureError(demo, args, scratch, "2G");
  }
  rmSync(scratch, { recursive: true, force: true });
  const report: Report = {
    command: argv.includes("--trunk") ? `npm run bench -- ${argv.join(" ")}` : `bun bench/trunk.ts ${argv.join(" ")}`.trim(),
    started: started.toISOString(),
    finished: new Date().toISOString(),
    args,
    machine,
    kernels,
    packed: basename(packed),
    disk,
    results,
    error,
    demoError,
  };
  const md = renderMarkdown(report);
  writeReport("trunk", stamp, report, md, say);
  if (!args.timing || !args.errors) {
    say(`a part of the benchmark: merge it with the others (bun bench/trunk.ts --merge bench/out/trunk-….json …) for the docs`);
    const bad = results.filter((r) => !r.ok).length + [error, demoError].filter((e) => e && "error" in e).length;
    process.exit(bad ? 1 : 0);
  }
  if (args.docs && !args.quick) writeDocs(report, md);
  const { problems } = summarize(report);
  for (const p of problems) say(`PROBLEM: ${p}`);
  process.exit(problems.some((p) => !p.startsWith("target missed")) ? 1 : 0);
}

await main();
