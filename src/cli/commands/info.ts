// `k3 info [DIR | -m DIR]` or `k3 info --config F --index F` [--json]: describe a checkpoint
// (architecture, layer map, byte census, layout facts). Text or one JSON object (snake_case keys)
// on stdout; every failure is a thrown K3Error that main.ts maps to an exit status.
import { describeCheckpoint, describeMetadata, renderInfo } from "../../inspect.ts";
import { snakeKeys } from "../../report.ts";
import { defineCommand } from "../command.ts";
import { folderOrMetadata, modelOption } from "../common.ts";

export default defineCommand({
  meta: { name: "info", description: "Describe a checkpoint: architecture, layer map, byte census, layout" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (config.json + shards; default: $K3_MODEL)" },
    ...modelOption,
    config: { type: "string", valueHint: "FILE", description: "config.json, to describe release metadata without shards (with --index)" },
    index: { type: "string", valueHint: "FILE", description: "model.safetensors.index.json[.gz] (with --config)" },
    json: { type: "boolean", description: "print one JSON object instead of text" },
  },
  help: {
    examples: [["k3 info --config reference/k3/config.json --index reference/k3/model.safetensors.index.json.gz", "the release's architecture and byte census"]],
    env: ["K3_MODEL"],
  },
  run({ args }) {
    const source = folderOrMetadata(args, "info");
    const report = "dir" in source ? describeCheckpoint(source.dir) : describeMetadata(source.config, source.index);
    process.stdout.write(args.json ? `${JSON.stringify(snakeKeys(report))}\n` : renderInfo(report));
  },
});
