// What bench/draft.ts runs on: the model, its draft, the prompts, the budgets.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { checkDraft } from "../src/engine/draft.ts";
import { loadKernels } from "../src/kernels.ts";
import { draftInFormat } from "../src/memory/draft-plan.ts";
import { draftFormatsAvailable } from "../src/memory/draft-pack.ts";
import { floorBytes, planInputFromCensus } from "../src/memory/plan.ts";
import { parseSize } from "../src/memory/ram.ts";
import { streamSlots } from "../src/memory/slots.ts";
import { forwardBufferBytes, passShape } from "../src/model/buffers.ts";
import { ROOT } from "./common.ts";

export interface Setup {
  model: string;
  draft: string;
  threads: number;
  prompts: number[][];
  decodings: ("greedy" | "sampled")[];
  rejectionArm: boolean;
  /** Whether to run the n-gram arm (the slice's random weights never repeat: it never drafts there, docs/SPECULATION.md §6). */
  ngramArm: boolean;
  /** `ram`: every arm's budget; `draftRam`: the model arms' instead (the same plus the draft's own
   *  bytes, so the target's plan is the one `off` has: where the draft is large next to the trunk,
   *  as on the 4M-parameter demo, an equal budget would mostly measure the pins it takes). */
  budgets: { name: string; ram?: string; draftRam?: string; resident?: boolean; context: number }[];
}

/** The draft's own bytes in the plan at `context`, in the smallest format there is (its pack's, else bf16). */
function draftBytes(model: string, draft: string, context: number, chunk: number): number {
  const ck = openCheckpoint(model);
  let d = checkDraft(loadKernels(), ck, draft, context, 8);
  const formats = draftFormatsAvailable(d.checkpoint);
  d = draftInFormat(d, formats.at(-1)!);
  // (a little more than the plan's draft items: the pass's scratch is planned for the chosen chunk)
  const capture = forwardBufferBytes(ck.config, passShape(chunk, 1, context, 8, d.plan.taps)) - forwardBufferBytes(ck.config, passShape(chunk, 1, context, 8, 0));
  return d.plan.weightBytes + d.plan.stateBytes + d.plan.scratchBytes + capture;
}

/** The slice and its random released-format draft (models/slice-draft: bun tools/gen/draft.ts --target-dir models/slice). */
export function sliceSetup(model: string, ram: string): Setup {
  if (!existsSync(join(model, "config.json"))) throw new Error(`${model}: no slice model (bench/run.ts generates it)`);
  const draft = join(ROOT, "models/slice-draft");
  if (!existsSync(join(draft, "model.safetensors"))) throw new Error(`${draft}: generate it first: bun tools/gen/draft.ts --target-dir ${model} --out ${draft} (and k3 pack ${draft} --draft int4)`);
  const context = 4096;
  const plus = parseSize(ram, "--ram") + draftBytes(model, draft, context, 256);
  return {
    model,
    draft,
    threads: 2,
    prompts: [[5, 17, 300, 42]],
    decodings: ["greedy"],
    rejectionArm: false,
    ngramArm: false,
    budgets: [
      { name: `${ram} (all arms)`, ram, context },
      { name: `${ram}, the model arm + its draft (${(plus / 2 ** 30).toFixed(2)} GiB)`, ram, draftRam: String(plus), context },
    ],
  };
}

/** The demo and its trained draft: held-out prose prompts; the demo's floor (+ 2 expert slots: the
 *  trunk streams) with the model arms given the draft's bytes on top; and resident. */
export async function demoSetup(): Promise<Setup> {
  const { ensureDemoModel, ensureDemoDraft } = await import("../src/cli/demo.ts");
  const model = ensureDemoModel();
  const draft = ensureDemoDraft();
  const evalSet = JSON.parse(readFileSync(join(ROOT, "assets/demo/draft-eval/heldout-greedy.json"), "utf8")) as { texts: number[][] };
  const prompts = evalSet.texts.slice(0, 4).map((t) => t.slice(0, 16));
  const context = 512;
  const ck = openCheckpoint(model);
  const input = planInputFromCensus(ck.config, ck.layout.census, 0, context, 2, 32, streamSlots(ck), 8);
  const floor = floorBytes(input, 32) + 2 * ck.layout.census.expertBytes;
  const plus = floor + draftBytes(model, draft, context, 32);
  return {
    model,
    draft,
    threads: 2,
    prompts,
    decodings: ["greedy", "sampled"],
    rejectionArm: true,
    ngramArm: true,
    budgets: [
      { name: `streaming: floor + 2 experts (${(floor / 2 ** 20).toFixed(1)} MiB; model arms + the draft: ${(plus / 2 ** 20).toFixed(1)} MiB)`, ram: String(floor), draftRam: String(plus), context },
      { name: "resident", resident: true, context },
    ],
  };
}
