// The exact compact trunk's benchmark (issue 25): the bf16 trunk from the shards against the exact
// pack (BX4: `k3 pack --trunk exact`), arms side by side in one run, on the `slice` model and the
// trained demo. Opt-in (`npm run bench -- --exact`), never part of `npm test`; timed runs alone on the
// machine (nothing else timed at once). docs/TRUNK.md "The exact trunk" reads the report.
//
//   bun bench/exact.ts [--quick] [--runs N] [--tokens N] [--ram SIZE] [--resident-ram SIZE] [--model DIR] [--no-demo] [--no-docs]
//   bun bench/exact.ts --merge bench/out/exact-A.json bench/out/exact-B.json … [--no-docs]
//
// Per model, arms (each its own `bun bench/stream.ts` process; round r runs every arm once, in
// the opposite order every other round; the disk is measured before every round and after the last):
//   bf16 @ RAM, exact @ RAM           at the streaming budget (--ram, default 3G on the slice; the
//                                     floor of both on the demo): what a small machine pays
//   bf16 @ RES, exact @ RES           at a budget that pins every weight (--resident-ram, default
//                                     16G; 1G on the demo): the kernels alone, no disk
// Both trunks are asked for by name (auto would pick exact where it reads less). Every arm of a
// model must give the same ids and last logits. Deterministic counters (bytes read per token,
// pinned pieces) beside every time; the pack's bytes per trunk weight for each model.
// The pack goes into `<model>-exact/`, a folder of links to the model's files (the model folder is
// never written to), made once.
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { join, resolve } from "node:path";
import { tmpdir } from "node:os";
import { packTrunk, type PackResult } from "../src/engine.ts";
import { unpackDemo } from "../src/cli/demo-pack.ts";
import type { ArmResult, ArmSpec } from "./stream.ts";
import type { DiskResult } from "./disk.ts";
import { machineInfo, type MachineInfo } from "./machine.ts";
import { freezeKernels, isDisk, median, parseCommonArgs, ROOT, runArmChild, runDisk, updateDocSection, writeReport, type CommonArgs } from "./common.ts";
import { floorBytes, planInputFromCensus } from "../src/memory/plan.ts";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { loadPack, trunkSlots } from "../src/memory/pack.ts";
import { K3Error } from "../src/errors.ts";

const PROMPT = [5, 17, 300, 42];
const say = (s: string) => process.stderr.write(`[bench:exact] ${s}\n`);

interface Args extends CommonArgs {
  ram: string;
  residentRam: string;
  demo: boolean;
  merge: string[];
}

function parseArgs(argv: string[]): Args {
  let ram = "3G";
  let residentRam = "16G";
  let demo = true;
  const merge: string[] = [];
  const usage = "bench/exact.ts [--quick] [--runs N] [--tokens N] [--ram SIZE] [--resident-ram SIZE] [--model DIR] [--no-demo] [--no-docs] | --merge A.json B.json …";
  const common = parseCommonArgs(argv, { tokens: 9, minTokens: 3, quickTokens: 4 }, usage, (flag, value) => {
    if (flag === "--ram") ram = value();
    else if (flag === "--resident-ram") residentRam = value();
    else if (flag === "--no-demo") demo = false;
    else if (flag === "--merge") merge.push(resolve(value()));
    else if (merge.length && !flag.startsWith("--")) merge.push(resolve(flag));
    else if (flag !== "--exact") return false; // as forwarded by bench/run.ts
    return true;
  });
  return { ...common, ram, residentRam, demo, merge };
}

interface ModelSetup {
  name: "slice" | "demo";
  dir: string; // the links folder with the pack
  ram: string;
  residentRam: string;
  pack: Pick<PackResult, "fileBytes" | "sourceBytes" | "coded" | "ms">;
}

type Result = ArmResult & { model: ModelSetup["name"]; arm: string; run: number; wallMs: number; loadavg: number[] };

interface Report {
  command: string;
  started: string;
  finished: string;
  args: Args;
  machine: MachineInfo;
  kernels: { source: string; sha256: string };
  models: ModelSetup[];
  disk: (DiskResult | { error: string })[];
  results: Result[];
  parts?: string[];
}

/** Whether the exact pack in `dir` opens (an older k3's or a stale one is made again). */
function usablePack(dir: string): boolean {
  try {
    loadPack(openCheckpoint(dir), "exact");
    return true;
  } catch (err) {
    if (!(err instanceof K3Error)) throw err;
    say(`the exact pack in ${dir} is not usable (${err.message}): packing again`);
    return false;
  }
}

/** `<model>-exact/`: links to the model's files (not k3's own), plus the exact pack made from them. */
function ensurePack(model: string): { dir: string; pack: ModelSetup["pack"] } {
  const dir = `${model.replace(/\/+$/, "")}-exact`;
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(model)) if (!f.startsWith("k3-") && !existsSync(join(dir, f))) symlinkSync(join(model, f), join(dir, f));
  const meta = join(dir, "exact-pack.json");
  if (existsSync(join(dir, "k3-trunk-exact.k3pack")) && existsSync(meta) && usablePack(dir)) return { dir, pack: JSON.parse(readFileSync(meta, "utf8")) };
  say(`packing the exact trunk into ${dir} (reads the trunk once, decodes every block back)…`);
  const r = packTrunk(dir, "exact");
  Bun.write(meta, JSON.stringify({ fileBytes: r.fileBytes, sourceBytes: r.sourceBytes, coded: r.coded, ms: r.ms }));
  say(`  ${(r.fileBytes / 1e9).toFixed(3)} GB from ${(r.sourceBytes / 1e9).toFixed(3)} GB in ${(r.ms / 1000).toFixed(0)} s; ${r.coded!.bytesPerWeight.toFixed(4)} bytes per coded weight, ${r.coded!.escapes} escapes`);
  return { dir, pack: r };
}

/** A budget both trunks stream at with nothing pinned: the larger of the two floors. */
function bothFloors(dir: string): number {
  const ck = openCheckpoint(dir);
  const floor = (t: "bf16" | "exact") => floorBytes(planInputFromCensus(ck.config, ck.layout.census, 0, 4096, 1, 32, trunkSlots(ck, t).slots));
  return Math.max(floor("bf16"), floor("exact"));
}

const ARMS = (m: ModelSetup) => [
  { arm: `bf16 @ ${m.ram}`, trunk: "bf16" as const, ram: m.ram },
  { arm: `exact @ ${m.ram}`, trunk: "exact" as const, ram: m.ram },
  { arm: `bf16 @ ${m.residentRam}`, trunk: "bf16" as const, ram: m.residentRam },
  { arm: `exact @ ${m.residentRam}`, trunk: "exact" as const, ram: m.residentRam },
];


function summarize(rep: Report) {
  const problems: string[] = [];
  const rows = rep.models.flatMap((m) =>
    ARMS(m).map((a) => {
      const runs = rep.results.filter((r) => r.model === m.name && r.arm === a.arm);
      const ok = runs.filter((r) => r.ok);
      for (const r of runs) if (!r.ok) problems.push(`${m.name} ${a.arm} run ${r.run} failed: ${r.error}`);
      for (const r of ok) if (r.plan && r.vmHwmBytes! > r.plan.budgetBytes) problems.push(`PEAK RSS OVER BUDGET: ${m.name} ${a.arm} run ${r.run}`);
      return { model: m, ...a, runs, ok, s: median(ok.map((r) => r.sPerToken!)), trunk: median(ok.map((r) => r.perToken!.trunkBytes)), bytes: median(ok.map((r) => r.perToken!.bytes)) };
    }),
  );
  for (const m of rep.models) {
    const runs = rep.results.filter((r) => r.ok && r.model === m.name);
    const ref = runs[0];
    for (const r of runs) if (r.ids!.join(" ") !== ref!.ids!.join(" ") || r.lastLogitsSha256 !== ref!.lastLogitsSha256) problems.push(`IDENTITY: ${m.name} ${r.arm} run ${r.run}: ids or last logits differ from ${ref!.arm} run ${ref!.run}`);
  }
  const targets = rep.models.map((m) => {
    const row = (a: string) => rows.find((r) => r.model.name === m.name && r.arm === a)!;
    const [bs, xs, br, xr] = ARMS(m).map((a) => row(a.arm));
    return { model: m.name, trunkFewer: bs!.trunk / xs!.trunk, wall: xs!.s / bs!.s, resident: xr!.s / br!.s };
  });
  for (const t of targets.filter((x) => x.model === "slice")) {
    if (!(t.trunkFewer >= 1.3)) problems.push(`target missed: slice trunk bytes per token ${t.trunkFewer.toFixed(2)}× fewer (target ≥ 1.3)`);
    if (!(t.wall <= 0.8)) problems.push(`target missed: slice wall time ${t.wall.toFixed(2)}× bf16's at ${rep.args.ram} (target ≤ 0.8)`);
    if (!(t.resident <= 1)) problems.push(`target missed: slice resident decode ${t.resident.toFixed(2)}× bf16's (target ≤ 1)`);
  }
  return { rows, targets, problems };
}

function renderMarkdown(rep: Report): string {
  const { rows, targets, problems } = summarize(rep);
  const m = rep.machine;
  const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : "—");
  const L: string[] = [];
  L.push(`### The exact trunk, ${rep.started.slice(0, 10)} (\`${rep.command}\`)`, "");
  L.push(
    `Machine: ${m.cpu}, ${m.cores} cores, ${(m.memTotalBytes / 2 ** 30).toFixed(2)} GiB RAM; disk ${m.disk.device} (${m.disk.fsType}). Prompt ids \`${PROMPT.join(" ")}\`, ${rep.args.tokens} generated tokens (${rep.args.tokens - 1} decode steps, greedy), ${rep.args.runs} interleaved round(s). ` +
      `Started ${rep.started}, finished ${rep.finished}. Kernels sha256 ${rep.kernels.sha256.slice(0, 16)}….`,
    "",
  );
  L.push(`**Disk** (bench/disk.ts before every round and after the last; best pattern's median): ${rep.disk.map((d) => (isDisk(d) ? d.bestGbps.toFixed(2) : "failed")).join(" / ")} GB/s.`, "");
  if (rep.parts) L.push(`Parts merged: ${rep.parts.map((c) => `\`${c}\``).join("; ")}.`, "");
  L.push("**The packs** (`k3 pack --trunk exact`; every block decoded back and compared with the shards as it was written):", "");
  L.push("| model | trunk bf16 | pack file | file ÷ trunk | bytes per coded weight (rows + escape tables) | escapes | pack time |", "|---|---:|---:|---:|---:|---:|---:|");
  for (const x of rep.models)
    L.push(`| ${x.name} | ${f(x.pack.sourceBytes / 1e9, 3)} GB | ${f(x.pack.fileBytes / 1e9, 3)} GB | ${f(x.pack.fileBytes / x.pack.sourceBytes, 4)} | ${f(x.pack.coded!.bytesPerWeight, 4)} | ${x.pack.coded!.escapes} (${(x.pack.coded!.escapes / x.pack.coded!.weights).toExponential(2)} per weight) | ${f(x.pack.ms / 1000, 0)} s |`);
  L.push("", "**Every run** (decode only):", "");
  L.push("| model | arm | round | s/token | GB read/token (trunk + experts) | pieces pinned | expert slots | peak RSS | load 1m |", "|---|---|---|---:|---|---|---:|---:|---:|");
  for (const r of rep.results) {
    if (!r.ok) {
      L.push(`| ${r.model} | ${r.arm} | ${r.run} | FAILED: ${r.error} ||||||`);
      continue;
    }
    const p = r.perToken!;
    L.push(`| ${r.model} | ${r.arm} | ${r.run} | ${f(r.sPerToken!, 3)} | ${f(p.bytes / 1e9, 3)} (${f(p.trunkBytes / 1e9, 3)} + ${f(p.expertBytes / 1e9, 3)}) | ${r.plan ? `${r.plan.pinnedPieces}/${r.plan.pieces}` : "—"} | ${r.plan?.expertSlots ?? "—"} | ${f(r.vmHwmBytes! / 2 ** 30)} GiB | ${f(r.loadavg[0]!)} |`);
  }
  L.push("", "**Per arm** (medians over rounds):", "");
  L.push("| model | arm | runs ok | s/token (each round) | median s/token | trunk GB/token | GB/token |", "|---|---|---|---|---:|---:|---:|");
  for (const r of rows) L.push(`| ${r.model.name} | ${r.arm} | ${r.ok.length}/${r.runs.length} | ${r.ok.map((x) => f(x.sPerToken!, 3)).join(", ")} | ${f(r.s, 3)} | ${f(r.trunk / 1e9, 3)} | ${f(r.bytes / 1e9, 3)} |`);
  L.push("", "**Exact vs bf16** (ratios of the medians, same run):", "");
  L.push("| model | trunk bytes read per token, bf16 ÷ exact (target ≥ 1.3) | wall time at the streaming budget, exact ÷ bf16 (target ≤ 0.8) | resident decode, exact ÷ bf16 (target ≤ 1) |", "|---|---:|---:|---:|");
  // exact pinning every piece where bf16 still streams some: no finite ratio to show
  for (const t of targets) L.push(`| ${t.model} | ${t.trunkFewer > 1000 ? "all pinned (bf16 streams some)" : f(t.trunkFewer)} | ${f(t.wall)} | ${f(t.resident)} |`);
  L.push("", problems.length ? `Problems: ${problems.join("; ")}.` : "Every arm of a model gave the same ids and last logits; every target met.");
  return `${L.join("\n")}\n`;
}

function merge(paths: string[], docs: boolean): void {
  const parts = paths.map((p) => JSON.parse(readFileSync(p, "utf8")) as Report);
  let round = 0;
  const results: Result[] = [];
  for (const p of parts) {
    const rounds = [...new Set(p.results.map((r) => r.run))].sort((a, b) => a - b);
    for (const r0 of rounds) {
      round++;
      for (const r of p.results.filter((x) => x.run === r0)) results.push({ ...r, run: round });
    }
  }
  const first = parts[0]!;
  const rep: Report = { ...first, finished: parts.at(-1)!.finished, args: { ...first.args, runs: round }, disk: parts.flatMap((p) => p.disk), results, parts: parts.map((p) => p.command), command: `bun bench/exact.ts --merge ${paths.map((p) => p.replace(`${ROOT}/`, "")).join(" ")}` };
  const md = renderMarkdown(rep);
  writeReport("exact-merged", new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19), rep, md, say);
  if (docs) updateDocSection("docs/TRUNK.md", "exact-bench", md, say);
}

async function main() {
  const argv = process.argv.slice(2);
  const args = parseArgs(argv);
  if (args.merge.length) return merge(args.merge, args.docs);
  const started = new Date();
  const stamp = started.toISOString().replace(/[:.]/g, "-").slice(0, 19);
  const scratch = join(tmpdir(), `k3-bench-exact-${process.pid}`);
  mkdirSync(scratch, { recursive: true });
  const kernels = freezeKernels(scratch);
  const machine = machineInfo(args.model);
  const models: ModelSetup[] = [];
  const slice = ensurePack(args.model);
  models.push({ name: "slice", dir: slice.dir, ram: args.ram, residentRam: args.residentRam, pack: slice.pack });
  if (args.demo) {
    const src = join(ROOT, "models/demo");
    if (!existsSync(join(src, "config.json"))) {
      mkdirSync(src, { recursive: true });
      unpackDemo(new Uint8Array(readFileSync(join(ROOT, "assets/demo/k3-demo.pack.zst"))), src);
    }
    const d = ensurePack(src);
    models.push({ name: "demo", dir: d.dir, ram: `${Math.ceil(bothFloors(d.dir) / 2 ** 20)}M`, residentRam: "1G", pack: d.pack });
  }
  const threads = (await import("node:os")).availableParallelism();
  const disk: Report["disk"] = [];
  const results: Result[] = [];
  for (let run = 1; run <= args.runs; run++) {
    disk.push(await runDisk(slice.dir, args.quick));
    for (const m of models) {
      const arms = ARMS(m);
      for (const a of run % 2 ? arms : [...arms].reverse()) {
        say(`round ${run}: ${m.name} ${a.arm}…`);
        const spec: ArmSpec = { name: `${m.name} ${a.arm}`, model: m.dir, ram: a.ram, trunk: a.trunk, threads, prompt: PROMPT, maxTokens: args.tokens };
        const r = await runArmChild(spec, scratch, `${run}-${m.name}-${a.arm.replace(/\W+/g, "_")}`, 20 * 60_000);
        results.push({ ...r, model: m.name, arm: a.arm, run });
        say(r.ok ? `  ${r.sPerToken!.toFixed(3)} s/token, ${(r.perToken!.bytes / 1e9).toFixed(3)} GB/token` : `  FAILED: ${r.error}`);
      }
    }
  }
  disk.push(await runDisk(slice.dir, args.quick));
  rmSync(scratch, { recursive: true, force: true });
  const report: Report = { command: `bun bench/exact.ts ${argv.join(" ")}`.trim(), started: started.toISOString(), finished: new Date().toISOString(), args, machine, kernels, models, disk, results };
  const md = renderMarkdown(report);
  writeReport("exact", stamp, report, md, say);
  if (args.docs && !args.quick && args.runs >= 3) updateDocSection("docs/TRUNK.md", "exact-bench", md, say);
  const { problems } = summarize(report);
  for (const p of problems) say(`PROBLEM: ${p}`);
  process.exit(problems.some((p) => !p.startsWith("target missed")) ? 1 : 0);
}

await main();
