// The speculation benchmark (issue 11): speculation off vs auto on the `slice` model at a streaming
// budget, in one run, arms interleaved. Opt-in (`npm run bench -- --speculation`), never part of
// `npm test`. docs/SPECULATION.md says what each arm shows and holds the last full report.
//
//   bun run bench/speculate.ts [--quick] [--runs N] [--tokens N] [--ram SIZE] [--model DIR] [--no-docs]
//   bun run bench/speculate.ts --round R [...]      one round (R) of the compared arms: a piece of a
//                                                    run split to fit a lock slot (shared machine)
//   bun run bench/speculate.ts --illustrate [...]    the once-arm alone, with an `off` run to pair it
//   bun run bench/speculate.ts --merge A.json B.json …   one report (and the doc section) from pieces
//
// Arms (each run a separate `bun bench/stream.ts` process; round r runs every arm once):
//   off                   speculation off: the baseline, and the reference ids
//   auto, drafts right    `auto`, drafts replay the reference continuation: (a), the ceiling
//   auto, n-gram          `auto` with the default prompt-lookup drafter: (b), what a user gets
//   auto, drafts wrong    `auto`, every draft wrong: the cost model must back off, (b')
//   8, drafts wrong       `--speculate 8`, every draft wrong: what the cost model saves (first round only)
// Numbers per run: s/token = decode wall time ÷ tokens generated after the first; bytes read per
// generated token = the engine's counters over the same tokens (deterministic for a given arm).
// Ratios pair each run with the `off` run of the same round. Every arm must produce the
// reference ids (greedy output is identical with speculation on and off).
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { tmpdir } from "node:os";
import type { ArmResult, ArmSpec } from "./stream.ts";
import { machineInfo, type MachineInfo } from "./machine.ts";
import { freezeKernels, median, parseCommonArgs, ROOT, runArmChild, updateDocSection, writeReport, type CommonArgs } from "./common.ts";
const PROMPT = [5, 17, 300, 42];
const say = (s: string) => process.stderr.write(`[bench:spec] ${s}\n`);

interface Args extends CommonArgs {
  ram: string;
  /** Run only this round (the compared arms; the once-arms need --illustrate). */
  round?: number;
  /** Run only `off` and the once-arms. */
  illustrate: boolean;
  /** Reports (JSON) to merge instead of running anything. */
  merge: string[];
}

function parseArgs(argv: string[]): Args {
  let ram = "6G";
  let round: number | undefined;
  let illustrate = false;
  const merge: string[] = [];
  const usage = "bench/speculate.ts [--quick] [--runs N] [--tokens N] [--ram SIZE] [--model DIR] [--no-docs] [--round R | --illustrate | --merge A.json B.json …]";
  const common = parseCommonArgs(argv, { tokens: 33, minTokens: 3, quickTokens: 19 }, usage, (flag, value) => {
    if (flag === "--ram") ram = value();
    else if (flag === "--round") {
      round = Number(value());
      if (!Number.isInteger(round) || round < 1) throw new Error(`--round needs a positive integer (${usage})`);
    } else if (flag === "--illustrate") illustrate = true;
    else if (flag === "--merge") {
      for (let f = value(); f; f = value()) {
        if (f.startsWith("--")) throw new Error(`--merge takes every argument after it: put it last (${usage})`);
        merge.push(resolve(f));
      }
      if (!merge.length) throw new Error(`--merge needs report files (${usage})`);
    } else if (flag !== "--speculation") return false; // (as forwarded by bench/run.ts)
    return true;
  });
  if ([round !== undefined, illustrate, merge.length > 0].filter(Boolean).length > 1) throw new Error(`--round, --illustrate and --merge exclude each other (${usage})`);
  return { ...common, ram, round, illustrate, merge };
}

/** `once`: run in the first round only (an illustration, not a compared arm: it takes minutes). */
type Arm = { name: string; key: "off" | "a" | "b" | "b2" | "fixed"; speculate: ArmSpec["speculate"]; drafter?: "ngram" | "replay" | "wrong"; once?: true };
const ARMS: Arm[] = [
  { name: "off", key: "off", speculate: "off" },
  { name: "auto, drafts right (a)", key: "a", speculate: "auto", drafter: "replay" },
  { name: "auto, n-gram (b)", key: "b", speculate: "auto", drafter: "ngram" },
  { name: "auto, drafts wrong (b')", key: "b2", speculate: "auto", drafter: "wrong" },
  { name: "8, drafts wrong", key: "fixed", speculate: 8, drafter: "wrong", once: true },
];

type Result = ArmResult & { arm: Arm["key"]; run: number; wallMs: number; loadavg: number[] };

async function runChild(spec: ArmSpec, arm: Arm, run: number, scratch: string): Promise<Result> {
  return { ...(await runArmChild(spec, scratch, `${run}-${arm.key}`, 40 * 60_000)), arm: arm.key, run };
}

interface Report {
  /** One per piece: a merged report lists each piece's command. */
  command: string;
  started: string;
  finished: string;
  args: Args;
  machine: MachineInfo;
  kernels: { source: string; sha256: string };
  reference: number[];
  results: Result[];
}

/** Per arm: medians over runs, and ratios against the same round's `off` run. */
function summarize(rep: Report) {
  const off = (run: number) => rep.results.find((r) => r.arm === "off" && r.run === run && r.ok);
  const problems: string[] = [];
  const rows = ARMS.map((arm) => {
    const runs = rep.results.filter((r) => r.arm === arm.key);
    const ok = runs.filter((r) => r.ok);
    for (const r of runs) {
      if (!r.ok) problems.push(`${arm.name} run ${r.run} failed: ${r.error}`);
      else if (r.ids!.join(" ") !== rep.reference.join(" ")) problems.push(`${arm.name} run ${r.run}: ids differ from the reference`);
    }
    const speed = ok.flatMap((r) => (off(r.run) ? [off(r.run)!.sPerToken! / r.sPerToken!] : []));
    const bytes = ok.flatMap((r) => (off(r.run) ? [off(r.run)!.perToken!.bytes / r.perToken!.bytes] : []));
    const sp = ok[0]?.speculation;
    return {
      arm,
      runs: runs.length,
      ok: ok.length,
      sPerToken: ok.map((r) => r.sPerToken!),
      gbPerToken: ok.map((r) => r.perToken!.bytes / 1e9),
      speedRatio: median(speed),
      bytesRatio: median(bytes),
      speedRatios: speed,
      acceptance: sp && sp.draftedTokens ? sp.acceptedTokens / sp.draftedTokens : undefined,
      speculation: ok.map((r) => r.speculation!),
    };
  });
  const target = (key: Arm["key"], what: string, value: number, min: number) => {
    if (!(value >= min)) problems.push(`target missed: ${ARMS.find((a) => a.key === key)!.name}: ${what} ${value.toFixed(2)} < ${min}`);
  };
  const row = (k: Arm["key"]) => rows.find((r) => r.arm.key === k)!;
  target("a", "bytes ratio", row("a").bytesRatio, 1.8);
  target("a", "speed ratio", row("a").speedRatio, 1.6);
  target("b", "speed ratio", row("b").speedRatio, 0.97);
  target("b2", "speed ratio", row("b2").speedRatio, 0.97);
  return { rows, problems };
}

function renderMarkdown(rep: Report): string {
  const { rows, problems } = summarize(rep);
  const m = rep.machine;
  const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "—");
  const L: string[] = [];
  L.push(`### Speculation benchmark, ${rep.started.slice(0, 10)} (\`${rep.command}\`)`, "");
  L.push(`Machine: ${m.cpu}, ${m.cores} cores, ${(m.memTotalBytes / 2 ** 30).toFixed(2)} GiB RAM; model on ${m.disk.device} (${m.disk.fsType}). Budget ${rep.args.ram} (the trunk streams), prompt ids \`${PROMPT.join(" ")}\`, ${rep.args.tokens} generated tokens (${rep.args.tokens - 1} after the first), ${rep.args.runs} interleaved run(s) per arm. Started ${rep.started}, finished ${rep.finished}. Kernels sha256 ${rep.kernels.sha256.slice(0, 16)}….`, "");
  L.push("**Every run** (s/token and bytes: decode only, per generated token after the first; ratios against the `off` run of the same round):", "");
  L.push("| arm | run | s/token | GB read/token (trunk + experts) | decode passes | verify passes | drafted | accepted | speed vs off | bytes vs off | load 1m | ids |");
  L.push("|---|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of rep.results) {
    const arm = ARMS.find((a) => a.key === r.arm)!;
    if (!r.ok) {
      L.push(`| ${arm.name} | ${r.run} | FAILED: ${r.error} |||||||||||`);
      continue;
    }
    const off = rep.results.find((x) => x.arm === "off" && x.run === r.run && x.ok);
    const sp = r.speculation!;
    const pt = r.perToken!;
    L.push(
      `| ${arm.name} | ${r.run} | ${f2(r.sPerToken!)} | ${f2(pt.bytes / 1e9)} (${f2(pt.trunkBytes / 1e9)} + ${f2(pt.expertBytes / 1e9)}) | ${sp.decodePasses} | ${sp.verifyPasses} | ${sp.draftedTokens} | ${sp.acceptedTokens} | ${off ? f2(off.sPerToken! / r.sPerToken!) : "—"} | ${off ? f2(off.perToken!.bytes / pt.bytes) : "—"} | ${f2(r.loadavg[0]!)} | ${r.ids!.join(" ") === rep.reference.join(" ") ? "same" : "DIFFER"} |`,
    );
  }
  L.push("", "**Per arm** (medians over runs):", "");
  L.push("| arm | runs ok | s/token (each run) | GB read/token | acceptance | speed vs off | bytes vs off | target |");
  L.push("|---|---|---|---|---|---|---|---|");
  const targets: Record<string, string> = { a: "≥ 1.6× speed, ≥ 1.8× bytes", b: "≥ 0.97× speed", b2: "≥ 0.97× speed" };
  for (const r of rows)
    L.push(
      `| ${r.arm.name} | ${r.ok}/${r.runs} | ${r.sPerToken.map(f2).join(" / ")} | ${f2(median(r.gbPerToken))} | ${r.acceptance === undefined ? "—" : `${(100 * r.acceptance).toFixed(0)} %`} | ${r.arm.key === "off" ? "1" : f2(r.speedRatio)} | ${r.arm.key === "off" ? "1" : f2(r.bytesRatio)} | ${targets[r.arm.key] ?? ""} |`,
    );
  L.push("", `**Identity**: reference ids (the \`off\` arm, run 1) \`${rep.reference.join(" ")}\`; every run of every arm must match them.`, "");
  L.push(`**Problems**: ${problems.length ? problems.join("; ") : "none"}.`, "");
  return L.join("\n");
}

function updateDocs(md: string): void {
  updateDocSection("docs/SPECULATION.md", "spec-bench", md, say);
}

/** The arms one invocation runs in round `run`. */
function armsOf(args: Args, run: number): Arm[] {
  if (args.illustrate) return ARMS.filter((a) => a.key === "off" || a.once);
  return ARMS.filter((a) => !a.once || (args.round === undefined && run === 1));
}

function commandOf(args: Args): string {
  const extra = [args.quick && "--quick", args.round !== undefined && `--round ${args.round}`, args.illustrate && "--illustrate", args.tokens !== 33 && !args.quick && `--tokens ${args.tokens}`, args.runs !== 3 && args.round === undefined && !args.illustrate && `--runs ${args.runs}`, args.ram !== "6G" && `--ram ${args.ram}`];
  return ["npm run bench -- --speculation", ...extra.filter(Boolean)].join(" ");
}

/**
 * Pieces of one benchmark (--round R, --illustrate) as one report: results in piece order, each
 * piece's command. Refused if the pieces ran different kernels, models, budgets or token counts,
 * or saw different reference ids (they would not be comparable).
 */
function mergeReports(files: string[]): Report {
  const reps = files.map((f) => JSON.parse(readFileSync(f, "utf8")) as Report);
  const first = reps[0]!;
  for (const [i, r] of reps.entries()) {
    const same = (what: string, a: unknown, b: unknown) => {
      if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${files[i]}: ${what} differs from ${files[0]}'s`);
    };
    same("kernels", r.kernels.sha256, first.kernels.sha256);
    same("model", r.args.model, first.args.model);
    same("budget", r.args.ram, first.args.ram);
    same("tokens", r.args.tokens, first.args.tokens);
    same("reference ids", r.reference, first.reference);
  }
  // Ratios pair a run with the `off` run of its round: a round may come from one piece only.
  const seen = new Map<string, string>();
  for (const [i, r] of reps.entries())
    for (const x of r.results) {
      const key = `${x.arm}@${x.run}`;
      if (seen.has(key)) throw new Error(`${files[i]}: round ${x.run} of ${x.arm} is also in ${seen.get(key)} (give each piece its own --round)`);
      seen.set(key, files[i]!);
    }
  // Round 0 is --illustrate's (its `off` run pairs the once-arm): not a compared round.
  const runs = new Set(reps.flatMap((r) => r.results.filter((x) => x.run > 0).map((x) => x.run)));
  return {
    command: reps.map((r) => r.command).join("; "),
    started: reps.map((r) => r.started).sort()[0]!,
    finished: reps.map((r) => r.finished).sort().at(-1)!,
    args: { ...first.args, runs: runs.size },
    machine: first.machine,
    kernels: first.kernels,
    reference: first.reference,
    results: reps.flatMap((r) => r.results),
  };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (args.merge.length) {
    const report = mergeReports(args.merge);
    const md = renderMarkdown(report);
    writeReport("spec", report.started.replace(/[:.]/g, "-").slice(0, 19) + "-merged", report, md, say);
    if (args.docs) updateDocs(md);
    const { problems } = summarize(report);
    for (const p of problems) say(`PROBLEM: ${p}`);
    process.exit(problems.some((p) => !p.startsWith("target missed")) ? 1 : 0);
  }
  if (!existsSync(join(args.model, "config.json"))) throw new Error(`${args.model} has no model (npm run bench generates the slice)`);
  const started = new Date();
  const stamp = started.toISOString().replace(/[:.]/g, "-").slice(0, 19);
  const machine = machineInfo(args.model);
  const scratch = join(tmpdir(), `k3-bench-spec-${process.pid}`);
  mkdirSync(scratch, { recursive: true });
  const kernels = freezeKernels(scratch);
  const threads = navigator.hardwareConcurrency;
  const base = { model: args.model, prompt: PROMPT, maxTokens: args.tokens, threads, ram: args.ram };
  const results: Result[] = [];
  let reference: number[] | undefined;
  const rounds = args.round !== undefined ? [args.round] : args.illustrate ? [0] : Array.from({ length: args.runs }, (_, i) => i + 1);
  for (const run of rounds)
    for (const arm of armsOf(args, run)) {
      if (arm.drafter && arm.drafter !== "ngram" && !reference) {
        say(`run ${run}: ${arm.name} skipped: no reference ids (the off arm failed)`);
        continue;
      }
      const drafter = arm.drafter === "ngram" ? { kind: "ngram" as const } : arm.drafter ? { kind: arm.drafter, reference: [...PROMPT, ...reference!] } : undefined;
      say(`run ${run}: ${arm.name}…`);
      const r = await runChild({ ...base, name: arm.name, speculate: arm.speculate, drafter }, arm, run, scratch);
      results.push(r);
      if (!r.ok) say(`  FAILED: ${r.error}`);
      else {
        reference ??= r.arm === "off" ? r.ids : undefined;
        const sp = r.speculation!;
        say(`  ${r.sPerToken!.toFixed(2)} s/token, ${(r.perToken!.bytes / 1e9).toFixed(2)} GB/token, ${sp.decodePasses} passes (${sp.verifyPasses} verify), drafts kept ${sp.acceptedTokens}/${sp.draftedTokens}`);
      }
    }
  rmSync(scratch, { recursive: true, force: true });
  const report: Report = {
    command: commandOf(args),
    started: started.toISOString(),
    finished: new Date().toISOString(),
    args: { ...args, runs: rounds.filter((r) => r > 0).length },
    machine,
    kernels,
    reference: reference ?? [],
    results,
  };
  const md = renderMarkdown(report);
  writeReport("spec", stamp, report, md, say);
  // A piece (--round, --illustrate) is not the whole benchmark: merge the pieces for the doc.
  if (args.docs && !args.quick && args.round === undefined && !args.illustrate) updateDocs(md);
  const { problems } = summarize(report);
  for (const p of problems) say(`PROBLEM: ${p}`);
  process.exit(problems.some((p) => !p.startsWith("target missed")) ? 1 : 0);
}

await main();
