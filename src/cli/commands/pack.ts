// `k3 pack DIR --trunk int8|int4`: write an opt-in compact trunk (issue 16; docs/TRUNK.md): the
// trunk's matrices group-quantised, every other trunk tensor copied exactly, checksummed and tied
// to the exact shard bytes it came from. `--trunk int8|int4` on run/chat/serve/bench uses it; the
// routed experts stay the released MXFP4, exact. Nothing changes unless you ask for it.
import { defineCommand } from "../command.ts";
import { packDraft, packTrunk } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { formatBytes } from "../../format.ts";
import { resolveModelDir } from "../common.ts";
import { barProgress } from "../progress.ts";

export default defineCommand({
  meta: { name: "pack", description: "Write a compact (lossy) trunk for --trunk int8|int4 (experts stay exact), or a packed draft model (--draft int8|int4)" },
  args: {
    model: { type: "positional", required: false, description: "model directory (default: $K3_MODEL), or a draft model's folder with --draft" },
    trunk: { type: "string", valueHint: "FORMAT", description: "int8 (~1% weight error) or int4 (smaller, less exact): docs/TRUNK.md has the measured error" },
    draft: { type: "string", valueHint: "FORMAT", description: "pack the draft model in DIR instead: int8 or int4 (engines with --draft DIR then hold whichever reads the fewest bytes; output never changes)" },
    json: { type: "boolean", description: "print the result as JSON" },
  },
  help: {
    examples: [
      ["k3 pack /models/Kimi-K3 --trunk int4", "then: k3 run /models/Kimi-K3 --trunk int4 --ram 48G …"],
      ["k3 pack /models/kimi-k3-eagle3.1-mla --draft int4", "then: k3 run /models/Kimi-K3 --draft /models/kimi-k3-eagle3.1-mla --preset laptop …"],
    ],
  },
  run({ args }) {
    if (args.draft !== undefined) return packDraftCommand(args);
    if (args.trunk !== "int8" && args.trunk !== "int4") throw new K3Error("USAGE", `--trunk must be int8 or int4, got ${args.trunk === undefined ? "nothing" : `"${args.trunk}"`}`);
    const dir = resolveModelDir(args.model);
    const bar = args.json ? undefined : barProgress();
    const r = packTrunk(dir, args.trunk, bar && ((d, t) => bar("packing the trunk", d, t, "bytes")));
    if (args.json) {
      process.stdout.write(`${JSON.stringify(r)}\n`);
      return;
    }
    process.stdout.write(
      `packed ${formatBytes(r.sourceBytes)} of trunk into ${formatBytes(r.fileBytes)} (${r.format}: ${r.packedMatrices} matrices quantised, ${r.exactTensors} tensors exact; weight error ${(r.weightError.rms * 100).toFixed(2)}% RMS, worst row ${(r.weightError.worstRow * 100).toFixed(2)}%) in ${(r.ms / 1000).toFixed(1)} s → ${r.path}\n`,
    );
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
