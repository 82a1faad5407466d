// Turns the streaming benchmark's raw results into checks (identity, RSS within budget, plan
// shape) and a markdown report. Every run is listed, not just the best.
import { formatBytes } from "../src/format.ts";
import type { ArmResult } from "./stream.ts";
import type { DiskResult } from "./disk.ts";
import type { MachineInfo } from "./machine.ts";
import { median } from "./common.ts";

/** loadavg: /proc/loadavg (1, 5, 15 min) when the run started. */
export type RunResult = ArmResult & { run: number; wallMs: number; loadavg?: number[] };

export interface DiskSummary {
  /** Mean over the before/after measurements of the best pattern's median GB/s: the floor's rate. */
  bestGbps: number;
  /** Same, for expert-size random reads and for 1 GiB sequential reads (size-matched floor). */
  expertGbps: number;
  trunkGbps: number;
  direct: boolean;
}

export interface RunCheck {
  name: string;
  run: number;
  floorS?: number; // bytes read per decode token ÷ best disk GB/s
  ratio?: number; // s/token ÷ floorS (target ≤ 1.3)
  sizeMatchedFloorS?: number; // trunk bytes ÷ trunk GB/s + expert bytes ÷ expert GB/s
  sizeMatchedRatio?: number;
  /** s/token ÷ max(disk floor, the resident arm's median s/token): disk, memory and compute floor. */
  fullFloorRatio?: number;
  idsMatch?: boolean;
  logitsMatch?: boolean;
  rssWithinBudget?: boolean;
}

export interface Summary {
  disk?: DiskSummary;
  computeFloorS?: number; // median s/token of the resident arm
  reference?: { name: string; run: number; ids: number[]; lastLogitsSha256: string };
  checks: RunCheck[];
  problems: string[];
}

export interface BenchReport {
  command: string;
  started: string;
  finished: string;
  args: unknown;
  machine: MachineInfo;
  kernels?: { source: string; sha256: string };
  disk: (DiskResult | { error: string; when?: string })[];
  arms: { name: string; runs: number; timed: boolean }[];
  results: RunResult[];
  summary: Summary;
}

const isDisk = (d: DiskResult | { error: string }): d is DiskResult => !("error" in d);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
/** A floor below this is no disk floor: the arm is compute-bound and a ratio would mean nothing. */
const MIN_FLOOR_S = 0.05;

export function diskSummary(disk: (DiskResult | { error: string })[]): DiskSummary | undefined {
  const ok = disk.filter(isDisk);
  if (!ok.length) return undefined;
  const bestOf = (d: DiskResult, prefix: string) => Math.max(...d.patterns.filter((p) => p.name.startsWith(prefix)).map((p) => p.gbps));
  return {
    bestGbps: mean(ok.map((d) => d.bestGbps)),
    expertGbps: mean(ok.map((d) => bestOf(d, "expert"))),
    trunkGbps: mean(ok.map((d) => bestOf(d, "trunk"))),
    direct: ok.every((d) => d.direct),
  };
}

export function summarize(disk: (DiskResult | { error: string })[], results: RunResult[], arms: { spec: { name: string; ram?: string; resident?: boolean } }[]): Summary {
  const problems: string[] = [];
  const ds = diskSummary(disk);
  for (const d of disk) if (!isDisk(d)) problems.push(`disk bench failed: ${d.error}`);
  if (ds && !ds.direct) problems.push("O_DIRECT was unavailable for the disk bench: its GB/s may come from the page cache");

  // Reference for identity: the resident run (no planner) if it worked, else the first good run.
  const good = results.filter((r) => r.ok);
  const ref = good.find((r) => r.spec.resident) ?? good[0];
  const reference = ref ? { name: ref.spec.name, run: ref.run, ids: ref.ids!, lastLogitsSha256: ref.lastLogitsSha256! } : undefined;

  // Compute floor: every weight resident, no disk read during decode (the same bytes touched in
  // RAM and the same arithmetic as every other arm).
  const residentRuns = good.filter((r) => r.spec.resident && r.sPerToken);
  const computeFloorS = residentRuns.length ? median(residentRuns.map((r) => r.sPerToken!)) : undefined;

  const checks: RunCheck[] = [];
  for (const r of results) {
    const c: RunCheck = { name: r.spec.name, run: r.run };
    if (!r.ok) problems.push(`${r.spec.name} (run ${r.run}) failed: ${r.error}`);
    if (r.ok && reference) {
      c.idsMatch = JSON.stringify(r.ids) === JSON.stringify(reference.ids);
      c.logitsMatch = r.lastLogitsSha256 === reference.lastLogitsSha256;
      if (!c.idsMatch) problems.push(`${r.spec.name} (run ${r.run}): ids ${r.ids!.join(" ")} differ from ${reference.name}'s ${reference.ids.join(" ")}`);
      else if (!c.logitsMatch) problems.push(`${r.spec.name} (run ${r.run}): last logits differ from ${reference.name}'s (same ids)`);
    }
    if (r.ok && r.perToken && ds && r.sPerToken) {
      const floor = r.perToken.bytes / (ds.bestGbps * 1e9);
      const matched = r.perToken.trunkBytes / (ds.trunkGbps * 1e9) + r.perToken.expertBytes / (ds.expertGbps * 1e9);
      c.floorS = floor;
      c.sizeMatchedFloorS = matched;
      if (floor >= MIN_FLOOR_S) c.ratio = r.sPerToken / floor;
      if (matched >= MIN_FLOOR_S) c.sizeMatchedRatio = r.sPerToken / matched;
      if (computeFloorS !== undefined && !r.spec.resident) c.fullFloorRatio = r.sPerToken / Math.max(floor, computeFloorS);
    }
    if (r.plan && r.vmHwmBytes) {
      c.rssWithinBudget = r.vmHwmBytes <= r.plan.budgetBytes;
      if (!c.rssWithinBudget)
        problems.push(`PEAK RSS OVER BUDGET: ${r.spec.name} (run ${r.run}) peaked at ${gib(r.vmHwmBytes)} with a budget of ${gib(r.plan.budgetBytes)}`);
    }
    if (r.ok && r.directIo === false && !r.spec.resident) problems.push(`${r.spec.name} (run ${r.run}) fell back to buffered I/O: its bytes may have come from the page cache`);
    checks.push(c);
  }
  // The arms must be what they claim: the streaming budget streams, the pinned ones pin.
  for (const r of good) {
    if (!r.plan) continue;
    const name = r.spec.name;
    if (name.startsWith("stream") && r.plan.streamedLayers.length === 0) problems.push(`${name}: the plan streams no layer (the arm is mislabelled)`);
    if ((name.includes("pinned") || name.includes("all fits")) && (r.plan.streamedLayers.length > 0 || r.plan.head !== "resident"))
      problems.push(`${name}: the plan does not pin the whole trunk`);
  }
  void arms;
  return { disk: ds, computeFloorS, reference, checks, problems };
}

const gib = (b: number) => formatBytes(b, "GiB");
const gb = (b: number) => (b / 1e9).toFixed(2);
const f2 = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? "—" : x.toFixed(2));
const yn = (x: boolean | undefined) => (x === undefined ? "—" : x ? "yes" : "**NO**");

export function renderMarkdown(rep: BenchReport): string {
  const s = rep.summary;
  const m = rep.machine;
  const L: string[] = [];
  L.push(`### Streaming benchmark, ${rep.started.slice(0, 10)} (\`${rep.command}\`)`, "");
  L.push(
    `Machine: ${m.cpu}, ${m.cores} cores, ${gib(m.memTotalBytes)} RAM; model on ${m.disk.device} (${m.disk.fsType}, ${m.disk.size}, rotational ${m.disk.rotational}); ` +
      `Linux ${m.kernel}; bun ${m.bun}. Started ${rep.started}, finished ${rep.finished}.`,
    "",
  );

  L.push("**Disk read bandwidth** (same shard files, O_DIRECT, 4 I/O threads; GB/s = 1e9 B/s, median of passes; every pass listed):", "");
  L.push("| measurement | pattern | passes GB/s | median |", "|---|---|---|---|");
  rep.disk.forEach((d, i) => {
    const when = d.when ?? `measurement ${i + 1}`;
    if (!isDisk(d)) return L.push(`| ${when} | FAILED: ${d.error} | | |`);
    if (!d.direct) L.push(`| ${when} | **O_DIRECT unavailable: buffered reads** | | |`);
    for (const p of d.patterns) L.push(`| ${when} | ${p.name} | ${p.passes.map((x) => x.gbps.toFixed(2)).join(" / ")} | ${p.gbps.toFixed(2)} |`);
  });
  if (s.disk)
    L.push(
      "",
      `Floor rate: **${s.disk.bestGbps.toFixed(2)} GB/s** (best pattern, mean of the measurements); size-matched: experts ${s.disk.expertGbps.toFixed(2)} GB/s, 1 GiB reads ${s.disk.trunkGbps.toFixed(2)} GB/s.`,
    );
  if (s.computeFloorS !== undefined) L.push(`Compute floor (resident arm, median): ${s.computeFloorS.toFixed(2)} s/token.`);
  L.push("");

  L.push(
    "**Decode, every run** (per decode token: the prefill is excluded; floor = bytes read per token ÷ floor rate; ratio = s/token ÷ floor, target ≤ 1.3; " +
      "matched = the same with trunk bytes at the 1 GiB rate and expert bytes at the expert rate; " +
      "vs all floors = s/token ÷ max(floor, resident arm's s/token)):",
    "",
  );
  L.push(
    "| arm | run | s/token | GB read/token (trunk + experts) | reads | expert hits / requests | lookahead used / issued | I/O wait s | direct | peak RSS / budget | floor s | ratio | matched ratio | vs all floors | CPU user+sys s/token | open s | prefill s | load 1m |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  );
  const checkOf = (r: RunResult) => s.checks.find((c) => c.name === r.spec.name && c.run === r.run)!;
  for (const r of rep.results) {
    const c = checkOf(r);
    if (!r.ok) {
      L.push(`| ${r.spec.name} | ${r.run} | **FAILED**: ${r.error} | | | | | | | ${r.vmHwmBytes ? gib(r.vmHwmBytes) : "—"} | | | | | | | | |`);
      continue;
    }
    const p = r.perToken!;
    const budget = r.plan ? gib(r.plan.budgetBytes) : "none";
    const rss = `${gib(r.vmHwmBytes!)} / ${budget}${c.rssWithinBudget === false ? " **OVER**" : ""}`;
    L.push(
      `| ${r.spec.name} | ${r.run} | ${r.sPerToken!.toFixed(2)} | ${gb(p.bytes)} (${gb(p.trunkBytes)} + ${gb(p.expertBytes)}) | ${p.reads.toFixed(1)} | ` +
        `${p.expertHits.toFixed(1)} / ${p.expertRequests.toFixed(0)} | ${p.lookaheadUsed.toFixed(1)} / ${p.lookaheadIssued.toFixed(1)} | ${(p.ioWaitMs / 1000).toFixed(2)} | ` +
        `${r.directIo ? "on" : "off"} | ${rss} | ${f2(c.floorS)} | ${f2(c.ratio)} | ${f2(c.sizeMatchedRatio)} | ${f2(c.fullFloorRatio)} | ${r.decodeCpu ? `${(r.decodeCpu.userS / r.decodeSteps!).toFixed(2)} + ${(r.decodeCpu.sysS / r.decodeSteps!).toFixed(2)}` : "—"} | ${(r.openMs! / 1000).toFixed(1)} | ${(r.prefillMs! / 1000).toFixed(1)} | ${r.loadavg ? r.loadavg[0]!.toFixed(1) : "—"} |`,
    );
  }
  L.push("");

  L.push("**Per arm** (medians over runs):", "");
  L.push("| arm | runs ok | plan | s/token (each run) | median s/token | median ratio | median vs all floors | max peak RSS / budget |", "|---|---|---|---|---|---|---|---|");
  for (const a of rep.arms) {
    const rs = rep.results.filter((r) => r.spec.name === a.name);
    const ok = rs.filter((r) => r.ok);
    const plan = ok[0]?.plan;
    const planText = plan
      ? `pinned layers [${plan.pinnedLayers.join(",")}], streamed [${plan.streamedLayers.join(",")}], lm_head ${plan.head}, ring ${plan.ringSlots}, expert slots ${plan.expertSlots}`
      : ok.length ? "resident (no planner)" : "—";
    const ratios = ok.map((r) => checkOf(r).ratio).filter((x): x is number => x !== undefined);
    const full = ok.map((r) => checkOf(r).fullFloorRatio).filter((x): x is number => x !== undefined);
    const rss = Math.max(...rs.map((r) => r.vmHwmBytes ?? 0));
    L.push(
      `| ${a.name} | ${ok.length}/${rs.length} | ${planText} | ${ok.map((r) => r.sPerToken!.toFixed(2)).join(" / ")} | ${ok.length ? median(ok.map((r) => r.sPerToken!)).toFixed(2) : "—"} | ` +
        `${ratios.length ? median(ratios).toFixed(2) : "— (compute-bound)"} | ${full.length ? median(full).toFixed(2) : "—"} | ${gib(rss)} / ${plan ? gib(plan.budgetBytes) : "none"} |`,
    );
  }
  L.push("");

  if (s.reference) {
    const ok = s.checks.filter((c) => c.idsMatch !== undefined);
    const same = ok.filter((c) => c.idsMatch && c.logitsMatch);
    L.push(
      `**Identity**: reference ${s.reference.name} (run ${s.reference.run}): ids \`${s.reference.ids.join(" ")}\`, last logits sha256 \`${s.reference.lastLogitsSha256.slice(0, 16)}…\`. ` +
        `${same.length} of ${ok.length} successful runs have the same ids and bit-identical last logits` +
        (same.length === ok.length ? "." : `; **different: ${ok.filter((c) => !(c.idsMatch && c.logitsMatch)).map((c) => `${c.name} run ${c.run}`).join(", ")}**.`),
      "",
    );
  }
  L.push(s.problems.length ? `**Problems (${s.problems.length})**:\n\n${s.problems.map((p) => `- ${p}`).join("\n")}\n` : "**Problems**: none.\n");
  return L.join("\n");
}
