// `npm run bench:batch -- --spec`: speculation inside batched steps (issue 27) on the trained demo
// model with its trained draft, at a streaming budget (the floor of an engine of 4 sessions with the
// draft, + 2 expert slots: the trunk streams every step). Opt-in, never part of `npm test`.
//
//   bun run bench/batch.ts --spec [--runs N] [--tokens N] [--no-docs]
//
// One engine plan for every run (--parallel 4, --speculate auto, the draft loaded); each request
// says its own `speculate`: `off` (plain decoding: the baseline) or `auto` (the n-gram drafter and
// the model draft on offer, the cost model placing each step's draft rows). 1, 2 and 4 concurrent
// streams over the same 4 held-out prose prompts (16 tokens each, tools/train/drafteval.py's
// held-out windows), each run its own process, arms interleaved per round. Texts:
//   - greedy: the demo's greedy text falls into loops both drafters follow (drafts accepted);
//   - sampled: temperature 0.8, stream i seeded 1 + i (the model draft is partly accepted, the
//     n-gram drafter finds nearly nothing);
//   - wrong: greedy with a drafter whose drafts are never the target's (the cost model's worst
//     case: its baseline is greedy `off`).
// Figures per run: tokens generated after each stream's first ÷ the wall time from the group's last
// prefill step to its end (drafting between steps included), the weight bytes those steps read per
// such token, the span's time inside passes (the rest is between steps: drafting, the event loop),
// verify segments, steps that verified two sessions' drafts or more, drafts kept.
// Ratios pair runs of the same round. Every arm's ids must equal its baseline's (greedy and seeded).
// Report: bench/out/batch-spec-<stamp>.{json,md}, and docs/BENCH.md between its batch-spec markers.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { Engine } from "../src/engine.ts";
import { runBatchArmChild, type BatchArmResult, type BatchArmSpec } from "./batch-arm.ts";
import { median as medianOf, parseCommonArgs, ROOT, updateDocSection } from "./common.ts";
import { machineInfo, type MachineInfo } from "./machine.ts";

const say = (s: string) => process.stderr.write(`[bench:batch --spec] ${s}\n`);
const STREAMS = [1, 2, 4];
const TEXTS = ["greedy", "sampled", "wrong"] as const;
type Text = (typeof TEXTS)[number];
const CONTEXT = 512;
const PARALLEL = 4;
const THREADS = 2;

interface Run {
  round: number;
  text: Text;
  streams: number;
  speculate: "off" | "auto";
  result: BatchArmResult;
  load1: number;
}

interface Report {
  started: string;
  finished?: string;
  machine: MachineInfo;
  ram: number;
  tokens: number;
  runs: Run[];
  problems: string[];
}

/** The demo, its draft, the prompts and the streaming budget (the engine's own floor + 2 experts). */
async function setup() {
  const { ensureDemoModel, ensureDemoDraft } = await import("../src/cli/demo.ts");
  const model = ensureDemoModel();
  const draft = ensureDemoDraft();
  const evalSet = JSON.parse(readFileSync(join(ROOT, "assets/demo/draft-eval/heldout-greedy.json"), "utf8")) as { texts: number[][] };
  const prompts = evalSet.texts.slice(0, 4).map((t) => t.slice(0, 16));
  let floor = 0;
  try {
    Engine.open(model, { ram: "1M", parallel: PARALLEL, draft, threads: THREADS, context: CONTEXT }).close();
  } catch (err) {
    floor = Number(/need (\d+) bytes/.exec((err as Error).message)?.[1] ?? NaN);
  }
  if (!Number.isFinite(floor) || floor <= 0) throw new Error("could not read the demo's floor from the engine's refusal");
  const ram = floor + 2 * openCheckpoint(model).layout.census.expertBytes;
  return { model, draft, prompts, ram };
}

function armSpec(s: Awaited<ReturnType<typeof setup>>, text: Text, streams: number, speculate: "off" | "auto", tokens: number): BatchArmSpec {
  return {
    kind: "spec-streams",
    name: `${text} ${streams} ${speculate}`,
    model: s.model,
    ram: String(s.ram),
    threads: THREADS,
    parallel: PARALLEL,
    streams,
    prompts: s.prompts,
    maxTokens: tokens,
    context: CONTEXT,
    draft: s.draft,
    speculate,
    ...(text === "sampled" ? { temperature: 0.8, seed: 1 } : {}),
    ...(text === "wrong" ? { drafter: "wrong" as const } : {}),
  };
}

/** The arms of one round: per stream count, each text with and without speculation (wrong: with
 *  only; its baseline is greedy off). */
const ARMS: { text: Text; speculate: "off" | "auto" }[] = [
  { text: "greedy", speculate: "off" },
  { text: "greedy", speculate: "auto" },
  { text: "sampled", speculate: "off" },
  { text: "sampled", speculate: "auto" },
  { text: "wrong", speculate: "auto" },
];

/** The median of the finite values (an arm that failed has none). */
const median = (xs: number[]) => medianOf(xs.filter(Number.isFinite));
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "—");

/** The baseline of a run: the `off` run of the same round, stream count and text (wrong: greedy). */
const baseline = (runs: Run[], r: Run) => runs.find((x) => x.round === r.round && x.streams === r.streams && x.speculate === "off" && x.text === (r.text === "wrong" ? "greedy" : r.text));

function checkIdentity(report: Report): void {
  for (const r of report.runs) {
    if (!r.result.ok) continue;
    const want = baseline(report.runs, r) ?? report.runs.find((x) => x.speculate === "off" && x.text === (r.text === "wrong" ? "greedy" : r.text) && x.result.ok);
    if (want?.result.ok && JSON.stringify(want.result.ids) !== JSON.stringify(r.result.ids)) report.problems.push(`identity: ${r.result.spec.name} (round ${r.round}) produced other ids than ${want.result.spec.name}`);
  }
}

function render(r: Report): string {
  const L: string[] = [];
  const m = r.machine;
  const rounds = Math.max(...r.runs.map((x) => x.round));
  L.push(`### Speculation inside batched steps, ${r.started.slice(0, 10)} (\`npm run bench:batch -- --spec\`)`, "");
  L.push(`Machine: ${m.cpu}, ${m.cores} cores, ${(m.memTotalBytes / 2 ** 30).toFixed(2)} GiB RAM; bun ${m.bun}. The trained demo with its trained EAGLE-3 draft, budget ${(r.ram / 2 ** 20).toFixed(1)} MiB (the floor of an engine of ${PARALLEL} sessions with the draft, context ${CONTEXT}, + 2 expert slots: the trunk streams), ${THREADS} threads, one plan for every run (--parallel ${PARALLEL}, --speculate auto); each request's own \`speculate\` off or auto. 4 held-out prompts × ${r.tokens} tokens, run 1, 2 or 4 at a time; ${rounds} interleaved round(s). Started ${r.started}, finished ${r.finished}; load 1m ${f2(Math.min(...r.runs.map((x) => x.load1)))}–${f2(Math.max(...r.runs.map((x) => x.load1)))}.`, "");
  L.push("| text | streams | tokens/s off | tokens/s spec | × (median; each round) | MB read / token off | spec | × fewer bytes | verify segments | shared steps | drafts kept / verified |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|");
  for (const text of TEXTS)
    for (const S of STREAMS) {
      const spec = r.runs.filter((x) => x.text === text && x.streams === S && x.speculate === "auto" && x.result.ok);
      const pairs = spec.map((x) => ({ x, off: baseline(r.runs, x) })).filter((p) => p.off?.result.ok);
      const g = (x: Run) => x.result.specStreams!;
      const speed = pairs.map((p) => g(p.x).tokensPerS / g(p.off!).tokensPerS);
      const bytes = pairs.map((p) => g(p.off!).bytesPerToken / g(p.x).bytesPerToken);
      const sum = (f: (s: NonNullable<BatchArmResult["specStreams"]>) => number) => spec.reduce((a, x) => a + f(g(x)), 0);
      L.push(
        `| ${text} | ${S} | ${f2(median(pairs.map((p) => g(p.off!).tokensPerS)))} | ${f2(median(spec.map((x) => g(x).tokensPerS)))} | **${f2(median(speed))}** (${speed.map(f2).join(" / ")}) | ${f2(median(pairs.map((p) => g(p.off!).bytesPerToken / 1e6)))} | ${f2(median(spec.map((x) => g(x).bytesPerToken / 1e6)))} | ${f2(median(bytes))} | ${sum((s) => s.verifySegments)} | ${sum((s) => s.sharedVerifySteps)} | ${sum((s) => s.acceptedDrafts)} / ${sum((s) => s.draftTokens)} |`,
      );
    }
  L.push("", "Every run:", "", "| round | text | streams | speculate | tokens/s | MB / token | steps | ms in passes / span | verify segments | shared steps | kept / verified | load 1m |", "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const x of r.runs) {
    const s = x.result.specStreams;
    L.push(`| ${x.round} | ${x.text} | ${x.streams} | ${x.speculate} | ${s ? f2(s.tokensPerS) : "failed"} | ${s ? f2(s.bytesPerToken / 1e6) : "—"} | ${s?.steps ?? ""} | ${s ? `${Math.round(s.passMs)} / ${Math.round(s.decodeMs)}` : ""} | ${s?.verifySegments ?? ""} | ${s?.sharedVerifySteps ?? ""} | ${s ? `${s.acceptedDrafts} / ${s.draftTokens}` : ""} | ${f2(x.load1)} |`);
  }
  L.push("", `**Identity**: ${r.problems.some((p) => p.startsWith("identity")) ? "see problems" : "every run's ids equal its baseline's (greedy, seeded, wrong drafts)"}. **Problems**: ${r.problems.length ? r.problems.join("; ") : "none"}.`);
  return L.join("\n");
}

export async function specBench(argv: string[]): Promise<void> {
  const args = parseCommonArgs(argv, { tokens: 64, minTokens: 8, quickTokens: 16 }, "bench/batch.ts --spec [--runs N] [--tokens N] [--no-docs] [--quick]");
  const s = await setup();
  const work = mkdtempSync(join(tmpdir(), "k3-bench-batch-spec-"));
  const report: Report = { started: new Date().toISOString(), machine: machineInfo(s.model), ram: s.ram, tokens: args.tokens, runs: [], problems: [] };
  say(`budget ${s.ram} bytes; ${args.runs} round(s) × ${STREAMS.length * ARMS.length} runs`);
  let n = 0;
  try {
    for (let round = 1; round <= args.runs; round++)
      for (const S of STREAMS)
        for (const a of ARMS) {
          const load1 = Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
          const result = await runBatchArmChild(armSpec(s, a.text, S, a.speculate, args.tokens), work, n++);
          if (!result.ok) report.problems.push(`${result.spec.name} round ${round} failed: ${result.error?.split("\n")[0]}`);
          else say(`round ${round} ${result.spec.name}: ${f2(result.specStreams!.tokensPerS)} tokens/s, ${f2(result.specStreams!.bytesPerToken / 1e6)} MB/token, ${result.specStreams!.verifySegments} verify segments, passes ${f2(result.specStreams!.passMs)} of ${f2(result.specStreams!.decodeMs)} ms`);
          report.runs.push({ round, text: a.text, streams: S, speculate: a.speculate, result, load1 });
        }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  report.finished = new Date().toISOString();
  checkIdentity(report);
  const md = render(report);
  const out = join(ROOT, "bench/out");
  mkdirSync(out, { recursive: true });
  const stamp = report.started.replace(/[:.]/g, "-");
  writeFileSync(join(out, `batch-spec-${stamp}.json`), JSON.stringify(report, null, 1));
  writeFileSync(join(out, `batch-spec-${stamp}.md`), `${md}\n`);
  process.stdout.write(`${md}\n`);
  if (args.docs && !args.quick) updateDocSection("docs/BENCH.md", "batch-spec-bench", md, say);
  process.exit(report.problems.length ? 1 : 0);
}
