// `npm run bench:batch`: many users per pass over the weights (issue 12's proof) on the `slice`
// model at a streaming budget. Opt-in, never part of `npm test`. It holds several GB: on a shared
// machine run it under the machine's big-memory lock (flock LOCKFILE npm run bench:batch).
//
//   bun run bench/batch.ts [--quick] [--runs N] [--tokens N] [--ram 6G] [--model DIR] [--no-docs]
//                          [--only streams|prefix] [--setup-dir DIR]
//   bun run bench/batch.ts --merge OUT1.json OUT2.json …   (one report from pieces, into the docs)
//   bun run bench/batch.ts --spec [--runs N] [--tokens N] [--round R] [--merge …]   (speculation inside
//                                                        batched steps on the demo: bench/batch-spec.ts)
//
//  1. Streams: 1, 2 and 4 concurrent greedy streams on one engine plan (--parallel 4 for all), each
//     run in its own process, runs interleaved (1, 2, 4, 1, 2, 4, …). Aggregate generated tokens/s
//     and weight bytes read per generated token over the decode steps that carried exactly that
//     many streams (the scheduler's own step records); every prompt's ids compared across runs.
//  2. Prefix cache: a ~1,000-token conversation. A setup process runs turn 1, another conversation
//     (which takes the only session), then turn 2 restored from the RAM tier, and leaves its
//     snapshots in a disk tier. Then, interleaved: turn 2 on a fresh engine without the cache
//     (it feeds everything) and with a copy of the disk tier: time to the first token, same reply.
//  3. bench/out/batch-<stamp>.json (every raw number) + .md; the tables go into docs/BENCH.md
//     between its batch markers (full runs only, unless --no-docs).
// A full run takes longer than one slot of a shared machine's big-memory lock, so it can be run in
// pieces: `--only streams`, then `--only prefix --setup-dir DIR` once or more (the first piece runs
// the setup and keeps its disk tier and result in DIR; later pieces reuse them, so every piece's
// turn 2 is the same), then `--merge` of the pieces' JSON renders one report into docs/BENCH.md.
// Exit 1 when a run failed or an identity check failed.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { writeFileAtomic } from "../src/files.ts";
import { runBatchArmChild, type BatchArmResult } from "./batch-arm.ts";
import { machineInfo, type MachineInfo } from "./machine.ts";
import { median } from "./common.ts";

const ROOT = resolve(import.meta.dir, "..");
const say = (s: string) => process.stderr.write(`[bench:batch] ${s}\n`);

interface Args {
  quick: boolean;
  runs: number;
  tokens: number;
  ram: string;
  model: string;
  docs: boolean;
  only?: "streams" | "prefix";
  setupDir?: string;
  merge?: string[];
}

function parseArgs(argv: string[]): Args {
  const a: Args = { quick: false, runs: 3, tokens: 9, ram: "6G", model: join(ROOT, "models/slice"), docs: true };
  let runsSet = false;
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i]!;
    const num = () => {
      const n = Number(argv[++i]);
      if (!Number.isInteger(n) || n < 1) throw new Error(`${x} needs a positive integer`);
      return n;
    };
    if (x === "--quick") a.quick = true;
    else if (x === "--runs") (a.runs = num()), (runsSet = true);
    else if (x === "--tokens") a.tokens = Math.max(2, num());
    else if (x === "--ram") a.ram = argv[++i] ?? "";
    else if (x === "--model") a.model = resolve(argv[++i] ?? "");
    else if (x === "--no-docs") a.docs = false;
    else if (x === "--setup-dir") a.setupDir = resolve(argv[++i] ?? "");
    else if (x === "--merge") a.merge = argv.splice(i + 1).map((f) => resolve(f));
    else if (x === "--only") {
      const v = argv[++i];
      if (v !== "streams" && v !== "prefix") throw new Error("--only takes streams or prefix");
      a.only = v;
    } else throw new Error(`unknown argument ${x} (bench/batch.ts [--quick] [--runs N] [--tokens N] [--ram SIZE] [--model DIR] [--no-docs] [--only streams|prefix] [--setup-dir DIR] | --merge OUT.json …)`);
  }
  if (a.quick && !runsSet) a.runs = 1;
  return a;
}

const THREADS = 2;
const STREAMS = [1, 2, 4];
const PARALLEL = 4;
/** Token ids for the prompts: fixed, spread over the model's vocabulary (the slice's is 32768). */
function ids(n: number, a: number, b: number, vocab: number): number[] {
  return Array.from({ length: n }, (_, i) => 100 + ((i * a + b) % (vocab - 100)));
}
/** Four different 8-id prompts; the conversation: a 1,000-token first turn, another
 *  conversation, a 20-token follow-up. */
function prompts(vocab: number) {
  return {
    streams: [0, 1, 2, 3].map((k) => ids(8, 104729, k * 7919, vocab)),
    turn1: ids(1000, 7919, 13, vocab),
    other: ids(40, 15485863, 7, vocab),
    user2: ids(20, 104723, 99, vocab),
  };
}

const runArm = runBatchArmChild;

const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "—");
const gb = (x: number) => (x / 1e9).toFixed(2);

interface Report {
  args: Args;
  machine: MachineInfo;
  started: string;
  finished?: string;
  streams: BatchArmResult[];
  prefix: BatchArmResult[];
  problems: string[];
  /** The setup's result file when this run reused one (--setup-dir): its arm is in that piece. */
  setupReused?: string;
  /** --merge: the pieces (file, started, finished, what ran). */
  pieces?: { file: string; started: string; finished?: string; arms: string }[];
}

function render(r: Report): string {
  const L: string[] = [];
  L.push(`### Batching benchmark, ${r.started.slice(0, 10)} (\`npm run bench:batch\`)`, "");
  const m = r.machine as MachineInfo;
  L.push(`Machine: ${m.cpu}, ${m.cores} cores, ${(m.memTotalBytes / 2 ** 30).toFixed(2)} GiB RAM; model on ${m.disk.device} (${m.disk.fsType}); bun ${m.bun}. Model ${r.args.model.replace(ROOT + "/", "")}, budget ${r.args.ram}, ${THREADS} threads, engine --parallel ${PARALLEL} for every streams run. Started ${r.started}, finished ${r.finished}.`, "");
  if (r.pieces) L.push(`Run in ${r.pieces.length} pieces (separate invocations, under the big-memory lock), merged with \`--merge\`: ${r.pieces.map((p) => `${p.arms} ${p.started.slice(11, 16)}–${p.finished?.slice(11, 16)} UTC`).join("; ")}.`, "");
  if (r.streams.length) {
    L.push("**Concurrent streams** (decode steps that carried exactly that many streams; tokens/s = generated tokens ÷ the steps' wall time; bytes = weight bytes read from disk by those steps ÷ their tokens; every run its own process, runs interleaved):", "");
    L.push("| streams | run | decode steps | tokens | tokens/s (all streams) | GB read / generated token | × tokens/s of 1 stream (same round) | peak RSS GiB | load 1m |", "|---|---|---|---|---|---|---|---|---|");
    const byRound = new Map<number, Map<number, BatchArmResult>>();
    r.streams.forEach((a, i) => {
      const round = Math.floor(i / STREAMS.length);
      if (!byRound.has(round)) byRound.set(round, new Map());
      byRound.get(round)!.set(a.spec.streams!, a);
    });
    for (const [round, arms] of byRound)
      for (const [S, a] of arms) {
        const one = arms.get(1)?.streams?.tokensPerS;
        const s = a.streams;
        L.push(`| ${S} | ${round + 1} | ${s?.decodeSteps ?? "failed"} | ${s?.decodeTokens ?? ""} | ${f2(s?.tokensPerS ?? NaN)} | ${gb(s?.bytesPerToken ?? NaN)} | ${one && s ? f2(s.tokensPerS / one) : "—"} | ${f2((a.vmHwmBytes ?? NaN) / 2 ** 30)} | ${f2(a.load1 ?? NaN)} |`);
      }
    L.push("", "| streams | median tokens/s | median GB / token | median × of 1 stream (per-round ratios) |", "|---|---|---|---|");
    for (const S of STREAMS) {
      const arms = r.streams.filter((a) => a.spec.streams === S && a.ok);
      const ratios = [...byRound.values()].map((m) => (m.get(S)?.streams?.tokensPerS ?? NaN) / (m.get(1)?.streams?.tokensPerS ?? NaN)).filter(Number.isFinite);
      L.push(`| ${S} | ${f2(median(arms.map((a) => a.streams!.tokensPerS)))} | ${gb(median(arms.map((a) => a.streams!.bytesPerToken)))} | ${f2(median(ratios))} (${ratios.map(f2).join(" / ")}) |`);
    }
    L.push("");
  }
  if (r.prefix.length) {
    const t1 = r.prefix[0]?.spec.turn1?.length ?? 0;
    const chunk = r.prefix.find((a) => a.plan)?.plan?.prefillChunk ?? "?";
    L.push(`**Prefix cache**: the second turn of a conversation (${t1} tokens, the ${r.prefix[0]?.spec.maxTokens ?? 0}-token reply, 20 more), after another conversation took the only session (time to first token, wall, prefill chunk ${chunk} tokens):`, "");
    L.push("| arm | run | cached tokens / prompt | time to first token s | reply ids | load 1m |", "|---|---|---|---|---|---|");
    r.prefix.forEach((a, i) => {
      const p = a.prefix;
      L.push(`| ${a.spec.name} | ${i} | ${p ? `${p.cachedTokens} / ${p.promptTokens}` : "failed"} | ${p ? f2(p.ttftMs / 1000) : "—"} | ${p ? p.reply.join(" ") : ""} | ${f2(a.load1 ?? NaN)} |`);
    });
    const off = r.prefix.filter((a) => a.spec.kind === "prefix-off" && a.ok).map((a) => a.prefix!.ttftMs);
    const disk = r.prefix.filter((a) => a.spec.kind === "prefix-disk" && a.ok).map((a) => a.prefix!.ttftMs);
    const ram = r.prefix.filter((a) => a.spec.kind === "prefix-setup" && a.ok).map((a) => a.prefix!.ttftMs);
    L.push("", `Median time to first token: cache off ${f2(median(off) / 1000)} s, disk tier ${f2(median(disk) / 1000)} s (**${f2(median(off) / median(disk))}×** sooner), RAM tier ${f2(median(ram) / 1000)} s (${f2(median(off) / median(ram))}×; one run, in the setup).`, "");
  }
  L.push(`**Identity**: ${r.problems.filter((p) => p.startsWith("identity")).length === 0 ? "every prompt's ids are the same in every streams run (1, 2 or 4 at once); every second-turn reply is the same with the cache off, from the RAM tier and from the disk tier." : "see problems."}`, "");
  L.push(`**Problems**: ${r.problems.length ? r.problems.join("; ") : "none"}.`);
  return L.join("\n");
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.merge) return write(merge(args.merge), args.docs);
  if (!existsSync(join(args.model, "config.json"))) throw new Error(`${args.model} has no model (npm run bench generates models/slice)`);
  const config = JSON.parse(readFileSync(join(args.model, "config.json"), "utf8"));
  const { streams: PROMPTS, turn1: TURN1, other: OTHER, user2: USER2 } = prompts((config.text_config ?? config).vocab_size);
  const work = mkdtempSync(join(tmpdir(), "k3-bench-batch-"));
  const report: Report = { args, machine: machineInfo(args.model), started: new Date().toISOString(), streams: [], prefix: [], problems: [] };
  let n = 0;
  const tokens = args.quick ? 5 : args.tokens;
  if (args.only !== "prefix") {
    for (let round = 0; round < args.runs; round++)
      for (const S of STREAMS) {
        say(`streams ${S}, run ${round + 1}/${args.runs}`);
        const a = await runArm({ kind: "streams", name: `${S} streams`, model: args.model, ram: args.ram, threads: THREADS, parallel: PARALLEL, streams: S, prompts: PROMPTS, maxTokens: tokens }, work, n++);
        if (!a.ok) report.problems.push(`streams ${S} run ${round + 1} failed: ${a.error?.split("\n")[0]}`);
        else say(`  ${f2(a.streams!.tokensPerS)} tokens/s, ${gb(a.streams!.bytesPerToken)} GB/token over ${a.streams!.decodeSteps} steps`);
        report.streams.push(a);
      }
  }
  let setup: BatchArmResult | undefined;
  if (args.only !== "streams") {
    const cacheDir = args.setupDir ? join(args.setupDir, "cache") : join(work, "prefix-cache");
    const setupFile = args.setupDir ? join(args.setupDir, "setup.json") : undefined;
    const base = { model: args.model, ram: args.ram, threads: THREADS, maxTokens: 8, turn1: args.quick ? TURN1.slice(0, 300) : TURN1, other: OTHER, user2: USER2, cacheDir };
    if (setupFile && existsSync(setupFile)) {
      setup = JSON.parse(readFileSync(setupFile, "utf8")) as BatchArmResult;
      if (JSON.stringify(setup.spec.turn1) !== JSON.stringify(base.turn1) || setup.spec.model !== base.model || setup.spec.ram !== base.ram)
        throw new Error(`${setupFile} was made for another conversation, model or budget: use another --setup-dir`);
      report.setupReused = setupFile;
      say(`prefix: the setup of ${setupFile} (its disk tier in ${cacheDir})`);
    } else {
      mkdirSync(cacheDir, { recursive: true });
      say("prefix: setup (turn 1, another conversation, turn 2 from the RAM tier)");
      setup = await runArm({ ...base, kind: "prefix-setup", name: "cache on, RAM tier" }, work, n++);
      report.prefix.push(setup);
      if (setupFile && setup.ok) writeFileAtomic(setupFile, "the setup file", "USAGE", JSON.stringify(setup));
    }
    if (!setup.ok) report.problems.push(`prefix setup failed: ${setup.error?.split("\n")[0]}`);
    else
      for (let round = 0; round < args.runs; round++)
        for (const kind of ["prefix-off", "prefix-disk"] as const) {
          say(`prefix: ${kind}, run ${round + 1}/${args.runs}`);
          const a = await runArm({ ...base, kind, name: kind === "prefix-off" ? "cache off" : "cache on, disk tier", reply1: setup.prefix!.reply1 }, work, n++);
          if (!a.ok) report.problems.push(`${kind} run ${round + 1} failed: ${a.error?.split("\n")[0]}`);
          else say(`  ttft ${f2(a.prefix!.ttftMs / 1000)} s, cached ${a.prefix!.cachedTokens}`);
          report.prefix.push(a);
        }
  }
  report.finished = new Date().toISOString();
  rmSync(work, { recursive: true, force: true });
  checkIdentity(report, setup);
  write(report, args.docs && !args.quick && !args.only);
}

/** Identity problems: every streams run's ids equal the first's; every second-turn reply equals
 *  the setup's (the RAM tier's). */
function checkIdentity(report: Report, setup: BatchArmResult | undefined): void {
  const ref = report.streams.find((a) => a.ok)?.ids;
  for (const a of report.streams) if (a.ok && JSON.stringify(a.ids) !== JSON.stringify(ref)) report.problems.push(`identity: ${a.spec.name} produced other ids`);
  const want = setup?.prefix?.reply;
  for (const a of report.prefix) if (a.ok && JSON.stringify(a.prefix!.reply) !== JSON.stringify(want)) report.problems.push(`identity: ${a.spec.name} replied otherwise`);
}

/** --merge: the pieces' reports as one (their arms in run order, identity checked across all). */
function merge(files: string[]): Report {
  const parts = files.map((f) => ({ f, r: JSON.parse(readFileSync(f, "utf8")) as Report }));
  if (parts.length === 0) throw new Error("--merge needs the pieces' bench/out/batch-*.json files");
  const first = parts[0]!.r;
  const report: Report = { args: first.args, machine: first.machine, started: first.started, finished: parts.at(-1)!.r.finished, streams: [], prefix: [], problems: [], pieces: [] };
  for (const { f, r } of parts) {
    report.streams.push(...r.streams);
    report.prefix.push(...r.prefix);
    report.problems.push(...r.problems.filter((p) => !p.startsWith("identity")));
    const arms = [r.streams.length ? `streams ×${r.streams.length}` : "", r.prefix.length ? `prefix ×${r.prefix.length}` : ""].filter(Boolean).join(" + ");
    report.pieces!.push({ file: f.replace(ROOT + "/", ""), started: r.started, finished: r.finished, arms });
  }
  const setups = report.prefix.filter((a) => a.spec.kind === "prefix-setup");
  if (setups.length > 1) report.problems.push(`${setups.length} prefix setups in the pieces: merge pieces that share one --setup-dir`);
  checkIdentity(report, setups[0]);
  return report;
}

function write(report: Report, docs: boolean): void {
  const md = render(report);
  const outDir = join(ROOT, "bench/out");
  mkdirSync(outDir, { recursive: true });
  // A merged report gets a name of its own: it starts when its first piece did.
  const stamp = `${report.pieces ? "merged-" : ""}${report.started.replace(/[:.]/g, "-")}`;
  writeFileSync(join(outDir, `batch-${stamp}.json`), JSON.stringify(report, null, 1));
  writeFileSync(join(outDir, `batch-${stamp}.md`), `${md}\n`);
  process.stdout.write(`${md}\n`);
  if (docs) {
    const doc = join(ROOT, "docs/BENCH.md");
    const text = readFileSync(doc, "utf8");
    const begin = "<!-- batch-bench:begin -->";
    const end = "<!-- batch-bench:end -->";
    const a = text.indexOf(begin);
    const b = text.indexOf(end);
    if (a >= 0 && b > a) writeFileSync(doc, `${text.slice(0, a + begin.length)}\n${md}\n\n${text.slice(b)}`);
    else say(`docs/BENCH.md has no ${begin} … ${end} markers: not updated`);
  }
  process.exit(report.problems.length ? 1 : 0);
}

// `--spec …`: speculation inside batched steps (issue 27), bench/batch-spec.ts.
if (process.argv[2] === "--spec") await (await import("./batch-spec.ts")).specBench(process.argv.slice(3));
else await main();
