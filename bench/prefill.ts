// Prefill benchmark (docs/BENCH-KERNELS.md, "Prefill"): tokens/s of long prompts on a model (the
// slice preset by default), per budget and per arm, with the weight math's GFLOP/s against the
// f32 peaks (bench/peak.ts) measured in the same run. Opt-in, never part of `npm test`; uses
// more than 4 GB: on a shared machine run it when nothing else is timed or holds much memory.
//
//   bun bench/prefill.ts [--model models/slice] [--prompts 256,1024] [--budgets resident,6G]
//                        [--arms today,kernels,planner] [--old bench/out/old/libkernels.so]
//                        [--runs 3] [--threads 2] [--isa auto] [--trunk bf16|int8|int4] [--warm] [--json out.json]
//
// --trunk int8|int4 runs every arm on that compact trunk (made first by `k3 pack MODEL --trunk F`;
// the engine refuses without it): the same matmuls, int8/int4 trunk weights instead of bf16.
// A packed trunk is never --resident: give a budget that holds it all (`k3 plan` says), and --warm.
// --warm prefills the prompt once untimed first (filling the expert slots a budget fills on first
// use), then times a second prefill of it: the "disk GB read" column then shows whether the timed
// pass ran from RAM alone (0.0).
//
// Arms (each run in its own process; rounds interleave every arm, so drift hits all alike):
//   today    the old kernel library (--old, loaded with K3_KERNELS) at the old default chunk 32
//   kernels  this library at chunk 32                         (the kernels' effect alone)
//   planner  this library at the planner's chunk (no --chunk)  (kernels + chunk choice)
//   oldplan  the old library at the planner's chunk            (planner vs oldplan: the kernels
//            at the chunk the engine uses)
//   cN       this library at chunk N (e.g. c128, c256): one chunk at every budget, so a
//            streamed budget and resident can be compared at equal kernel shapes
// Beside the time each run records where its wall time went that no kernel explains: seconds
// waited on reads (ioWaitS), user and system CPU seconds, the host's steal time (/proc/stat,
// a VM's vCPUs taken by the host), expert requests and hits, and whether reads were O_DIRECT.
// Every run of one prompt must give the same last-logit bits (arms, budgets, runs): checked.
// GFLOP/s counts the weight math of the pass (2 per weight·token: every matmul the forward pass
// makes, and lm_head once), not attention scores or elementwise work.
import { existsSync, readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { join, resolve } from "node:path";
import type { ModelConfig } from "../src/checkpoint/types.ts";
import { Engine, TRUNK_FORMATS, type EngineOptions, type TrunkFormat } from "../src/engine.ts";
import { writeFileAtomic, writeTarget } from "../src/files.ts";
import { cpuInfo, loadAvg } from "./machine.ts";
import { childMain, spawnChild } from "./child.ts";
import { arg } from "./common.ts";

const ROOT = resolve(import.meta.dir, "..");

interface Spec {
  model: string;
  budget: string; // "resident" or a --ram size
  arm: string;
  lib?: string; // K3_KERNELS for this run
  chunk?: number;
  threads: number;
  isa: "auto" | "avx2" | "avx512";
  trunk: TrunkFormat;
  warm: boolean;
  promptTokens: number;
}
interface Result {
  ok: boolean;
  error?: string;
  chunk?: number;
  prefillS?: number;
  cpuS?: number;
  bytesRead?: number;
  reads?: number;
  ioWaitS?: number;
  userS?: number;
  sysS?: number;
  stealS?: number;
  expertRequests?: number;
  expertHits?: number;
  ioMode?: string;
  flops?: number;
  logitsSha?: string;
  load?: string;
}

/** 2 × weights used per token by the forward pass's matmuls (src/model/forward.ts), plus lm_head once. */
export function weightFlops(c: ModelConfig, tokens: number): number {
  const E = c.hidden, P = c.kdaHeads * c.kdaHeadDim, D = c.kdaHeadDim;
  const kda = 4 * P * E + D * E + P * D + c.kdaHeads * E + E * P; // q,k,v,g; f_a; f_b; b; o
  const qk = c.qkNope + c.qkRope;
  const mla =
    c.qLoraRank * E + c.mlaHeads * qk * c.qLoraRank + (c.kvLoraRank + c.qkRope) * E + 2 * c.mlaHeads * c.vHead * E +
    c.mlaHeads * (c.qkNope + c.vHead) * c.kvLoraRank; // kv_b absorbed: q_lat and the output
  const dense = 3 * c.denseInter * E;
  const moe = c.numExperts * E + c.latent * E + 3 * c.numSharedExperts * c.moeInter * E + c.topK * 3 * c.moeInter * c.latent + E * c.latent;
  let perToken = 0;
  for (let L = 0; L < c.numLayers; L++) perToken += (c.layerKinds[L] === "kda" ? kda : mla) + (L < c.firstKDense ? dense : moe);
  return 2 * (perToken * tokens + c.vocab * E);
}

/** Seconds of steal time the host took from this VM's vCPUs so far (/proc/stat; 0 when not there). */
function stealSeconds(): number {
  try {
    const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/);
    return Number(cpu[8] ?? 0) / 100; // USER_HZ = 100 on Linux
  } catch {
    return 0;
  }
}

function runChild(spec: Spec): Result {
  const opts: EngineOptions = { threads: spec.threads, isa: spec.isa, chunk: spec.chunk, trunk: spec.trunk };
  if (spec.budget === "resident") opts.resident = true;
  else opts.ram = spec.budget;
  const engine = Engine.open(spec.model, opts);
  try {
    const s = engine.createSession();
    const prompt = Array.from({ length: spec.promptTokens }, (_, i) => (i * 7919 + 13) % engine.config.vocab);
    if (spec.warm) engine.prefill(s, prompt), s.reset();
    const before = engine.stats();
    const st0 = stealSeconds(), c0 = process.cpuUsage(), t0 = performance.now();
    const logits = engine.prefill(s, prompt);
    const prefillS = (performance.now() - t0) / 1000, c = process.cpuUsage(c0), stealS = stealSeconds() - st0;
    const after = engine.stats();
    return {
      ok: true,
      chunk: engine.prefillChunk,
      prefillS,
      cpuS: (c.user + c.system) / 1e6,
      bytesRead: after.trunkBytesRead + after.expertBytesRead - before.trunkBytesRead - before.expertBytesRead,
      reads: after.reads - before.reads,
      ioWaitS: (after.ioWaitMs - before.ioWaitMs) / 1000,
      userS: c.user / 1e6,
      sysS: c.system / 1e6,
      stealS,
      expertRequests: after.expertRequests - before.expertRequests,
      expertHits: after.expertHits - before.expertHits,
      ioMode: after.ioMode,
      flops: weightFlops(engine.config, prompt.length),
      logitsSha: createHash("sha256").update(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength)).digest("hex"),
    };
  } finally {
    engine.close();
  }
}

if (process.argv[2] === "--child") await childMain(runChild);

// ---------------------------------------------------------------- parent
const model = resolve(arg("--model", join(ROOT, "models/slice")));
const prompts = arg("--prompts", "256,1024").split(",").map(Number);
const budgets = arg("--budgets", "resident,6G").split(",");
const armNames = arg("--arms", "today,kernels,planner").split(",");
const oldLib = arg("--old", join(ROOT, "bench/out/old/libkernels.so"));
const RUNS = Number(arg("--runs", "3"));
const threads = Number(arg("--threads", "2"));
const isa = arg("--isa", "auto") as Spec["isa"];
const trunk = arg("--trunk", "bf16") as TrunkFormat;
if (!TRUNK_FORMATS.includes(trunk)) throw new Error(`--trunk must be one of ${TRUNK_FORMATS.join(", ")}, got ${JSON.stringify(trunk)}`);
const warm = process.argv.includes("--warm");
const jsonOut = arg("--json", "");
if (jsonOut) writeTarget(jsonOut, "the --json output", "USAGE"); // a FIFO or folder there: refused now, not after the run
if ((armNames.includes("today") || armNames.includes("oldplan")) && !existsSync(oldLib)) throw new Error(`--old ${oldLib}: no such library (the "today" arm needs the pre-change kernels)`);
const say = (s: string) => process.stderr.write(`[prefill] ${s}\n`);

const { peakGflops } = await import("./peak.ts");
const isaId = isa === "avx2" ? 1 : 2;
/** The chunk an arm runs at: the planner's (undefined), 32, or N for an arm "cN". */
function armChunk(a: string): number | undefined {
  if (a === "planner" || a === "oldplan") return undefined;
  if (a === "today" || a === "kernels") return 32;
  const m = /^c([1-9]\d*)$/.exec(a);
  if (!m) throw new Error(`--arms: unknown arm ${JSON.stringify(a)} (today, kernels, planner, oldplan or cN)`);
  return Number(m[1]);
}
const arms = armNames.map((a) => ({ arm: a, lib: a === "today" || a === "oldplan" ? oldLib : undefined, chunk: armChunk(a) }));
const rows: { key: string; spec: Spec; results: Result[] }[] = [];
for (const n of prompts) for (const b of budgets) for (const a of arms)
  rows.push({ key: `${n}/${b}/${a.arm}`, spec: { model, budget: b, arm: a.arm, lib: a.lib, chunk: a.chunk, threads, isa, trunk, warm, promptTokens: n }, results: [] });
// The peak of a round is the best of PEAK_PASSES probe passes of each mode (60 ms each): one pass
// can land on a moment another process (or the hypervisor) takes a core, which once read 159 and
// 193 GFLOP/s FMA where undisturbed passes read 223–226 and made a ratio look better than it was.
// A last set after the final round lets a run that got slower while it ran show it.
const PEAK_PASSES = 5;
const peaks: { round: number; mulAdd: number; fma: number; mulAddPasses: number[]; fmaPasses: number[] }[] = [];
function measurePeaks(round: number): { mulAdd: number; fma: number } {
  const ma: number[] = [], fm: number[] = [];
  for (let k = 0; k < PEAK_PASSES; k++) {
    ma.push(peakGflops(isaId, "mul+add", threads).wall);
    fm.push(peakGflops(isaId, "fma", threads).wall);
  }
  const p = { round, mulAdd: Math.max(...ma), fma: Math.max(...fm), mulAddPasses: ma, fmaPasses: fm };
  peaks.push(p);
  return p;
}
for (let run = 1; run <= RUNS; run++) {
  const pk = measurePeaks(run);
  say(`round ${run}/${RUNS}: peak ${pk.mulAdd.toFixed(0)} / ${pk.fma.toFixed(0)} GFLOP/s (mul+add / FMA, best of ${PEAK_PASSES} passes each), load ${loadAvg()}`);
  for (const row of run % 2 ? rows : [...rows].reverse()) {
    const load = loadAvg();
    const r = spawnChild<Result>(import.meta.path, row.spec, row.spec.lib);
    r.load = load;
    row.results.push(r);
    say(`${row.key}: ${r.ok ? `${(row.spec.promptTokens / r.prefillS!).toFixed(2)} tok/s (chunk ${r.chunk}, ${r.prefillS!.toFixed(1)} s; ${where(r)})` : r.error}`);
  }
}

{
  const pk = measurePeaks(RUNS + 1);
  say(`after the last round: peak ${pk.mulAdd.toFixed(0)} / ${pk.fma.toFixed(0)} GFLOP/s (mul+add / FMA, best of ${PEAK_PASSES} passes each), load ${loadAvg()}`);
}

/** Where a run's time went beside the kernels: read waits, CPU, steal, bytes, experts. */
function where(r: Result): string {
  const hits = r.expertRequests ? `, experts ${r.expertHits}/${r.expertRequests} hits` : "";
  return `read wait ${r.ioWaitS!.toFixed(2)} s, CPU user ${r.userS!.toFixed(1)} + sys ${r.sysS!.toFixed(1)} s, steal ${r.stealS!.toFixed(1)} s, ${(r.bytesRead! / 1e9).toFixed(1)} GB in ${r.reads} reads${hits}, ${r.ioMode}`;
}

// ---------------------------------------------------------------- report
const best = (xs: number[]) => Math.max(...xs);
const tps = (row: (typeof rows)[number]) => row.results.filter((r) => r.ok).map((r) => row.spec.promptTokens / r.prefillS!);
const peakFma = best(peaks.map((p) => p.fma)), peakMulAdd = best(peaks.map((p) => p.mulAdd));
const cpu = cpuInfo();
console.log(`CPU: ${cpu.model}; ${navigator.hardwareConcurrency} threads visible; ${cpu.vectorFlags.join(" ")}; model ${model}; trunk ${trunk}${warm ? " (timed after a warm-up prefill)" : ""}; ${threads} threads; ISA ${isa}`);
console.log(`${RUNS} rounds, every arm once per round (alternating order); load average at each run start: ${rows.flatMap((r) => r.results.map((x) => x.load!.split(" ")[0])).join(", ")}`);
console.log(`peak GFLOP/s of the same run (${threads} threads, best of ${PEAK_PASSES} passes before each of the ${RUNS} rounds and after the last): mul+add ${peakMulAdd.toFixed(1)}, FMA ${peakFma.toFixed(1)}; FMA per set: ${peaks.map((p) => p.fma.toFixed(0)).join(" / ")}\n`);
console.log("| prompt | budget | arm | chunk | tokens/s (each round) | best | × today | weight GFLOP/s (best) | / FMA peak | / mul+add peak | tokens per CPU-s × threads (best) | × today (CPU) | disk GB read | identical logits |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
const identity = new Map<number, Set<string>>();
for (const row of rows) for (const r of row.results) if (r.ok) (identity.get(row.spec.promptTokens) ?? identity.set(row.spec.promptTokens, new Set()).get(row.spec.promptTokens)!).add(r.logitsSha!);
for (const row of rows) {
  const t = tps(row);
  const ok = row.results.filter((r) => r.ok);
  const today = rows.find((r) => r.key === `${row.spec.promptTokens}/${row.spec.budget}/today`);
  const ratio = today && tps(today).length && t.length ? (best(t) / best(tps(today))).toFixed(2) : "—";
  const gflops = ok.length ? best(ok.map((r) => r.flops! / r.prefillS! / 1e9)) : NaN;
  const bytes = ok.length ? (ok[0]!.bytesRead! / 1e9).toFixed(1) : "—";
  // On a machine shared with other work: tokens per CPU-second × threads is what the cores do while they run.
  const cpuRate = (rw: (typeof rows)[number]) => rw.results.filter((r) => r.ok).map((r) => (rw.spec.promptTokens / r.cpuS!) * threads);
  const c = cpuRate(row), ct = today ? cpuRate(today) : [];
  const cpuRatio = c.length && ct.length ? (best(c) / best(ct)).toFixed(2) : "—";
  console.log(`| ${row.spec.promptTokens} | ${row.spec.budget} | ${row.spec.arm} | ${ok[0]?.chunk ?? "—"} | ${t.map((x) => x.toFixed(2)).join(" / ") || row.results.map((r) => r.error).join("; ")} | ${t.length ? best(t).toFixed(2) : "—"} | ${ratio} | ${gflops.toFixed(1)} | ${(gflops / peakFma).toFixed(2)} | ${(gflops / peakMulAdd).toFixed(2)} | ${c.length ? best(c).toFixed(2) : "—"} | ${cpuRatio} | ${bytes} | ${identity.get(row.spec.promptTokens)?.size === 1 ? "yes" : "NO"} |`);
}
if (jsonOut) writeFileAtomic(jsonOut, "the --json output", "USAGE", JSON.stringify({ cpu, model, trunk, threads, isa, peaks, rows }, null, 1));
const failed = rows.some((r) => r.results.some((x) => !x.ok)) || [...identity.values()].some((s) => s.size !== 1);
process.exit(failed ? 1 : 0);
