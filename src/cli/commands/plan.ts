// k3 plan <dir> | --config F --index F  [--preset X] [--ram SIZE] [--context N] [--threads N] [--json]
// Prints the memory plan (docs/PLAN.md) from the config and tensor sizes alone: no weights read.
import { availableParallelism } from "node:os";
import { K3Error } from "../../errors.ts";
import { formatRanges } from "../../format.ts";
import { catalogueFromMetadata, openCheckpointCached, computeCensus, DEFAULT_CONTEXT, defaultPrefixCacheBytes, planMemory, planInputFromCensus, type MemoryPlan, gib, parseSize, PRESETS, resolveBudget } from "../../inspect.ts";
import { defineCommand } from "../command.ts";
import { positiveInt, ramFlag } from "../common.ts";
import { engineLimits } from "../../engine.ts";

function render(plan: MemoryPlan, budgetSource: string, model: string): string {
  const lines = [
    `model ${model}`,
    `budget ${gib(plan.budgetBytes)} (${budgetSource}); context ${plan.contextTokens} tokens; ${plan.threads} threads${plan.parallel > 1 ? `; ${plan.parallel} parallel sessions` : ""}`,
    "",
  ];
  const w = Math.max(...plan.items.map((i) => i.name.length));
  for (const i of plan.items)
    lines.push(`  ${i.name.padEnd(w)}  ${gib(i.bytes).padStart(12)}  ${i.count === undefined ? "" : `×${i.count}  `}${i.note}`);
  lines.push(`  ${"total".padEnd(w)}  ${gib(plan.totalBytes).padStart(12)}  free ${gib(plan.freeBytes)}`, "");
  lines.push(`pinned layers:   ${formatRanges(plan.pinnedLayers)}`);
  lines.push(`streamed layers: ${formatRanges(plan.streamedLayers)}`);
  lines.push(`lm_head ${plan.head}; embedding rows ${plan.embed} from disk`);
  lines.push(
    `ring: ${plan.ringSlots} slot(s) of ${gib(plan.ringSlotBytes)}${plan.ringSlots === 1 ? " — reader must not run ahead" : ""}`,
  );
  lines.push(`expert slots: ${plan.expertSlots} of ${plan.expertCount} (working set ${plan.expertWorkingSet}/token)`);
  lines.push(
    `disk per decoded token: trunk ${gib(plan.streamedBytesPerToken)} + experts ≤ ${gib(plan.expertBytesPerTokenAllMiss)} (at 0% hits)`,
  );
  return `${lines.join("\n")}\n`;
}

export default defineCommand({
  meta: { name: "plan", description: "Print the memory plan for a RAM budget (no weights are read)" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "checkpoint folder (headers are validated, weights not read)" },
    config: { type: "string", valueHint: "FILE", description: "config.json (release metadata, with --index instead of a folder)" },
    index: { type: "string", valueHint: "FILE", description: "model.safetensors.index.json[.gz]" },
    preset: { type: "string", default: "auto", valueHint: "NAME", description: `RAM budget: ${Object.keys(PRESETS).join(", ")}, auto (usable RAM)` },
    ram: { type: "string", valueHint: "SIZE", description: "RAM budget (K/M/G/T binary, G = 2^30; KB/MB/GB/TB decimal); overrides --preset; any size, for what-if questions" },
    context: { type: "string", alias: ["c", "ctx-size"], default: String(DEFAULT_CONTEXT), valueHint: "N", description: "context length the MLA cache is sized for" },
    threads: { type: "string", alias: ["t"], valueHint: "N", description: "compute threads (default: all CPUs)" },
    parallel: { type: "string", valueHint: "N", description: "sessions held at once (k3 serve --parallel; default 1)" },
    "prefix-cache-ram": { type: "string", valueHint: "SIZE", description: "RAM for prefix-cache snapshots (default: k3 serve's share with --parallel, else 0)" },
    json: { type: "boolean", default: false, description: "print the plan as JSON" },
  },
  help: {
    examples: [
      ["k3 plan --config reference/k3/config.json --index reference/k3/model.safetensors.index.json.gz --preset laptop", "the release on an 8 GiB budget"],
      ["k3 plan /models/Kimi-K3 --ram 48G --context 32768", "a what-if for a 48 GiB machine, 32k context"],
    ],
  },
  run({ args }) {
    // Flags first: a typo must not wait for every shard header to be read.
    const budget = resolveBudget(args.preset, ramFlag(args.ram));
    // What-if questions for other machines are the point: more threads than here is fine.
    const threads = positiveInt(args.threads, "--threads", engineLimits().threads, " (the compute pool's limit)") ?? availableParallelism();
    const context = positiveInt(args.context, "--context") ?? DEFAULT_CONTEXT;
    const parallel = positiveInt(args.parallel, "--parallel") ?? 1;
    let cfg, census, model: string;
    if (args.dir) {
      if (args.config || args.index) throw new K3Error("USAGE", "give a checkpoint directory or --config/--index, not both");
      const ck = openCheckpointCached(args.dir);
      cfg = ck.config;
      census = computeCensus(cfg);
      model = ck.dir;
    } else {
      if (!args.config || !args.index) throw new K3Error("USAGE", "give a checkpoint directory, or both --config and --index");
      const cat = catalogueFromMetadata(args.config, args.index);
      cfg = cat.config;
      census = cat.census;
      model = `${args.config} + ${args.index}`;
    }
    const input = planInputFromCensus(cfg, census, budget.bytes, context, threads);
    input.parallel = parallel;
    const ram = args["prefix-cache-ram"];
    input.prefixCacheBytes = ram !== undefined ? parseSize(ram) : args.parallel !== undefined ? defaultPrefixCacheBytes(input) : 0;
    const plan = planMemory(input);
    if (args.json) process.stdout.write(`${JSON.stringify({ model, budgetSource: budget.source, ...plan }, null, 2)}\n`);
    else process.stdout.write(render(plan, budget.source, model));
  },
});
