// `k3 verify DIR [--record]`: shard sizes against headers; --record writes a CRC-32C per expert and
// per trunk unit so that `run --verify` can check every read.
import { defineCommand } from "citty";
import { verifyModel } from "../../engine.ts";
import { log } from "../../log.ts";
import { formatBytes, resolveModelDir } from "../common.ts";
import { barProgress } from "../progress.ts";

export default defineCommand({
  meta: { name: "verify", description: "Check every shard against its header; --record checksums every expert and trunk unit" },
  args: {
    model: { type: "positional", required: false, description: "model directory (default: $K3_MODEL)" },
    record: { type: "boolean", description: "read everything once and record CRC-32Cs for `run --verify`" },
    json: { type: "boolean", description: "print the result as JSON" },
  },
  run({ args }) {
    const dir = resolveModelDir(args.model);
    const bar = args.json ? undefined : barProgress();
    const r = verifyModel(dir, { record: args.record, onProgress: bar && ((d, t) => bar("checksumming", d, t)) });
    if (args.json) {
      process.stdout.write(`${JSON.stringify(r)}\n`);
      return;
    }
    const bytes = r.shards.reduce((a, s) => a + s.bytes, 0);
    process.stdout.write(`${r.shards.length} shards (${formatBytes(bytes)}), ${r.tensors} language-model tensors: sizes match their headers\n`);
    if (r.recorded) process.stdout.write(`recorded ${r.recorded.experts} expert and ${r.recorded.trunkUnits} trunk checksums in ${(r.recorded.ms / 1000).toFixed(1)} s → ${r.recorded.path}\n`);
    else log.info("add --record to checksum every expert and trunk unit (then `k3 run --verify` checks each read)");
  },
});
