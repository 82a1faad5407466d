// k3 disks [DIR | -m DIR] [--mirror DIR]… [--ram SIZE | --preset X] [--context N] [--trace FILE]
//          [--seconds S] [--io-threads N] [--no-measure] [--json]
// Each drive the model is on: what of the model it holds, its read rate at k3's request sizes
// (measured now, O_DIRECT: an expert at random offsets, trunk chunks in sequence), what it serves
// per decoded token under the memory plan, and what moving which shards to the fastest drive
// would save per token (src/memory/placement.ts). Reads only; k3 never moves a file
// (docs/DRIVES.md says how to).
import { readFileSync } from "node:fs";
import { K3Error } from "../../errors.ts";
import { defaultThreads } from "../../engine.ts";
import { contextFor, filesByDevice, HEDGE_BUFFERS, findMirrorCopies, gib, openCheckpointCached, parseTrace, placementReport, planInputFromCensus, planMemory, PRESETS, probeDevice, resolveBudget, streamSlots, TRUNK_READ_BYTES, type DeviceRates, type PlacementReport } from "../../inspect.ts";
import { formatRanges } from "../../format.ts";
import { snakeKeys } from "../../report.ts";
import { repeatedValues } from "../args.ts";
import { defineCommand } from "../command.ts";
import { modelOption, pickModel, positiveInt, ramFlag, resolveModelDir } from "../common.ts";

const DEFAULT_SECONDS = 2;
const DEFAULT_DEPTH = 4;

const gbps = (bytesPerSecond: number) => `${(bytesPerSecond / 1e9).toFixed(2)} GB/s`;
const secs = (s: number) => `${s.toFixed(s < 10 ? 2 : 1)} s`;

function render(model: string, budget: string, r: PlacementReport, notes: string[]): string {
  const out = [`model ${model}; plan ${budget}; experts: ${r.experts === "trace" ? "the routing trace" : "uniform routing"}, hit rate ${(100 * r.expertHitRate).toFixed(0)}%`, "", "drives"];
  for (const d of r.drives) {
    const held = r.shards.filter((s) => d.shards.includes(s.file));
    const layers = formatRanges([...new Set(held.flatMap((s) => s.layers))].sort((a, b) => a - b));
    const holds = [layers === "none" || layers === "" ? "" : `layers ${layers}`, held.some((s) => s.head) ? "the head" : ""].filter(Boolean).join(" and ") || "no weights";
    out.push(`  ${d.device.name} (${d.device.key}${d.device.rotational ? ", rotational" : ""}): ${d.shards.length} shard(s), ${gib(d.fileBytes)}, ${holds}${d.freeBytes === null ? "" : `; free ${gib(d.freeBytes)}`}`);
    if (d.rates) out.push(`      reads: expert-size ${gbps(d.rates.expert)}, trunk chunks ${gbps(d.rates.trunk)}${d.rates.direct ? "" : " (buffered: the page cache, not the drive)"}`);
    out.push(`      per token: trunk ${gib(d.trunkBytesPerToken)} + experts ${gib(d.expertBytesPerToken)}${d.rates ? ` → ${secs(d.secondsPerToken)}` : ""}`);
  }
  if (r.secondsPerToken !== null) {
    out.push("", `disk time per token: ${secs(r.secondsPerToken)} (a layer's reads come from the drive holding its shard, so the drives take turns; a mirrored shard is read from all its copies at once)`);
    if (r.moves.length === 0) out.push(`nothing to move: every shard streamed per token is on the fastest drive (${r.fastest}) or mirrored`);
    else {
      out.push(`moving shards to the fastest drive (${r.fastest}), best first:`);
      for (const m of r.moves.slice(0, 12))
        out.push(`  ${m.file} (${m.holds}) from ${m.from}: saves ${secs(m.savesSecondsPerToken)}/token, ${gib(m.fileBytes)}${m.fits ? "" : " — does not fit in the free space left"}`);
      if (r.moves.length > 12) out.push(`  … and ${r.moves.length - 12} more`);
      out.push(`  every move that fits: ${secs(r.secondsPerToken)} → ${secs(r.secondsPerTokenAfter!)} per token. k3 never moves files: docs/DRIVES.md says how (or --mirror a copy instead).`);
    }
  }
  out.push(...notes);
  return `${out.join("\n")}\n`;
}

export default defineCommand({
  meta: { name: "disks", description: "Each drive the model is on: what it holds, its read rate, what moving shards to the fastest would save" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (default: $K3_MODEL)" },
    ...modelOption,
    mirror: { type: "string", valueHint: "DIR", description: "a folder with copies of shards (repeatable), as k3 run --mirror" },
    preset: { type: "string", default: "auto", valueHint: "NAME", description: `RAM budget the per-token figures are for: ${Object.keys(PRESETS).join(", ")}, auto` },
    ram: { type: "string", valueHint: "SIZE", description: "RAM budget (overrides --preset)" },
    context: { type: "string", alias: ["c"], valueHint: "N", description: "context length (sizes the plan)" },
    trace: { type: "string", valueHint: "FILE", description: "a routing trace of this model (k3 run --trace): which experts miss the cache, per layer" },
    seconds: { type: "string", valueHint: "S", description: `measuring time per drive and request size (default ${DEFAULT_SECONDS})` },
    "io-threads": { type: "string", valueHint: "N", description: `reads in flight while measuring, as each drive's queue (default ${DEFAULT_DEPTH})` },
    measure: { type: "boolean", default: true, description: "measure each drive's read rate (--no-measure: the holdings and bytes alone)" },
    json: { type: "boolean", default: false, description: "print the report as JSON" },
  },
  help: {
    examples: [
      ["k3 disks /models/Kimi-K3 --preset laptop", "which drive serves what per token at 8 GiB, and what moving shards would save"],
      ["k3 disks /models/Kimi-K3 --mirror /mnt/ssd2/Kimi-K3 --trace chat.jsonl", "with a mirror, expert misses from a recorded trace"],
    ],
    env: ["K3_MODEL"],
  },
  run({ args, rawArgs }) {
    const budget = resolveBudget(args.preset, ramFlag(args.ram));
    const seconds = Number(args.seconds ?? DEFAULT_SECONDS);
    if (!(seconds > 0 && seconds <= 600)) throw new K3Error("USAGE", `--seconds must be a number in (0, 600], got "${args.seconds}"`);
    const depth = positiveInt(args["io-threads"], "--io-threads", 256) ?? DEFAULT_DEPTH;
    const ckpt = openCheckpointCached(resolveModelDir(pickModel(args.dir, args.model)));
    const mirrorDirs = repeatedValues(rawArgs, "--mirror");
    const mirrors = mirrorDirs.length ? findMirrorCopies(ckpt, mirrorDirs) : undefined;
    const trace = args.trace === undefined ? undefined : parseTrace(readFileSync(args.trace, "utf8"), args.trace);
    const input = planInputFromCensus(ckpt.config, ckpt.layout.census, budget.bytes, contextFor(ckpt.config, positiveInt(args.context, "--context")), defaultThreads(), undefined, streamSlots(ckpt));
    input.hedgeBuffers = mirrors ? HEDGE_BUFFERS : 0;
    const plan = planMemory(input);
    let rates: Map<string, DeviceRates> | undefined;
    if (args.measure) {
      rates = new Map();
      for (const [key, g] of filesByDevice(ckpt, mirrors)) {
        const probe = (readBytes: number, pattern: "random" | "sequential") => probeDevice(g.files, { readBytes, depth, pattern, seconds, direct: true, seed: Date.now() >>> 0 });
        const expert = probe(ckpt.layout.experts.bytes, "random");
        const trunk = probe(TRUNK_READ_BYTES, "sequential");
        rates.set(key, { expert: expert.bytesPerSecond, trunk: trunk.bytesPerSecond, direct: expert.direct && trunk.direct });
      }
    }
    const report = placementReport(ckpt, plan, { mirrors, trace, rates });
    const notes = args.measure ? [] : ["", "(--no-measure: no read rates, so no times or moves)"];
    if (args.json) process.stdout.write(`${JSON.stringify(snakeKeys({ model: ckpt.dir, budgetSource: budget.source, ...report }), null, 2)}\n`);
    else process.stdout.write(render(ckpt.dir, `${gib(budget.bytes)} (${budget.source})`, report, notes));
  },
});
