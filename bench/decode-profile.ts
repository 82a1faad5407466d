// Decode component profile (docs/BENCH-KERNELS.md, "Decode"): where a decoded token's time goes
// on a model (the slice by default), next to its memory floor — the bytes a token must touch
// (every resident trunk weight, lm_head, its top-k experts per MoE layer, the MLA cache and KDA
// state) ÷ the memory read rate measured in the same process with the same threads: the best of
// 3 probe passes before each round, and (decode) one probe pass between every two tokens — the
// rate in the same seconds as the tokens, reported as median step ÷ median floor beside it.
// Beside it, a compute-aware floor: one-token MXFP4 is bound by the vector units, not memory, on
// hosts such as Zen 4, so the routed experts' MXFP4 bytes are charged at min(read rate, the rate
// k3_matmul_mxfp4 reaches on a matrix in cache, measured before each round: bench/mxfp4-cache.ts),
// the bf16 trunk and every other byte at the read rate; step ÷ it says how far decode is from
// what this host's kernels could do at best. Per round it also gives the one-token bf16 matmuls' own
// rate (weight bytes ÷ their call time) of each token beside the probe pass right after it.
// Opt-in; the resident slice takes ~14 GB: run it alone on the machine.
//
//   bun bench/decode-profile.ts [--model models/slice] [--ram SIZE | resident] [--threads 2]
//                               [--prompt 32] [--tokens 16] [--runs 3] [--isa auto] [--json out]
//                               [--phase decode | prefill] [--chunk N] [--mx-rows 192·threads]
//                               [--trunk bf16|int8|int4]   (a packed trunk, with --phase prefill only: give
//                                                           --ram, not resident; round 1 fills the expert slots)
// --phase prefill profiles the prompt's prefill instead (per prompt token; matmul GFLOP/s from
// each call's rows × cols × T), e.g. `--phase prefill --prompt 256`.
//
// How: every kernel binding is wrapped with a timer (≈ 50 ns per call, ~1,000 calls per token),
// and the model's layer-part methods (KDA, MLA, AttnRes mix, norms, router, MoE, dense FFN,
// final logits) push a tag, so each kernel call's time is charged to the innermost part that
// made it. "JS, FFI and pool" is the step's wall time minus every kernel call's time. Runs
// (engine opened once, decode repeated) alternate nothing: one arm; rounds show the spread.
import { writeFileAtomic, writeTarget } from "../src/files.ts";
import { join, resolve } from "node:path";
import { Engine, TRUNK_FORMATS, type EngineOptions, type TrunkFormat } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { Model } from "../src/model/forward.ts";
import { cpuInfo, hugePages, loadAvg } from "./machine.ts";
import { arg, median } from "./common.ts";
import { mxfp4InCache, type Mxfp4InCache } from "./mxfp4-cache.ts";

const ROOT = resolve(import.meta.dir, "..");
const model = resolve(arg("--model", join(ROOT, "models/slice")));
const ram = arg("--ram", "resident");
const threads = Number(arg("--threads", "2"));
const promptLen = Number(arg("--prompt", arg("--phase", "decode") === "prefill" ? "256" : "32"));
const TOKENS = arg("--phase", "decode") === "prefill" ? Number(arg("--prompt", "256")) : Number(arg("--tokens", "16"));
const RUNS = Number(arg("--runs", "3"));
const isa = arg("--isa", "auto") as EngineOptions["isa"];
const jsonOut = arg("--json", "");
if (jsonOut) writeTarget(jsonOut, "the --json output", "USAGE"); // a FIFO or folder there: refused now, not after the run
const phase = arg("--phase", "decode");
const chunkArg = arg("--chunk", "");
const mxRows = Number(arg("--mx-rows", String(192 * threads))); // the in-cache MXFP4 matrix: mxRows × 3584
if (!Number.isInteger(mxRows) || mxRows < 1) {
  process.stderr.write(`--mx-rows wants a whole number of rows ≥ 1 (the in-cache MXFP4 matrix is rows × 3584), got ${arg("--mx-rows", "")}\n`);
  process.exit(2);
}

// ---- instrumentation: kernel timers charged to the innermost model part on the stack
const k = loadKernels() as unknown as Record<string, (...a: unknown[]) => unknown>;
const tags: string[] = ["other"];
const cost = new Map<string, { ns: number; calls: number; flops: number }>(); // "part\tkernel"
const byShape = new Map<string, { ns: number; calls: number; flops: number }>(); // "kernel rows×cols T"
/** 2·rows·cols·T of a matmul call (argument positions from src/kernels.ts), else 0. */
const matmulFlops = (name: string, a: unknown[]): number =>
  ["k3_matmul_mxfp4", "k3_matmul_q8", "k3_matmul_q4"].includes(name) ? 2 * (a[6] as number) * (a[7] as number) * (a[8] as number)
  : name === "k3_matmul_bf16" || name === "k3_matmul_f32" ? 2 * (a[5] as number) * (a[6] as number) * (a[7] as number) : 0;
/** "k3_matmul_bf16 2048×7168 T256" for a matmul call, else "". */
const matmulShape = (name: string, a: unknown[]): string => {
  const at = name === "k3_matmul_bf16" || name === "k3_matmul_f32" ? 5 : ["k3_matmul_mxfp4", "k3_matmul_q8", "k3_matmul_q4"].includes(name) ? 6 : -1;
  return at < 0 ? "" : `${name.slice(10)} ${a[at]}×${a[at + 1]} T${a[at + 2]}`;
};
let counting = false;
let bf16Ns = 0, bf16Bytes = 0; // one-token bf16 matmuls since the last decoded token (bytes = weights × 2)
for (const name of Object.keys(k)) {
  const f = k[name]!;
  if (typeof f !== "function" || !name.startsWith("k3_")) continue;
  k[name] = (...a: unknown[]) => {
    if (!counting) return f(...a);
    const t0 = Bun.nanoseconds();
    const r = f(...a);
    const key = `${tags.at(-1)}\t${name}`;
    const c = cost.get(key) ?? cost.set(key, { ns: 0, calls: 0, flops: 0 }).get(key)!;
    const dt = Bun.nanoseconds() - t0;
    c.ns += dt;
    c.calls++;
    c.flops += matmulFlops(name, a);
    if (name === "k3_matmul_bf16" && a[7] === 1) (bf16Ns += dt), (bf16Bytes += 2 * (a[5] as number) * (a[6] as number));
    const shape = matmulShape(name, a);
    if (shape) {
      const m = byShape.get(shape) ?? byShape.set(shape, { ns: 0, calls: 0, flops: 0 }).get(shape)!;
      m.ns += Bun.nanoseconds() - t0;
      m.calls++;
      m.flops += matmulFlops(name, a);
    }
    return r;
  };
}
const parts: Record<string, string> = {
  kda: "KDA", mla: "MLA", mix: "AttnRes mix", norm: "norms", route: "router", moe: "MoE (experts, shared, latent)",
  glu: "dense FFN / shared experts", finalLogits: "final mix + lm_head", lookaheadRouter: "router lookahead",
};
const proto = Model.prototype as unknown as Record<string, (...a: unknown[]) => unknown>;
for (const [m, label] of Object.entries(parts)) {
  const f = proto[m];
  if (typeof f !== "function") throw new Error(`Model.${m} not found: update bench/decode-profile.ts`);
  proto[m] = function (this: unknown, ...a: unknown[]) {
    tags.push(label);
    try {
      return f.apply(this, a);
    } finally {
      tags.pop();
    }
  };
}

// ---- the run
const say = (s: string) => process.stderr.write(`[decode-profile] ${s}\n`);
const trunk = arg("--trunk", "bf16") as TrunkFormat;
if (!TRUNK_FORMATS.includes(trunk)) {
  process.stderr.write(`--trunk must be one of ${TRUNK_FORMATS.join(", ")}, got ${JSON.stringify(trunk)}\n`);
  process.exit(2);
}
if (trunk !== "bf16" && phase !== "prefill") {
  // the floors count the checkpoint's trunk bytes (bf16, the census), not a pack's: a wrong floor
  process.stderr.write(`--trunk ${trunk} profiles a prefill only (add --phase prefill): the decode floors count the checkpoint's bf16 trunk bytes, not the pack's\n`);
  process.exit(2);
}
const opts: EngineOptions = { threads, isa, trunk, ...(chunkArg ? { chunk: Number(chunkArg) } : {}), ...(ram === "resident" ? { resident: true } : { ram }) };
say(`opening ${model} (${ram}, ${threads} threads)…`);
const engine = Engine.open(model, opts);
const huge = hugePages(); // right after open: the weights (and the probe buffer below, 1 GiB, not yet)
say(`opened; transparent huge pages: ${huge}`);
const cfg = engine.config;
const census = (engine as unknown as { checkpoint: { layout: { census: { trunkBytesPerLayer: number[]; expertBytes: number; headBytes: number; finalBytes: number } } } }).checkpoint.layout.census;

// The read probe: k3_mem_read_sum over one 1 GiB buffer (all threads). memReadGBs() is the best of
// 3 passes before a round (the floor the issue-23 figures used); probeOnce() is one pass, run
// between decoded tokens (the generator is paused, so it is not in any step's time): the read rate
// in the same seconds as the tokens, which on a shared VM moves ±20 % from minute to minute.
const PROBE_BYTES = 2 ** 30;
const probeBuf = (k.k3_mem_alloc as (b: number, a: number) => number)(PROBE_BYTES, 4096);
const readSum = k.k3_mem_read_sum as (p: number, b: number) => bigint;
readSum(probeBuf, PROBE_BYTES);
function probeOnce(): number {
  const was = counting; // the probe is no kernel of the token: keep it out of the cost tables
  counting = false;
  const t0 = Bun.nanoseconds();
  readSum(probeBuf, PROBE_BYTES);
  const gbs = PROBE_BYTES / ((Bun.nanoseconds() - t0) / 1e9) / 1e9;
  counting = was;
  return gbs;
}
function memReadGBs(): number {
  let best = 0;
  for (let i = 0; i < 3; i++) best = Math.max(best, probeOnce());
  return best;
}

/** Bytes a decoded token at position `pos` touches, by format: `mxfp4` = its top-k routed experts per
 * MoE layer (the only MXFP4 tensors, MODEL.md §3); `other` = the trunk and head (bf16, a few f32
 * vectors), MLA cache rows, KDA state (read + written). */
function bytesByFormat(pos: number): { mxfp4: number; other: number } {
  const trunk = census.trunkBytesPerLayer.reduce((a, b) => a + b, 0) + census.headBytes + census.finalBytes;
  const experts = (cfg.numLayers - cfg.firstKDense) * cfg.topK * census.expertBytes;
  const mla = cfg.layerKinds.filter((x) => x === "mla").length * pos * (cfg.kvLoraRank + cfg.qkRope) * 4;
  const kda = cfg.layerKinds.filter((x) => x === "kda").length * cfg.kdaHeads * cfg.kdaHeadDim * cfg.kdaHeadDim * 4 * 2;
  return { mxfp4: experts, other: trunk + mla + kda };
}
/** Every byte a decoded token at `pos` touches (the RAM floor's numerator). */
function bytesTouched(pos: number): number {
  const b = bytesByFormat(pos);
  return b.mxfp4 + b.other;
}
/** The compute-aware floor in seconds: MXFP4 bytes at min(read, in-cache MXFP4 rate), the rest at the read rate (GB/s). */
function computeFloorS(pos: number, readGBs: number, mxGBs: number): number {
  const b = bytesByFormat(pos);
  return b.other / (readGBs * 1e9) + b.mxfp4 / (Math.min(readGBs, mxGBs) * 1e9);
}

const prompt = Array.from({ length: promptLen }, (_, i) => (i * 7919 + 13) % cfg.vocab);
// The in-cache MXFP4 rate, measured like the probe: best of 3 × 50 ms before a round, and one 25 ms
// pass after each decoded token's probe pass. A round's rate (mxGBs) is the best of all its passes:
// a ceiling, and on a shared VM a single window can be cut by a descheduled vCPU (round 2 of a
// run here read 10.8 GB/s before a round whose decode then ran MXFP4 at 17.1).
const measureMx = mxfp4InCache(k.k3_matmul_mxfp4 as Parameters<typeof mxfp4InCache>[0], mxRows, 3584);
function mxOnce(ms: number, passes: number): Mxfp4InCache {
  const was = counting; // no kernel of the token: keep it out of the cost tables
  counting = false;
  const m = measureMx(ms, passes);
  counting = was;
  return m;
}
type Round = {
  sPerToken: number; bw: number; floorS: number; mx: Mxfp4InCache; mxBetween: number[]; mxGBs: number; computeFloorS: number;
  stepMs: number[]; probes: number[]; bf16: number[]; cost: [string, { ns: number; calls: number; flops: number }][]; load: string;
};
const rounds: Round[] = [];
for (let run = 1; run <= RUNS; run++) {
  const load = loadAvg();
  const bw = memReadGBs();
  const mx = mxOnce(50, 3);
  const s = engine.createSession();
  cost.clear();
  byShape.clear();
  const stepMs: number[] = [];
  const probes: number[] = []; // GB/s of one probe pass after each decoded token
  const mxBetween: number[] = []; // GB/s of one in-cache MXFP4 pass after each probe pass
  const bf16: number[] = []; // GB/s of each decoded token's one-token bf16 matmuls (weight bytes ÷ their time)
  if (phase === "prefill") {
    counting = true;
    const t0 = performance.now();
    engine.prefill(s, prompt);
    stepMs.push((performance.now() - t0) / TOKENS); // "per token" below divides by TOKENS = the prompt
    counting = false;
  } else {
    const it = engine.generate(s, prompt, { maxTokens: TOKENS + 1 });
    for (let r = it.next(); !r.done; r = it.next()) {
      if (r.value.index === 0) {
        counting = true; // decode steps only
        bf16Ns = bf16Bytes = 0;
        continue;
      }
      stepMs.push(r.value.ms);
      if (bf16Ns) bf16.push(bf16Bytes / bf16Ns);
      bf16Ns = bf16Bytes = 0;
      probes.push(probeOnce());
      mxBetween.push(mxOnce(25, 1).gbs);
    }
    counting = false;
  }
  s.close();
  const sPerToken = stepMs.reduce((a, b) => a + b, 0) / stepMs.length / 1000;
  const floorS = bytesTouched(promptLen + TOKENS / 2) / (bw * 1e9);
  const mxGBs = Math.max(mx.gbs, ...mxBetween);
  const cFloorS = computeFloorS(promptLen + TOKENS / 2, bw, mxGBs);
  rounds.push({ sPerToken, bw, floorS, mx, mxBetween, mxGBs, computeFloorS: cFloorS, stepMs, probes, bf16, cost: [...cost], load });
  say(`round ${run}: ${sPerToken.toFixed(3)} s/token, floor ${floorS.toFixed(3)} s (${bw.toFixed(1)} GB/s), ratio ${(sPerToken / floorS).toFixed(2)}; MXFP4 in cache ${mxGBs.toFixed(1)} GB/s, compute-aware floor ${cFloorS.toFixed(3)} s, ratio ${(sPerToken / cFloorS).toFixed(2)}${below(sPerToken / cFloorS)}; load ${load}`);
  if (probes.length) say(`  between tokens: ${interleaved(rounds.at(-1)!)}`);
}
engine.close();
(k.k3_mem_free as (p: number) => void)(probeBuf);

/** A floor the step beat was mis-measured (a disturbed probe or in-cache pass): say so beside the ratio. */
function below(ratio: number): string {
  return ratio < 1 ? " (< 1: a disturbed measurement, not a floor)" : "";
}

/** The interleaved floor of a decode round: median step time ÷ (bytes ÷ median probe), and the
 * median of each token's own ratio (its step ÷ the bytes at the probe right after it); then the
 * same median step ÷ the compute-aware floor at the median probe and median in-cache MXFP4 pass;
 * then the one-token bf16 matmuls' own rate, each token's beside the probe right after it. */
function interleaved(r: { stepMs: number[]; probes: number[]; mxBetween: number[]; bf16: number[] }): string {
  const pos = promptLen + TOKENS / 2, bytes = bytesTouched(pos);
  const floors = r.probes.map((g) => (bytes / (g * 1e9)) * 1000);
  const paired = r.stepMs.map((ms, i) => ms / floors[i]!);
  const mxMed = median(r.mxBetween), cFloorMs = computeFloorS(pos, median(r.probes), mxMed) * 1000, cRatio = median(r.stepMs) / cFloorMs;
  return `probe median ${median(r.probes).toFixed(1)} GB/s (${Math.min(...r.probes).toFixed(1)}–${Math.max(...r.probes).toFixed(1)}), median step ${median(r.stepMs).toFixed(1)} ms = ${(median(r.stepMs) / median(floors)).toFixed(2)}× the median floor, per-token ratio median ${median(paired).toFixed(2)}; MXFP4 in cache median ${mxMed.toFixed(1)} GB/s (${Math.min(...r.mxBetween).toFixed(1)}–${Math.max(...r.mxBetween).toFixed(1)}): ${cRatio.toFixed(2)}× the compute-aware floor at both medians (${cFloorMs.toFixed(1)} ms)${below(cRatio)}${bf16Line(r)}`;
}

/** "; bf16 one-token median 31.2 GB/s (28.0–33.1), per-token ratio to the probe after it median 0.93": each
 *  token's one-token bf16 matmuls (weight bytes ÷ their summed call time) beside the probe pass right after it. */
function bf16Line(r: { probes: number[]; bf16: number[] }): string {
  if (r.bf16.length !== r.probes.length || !r.bf16.length) return "";
  const paired = r.bf16.map((g, i) => g / r.probes[i]!);
  return `; bf16 one-token median ${median(r.bf16).toFixed(1)} GB/s (${Math.min(...r.bf16).toFixed(1)}–${Math.max(...r.bf16).toFixed(1)}), per-token ratio to the probe after it median ${median(paired).toFixed(2)}`;
}

// ---- report: the round with the fastest decode (least disturbed), every round's totals
const best = rounds.reduce((a, b) => (b.sPerToken < a.sPerToken ? b : a));
const per = (ns: number) => ns / 1e6 / TOKENS; // ms per token
const byPart = new Map<string, number>(), byKernel = new Map<string, { ns: number; calls: number; flops: number }>();
for (const [key, c] of best.cost) {
  const [part, kern] = key.split("\t") as [string, string];
  byPart.set(part, (byPart.get(part) ?? 0) + c.ns);
  const kk = byKernel.get(kern) ?? byKernel.set(kern, { ns: 0, calls: 0, flops: 0 }).get(kern)!;
  kk.ns += c.ns;
  kk.calls += c.calls;
  kk.flops += c.flops;
}
const stepMsTotal = best.sPerToken * 1000;
const kernelMs = per([...byPart.values()].reduce((a, b) => a + b, 0));
const cpu = cpuInfo();
console.log(`CPU: ${cpu.model}; ${cpu.vectorFlags.join(" ")}; model ${model}; ${ram}; trunk ${trunk}; ${threads} threads; ISA ${isa}; prompt ${promptLen}, ${TOKENS} decoded tokens per round`);
console.log(`rounds (s/token; floor; read GB/s; MXFP4 in cache GB/s; compute-aware floor; load): ${rounds.map((r) => `${r.sPerToken.toFixed(3)}; ${r.floorS.toFixed(3)}; ${r.bw.toFixed(1)}; ${r.mxGBs.toFixed(1)}; ${r.computeFloorS.toFixed(3)}; ${r.load}`).join(" | ")}`);
const split = bytesByFormat(promptLen + TOKENS / 2);
console.log(`bytes touched per token: ${(bytesTouched(promptLen + TOKENS / 2) / 1e9).toFixed(2)} GB (MXFP4 experts ${(split.mxfp4 / 1e9).toFixed(2)}, bf16 and other ${(split.other / 1e9).toFixed(2)}); best round ${best.sPerToken.toFixed(3)} s/token = ${(best.sPerToken / best.floorS).toFixed(2)}× its floor ${best.floorS.toFixed(3)} s`);
const mxDesc = `${best.mx.rows}×${best.mx.cols}, ${(best.mx.bytesPerCall / 1e3).toFixed(0)} KB, ${threads} threads; before the round ${best.mx.passes.map((g) => g.toFixed(1)).join(" / ")}${best.mxBetween.length ? `, between tokens ${Math.min(...best.mxBetween).toFixed(1)}–${Math.max(...best.mxBetween).toFixed(1)}` : ""}`;
console.log(`MXFP4 one-token in cache: ${best.mxGBs.toFixed(1)} GB/s (${mxDesc}); compute-aware floor: ${best.computeFloorS.toFixed(3)} s (bf16 and other bytes at the read rate ${best.bw.toFixed(1)} GB/s, MXFP4 bytes at min(read, ${best.mxGBs.toFixed(1)})); step ÷ it: ${(best.sPerToken / best.computeFloorS).toFixed(2)}${below(best.sPerToken / best.computeFloorS)}`);
console.log(`transparent huge pages after open: ${huge}`);
if (phase !== "prefill") for (const [i, r] of rounds.entries()) console.log(`round ${i + 1}, a probe pass between tokens: ${interleaved(r)}`);
console.log("");
console.log("| part | ms/token | share |\n|---|---|---|");
for (const [part, ns] of [...byPart].sort((a, b) => b[1] - a[1])) console.log(`| ${part} | ${per(ns).toFixed(2)} | ${((100 * per(ns)) / stepMsTotal).toFixed(1)}% |`);
console.log(`| JS, FFI and pool (step − kernel calls) | ${(stepMsTotal - kernelMs).toFixed(2)} | ${((100 * (stepMsTotal - kernelMs)) / stepMsTotal).toFixed(1)}% |`);
console.log("\n| kernel | calls/token | ms/token | µs/call | GFLOP/s (matmuls: 2·rows·cols·T per call) |\n|---|---|---|---|---|");
for (const [kern, c] of [...byKernel].sort((a, b) => b[1].ns - a[1].ns))
  console.log(`| ${kern} | ${(c.calls / TOKENS).toFixed(1)} | ${per(c.ns).toFixed(2)} | ${(c.ns / c.calls / 1e3).toFixed(1)} | ${c.flops ? (c.flops / c.ns).toFixed(1) : ""} |`);
// per matmul shape (of the last round): where the matmul time goes and the rate each shape reaches
console.log("\n| matmul (last round) | calls/token | ms/token | GFLOP/s |\n|---|---|---|---|");
for (const [shape, c] of [...byShape].sort((a, b) => b[1].ns - a[1].ns).slice(0, 25))
  console.log(`| ${shape} | ${(c.calls / TOKENS).toFixed(2)} | ${per(c.ns).toFixed(2)} | ${(c.flops / c.ns).toFixed(1)} |`);
if (jsonOut) writeFileAtomic(jsonOut, "the --json output", "USAGE", JSON.stringify({ cpu, model, ram, threads, isa, promptLen, tokens: TOKENS, bytesPerToken: { total: bytesTouched(promptLen + TOKENS / 2), ...split }, rounds }, null, 1));
