// k3 simulate-cache TRACE --slots N[,N…] [--policy lru,…] [--json]: replay a routing trace through
// each eviction policy at each cache size and print hit rates (docs/CACHE.md).
import { readFileSync } from "node:fs";
import { defineCommand } from "../command.ts";
import { K3Error } from "../../errors.ts";
import { snakeKeys } from "../../report.ts";
import { ALL_POLICIES, isPolicyName, nextUseTable, parseSlotList, simulateCache, type SimResult, parseTrace, traceKeys } from "../../inspect.ts";

export default defineCommand({
  meta: { name: "simulate-cache", description: "Replay a routing trace (JSONL) through expert-cache policies; print hit rates" },
  args: {
    trace: { type: "positional", required: true, description: "routing trace, one JSON line per token" },
    slots: { type: "string", required: true, description: "cache sizes: N slots or Nx (× one token's k·layers), comma-separated" },
    policy: { type: "string", default: ALL_POLICIES.join(","), description: `policies, comma-separated (${ALL_POLICIES.join(", ")})` },
    json: { type: "boolean", default: false, description: "print JSON instead of a table" },
  },
  run({ args }) {
    let text: string;
    try {
      text = readFileSync(args.trace, "utf8");
    } catch (e) {
      throw new K3Error("IO", `cannot read trace ${args.trace}`, [String((e as Error).message)]);
    }
    const trace = parseTrace(text, args.trace);
    const workingSet = trace.k * trace.layers;
    const slotList = parseSlotList(args.slots, workingSet);
    const policies = args.policy.split(",").map((p) => p.trim()).filter(Boolean);
    if (policies.length === 0) throw new K3Error("USAGE", "--policy needs at least one policy", [`known: ${ALL_POLICIES.join(", ")}`]);
    const unknown = policies.filter((p) => !isPolicyName(p));
    if (unknown.length) throw new K3Error("USAGE", "unknown cache policy", unknown.map((p) => `"${p}" (known: ${ALL_POLICIES.join(", ")})`));
    const small = slotList.filter((s) => s < trace.k);
    if (small.length) throw new K3Error("USAGE", `every cache needs ≥ k = ${trace.k} slots (one layer's experts at once)`, small.map(String));

    const nextUse = policies.includes("belady") ? nextUseTable(trace.requests, traceKeys(trace)) : undefined;
    const results: SimResult[] = [];
    for (const slots of slotList) for (const p of policies) results.push(simulateCache(trace, slots, p, nextUse));

    const info = { tokens: trace.tokens, layers: trace.layers, k: trace.k, experts: trace.experts, workingSet };
    if (args.json) {
      process.stdout.write(`${JSON.stringify(snakeKeys({ trace: args.trace, ...info, results }), null, 2)}\n`);
      return;
    }
    process.stdout.write(
      `${args.trace}: ${info.tokens} tokens × ${info.layers} MoE layers × top-${info.k} of ${info.experts}; ` +
        `working set ${workingSet} slots/token; ${trace.requests.length} requests\nhit rate %\n`,
    );
    const header = ["slots", "×ws", ...policies];
    const rows = slotList.map((slots) => [
      String(slots),
      (slots / workingSet).toFixed(2),
      ...policies.map((p) => (100 * results.find((r) => r.slots === slots && r.policy === p)!.hitRate).toFixed(1)),
    ]);
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    for (const r of [header, ...rows]) process.stdout.write(`${r.map((c, i) => c.padStart(widths[i]!)).join("  ")}\n`);
  },
});
