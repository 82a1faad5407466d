// `k3 pack DIR --trunk exact|int8|int4`: write a packed trunk (docs/TRUNK.md), checksummed and tied
// to the exact shard bytes it came from; the routed experts stay the released MXFP4.
//  - exact (issue 25): the release's bf16 matrices coded in 12 bits per weight plus escapes, every
//    block decoded back and compared with the shards as it is written: the same model, fewer
//    bytes; engines use it by default where it reads fewer bytes (--trunk auto).
//  - int8 / int4 (issue 16): lossy, group-quantised; used only with --trunk int8|int4.
import { defineCommand } from "../command.ts";
import { packDraft, PACK_FORMATS, packTrunk } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { formatBytes } from "../../format.ts";
import { resolveModelDir } from "../common.ts";
import { barProgress } from "../progress.ts";

export default defineCommand({
  meta: { name: "pack", description: "Write a packed trunk: exact (the same bits, ~0.75 of the bytes) or lossy int8|int4 (experts stay exact); or a packed draft model (--draft int8|int4)" },
  args: {
    model: { type: "positional", required: false, description: "model directory (default: $K3_MODEL), or a draft model's folder with --draft" },
    trunk: { type: "string", valueHint: "FORMAT", description: "exact (bit-identical, ~12 bits per weight), int8 (~1% weight error) or int4 (smaller, less exact): docs/TRUNK.md" },
    draft: { type: "string", valueHint: "FORMAT", description: "pack the draft model in DIR instead: int8 or int4 (engines with --draft DIR then hold whichever reads the fewest bytes; output never changes)" },
    json: { type: "boolean", description: "print the result as JSON" },
  },
  help: {
    examples: [
      ["k3 pack /models/Kimi-K3 --trunk exact", "then k3 run /models/Kimi-K3 --ram 32G … uses it where it reads fewer bytes (same output)"],
      ["k3 pack /models/Kimi-K3 --trunk int4", "then: k3 run /models/Kimi-K3 --trunk int4 --ram 48G …"],
      ["k3 pack /models/kimi-k3-eagle3.1-mla --draft int4", "then: k3 run /models/Kimi-K3 --draft /models/kimi-k3-eagle3.1-mla --preset laptop …"],
    ],
  },
  run({ args }) {
    if (args.draft !== undefined) return packDraftCommand(args);
    const format = PACK_FORMATS.find((f) => f === args.trunk);
    if (!format) throw new K3Error("USAGE", `--trunk must be ${PACK_FORMATS.join(", ")}, got ${args.trunk === undefined ? "nothing" : `"${args.trunk}"`}`);
    const dir = resolveModelDir(args.model);
    const bar = args.json ? undefined : barProgress();
    const r = packTrunk(dir, format, bar && ((d, t) => bar("packing the trunk", d, t, "bytes")));
    if (args.json) {
      process.stdout.write(`${JSON.stringify(r)}\n`);
      return;
    }
    const what = r.coded
      ? `exact: ${r.coded.matrices} matrices coded in ${r.coded.bytesPerWeight.toFixed(4)} bytes per weight (${r.coded.escapes} escapes), ${r.exactTensors} tensors copied; every block decoded back to the shards' bytes`
      : `${r.format}: ${r.packedMatrices} matrices quantised, ${r.exactTensors} tensors exact; weight error ${(r.weightError.rms * 100).toFixed(2)}% RMS, worst row ${(r.weightError.worstRow * 100).toFixed(2)}%`;
    process.stdout.write(`packed ${formatBytes(r.sourceBytes)} of trunk into ${formatBytes(r.fileBytes)} (${what}) in ${(r.ms / 1000).toFixed(1)} s → ${r.path}\n`);
  },
});

/** `k3 pack DRAFT_DIR --draft int8|int4`. */
function packDraftCommand(args: { model?: string; trunk?: string; draft?: string; json?: boolean }): void {
  if (args.trunk !== undefined) throw new K3Error("USAGE", "give --trunk (pack a model's trunk) or --draft (pack a draft model), not both");
  if (args.draft !== "int8" && args.draft !== "int4") throw new K3Error("USAGE", `--draft must be int8 or int4, got "${args.draft}"`);
  if (!args.model) throw new K3Error("USAGE", "k3 pack DRAFT_DIR --draft int8|int4: name the draft model's folder");
  const bar = args.json ? undefined : barProgress();
  const r = packDraft(args.model, args.draft, bar && ((d, t) => bar("packing the draft", d, t, "bytes")));
  if (args.json) {
    process.stdout.write(`${JSON.stringify(r)}\n`);
    return;
  }
  process.stdout.write(`packed ${formatBytes(r.sourceBytes)} of draft into ${formatBytes(r.fileBytes)} (${r.format}: ${r.packedMatrices} matrices quantised; weight error ${(r.weightError.rms * 100).toFixed(2)}% RMS, worst row ${(r.weightError.worstRow * 100).toFixed(2)}%) in ${(r.ms / 1000).toFixed(1)} s → ${r.path}\n`);
}
