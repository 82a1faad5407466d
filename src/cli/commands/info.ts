// `k3 info <dir> [--json]` or `k3 info --config F --index F [--json]`: describe a checkpoint
// (architecture, layer map, byte census, layout facts). Text or one JSON object on stdout;
// every failure is a thrown K3Error that main.ts maps to an exit status.
import { K3Error } from "../../errors.ts";
import { describeCheckpoint, describeMetadata, renderInfo } from "../../inspect.ts";
import { defineCommand } from "../command.ts";

export default defineCommand({
  meta: { name: "info", description: "Describe a checkpoint: architecture, layer map, byte census, layout" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (config.json + shards)" },
    config: { type: "string", valueHint: "FILE", description: "config.json, to describe release metadata without shards (with --index)" },
    index: { type: "string", valueHint: "FILE", description: "model.safetensors.index.json[.gz] (with --config)" },
    json: { type: "boolean", description: "print one JSON object instead of text" },
  },
  help: {
    examples: [["k3 info --config reference/k3/config.json --index reference/k3/model.safetensors.index.json.gz", "the release's architecture and byte census"]],
  },
  run({ args }) {
    const meta = args.config !== undefined || args.index !== undefined;
    if (meta && args.dir) throw new K3Error("USAGE", "give either a model directory or --config and --index, not both");
    if (meta && (!args.config || !args.index)) throw new K3Error("USAGE", "--config and --index go together");
    if (!meta && !args.dir) throw new K3Error("USAGE", "no model directory: k3 info <dir> or k3 info --config F --index F");
    const report = meta ? describeMetadata(args.config!, args.index!) : describeCheckpoint(args.dir!);
    process.stdout.write(args.json ? `${JSON.stringify(report)}\n` : renderInfo(report));
  },
});
