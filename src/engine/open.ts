// What Engine.open decides before any weight is read (context, prefill chunk, drafts per verify
// pass, parallel sessions, the prefix cache's RAM tier, the trunk, the memory plan) and the
// streamed weights it then loads. Every refusal here comes before a byte of weights is read.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { K3Error } from "../errors.ts";
import { log } from "../log.ts";
import type { Kernels } from "../kernels.ts";
import { findPack, loadPack, TRUNK_FORMATS, type PackedTrunk, type TrunkFormat } from "../memory/pack.ts";
import { chooseTrunk, contextFor, DEFAULT_PARALLEL_CAP, defaultParallel, defaultPrefixCacheBytes, planInputFromCensus, planMemory, residentChunk, sessionStateBytes, type MemoryPlan } from "../memory/plan.ts";
import { gib, resolveBudget, usableRam } from "../memory/ram.ts";
import { streamSlots } from "../memory/slots.ts";
import { StreamingWeights } from "../memory/stream.ts";
import { loadChecksums } from "../memory/verify.ts";
import { findMirrorCopies, type MirrorCopies } from "../memory/mirrors.ts";
import { HEDGE_BUFFERS } from "../memory/reader.ts";
import { autoDrafts, DEFAULT_MAX_DRAFTS } from "../model/buffers.ts";
import { draftInFormat, placeDraft, type DraftSetup } from "../memory/draft-plan.ts";
import { draftFormatsAvailable } from "../memory/draft-pack.ts";
import { checkDraft, wantsDraft } from "./draft.ts";
import { parseSpeculate, type SpeculateSetting } from "../speculate/speculator.ts";
import type { EngineOptions } from "../engine.ts";

/** An engine's sizes, decided at open. */
export interface EngineSizing {
  context: number;
  /** Tokens per prefill pass: EngineOptions.chunk, the planner's choice, or residentChunk. */
  chunk: number;
  speculate: SpeculateSetting;
  /** Drafts one verify pass holds (its buffers are sized for them); 0: no verify buffers. */
  drafts: number;
  parallel: number;
  prefixRam: number;
  trunk: TrunkFormat;
  pack: PackedTrunk | undefined;
  /** Why this trunk answers (the default's choice: docs/TRUNK.md "The exact trunk"). */
  trunkWhy: string;
  /** The memory plan the streamed weights follow; undefined with `resident`. */
  plan: MemoryPlan | undefined;
  /** Checked copies of shards in the `mirrors` folders (none without). */
  mirrors: MirrorCopies | undefined;
  /** A draft model (--draft), checked against the target; the plan holds it. */
  draft: DraftSetup | undefined;
}

/** The engine's sizes for `opts` on this checkpoint, with `threads` compute threads. */
export function sizeEngine(k: Kernels, checkpoint: Checkpoint, opts: EngineOptions, threads: number): EngineSizing {
  const cfg = checkpoint.config;
  const context = contextFor(cfg, opts.context);
  // Without --chunk: the planner's choice under a budget (planSizing), the compute rule when resident.
  const chunk = opts.chunk ?? residentChunk(cfg, context);
  const speculate = parseSpeculate(opts.speculate ?? "auto", "speculate");
  // Automatic drafts follow the chunk (autoDrafts); a given number must fit one verify pass.
  const drafts = speculate === "off" ? 0 : speculate === "auto" ? autoDrafts(chunk) : speculate;
  if (opts.chunk !== undefined || opts.resident) checkDrafts(speculate, chunk);
  // Sessions and the prefix cache's RAM tier: sized before the plan, which holds them.
  const parallel = opts.parallel === "auto" ? DEFAULT_PARALLEL_CAP : (opts.parallel ?? 1);
  const ramOpt = opts.prefixCache?.ramBytes ?? (opts.prefixCache ? "auto" : 0);
  const prefixRam = typeof ramOpt === "number" ? ramOpt : parallel * sessionStateBytes(cfg, context);
  const asked = opts.trunk ?? "auto";
  if (asked !== "auto" && !TRUNK_FORMATS.includes(asked)) throw new K3Error("USAGE", `--trunk must be one of ${TRUNK_FORMATS.join(", ")} (or auto), got ${JSON.stringify(asked)}`);
  if (opts.resident && asked !== "bf16" && asked !== "auto") throw new K3Error("USAGE", "--resident reads the release's bf16 trunk from the shards; a packed trunk (--trunk) is read through the planner (give a budget that fits it all instead)");
  const trunk = asked === "auto" ? "bf16" : asked;
  const pack = trunk === "bf16" ? undefined : loadPack(checkpoint, trunk);
  if (opts.resident && opts.mirrors?.length) throw new K3Error("USAGE", "--mirror is for streamed reads; --resident reads every weight once from the model folder");
  // Every copy is checked (size, header, mtime) before the plan: a differing one is refused now.
  const mirrors = opts.mirrors?.length ? findMirrorCopies(checkpoint, opts.mirrors) : undefined;
  const draft = wantsDraft(opts.draft) ? draftFor(k, checkpoint, opts.draft, context, speculate) : undefined;
  const trunkWhy = asked === "auto" ? (opts.resident ? "auto: --resident reads the shards" : "auto: no exact pack") : "asked for";
  const sizing: EngineSizing = { context, chunk, speculate, drafts, parallel, prefixRam, trunk, pack, trunkWhy, plan: undefined, mirrors, draft };
  const forced = opts.draftFormat === undefined || opts.draftFormat === "auto" ? undefined : opts.draftFormat;
  if (opts.resident) return { ...sizing, draft: draft && draftInFormat(draft, forced ?? "bf16") };
  // The plan for one trunk: with a draft, in the draft format whose plan reads the fewest bytes.
  const formats = draft && (forced ? [forced] : draftFormatsAvailable(draft.checkpoint));
  const place = (x: EngineSizing): EngineSizing =>
    !draft || !formats ? planSizing(checkpoint, opts, threads, x, ramOpt === "auto") : placeDraft(formats, (f) => planSizing(checkpoint, opts, threads, { ...x, draft: draftInFormat(draft, f) }, ramOpt === "auto"), (y) => y.plan!);
  return asked === "auto" ? autoTrunk(checkpoint, sizing, place) : place(sizing);
}

/**
 * The default trunk (chooseTrunk): the exact pack (`k3 pack --trunk exact`: the same model, its
 * matrices in 12 bits plus escapes) when one exists and reads fewer bytes at this budget, else the
 * bf16 trunk from the shards. A pack that exists but cannot be used (stale, damaged) is named in a
 * warning and the shards answer: nobody asked for it, and the bits are the same either way.
 */
function autoTrunk(checkpoint: Checkpoint, s: EngineSizing, place: (x: EngineSizing) => EngineSizing): EngineSizing {
  let pack: PackedTrunk | undefined;
  try {
    pack = findPack(checkpoint, "exact");
  } catch (err) {
    if (!(err instanceof K3Error)) throw err;
    log.warn(`not using the exact trunk pack: ${err.message} — the bf16 trunk from the shards answers (the same bits)`);
  }
  const plan = (x: EngineSizing): EngineSizing | K3Error => {
    try {
      return place(x);
    } catch (err) {
      if (err instanceof K3Error && err.code === "BUDGET") return err;
      throw err;
    }
  };
  const bf16 = plan(s);
  const exact = pack && plan({ ...s, trunk: "exact", pack });
  const planOf = (x: EngineSizing | K3Error | undefined) => (x === undefined || x instanceof K3Error ? x : x.plan!);
  const { trunk, why } = chooseTrunk(planOf(bf16)!, planOf(exact));
  return { ...((trunk === "exact" ? exact : bf16) as EngineSizing), trunkWhy: `auto: ${why}` };
}

/** The plan under the budget, and the sizes it settles: parallel "auto", the prefix cache's
 *  "auto" RAM tier, the chunk (unless given) and the automatic drafts that follow it. */
function planSizing(checkpoint: Checkpoint, opts: EngineOptions, threads: number, s: EngineSizing, autoPrefixRam: boolean): EngineSizing {
  const budget = resolveBudget(opts.preset, opts.ram);
  if (!budget.source.startsWith("auto") && !opts.allowOverRam) refuseOverRam(budget);
  const pieces = { ...opts.trunkPieces, tensors: s.pack?.tensors };
  const input = planInputFromCensus(checkpoint.config, checkpoint.layout.census, budget.bytes, s.context, threads, opts.chunk, streamSlots(checkpoint, pieces), s.drafts, { draft: s.draft?.plan });
  const parallel = opts.parallel === "auto" ? defaultParallel(input) : s.parallel;
  input.parallel = parallel;
  let drafts = s.drafts;
  // auto drafts follow the chunk, which the planner may still choose
  input.drafts = s.speculate === "auto" && drafts > 0 && opts.chunk === undefined ? undefined : drafts;
  const prefixRam = autoPrefixRam ? defaultPrefixCacheBytes(input) : s.prefixRam;
  input.prefixCacheBytes = prefixRam;
  input.hedgeBuffers = s.mirrors ? HEDGE_BUFFERS : 0;
  const plan = planMemory(input); // without opts.chunk the planner chooses the chunk (plan.chunkChoice says why)
  const chunk = plan.prefillChunk;
  checkDrafts(s.speculate, chunk);
  if (input.drafts === undefined) drafts = autoDrafts(chunk);
  return { ...s, chunk, drafts, parallel, prefixRam, plan };
}

/**
 * The draft of `--draft DIR`, checked against the target (before any weight is read but its
 * embedding's sampled rows). It needs speculation on; every session gets its own draft state
 * (batched generations speculate too: each session drafts its own verify segment).
 */
function draftFor(k: Kernels, checkpoint: Checkpoint, dir: string, context: number, speculate: SpeculateSetting): DraftSetup {
  if (speculate === "off") throw new K3Error("USAGE", `--draft ${dir} drafts for speculative decoding, which --speculate off turns off`, ["drop --draft, or use --speculate auto or N"]);
  // The taps ring is sized for the most drafts a pass may verify: N, or --speculate auto's maximum.
  return checkDraft(k, checkpoint, dir, context, typeof speculate === "number" ? speculate : DEFAULT_MAX_DRAFTS);
}

/** A given number of drafts must fit one verify pass: 1 + drafts positions in a chunk. */
function checkDrafts(speculate: SpeculateSetting, chunk: number): void {
  if (typeof speculate === "number" && 1 + speculate > chunk)
    throw new K3Error("USAGE", `--speculate ${speculate} needs a verify pass of ${1 + speculate} positions, more than the ${chunk}-token chunk`, [`use --chunk ${1 + speculate} or more, or fewer drafts per pass`]);
}

/** A budget past usable RAM would push the machine into swap: refused unless allowOverRam. */
function refuseOverRam(budget: { bytes: number; source: string }): void {
  const usable = usableRam();
  if (budget.bytes > usable.bytes)
    throw new K3Error("BUDGET", `the budget ${budget.source} (${gib(budget.bytes)}) is more than this machine's usable RAM ${gib(usable.bytes)} (${usable.binding.source}): it would swap`, [
      "choose a smaller --preset or --ram (k3 plan shows what each one does, for any machine)",
      "or pass --allow-over-ram (EngineOptions.allowOverRam) if you know the memory will be there",
    ]);
}

/** The streamed weights `plan` lays out, the pinned pieces read in steps (yields after each
 *  lands); closed again if an error or the caller stops the opening first. */
export function* openStreaming(k: Kernels, checkpoint: Checkpoint, plan: MemoryPlan, pack: PackedTrunk | undefined, mirrors: MirrorCopies | undefined, opts: EngineOptions): Generator<void, StreamingWeights> {
  const streaming = new StreamingWeights(k, checkpoint, {
    pinnedPieces: plan.pinnedPieces,
    ringSlots: plan.ringSlots,
    coreSlots: plan.coreSlots,
    pieces: opts.trunkPieces,
    trunk: pack && { tensors: pack.tensors, files: [{ file: pack.path, bytes: pack.fileBytes }], blockCrc: pack.blockCrc },
    expertSlots: plan.expertSlots,
    prefetch: (opts.prefetch ?? true) && plan.readerMayRunAhead,
    direct: opts.direct ?? true,
    ioThreads: opts.ioThreads,
    mirrors,
    hedgeBuffers: plan.hedgeBuffers,
    deviceOf: opts.deviceOf,
    hedgeAfter: opts.hedgeAfter,
    policy: opts.policy ?? "lfru",
    checksums: opts.verify ? loadChecksums(checkpoint) : undefined,
    onProgress: opts.onProgress && ((d, t) => opts.onProgress!("loading pinned layers", d, t, "bytes")),
  });
  let loaded = false;
  try {
    yield* streaming.loadPinned();
    loaded = true;
  } finally {
    if (!loaded) streaming.close(); // an error, or the caller stopped the opening
  }
  return streaming;
}
