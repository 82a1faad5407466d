// One run of the batching benchmark, in its own process (so its peak RSS is its own):
//
//   bun bench/batch-arm.ts SPEC.json OUT.json      (bench/batch.ts writes SPEC and reads OUT)
//
// kind "streams": S concurrent greedy streams on one engine opened with --parallel P (the same
//   plan for every S): the prompts are run S at a time (S = 1: one after another), each through
//   the engine's batch scheduler, as `k3 serve` runs them. The decode figures come from the
//   scheduler's step records: steps that carried exactly S sessions and no prefill rows. Every
//   stream's ids are written out, so runs with different S can be compared token for token.
// kind "spec-streams" (issue 27): like "streams", on an engine with speculation (and a draft), each
//   request with its own `speculate` (off, or auto), greedy or seeded sampling, or a drafter whose
//   drafts are always wrong; every stream generates exactly maxTokens (no stop token). The decode
//   figures span the wall time from each group's last prefill step to its last token (drafting
//   between steps included), with the tokens generated after the first of each stream.
// kind "prefix-setup": the first turn of a conversation (prompt P1, reply R1), another
//   conversation that takes the (only) session; the prefix cache is then written to the disk tier
//   the other kinds copy (what a second turn finds: turn 1's snapshots and its history, not the
//   snapshots turn 2 itself leaves), then the second turn (P1 + R1 + U2) restored from RAM.
// kind "prefix-off" / "prefix-disk": the second turn alone, on a fresh engine without a prefix
//   cache / with a copy of the setup's disk tier: time to its first token, and its reply.
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { streamCompletion } from "../src/conversation.ts";
import { createSampler, Engine, type Drafter, type EngineOptions, type GenerationStats, type Session, type StepRecord } from "../src/engine.ts";

export interface BatchArmSpec {
  kind: "streams" | "spec-streams" | "prefix-setup" | "prefix-off" | "prefix-disk";
  name: string;
  model: string;
  ram: string;
  threads: number;
  /** streams: engine --parallel, and streams at once. */
  parallel?: number;
  streams?: number;
  prompts?: number[][];
  /** Generated tokens per stream / per turn. */
  maxTokens: number;
  /** spec-streams: the engine's context and draft, each request's speculate, sampling, drafter. */
  context?: number;
  draft?: string;
  speculate?: "off" | "auto";
  temperature?: number;
  /** Stream i's seed is seed + i (with temperature). */
  seed?: number;
  drafter?: "wrong";
  /** prefix kinds: the conversation, and the disk tier folder. */
  turn1?: number[];
  other?: number[];
  user2?: number[];
  /** prefix-disk / prefix-off: the setup's reply to turn 1 (ids, pending included). */
  reply1?: number[];
  cacheDir?: string;
}

export interface StreamsResult {
  /** Steps with exactly S sessions and no prefill rows. */
  decodeSteps: number;
  decodeTokens: number;
  decodeMs: number;
  decodeBytes: number;
  /** Generated tokens per second over those steps, all streams together. */
  tokensPerS: number;
  /** Weight bytes read per generated token over those steps. */
  bytesPerToken: number;
  /** Wall time of the whole arm (prefills included) and every token it generated. */
  wallMs: number;
  generated: number;
  steps: StepRecord[];
}

export interface PrefixResult {
  /** Wall ms from the request to its first generated token (turn 2). */
  ttftMs: number;
  cachedTokens: number;
  promptTokens: number;
  reply: number[];
  reply1?: number[];
  prefixStats?: unknown;
}

export interface BatchArmResult {
  spec: BatchArmSpec;
  ok: boolean;
  error?: string;
  ids?: number[][];
  streams?: StreamsResult;
  specStreams?: SpecStreamsResult;
  prefix?: PrefixResult;
  plan?: { parallel: number; prefillChunk: number; pinnedLayers: number[]; expertSlots: number; prefixCacheBytes: number; totalBytes: number };
  vmHwmBytes?: number;
  load1?: number;
}

function vmHwm(): number {
  const m = /^VmHWM:\s+(\d+)\s*kB/m.exec(readFileSync("/proc/self/status", "utf8"));
  return m ? Number(m[1]) * 1024 : NaN;
}

/** One completion through the batch scheduler, as the server runs it: ids, time to first id. */
async function complete(engine: Engine, session: ReturnType<Engine["createSession"]>, prompt: number[], maxTokens: number) {
  const t0 = performance.now();
  let first = 0;
  const g = streamCompletion(engine, session, prompt, { maxTokens, batched: true });
  for (;;) {
    const r = g.next();
    if (r.done) return { ids: r.value.ids, cachedTokens: r.value.usage.cachedTokens, ttftMs: first - t0 };
    if (r.value.waiting) await engine.turn();
    else if (r.value.ids.length > 0 && first === 0) first = performance.now();
  }
}

async function streams(spec: BatchArmSpec, engine: Engine, out: BatchArmResult): Promise<void> {
  const S = spec.streams!;
  const prompts = spec.prompts!;
  const sessions = Array.from({ length: S }, () => engine.createSession());
  out.ids = [];
  const t0 = performance.now();
  const seq0 = engine.batchStats().steps;
  for (let g = 0; g < prompts.length; g += S) {
    const group = prompts.slice(g, g + S);
    const got = await Promise.all(group.map((p, i) => (sessions[i]!.reset(), complete(engine, sessions[i]!, p, spec.maxTokens))));
    out.ids.push(...got.map((x) => x.ids));
  }
  const wallMs = performance.now() - t0;
  const b = engine.batchStats();
  const steps = b.recent.slice(-(b.steps - seq0));
  const decode = steps.filter((s) => s.sessions === S && s.prefillRows === 0);
  const decodeMs = decode.reduce((a, s) => a + s.ms, 0);
  const decodeTokens = decode.reduce((a, s) => a + s.decodeRows, 0);
  const decodeBytes = decode.reduce((a, s) => a + s.bytesRead, 0);
  out.streams = {
    decodeSteps: decode.length,
    decodeTokens,
    decodeMs,
    decodeBytes,
    tokensPerS: decodeMs > 0 ? (decodeTokens * 1000) / decodeMs : 0,
    bytesPerToken: decodeTokens > 0 ? decodeBytes / decodeTokens : 0,
    wallMs,
    generated: out.ids.reduce((a, x) => a + x.length, 0),
    steps,
  };
}

export interface SpecStreamsResult {
  /** Tokens generated after each stream's first, wall ms from each group's last prefill step to
   *  its end, and the weight bytes the steps of that span read (all summed over the groups). */
  decodeTokens: number;
  decodeMs: number;
  decodeBytes: number;
  tokensPerS: number;
  bytesPerToken: number;
  /** The steps of that span, and what they verified. */
  steps: number;
  /** Of decodeMs, the time inside those steps' passes (the rest: between steps, drafting included). */
  passMs: number;
  verifySegments: number;
  draftTokens: number;
  acceptedDrafts: number;
  sharedVerifySteps: number;
  /** Per stream: drafted, accepted, verify passes (the answers' own counters). */
  perStream: { drafted: number; accepted: number; verifyPasses: number }[];
  wallMs: number;
  generated: number;
}

/** Proposes tokens that are (practically) never the target's: the last token + 1, + 2, … */
const WRONG: Drafter = { name: "wrong", draft: ({ tokens, max }) => ({ tokens: Array.from({ length: max }, (_, j) => (tokens[tokens.length - 1]! + 1 + j) % 1000) }) };

/** One generation through the batch scheduler (every token, no stop id): its ids and stats. */
async function generateBatched(engine: Engine, session: Session, prompt: number[], spec: BatchArmSpec, i: number): Promise<{ ids: number[]; stats: GenerationStats }> {
  const sampler = spec.temperature ? createSampler({ temperature: spec.temperature, seed: (spec.seed ?? 0) + i }) : undefined;
  const g = engine.generate(session, prompt, { maxTokens: spec.maxTokens, batched: true, speculate: spec.speculate, sampler, drafter: spec.drafter === "wrong" ? WRONG : undefined });
  const ids: number[] = [];
  for (;;) {
    const r = g.next();
    if (r.done) return { ids, stats: r.value };
    if (r.value.wait) await engine.turn();
    else ids.push(r.value.id);
  }
}

async function specStreams(spec: BatchArmSpec, engine: Engine, out: BatchArmResult): Promise<void> {
  const S = spec.streams!;
  const prompts = spec.prompts!;
  const sessions = Array.from({ length: S }, () => engine.createSession());
  const r: SpecStreamsResult = { decodeTokens: 0, decodeMs: 0, decodeBytes: 0, tokensPerS: 0, bytesPerToken: 0, steps: 0, passMs: 0, verifySegments: 0, draftTokens: 0, acceptedDrafts: 0, sharedVerifySteps: 0, perStream: [], wallMs: 0, generated: 0 };
  out.ids = [];
  const t0 = performance.now();
  for (let g = 0; g < prompts.length; g += S) {
    const seq0 = engine.batchStats().steps;
    const group = prompts.slice(g, g + S);
    const got = await Promise.all(group.map((p, i) => (sessions[i]!.reset(), generateBatched(engine, sessions[i]!, p, spec, g + i))));
    const end = Date.now();
    const b = engine.batchStats();
    const steps = b.recent.slice(-(b.steps - seq0));
    const lastPrefill = steps.findLastIndex((s) => s.prefillRows > 0);
    const decode = steps.slice(lastPrefill + 1);
    r.decodeMs += end - steps[lastPrefill]!.at;
    r.decodeTokens += got.reduce((a, x) => a + x.ids.length - 1, 0);
    r.decodeBytes += decode.reduce((a, s) => a + s.bytesRead, 0);
    r.steps += decode.length;
    r.passMs += decode.reduce((a, s) => a + s.ms, 0);
    r.verifySegments += decode.reduce((a, s) => a + s.verify.length, 0);
    r.draftTokens += decode.reduce((a, s) => a + s.draftRows, 0);
    r.acceptedDrafts += decode.reduce((a, s) => a + s.verify.reduce((x, v) => x + (v.accepted ?? 0), 0), 0);
    r.sharedVerifySteps += decode.filter((s) => s.verify.length >= 2).length;
    for (const x of got) r.perStream.push({ drafted: x.stats.speculation.draftedTokens, accepted: x.stats.speculation.acceptedTokens, verifyPasses: x.stats.speculation.verifyPasses });
    out.ids.push(...got.map((x) => x.ids));
  }
  r.wallMs = performance.now() - t0;
  r.generated = out.ids.reduce((a, x) => a + x.length, 0);
  r.tokensPerS = r.decodeMs > 0 ? (r.decodeTokens * 1000) / r.decodeMs : 0;
  r.bytesPerToken = r.decodeTokens > 0 ? r.decodeBytes / r.decodeTokens : 0;
  out.specStreams = r;
}

async function prefix(spec: BatchArmSpec, engine: Engine, out: BatchArmResult, liveDir?: string): Promise<void> {
  const s = engine.createSession();
  let reply1 = spec.reply1;
  if (spec.kind === "prefix-setup") {
    const t1 = await complete(engine, s, spec.turn1!, spec.maxTokens);
    // The reply as the next turn resends it: the generated ids (the last one was never fed, so
    // the session's history, which the cache keeps, is P1 and all but the last of them).
    reply1 = t1.ids;
    await complete(engine, s, spec.other!, 4); // another conversation takes the session
    engine.persistPrefixCache();
    cpSync(liveDir!, spec.cacheDir!, { recursive: true });
  }
  const turn2 = [...spec.turn1!, ...reply1!, ...spec.user2!];
  const r = await complete(engine, s, turn2, spec.maxTokens);
  out.prefix = { ttftMs: r.ttftMs, cachedTokens: r.cachedTokens, promptTokens: turn2.length, reply: r.ids, reply1, prefixStats: engine.prefixStats() };
}

export async function runBatchArm(spec: BatchArmSpec): Promise<BatchArmResult> {
  const out: BatchArmResult = { spec, ok: false };
  let engine: Engine | undefined;
  let dir: string | undefined;
  try {
    const opts: EngineOptions = { ram: spec.ram, threads: spec.threads, parallel: spec.parallel ?? 1 };
    if (spec.kind === "spec-streams") Object.assign(opts, { context: spec.context, draft: spec.draft, speculate: "auto" });
    // A RAM tier of its own (the default one is empty at streaming budgets: docs/SERVER.md), so
    // the setup's turn 2 really comes from RAM.
    // Its disk tier is a folder of its own: the runs get a copy made before its turn 2.
    if (spec.kind === "prefix-setup") {
      dir = mkdtempSync(join(tmpdir(), "k3-prefix-bench-"));
      opts.prefixCache = { ramBytes: 256 * 2 ** 20, dir, diskBytes: 2 ** 34 };
    }
    if (spec.kind === "prefix-disk") {
      // A copy per run: a run stores its own snapshots, which must not help the next run.
      dir = mkdtempSync(join(tmpdir(), "k3-prefix-bench-"));
      cpSync(spec.cacheDir!, dir, { recursive: true });
      opts.prefixCache = { ramBytes: 0, dir, diskBytes: 2 ** 34 };
    }
    engine = Engine.open(spec.model, opts);
    const p = engine.plan!;
    out.plan = { parallel: p.parallel, prefillChunk: p.prefillChunk, pinnedLayers: p.pinnedLayers, expertSlots: p.expertSlots, prefixCacheBytes: p.prefixCacheBytes, totalBytes: p.totalBytes };
    if (spec.kind === "streams") await streams(spec, engine, out);
    else if (spec.kind === "spec-streams") await specStreams(spec, engine, out);
    else await prefix(spec, engine, out, dir);
    out.ok = true;
  } catch (err) {
    out.error = (err as Error).stack ?? String(err);
  } finally {
    engine?.close(); // with a prefix cache: its RAM tier goes to the disk tier (a temporary one)
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  out.vmHwmBytes = vmHwm();
  out.load1 = Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
  return out;
}

/** One arm in its own `bun bench/batch-arm.ts` process (its files in `dir`, numbered `n`). */
export async function runBatchArmChild(spec: BatchArmSpec, dir: string, n: number): Promise<BatchArmResult> {
  const specPath = join(dir, `spec-${n}.json`);
  const outPath = join(dir, `out-${n}.json`);
  writeFileSync(specPath, JSON.stringify(spec));
  const p = Bun.spawn([process.execPath, join(import.meta.dir, "batch-arm.ts"), specPath, outPath], { stdout: "inherit", stderr: "inherit", cwd: join(import.meta.dir, "..") });
  await p.exited;
  if (!existsSync(outPath)) return { spec, ok: false, error: `the arm process exited ${p.exitCode} without a result` };
  return JSON.parse(readFileSync(outPath, "utf8")) as BatchArmResult;
}

if (import.meta.main) {
  const [specPath, outPath] = process.argv.slice(2);
  if (!specPath || !outPath) {
    process.stderr.write("usage: bun bench/batch-arm.ts SPEC.json OUT.json\n");
    process.exit(2);
  }
  const result = await runBatchArm(JSON.parse(readFileSync(specPath, "utf8")) as BatchArmSpec);
  writeFileSync(outPath, JSON.stringify(result));
  process.exit(result.ok ? 0 : 1);
}
