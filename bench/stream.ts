// One decode arm of the streaming benchmark, in its own process (so peak RSS from the OS is this
// arm's alone): open the engine under the arm's budget/flags, prefill a short prompt, decode
// greedily, and write every counter to a JSON file.
//
//   bun bench/stream.ts SPEC.json OUT.json      (bench/run.ts writes SPEC and reads OUT)
//
// Per-token counters cover DECODE steps only: the engine's counters are snapshotted when the
// first token is yielded (prefill done, no decode step run yet) and again at the end; the
// difference is divided by the number of decode forwards (maxTokens − 1). The last logits are
// captured by the sampler (the same greedy rule as the engine's default: k3_argmax, lowest id on
// ties) and hashed so arms can be compared bit for bit.
import { readFileSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { createSampler, Engine, type EngineOptions, type TrunkFormat, type WeightStats } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { makeDrafter, type DrafterChoice } from "./drafters.ts";

export interface ArmSpec {
  name: string; // e.g. "stream 6G"
  model: string; // model directory
  ram?: string; // budget ("6G"); absent with resident
  resident?: boolean;
  prefetch?: boolean;
  lookahead?: boolean;
  threads: number;
  prompt: number[];
  maxTokens: number; // generated tokens: 1 from prefill + (maxTokens − 1) decode steps
  /** Speculation arms (bench/speculate.ts): the engine's setting and who drafts. Without it the
   *  engine runs with speculation off, as before. */
  speculate?: "auto" | "off" | number;
  drafter?: DrafterChoice;
  /** Compact-trunk arms (bench/trunk.ts): the trunk the engine reads (default the exact one). */
  trunk?: TrunkFormat;
  /** One matrix piece per unit: the trunk layout before issue 16 (bench/trunk.ts's "before"). */
  wholeUnits?: boolean;
  /** Draft arms (bench/draft.ts): a draft model (--draft), its format, and seeded sampling. */
  draft?: string;
  draftFormat?: "auto" | "bf16" | "int8" | "int4";
  temperature?: number;
  seed?: number;
  acceptRule?: "exact" | "rejection";
  context?: number;
}

export interface PerToken {
  trunkBytes: number;
  expertBytes: number;
  bytes: number;
  reads: number;
  expertRequests: number;
  expertHits: number;
  lookaheadIssued: number;
  lookaheadUsed: number;
  ioWaitMs: number;
}

export interface ArmResult {
  spec: ArmSpec;
  ok: boolean;
  error?: string;
  plan?: {
    budgetBytes: number;
    totalBytes: number;
    pinnedLayers: number[];
    streamedLayers: number[];
    head: string;
    ringSlots: number;
    readerMayRunAhead: boolean;
    expertSlots: number;
    expertWorkingSet: number;
    streamedBytesPerToken: number;
    pieces?: number;
    pinnedPieces?: number;
    ringSlotBytes?: number;
  };
  openMs?: number;
  prefillMs?: number;
  decodeSteps?: number;
  decodeMs?: number;
  sPerToken?: number; // decode only
  stepMs?: number[]; // every decode step
  perToken?: PerToken; // decode only
  prefillIo?: PerToken; // the whole prefill (not per token)
  openIo?: { trunkBytes: number; expertBytes: number; reads: number }; // pinned units read at open
  directIo?: boolean;
  ids?: number[];
  lastLogitsSha256?: string;
  /** CPU seconds of this process during decode (all threads; sys includes the kernel's I/O work). */
  decodeCpu?: { userS: number; sysS: number };
  vmHwmBytes?: number; // /proc/self/status VmHWM at the end
  maxRssBytes?: number; // getrusage maxrss at the end
  /** Speculation counters of the generation (speculation arms). */
  speculation?: { draftedTokens: number; acceptedTokens: number; verifyPasses: number; decodePasses: number; drafters?: Record<string, { draftedTokens: number; acceptedTokens: number; verifyPasses: number }>; draft?: string };
}

function vmHwm(): number {
  const m = /^VmHWM:\s+(\d+)\s*kB/m.exec(readFileSync("/proc/self/status", "utf8"));
  return m ? Number(m[1]) * 1024 : NaN;
}

function diff(a: WeightStats, b: WeightStats, steps: number): PerToken {
  const d = (x: number, y: number) => (x - y) / steps;
  return {
    trunkBytes: d(a.trunkBytesRead, b.trunkBytesRead),
    expertBytes: d(a.expertBytesRead, b.expertBytesRead),
    bytes: d(a.trunkBytesRead + a.expertBytesRead, b.trunkBytesRead + b.expertBytesRead),
    reads: d(a.reads, b.reads),
    expertRequests: d(a.expertRequests, b.expertRequests),
    expertHits: d(a.expertHits, b.expertHits),
    lookaheadIssued: d(a.lookaheadIssued, b.lookaheadIssued),
    lookaheadUsed: d(a.lookaheadUsed, b.lookaheadUsed),
    ioWaitMs: d(a.ioWaitMs, b.ioWaitMs),
  };
}

export function runArm(spec: ArmSpec): ArmResult {
  const out: ArmResult = { spec, ok: false };
  let engine: Engine | undefined;
  try {
    const opts: EngineOptions = { threads: spec.threads, prefetch: spec.prefetch, lookahead: spec.lookahead, speculate: spec.speculate ?? "off", trunk: spec.trunk, draft: spec.draft, draftFormat: spec.draftFormat, context: spec.context };
    if (spec.wholeUnits) opts.trunkPieces = { pieceBytes: Infinity };
    if (spec.resident) opts.resident = true;
    else opts.ram = spec.ram;
    const t0 = performance.now();
    engine = Engine.open(spec.model, opts);
    out.openMs = performance.now() - t0;
    const p = engine.plan;
    if (p)
      out.plan = {
        budgetBytes: p.budgetBytes,
        totalBytes: p.totalBytes,
        pinnedLayers: p.pinnedLayers,
        streamedLayers: p.streamedLayers,
        head: p.head,
        ringSlots: p.ringSlots,
        readerMayRunAhead: p.readerMayRunAhead,
        expertSlots: p.expertSlots,
        expertWorkingSet: p.expertWorkingSet,
        streamedBytesPerToken: p.streamedBytesPerToken,
        pieces: p.pieces.length,
        pinnedPieces: p.pinnedPieces.length,
        ringSlotBytes: p.ringSlotBytes,
      };
    const atOpen = engine.stats();
    out.openIo = { trunkBytes: atOpen.trunkBytesRead, expertBytes: atOpen.expertBytesRead, reads: atOpen.reads };
    out.directIo = atOpen.directIo;

    const k = loadKernels();
    let last: Float32Array | undefined;
    const sampler = {
      sample(l: Float32Array) {
        last = Float32Array.from(l);
        return k.k3_argmax(l as any, l.length);
      },
    };
    const session = engine.createSession();
    const ids: number[] = [];
    const stepMs: number[] = [];
    let afterPrefill: WeightStats | undefined;
    let cpu0: NodeJS.ResourceUsage | undefined;
    // Speculation arms decode with the engine's own greedy rule; their ids are compared, not last
    // logits. The others capture the last logits, so they decode plainly (a verify pass would hand
    // the sampler its rows too).
    // Sampled arms (bench/draft.ts) draw with the seeded sampler, speculation or not: their ids are compared.
    const seeded = spec.temperature ? createSampler({ temperature: spec.temperature, seed: spec.seed ?? 0 }) : undefined;
    const it = spec.speculate
      ? engine.generate(session, spec.prompt, { maxTokens: spec.maxTokens, drafter: makeDrafter(spec.drafter, engine.config.vocab), sampler: seeded, acceptRule: spec.acceptRule })
      : engine.generate(session, spec.prompt, { maxTokens: spec.maxTokens, sampler: seeded ?? sampler, speculate: "off" });
    let r = it.next();
    for (; !r.done; r = it.next()) {
      if (r.value.index === 0) (afterPrefill = engine.stats()), (cpu0 = process.resourceUsage());
      else stepMs.push(r.value.ms);
      ids.push(r.value.id);
    }
    const end = engine.stats();
    const cpu1 = process.resourceUsage();
    if (cpu0) out.decodeCpu = { userS: (cpu1.userCPUTime - cpu0.userCPUTime) / 1e6, sysS: (cpu1.systemCPUTime - cpu0.systemCPUTime) / 1e6 };
    const stats = r.value;
    const steps = ids.length - 1;
    out.speculation = { ...stats.speculation, decodePasses: stats.decodeSteps, drafters: stats.drafters, draft: stats.draft?.format };
    out.ids = ids;
    out.prefillMs = stats.prefillMs;
    out.decodeSteps = steps;
    out.decodeMs = stats.decodeMs;
    out.sPerToken = steps > 0 ? stats.decodeMs / steps / 1000 : NaN;
    out.stepMs = stepMs;
    if (afterPrefill) {
      out.prefillIo = diff(afterPrefill, atOpen, 1);
      if (steps > 0) out.perToken = diff(end, afterPrefill, steps);
    }
    out.lastLogitsSha256 = last ? createHash("sha256").update(new Uint8Array(last.buffer)).digest("hex") : undefined;
    session.close();
    out.ok = true;
  } catch (err) {
    const e = err as Error & { problems?: string[] };
    out.error = `${e.name}: ${e.message}${e.problems?.length ? ` (${e.problems.join("; ")})` : ""}`;
  } finally {
    try {
      engine?.close();
    } catch {
      /* the arm's result already says what failed */
    }
  }
  // Peak RSS after everything this arm did (the OS's high-water mark, not the plan's figure).
  out.vmHwmBytes = vmHwm();
  out.maxRssBytes = process.resourceUsage().maxRSS * 1024;
  return out;
}

if (import.meta.main) {
  const [specPath, outPath] = process.argv.slice(2);
  if (!specPath || !outPath) {
    process.stderr.write("usage: bun bench/stream.ts SPEC.json OUT.json\n");
    process.exit(2);
  }
  const result = runArm(JSON.parse(readFileSync(specPath, "utf8")) as ArmSpec);
  writeFileSync(outPath, JSON.stringify(result, null, 2) + "\n");
  process.exit(result.ok ? 0 : 1);
}
