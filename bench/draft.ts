// The draft-model benchmark (issue 22): speculation off / the n-gram drafter / the model draft
// side by side, greedy and sampled (T 0.8, seeded), every run its own `bun bench/stream.ts`
// process, arms interleaved per round. Opt-in (`npm run bench -- --draft`), never part of
// `npm test`; docs/DRAFT.md ("Measured") holds the last report.
//
//   bun run bench/draft.ts --demo  [--runs N] [--tokens N] [--no-docs]          the demo and its trained draft
//   bun run bench/draft.ts --slice [--runs N] [--tokens N] [--ram SIZE] [--no-docs]   the slice + a random draft
//   bun run bench/draft.ts [--demo|--slice] --merge A.json B.json …            one report from pieces (into that docs section)
//
// Demo: the trained demo model (unpacked as `k3 run` does) with its trained EAGLE-3 draft, on
// held-out prose (the first 16 tokens of the held-out windows tools/train/drafteval.py used), at
// a streaming budget just above the floor with the draft held, and resident. Arms per decoding
// (greedy; sampled T 0.8 with the window's seed): off, n-gram (auto, no draft), model (auto,
// --draft; n-gram and model both on offer, the cost model picks per pass); sampled also
// `model, rejection` (the opt-in min(1, p/q) rule: not seed-identical, reported apart).
// Slice: the 6-layer slice of the release's widths with a random-weight draft in the released
// format (its drafts are practically never accepted): off vs model at the streaming budget
// (--ram, default 6G: the draft's memory then comes out of the trunk's pins) and at that budget
// plus the draft's own bytes (the cost of drafting alone: probes, capture, refill).
// Numbers per run: s/token (decode), bytes read per generated token, tokens per verify pass,
// drafted/accepted per drafter. Ratios pair each run with `off` of the same round and budget.
// Every exact arm must reproduce its `off` ids (greedy, and seeded sampling by the contract).
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { tmpdir } from "node:os";
import type { ArmResult, ArmSpec } from "./stream.ts";
import { machineInfo } from "./machine.ts";
import { freezeKernels, median, parseCommonArgs, ROOT, runArmChild, updateDocSection, writeReport } from "./common.ts";
import { demoSetup, sliceSetup, type Setup } from "./draft-setup.ts";

const say = (s: string) => process.stderr.write(`[bench:draft] ${s}\n`);

interface Row {
  round: number;
  budget: string;
  decoding: "greedy" | "sampled";
  arm: string;
  prompt: number;
  result: ArmResult & { wallMs: number; loadavg: number[] };
}

function parseArgs(argv: string[]) {
  let which: "demo" | "slice" | undefined;
  let ram = "6G";
  const merge: string[] = [];
  const usage = "bench/draft.ts --demo | --slice [--ram SIZE] | --merge A.json …  [--runs N] [--tokens N] [--no-docs]";
  const common = parseCommonArgs(argv, { tokens: 65, minTokens: 8, quickTokens: 17 }, usage, (flag, value) => {
    if (flag === "--demo") which = "demo";
    else if (flag === "--slice") which = "slice";
    else if (flag === "--ram") ram = value();
    else if (flag === "--merge") {
      for (let f = value(); f; f = value()) merge.push(resolve(f));
    } else if (flag !== "--draft") return false;
    return true;
  });
  if (!which && merge.length === 0) throw new Error(`say --demo, --slice or --merge (${usage})`);
  return { ...common, which, ram, merge };
}

/** The arms of one round at one budget and decoding. */
function arms(s: Setup, budget: Setup["budgets"][number], decoding: "greedy" | "sampled", prompt: number[], seed: number, tokens: number, threads: number): { arm: string; spec: ArmSpec }[] {
  const base: ArmSpec = { name: "", model: s.model, prompt, maxTokens: tokens, threads, context: budget.context, ...(budget.resident ? { resident: true } : { ram: budget.ram }) };
  const withDraft: ArmSpec = { ...base, ...(budget.draftRam ? { ram: budget.draftRam } : {}), draft: s.draft };
  const sampled = decoding === "sampled" ? { temperature: 0.8, seed } : {};
  const out: { arm: string; spec: ArmSpec }[] = [
    { arm: "off", spec: { ...base, ...sampled, name: "off", speculate: "off" } },
    ...(s.ngramArm ? [{ arm: "n-gram", spec: { ...base, ...sampled, name: "n-gram", speculate: "auto" as const } }] : []),
    { arm: "model", spec: { ...withDraft, ...sampled, name: "model", speculate: "auto" } },
  ];
  if (decoding === "sampled" && s.rejectionArm) out.push({ arm: "model, rejection", spec: { ...withDraft, ...sampled, name: "model, rejection", speculate: "auto", acceptRule: "rejection" } });
  return out;
}

async function run(args: ReturnType<typeof parseArgs>): Promise<Row[]> {
  const scratch = join(tmpdir(), `k3-bench-draft-${process.pid}`);
  mkdirSync(scratch, { recursive: true });
  const kernels = freezeKernels(scratch);
  say(`kernels ${kernels.sha256.slice(0, 16)} (frozen copy)`);
  const s = args.which === "demo" ? await demoSetup() : sliceSetup(args.model, args.ram);
  const rows: Row[] = [];
  try {
    for (let round = 1; round <= args.runs; round++)
      for (const budget of s.budgets)
        for (const decoding of s.decodings)
          for (let pi = 0; pi < s.prompts.length; pi++)
            for (const { arm, spec } of arms(s, budget, decoding, s.prompts[pi]!, pi + 1, args.tokens, s.threads)) {
              const tag = `${round}-${budget.name}-${decoding}-${arm}-${pi}`.replace(/\W+/g, "_");
              const result = await runArmChild({ ...spec, name: `${budget.name} ${decoding} ${arm}` }, scratch, tag, 30 * 60_000);
              say(`${tag}: ${result.ok ? `${result.sPerToken?.toFixed(3)} s/token, ${((result.perToken?.bytes ?? 0) / 1e6).toFixed(2)} MB/token, ${result.speculation?.verifyPasses ?? 0} verify passes` : result.error}`);
              rows.push({ round, budget: budget.name, decoding, arm, prompt: pi, result });
            }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return rows;
}


// ---- the report ----

/** Two decimals, or a dash where there is no figure (a ratio of 0 bytes to 0 bytes: resident). */
const fixed = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "—");
function summarize(rows: Row[]) {
  const groups = new Map<string, Row[]>();
  for (const r of rows) {
    const key = `${r.budget}|${r.decoding}|${r.arm}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  const off = (r: Row) => rows.find((x) => x.round === r.round && x.budget === r.budget && x.decoding === r.decoding && x.prompt === r.prompt && x.arm === "off");
  const lines: string[] = [];
  const problems: string[] = [];
  for (const [key, g] of groups) {
    const [budget, decoding, arm] = key.split("|") as [string, string, string];
    const ok = g.filter((r) => r.result.ok);
    const sum = (f: (r: Row) => number) => ok.reduce((a, r) => a + f(r), 0);
    const passes = sum((r) => r.result.speculation?.verifyPasses ?? 0);
    const accepted = sum((r) => r.result.speculation?.acceptedTokens ?? 0);
    const drafted = sum((r) => r.result.speculation?.draftedTokens ?? 0);
    const tpp = passes > 0 ? (accepted + passes) / passes : NaN;
    const bytes = sum((r) => (r.result.perToken?.bytes ?? 0) * (r.result.decodeSteps ?? 0)) / Math.max(1, sum((r) => r.result.decodeSteps ?? 0));
    const speed = median(ok.map((r) => (off(r)?.result.sPerToken ?? NaN) / (r.result.sPerToken ?? NaN)));
    const bytesRatio = median(ok.map((r) => (off(r)?.result.perToken?.bytes ?? NaN) / (r.result.perToken?.bytes ?? NaN)));
    const same = ok.every((r) => JSON.stringify(r.result.ids) === JSON.stringify(off(r)?.result.ids));
    if (arm !== "off" && !arm.includes("rejection") && !same) problems.push(`${key}: ids differ from off`);
    const by = (name: string) => sum((r) => r.result.speculation?.drafters?.[name]?.draftedTokens ?? 0);
    lines.push(`| ${budget} | ${decoding} | ${arm} | ${ok.length}/${g.length} | ${fixed(tpp)} | ${accepted}/${drafted} (model ${by("model")}, n-gram ${by("ngram")}) | ${(bytes / 1e6).toFixed(3)} | ${median(ok.map((r) => r.result.sPerToken ?? NaN)).toFixed(4)} | ${arm === "off" ? "1" : fixed(bytesRatio)} | ${arm === "off" ? "1" : fixed(speed)} | ${arm === "off" ? "ref" : arm.includes("rejection") ? "(not seed-identical)" : same ? "same" : "DIFFER"} |`);
  }
  return { lines, problems };
}

function render(rows: Row[], started: string, cmd: string, pieces: number): string {
  const m = machineInfo(rows[0]?.result.spec.model ?? ROOT);
  const { lines, problems } = summarize(rows);
  const load = rows.flatMap((r) => r.result.loadavg.slice(0, 1));
  return [
    `### Draft benchmark, ${started.slice(0, 10)} (\`${cmd}\`${pieces > 1 ? `, ${pieces} runs of it merged` : ""})`,
    "",
    `Machine: ${m.cpu}, ${m.cores} cores, ${(m.memTotalBytes / 2 ** 30).toFixed(2)} GiB RAM. Load (1 min) ${Math.min(...load).toFixed(1)}–${Math.max(...load).toFixed(1)}. ${rows.length} runs. Tokens per verify pass = (accepted + passes) / passes; bytes per generated token and s/token over decode steps; ratios are medians of run / the same round's \`off\` run.`,
    "",
    "| budget | decoding | arm | runs ok | tokens / verify pass | accepted / drafted | MB read / token | s / token | bytes vs off | speed vs off | ids |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
    ...lines,
    "",
    problems.length ? `**Problems**: ${problems.join("; ")}` : "**Identity**: every exact arm reproduced its `off` ids.",
  ].join("\n");
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  // Pieces run apart (each under one exclusive lock) and merged: one report, dated and named by
  // its pieces' own runs.
  const pieces = args.merge.map((f) => JSON.parse(readFileSync(f, "utf8")) as { started: string; cmd?: string; rows: Row[] });
  const started = pieces[0]?.started ?? new Date().toISOString();
  const cmd = pieces.length ? [...new Set(pieces.map((p) => p.cmd ?? "bun run bench/draft.ts"))].join(" + ") : `npm run bench -- --draft --${args.which} --runs ${args.runs} --tokens ${args.tokens}`;
  // A piece's rounds are its own: renumbered after the pieces before it, so a run is only ever
  // paired with the `off` run of its own piece and round.
  let last = 0;
  const renumbered = pieces.map((p) => {
    const base = last;
    last += Math.max(0, ...p.rows.map((r) => r.round));
    return p.rows.map((r) => ({ ...r, round: base + r.round }));
  });
  const rows: Row[] = pieces.length ? renumbered.flat() : await run(args);
  const md = render(rows, started, cmd, pieces.length);
  // A merged report is a file of its own (never one of its pieces, which stay as they ran).
  const stem = `draft-${args.which ?? "runs"}${pieces.length ? "-merged" : ""}`;
  writeReport(stem, (pieces.length ? new Date().toISOString() : started).replace(/[:.]/g, "-"), { started, cmd, rows }, md, say);
  if (args.docs && !args.quick) updateDocSection("docs/DRAFT.md", `draft-bench-${args.which ?? "merged"}`, md, say);
}

if (import.meta.main) await main();
