// k3 plan [DIR | -m DIR] | --config F --index F  [--preset X] [--ram SIZE] [--context N] [--threads N]
//                                       [--chunk N | --prompt N] [--json]
// Prints the memory plan (docs/PLAN.md) from the config and tensor sizes alone: no weights read.
// From a model folder the plan is the one Engine.open makes (the same context rule, default
// threads and exact read-plan buffer sizes); from metadata the release's layout is assumed.
import { K3Error } from "../../errors.ts";
import { formatRanges } from "../../format.ts";
import { catalogueFromMetadata, chooseTrunk, decodeBytesPerToken, HEDGE_BUFFERS, draftCost, type DraftCost, DRAFT_FORMATS, draftFormatsAvailable, draftInFormat, LM_MODEL_PREFIX, placeDraft, prepareDraft, type DraftFormat, type DraftSetup, contextFor, DEFAULT_CONTEXT, defaultPrefixCacheBytes, gib, openCheckpointCached, parseSize, planInputFromCensus, planMemory, PRESETS, REFERENCE_PROMPT, resolveBudget, metadataTrunkSlots, trunkSlots, TRUNK_FORMATS, type TrunkFormat, type MemoryPlan, type PlanInput } from "../../inspect.ts";
import { DEFAULT_MAX_DRAFTS, defaultThreads, engineLimits, parseSpeculate } from "../../engine.ts";
import { snakeKeys } from "../../report.ts";
import { repeatedValues } from "../args.ts";
import { defineCommand } from "../command.ts";
import { folderOrMetadata, modelOption, positiveInt, ramFlag } from "../common.ts";

function render(plan: MemoryPlan, budgetSource: string, model: string, draft?: DraftCost): string {
  const lines = [
    `model ${model}`,
    `budget ${gib(plan.budgetBytes)} (${budgetSource}); context ${plan.contextTokens} tokens; ${plan.threads} threads${plan.parallel > 1 ? `; ${plan.parallel} parallel sessions` : ""}`,
    "",
  ];
  const w = Math.max(...plan.items.map((i) => i.name.length));
  for (const i of plan.items)
    lines.push(`  ${i.name.padEnd(w)}  ${gib(i.bytes).padStart(12)}  ${i.count === undefined ? "" : `×${i.count}  `}${i.note}`);
  lines.push(`  ${"total".padEnd(w)}  ${gib(plan.totalBytes).padStart(12)}  free ${gib(plan.freeBytes)}`, "");
  if (plan.parallel > 1 || plan.prefixCacheBytes > 0)
    lines.push(`sessions: ${plan.parallel} (k3 serve --parallel), each with its own KDA state and MLA cache; prefix cache RAM tier ${gib(plan.prefixCacheBytes)}`);
  lines.push(...renderPieces(plan));
  lines.push(`lm_head ${plan.head}; embedding rows ${plan.embed} from disk`);
  lines.push(
    `ring: ${plan.ringSlots} slot(s) of ${gib(plan.ringSlotBytes)}${plan.ringSlots === 1 ? " — reader must not run ahead" : ""}; cores: ${plan.coreSlots} slot(s) of ${gib(plan.coreSlotBytes)}`,
  );
  lines.push(`expert slots: ${plan.expertSlots} of ${plan.expertCount} (working set ${plan.expertWorkingSet}/token)`);
  lines.push(
    `disk per decoded token: trunk ${gib(plan.streamedBytesPerToken)} + experts ≤ ${gib(plan.expertBytesPerTokenAllMiss)} (at 0% hits)`,
  );
  if (draft) lines.push(renderDraftCost(plan, draft));
  lines.push("", ...renderChunk(plan));
  return `${lines.join("\n")}\n`;
}

/** What the draft's share of the budget costs the target's plan (docs/DRAFT.md "Placement, packs"). */
function renderDraftCost(plan: MemoryPlan, d: DraftCost): string {
  const share = `the draft's ${gib(d.shareBytes)}`;
  if (d.extraBytesPerToken <= 0) return `draft: ${share} fit beside the target's plan (it reads what it reads without the draft)`;
  return `draft: ${share} come out of the target's pins and expert slots: ${gib(d.extraBytesPerToken)} more disk per decoded token (${gib(d.bytesPerTokenWithout)} without it) until kept drafts save more; --ram ${gib(plan.budgetBytes + d.shareBytes)} keeps the target's plan`;
}

/** The trunk's pieces: how each unit is cut and what of it is pinned (issue 16). */
function renderPieces(plan: MemoryPlan): string[] {
  const N = plan.pinnedLayers.length + plan.streamedLayers.length;
  const matrices = plan.pieces.filter((p) => p.kind === "matrix");
  const largest = Math.max(...matrices.map((p) => p.bytes));
  const size = plan.pieceBytes === Infinity ? "whole units" : `≤ ${gib(plan.pieceBytes)} each`;
  const count = (u: number, pinned?: boolean) => plan.pieces.filter((p) => p.unit === u && (pinned === undefined || p.pinned === pinned)).length;
  const partly = plan.streamedLayers.filter((L) => count(L, true) > 0);
  const none = plan.streamedLayers.filter((L) => count(L, true) === 0);
  const partlyPieces = partly.reduce((a, L) => a + count(L, true), 0);
  return [
    `trunk pieces:    ${plan.pieces.length} (${plan.pieces.length - matrices.length} cores + ${matrices.length} matrix pieces, ${size}; largest ${gib(largest)}), ${plan.pinnedPieces.length} pinned`,
    `pinned layers:   ${formatRanges(plan.pinnedLayers)}`,
    `partly pinned:   ${formatRanges(partly)}${partly.length ? ` (${partlyPieces} of their ${partly.reduce((a, L) => a + count(L), 0)} pieces)` : ""}`,
    `streamed layers: ${formatRanges(none)}`,
    `head:            ${count(N, true)} of ${count(N)} pieces pinned`,
  ];
}

/** The prefill chunk and why: the sizes the planner weighed, in modeled disk bytes. */
function renderChunk(plan: MemoryPlan): string[] {
  const c = plan.chunkChoice;
  const out = [`prefill chunk: ${plan.prefillChunk} tokens — ${c.why}`];
  if (!c.candidates.length) return out;
  out.push(`  ${"chunk".padStart(6)}  ${"scratch".padStart(12)}  ${"disk/prompt token".padStart(17)}  ${"disk/decoded token".padStart(18)}  ${"rows/expert matmul".padStart(18)}`);
  for (const k of c.candidates)
    out.push(
      `  ${String(k.chunk).padStart(6)}  ${gib(k.scratchBytes).padStart(12)}  ${gib(k.prefillBytesPerToken).padStart(17)}  ${gib(k.decodeBytesPerToken).padStart(18)}  ${k.rowsPerExpertCall.toFixed(1).padStart(18)}${k.chunk === plan.prefillChunk ? "  ←" : ""}`,
    );
  out.push(`  (modeled for a ${c.promptTokens}-token prompt, uniform routing; --chunk N overrides)`);
  return out;
}

export default defineCommand({
  meta: { name: "plan", description: "Print the memory plan for a RAM budget (no weights are read)" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "checkpoint folder (headers are validated, weights not read; default: $K3_MODEL)" },
    ...modelOption,
    config: { type: "string", valueHint: "FILE", description: "config.json (release metadata, with --index instead of a folder)" },
    index: { type: "string", valueHint: "FILE", description: "model.safetensors.index.json[.gz]" },
    preset: { type: "string", default: "auto", valueHint: "NAME", description: `RAM budget: ${Object.keys(PRESETS).join(", ")}, auto (usable RAM)` },
    ram: { type: "string", valueHint: "SIZE", description: "RAM budget (K/M/G/T binary, G = 2^30; KB/MB/GB/TB decimal); overrides --preset; any size, for what-if questions" },
    context: { type: "string", alias: ["c", "ctx-size"], valueHint: "N", description: `context length the MLA cache is sized for (default ${DEFAULT_CONTEXT}; at most the model's max_position_embeddings)` },
    threads: { type: "string", alias: ["t"], valueHint: "N", description: "compute threads (default: this machine's hardware threads, at most the pool's limit)" },
    parallel: { type: "string", valueHint: "N", description: "sessions held at once (k3 serve --parallel; default 1)" },
    "prefix-cache-ram": { type: "string", valueHint: "SIZE", description: "RAM for prefix-cache snapshots (default: k3 serve's share with --parallel, else 0)" },
    trunk: { type: "string", default: "auto", valueHint: "FORMAT", description: `trunk weights: auto | ${TRUNK_FORMATS.join(" | ")} (auto: the engine's choice, with the bf16 and exact plans side by side; a packed trunk from \`k3 pack\`, or what it would be)` },
    chunk: { type: "string", valueHint: "N", description: "prefill chunk in tokens (default: the planner's choice)" },
    prompt: { type: "string", valueHint: "N", description: `prompt length the chunk is chosen for (default ${REFERENCE_PROMPT})` },
    mirror: { type: "string", valueHint: "DIR", description: "as k3 run --mirror (repeatable): the plan then holds the hedge buffers" },
    draft: { type: "string", valueHint: "DIR|none", description: "a draft model folder (--draft of run/chat/serve): its weights, per-session state and scratch join the plan" },
    "draft-format": { type: "string", valueHint: "FORMAT", description: "the draft's weights: auto (default: the format whose plan reads the fewest bytes, as the engine picks) | bf16 | int8 | int4" },
    speculate: { type: "string", valueHint: "MODE", description: "speculation the engine would run (auto | off | N drafts per pass; default auto): sizes the verify buffers" },
    json: { type: "boolean", default: false, description: "print the plan as JSON" },
  },
  help: {
    examples: [
      ["k3 plan --config reference/k3/config.json --index reference/k3/model.safetensors.index.json.gz --preset laptop", "the release on an 8 GiB budget"],
      ["k3 plan /models/Kimi-K3 --ram 48G --context 32768", "a what-if for a 48 GiB machine, 32k context"],
    ],
    env: ["K3_MODEL"],
  },
  run({ args, rawArgs }) {
    // Flags first: a typo must not wait for every shard header to be read.
    const budget = resolveBudget(args.preset, ramFlag(args.ram));
    // What-if questions for other machines are the point: more threads than here is fine.
    const threads = positiveInt(args.threads, "--threads", engineLimits().threads, " (the compute pool's limit)") ?? defaultThreads();
    const requestedContext = positiveInt(args.context, "--context");
    const parallel = positiveInt(args.parallel, "--parallel") ?? 1;
    const chunk = positiveInt(args.chunk, "--chunk");
    const prompt = positiveInt(args.prompt, "--prompt");
    if (chunk !== undefined && prompt !== undefined) throw new K3Error("USAGE", "--prompt chooses the chunk; give --chunk or --prompt, not both");
    const asked = args.trunk as TrunkFormat | "auto";
    if (asked !== "auto" && !TRUNK_FORMATS.includes(asked)) throw new K3Error("USAGE", `--trunk must be auto, ${TRUNK_FORMATS.join(", ")}; got "${args.trunk}"`);
    const source = folderOrMetadata(args, "plan");
    const ck = "dir" in source ? openCheckpointCached(source.dir) : undefined;
    const cat = "dir" in source ? undefined : catalogueFromMetadata(source.config, source.index);
    const cfg = ck ? ck.config : cat!.config;
    const model = "dir" in source ? ck!.dir : `${source.config} + ${source.index}`;
    const context = contextFor(cfg, requestedContext);
    const speculate = parseSpeculate(args.speculate ?? "auto", "--speculate");
    // As the engine opens it: no verify buffers with speculation off, N with --speculate N.
    const drafts = speculate === "off" ? 0 : typeof speculate === "number" ? speculate : undefined;
    const embed = ck?.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`);
    const draft = args.draft !== undefined && args.draft !== "none" ? prepareDraft(cfg, embed, args.draft, context, drafts ?? DEFAULT_MAX_DRAFTS) : undefined;
    // With a draft, the format the engine would hold (the fewest bytes per token; --draft-format forces one).
    const forced = args["draft-format"] === undefined || args["draft-format"] === "auto" ? undefined : args["draft-format"];
    if (forced !== undefined && !DRAFT_FORMATS.includes(forced as never)) throw new K3Error("USAGE", `--draft-format must be auto, ${DRAFT_FORMATS.join(", ")}; got "${forced}"`);
    const formats = draft && (forced ? [forced as DraftFormat] : draftFormatsAvailable(draft.checkpoint));
    // The plan for one trunk: from a folder the buffers the engine will allocate for this layout
    // and trunk, exactly (a pack not made yet: what it would be, escapes not counted).
    const planFor = (trunk: TrunkFormat): TrunkPlan => {
      let t: ReturnType<typeof trunkSlots>;
      try {
        t = ck ? trunkSlots(ck, trunk) : { slots: metadataTrunkSlots(cfg, trunk), packed: trunk === "bf16" ? null : false };
      } catch (err) {
        // auto, as the engine: a stale or damaged exact pack is not used (named), the shards answer
        if (asked !== "auto" || !(err instanceof K3Error)) throw err;
        return { trunk, packed: false, plan: err };
      }
      const input = planInputFromCensus(cfg, ck ? ck.layout.census : cat!.census, budget.bytes, context, threads, chunk, t.slots, drafts);
      input.promptTokens = prompt;
      input.parallel = parallel;
      const ram = args["prefix-cache-ram"];
      input.hedgeBuffers = repeatedValues(rawArgs, "--mirror").length ? HEDGE_BUFFERS : 0;
      input.prefixCacheBytes = ram !== undefined ? parseSize(ram, "--prefix-cache-ram") : args.parallel !== undefined ? defaultPrefixCacheBytes(input) : 0;
      try {
        return { trunk, packed: t.packed, ...placed(input, draft && formats && { draft, formats }) };
      } catch (err) {
        if (asked === "auto" && err instanceof K3Error && err.code === "BUDGET") return { trunk, packed: t.packed, plan: err };
        throw err;
      }
    };
    const options = asked === "auto" ? [planFor("bf16"), planFor("exact")] : [planFor(asked)];
    const choice = asked === "auto" ? chooseTrunk(options[0]!.plan, options[1]!.packed ? options[1]!.plan : undefined) : { trunk: asked, why: "asked for (--trunk)" };
    const chosen = options.find((o) => o.trunk === choice.trunk)!;
    const plan = chosen.plan as MemoryPlan;
    const cost = chosen.cost;
    const unusable = (o: TrunkPlan) => o.plan instanceof K3Error && o.plan.code !== "BUDGET";
    const unpacked = (o: TrunkPlan) => (o.packed === false && !unusable(o) ? ` (not packed yet: k3 pack ${ck?.dir ?? "DIR"} --trunk ${o.trunk}${o.trunk === "exact" ? "; escapes not counted" : ""})` : "");
    if (args.json) {
      const trunkChoice = asked === "auto" ? { chosen: choice.trunk, why: choice.why, options: options.map(optionSummary) } : undefined;
      process.stdout.write(`${JSON.stringify(snakeKeys({ model, budgetSource: budget.source, trunk: choice.trunk, ...(trunkChoice && { trunkChoice }), ...plan, ...(cost && { draftCost: cost }) }), null, 2)}\n`);
    } else {
      const lines = asked === "auto" ? ["", `trunk: auto → ${choice.trunk} (${choice.why}; the same bits either way)`, ...options.map((o) => `  ${renderOption(o)}${unpacked(o)}`)] : [];
      process.stdout.write(render(plan, budget.source, `${model}; trunk ${choice.trunk}${unpacked(chosen)}`, cost) + (lines.length ? `${lines.join("\n")}\n` : ""));
    }
  },
});

interface TrunkPlan {
  trunk: TrunkFormat;
  packed: boolean | null; // null: the shards' bf16; false: a pack not made yet (what it would be)
  plan: MemoryPlan | K3Error;
  /** With a draft: what its share costs the target (k3 plan --draft). */
  cost?: DraftCost;
}

/** The plan for `input`; with a draft, in the format the engine would hold, and what it costs. */
function placed(input: PlanInput, d: { draft: DraftSetup; formats: DraftFormat[] } | undefined): { plan: MemoryPlan; cost?: DraftCost } {
  if (!d) return { plan: planMemory(input) };
  const plan = placeDraft(d.formats, (f) => planMemory({ ...input, draft: draftInFormat(d.draft, f).plan }), (p) => p);
  return { plan, cost: draftCost(plan, planMemory(input)) };
}

/** One trunk's plan in brief: what it pins and reads (modeled) per decoded token. */
function optionSummary(o: TrunkPlan) {
  if (o.plan instanceof K3Error) return { trunk: o.trunk, packed: o.packed, fits: false, error: o.plan.message };
  const p = o.plan;
  return { trunk: o.trunk, packed: o.packed, fits: true, pinnedPieces: p.pinnedPieces.length, pieces: p.pieces.length, streamedBytesPerToken: p.streamedBytesPerToken, decodeBytesPerToken: decodeBytesPerToken(p), expertSlots: p.expertSlots };
}

function renderOption(o: TrunkPlan): string {
  const s = optionSummary(o);
  if (!s.fits) return `${o.trunk.padEnd(5)}  ${o.plan instanceof K3Error && o.plan.code === "BUDGET" ? "does not fit" : "not usable"}: ${s.error}`;
  return `${o.trunk.padEnd(5)}  ${s.pinnedPieces} of ${s.pieces} pieces pinned, trunk ${gib(s.streamedBytesPerToken!)} streamed per token, ${s.expertSlots} expert slots; ${gib(s.decodeBytesPerToken!)} read per decoded token (modeled)`;
}
