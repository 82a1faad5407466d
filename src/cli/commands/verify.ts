// `k3 verify DIR [--record]`: every shard against its header; every packed trunk read whole against
// its own checksums and the shard rows it was made from; --record writes a CRC-32C per trunk
// unit, routed expert and embedding row so that `run --verify` can check every read; without
// --record, checksums recorded earlier are all read again and compared.
import { defineCommand } from "../command.ts";
import { verifyModel } from "../../engine.ts";
import { log } from "../../log.ts";
import { formatBytes } from "../../format.ts";
import { snakeKeys } from "../../report.ts";
import { modelOption, resolveModelDir } from "../common.ts";
import { barProgress } from "../progress.ts";

export default defineCommand({
  meta: { name: "verify", description: "Check every shard against its header and what --record recorded, and every packed trunk; --record checksums everything a token can read" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (default: $K3_MODEL)" },
    ...modelOption,
    record: { type: "boolean", description: "read everything once and record CRC-32Cs (trunk, experts, embedding rows) for `run --verify`" },
    json: { type: "boolean", description: "print the result as JSON (snake_case keys)" },
  },
  help: {
    examples: [
      ["k3 verify /models/Kimi-K3 --record", "checksum everything once (then `k3 run --verify` checks every read)"],
      ["k3 verify -m /models/Kimi-K3", "check the shards, and what --record recorded"],
    ],
    env: ["K3_MODEL"],
  },
  run({ args }) {
    const dir = resolveModelDir(args.dir, args.model);
    const bar = args.json ? undefined : barProgress();
    const r = verifyModel(dir, { record: args.record, onProgress: bar && ((d, t) => bar("checksumming", d, t)) });
    if (args.json) {
      process.stdout.write(`${JSON.stringify(snakeKeys(r))}\n`);
      return;
    }
    const bytes = r.shards.reduce((a, s) => a + s.bytes, 0);
    process.stdout.write(`${r.shards.length} shards (${formatBytes(bytes)}), ${r.tensors} language-model tensors: sizes match their headers\n`);
    for (const p of r.packs)
      process.stdout.write(`${p.format} trunk ${p.path}: ${p.blocks} blocks match their checksums and the shard bytes they were packed from (${formatBytes(p.packBytes + p.sourceBytes)} read in ${(p.ms / 1000).toFixed(1)} s)\n`);
    const c = r.recorded ?? r.checked;
    const what = c && `${c.trunkBlocks} trunk-block, ${c.experts} expert and ${c.embedRows} embedding-row checksums`;
    if (r.recorded) process.stdout.write(`recorded ${what} in ${(r.recorded.ms / 1000).toFixed(1)} s → ${r.recorded.path}\n`);
    else if (r.checked) process.stdout.write(`checked ${what} against ${r.checked.path} in ${(r.checked.ms / 1000).toFixed(1)} s: all match\n`);
    else log.info("no checksums recorded: add --record to checksum everything a token can read (then `k3 verify` and `k3 run --verify` check against them)");
  },
});
