// On paper (MODELLED, not measured): what the released K3 EAGLE-3 draft's published acceptance
// would give on the real model at the laptop, desktop and workstation presets, from the planner's
// own counts (docs/DRAFT.md "On paper"). The release's metadata (reference/k3/) and a draft with the
// release's exact roster (a header-only file of the pinned 6,031,253,592 bytes, made here in a
// temp folder: no weights are read) go through the same planner the engine follows; the draft is
// held as released (bf16) and as an int4 pack would be.
//
//   bun run bench/draft-paper.ts
//
// A pass over T = 1 + k positions reads the streamed trunk once and the distinct experts of its
// positions, D(T) = N·(1 − (1 − K/N)^T) per MoE layer (uniform routing, the planner's model: K3's
// router is trained for balanced load), that miss the cache (the plan's share). Plain decoding
// reads the streamed trunk and K experts per layer per token. Bytes per generated token = bytes
// per pass ÷ tokens per verify pass, at the published acceptance lengths for 3 drafts per pass.
import { closeSync, ftruncateSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { catalogueFromMetadata } from "../src/checkpoint/catalogue.ts";
import { openDraftCheckpoint } from "../src/checkpoint/draft.ts";
import { draftPlanInput, releasedDraftSources } from "../src/memory/draft-plan.ts";
import { draftPackLayout } from "../src/memory/draft-pack.ts";
import { metadataTrunkSlots } from "../src/memory/pack.ts";
import { planInputFromCensus, planMemory, type MemoryPlan } from "../src/memory/plan.ts";
import { PRESETS } from "../src/memory/ram.ts";
import { defaultLayerIds, draftConfigJson, draftDims, draftTensors } from "../tools/gen/draft-plan.ts";
import { DRAFT_METADATA } from "../tools/gen/draft.ts";
import { buildHeader } from "../tools/gen/safetensors-writer.ts";

const ROOT = join(import.meta.dir, "..");
/** Published tokens per verify pass with 3 drafts (DRAFTERS.md §4.2, kimi-k3-eagle3-mla, TokenSpeed). */
const PUBLISHED: [string, number][] = [
  ["long chat prompts", 1.94],
  ["MT-Bench", 2.794],
  ["GSM8K", 3.556],
];
const DRAFTS = 3;

function headerOnlyDraft(): string {
  const dir = mkdtempSync(join(tmpdir(), "k3-draft-paper-"));
  const spec = { dims: draftDims({ hidden: 7168, vocab: 163840 }), variant: "eagle3.1" as const, rope: "yarn" as const, layerIds: defaultLayerIds(93) };
  writeFileSync(join(dir, "config.json"), JSON.stringify(draftConfigJson(spec)));
  const { header, dataBytes } = buildHeader(draftTensors(spec), DRAFT_METADATA);
  const fd = openSync(join(dir, "model.safetensors"), "w");
  writeSync(fd, header);
  ftruncateSync(fd, header.length + dataBytes); // sparse: the planner reads the header only
  closeSync(fd);
  return dir;
}

/** Disk bytes of a pass over T positions under `plan`. */
function passBytes(plan: MemoryPlan, cfg: { numExperts: number; topK: number }, T: number, expertBytes: number, moeLayers: number): number {
  const N = cfg.numExperts;
  const K = cfg.topK;
  const miss = Math.max(0, 1 - plan.expertSlots / plan.expertCount);
  return plan.streamedBytesPerToken + moeLayers * expertBytes * miss * N * (1 - (1 - K / N) ** T);
}

/** The per-draft acceptance a with 1 + a + a² + a³ = al (bisection). */
function perDraft(al: number): number {
  let lo = 0;
  let hi = 0.999999;
  for (let i = 0; i < 60; i++) {
    const m = (lo + hi) / 2;
    if (1 + m + m * m + m * m * m < al) lo = m;
    else hi = m;
  }
  return lo;
}

const dir = headerOnlyDraft();
try {
  const cat = catalogueFromMetadata(join(ROOT, "reference/k3/config.json"), join(ROOT, "reference/k3/model.safetensors.index.json.gz"));
  const cfg = cat.config;
  const ck = openDraftCheckpoint(dir, cfg);
  const context = 4096;
  const rows: string[] = [];
  const moe = cfg.numLayers - cfg.firstKDense;
  for (const preset of ["laptop", "desktop", "workstation"] as const) {
    const base = planInputFromCensus(cfg, cat.census, PRESETS[preset]!, context, 16, 32, metadataTrunkSlots(cfg, "bf16"), DRAFTS);
    const off = planMemory(base);
    const offBytes = passBytes(off, cfg, 1, cat.census.expertBytes, moe);
    for (const format of ["bf16", "int4"] as const) {
      const sources = format === "bf16" ? releasedDraftSources(ck) : draftPackLayout(ck, "int4").tensors;
      const draft = draftPlanInput(ck, { context, drafts: DRAFTS, sharedEmbedding: true, sources, format });
      const plan = planMemory({ ...base, draft });
      const pass = passBytes(plan, cfg, 1 + DRAFTS, cat.census.expertBytes, moe);
      // At the per-draft acceptance a that gives the published length at 3 drafts (1 + a + a² + a³),
      // the draft length k ≤ 3 the cost model would take (most tokens per byte; 0: plain decoding).
      const cells = PUBLISHED.map(([, al]) => {
        const a = perDraft(al);
        let best = { k: 0, bytes: offBytes };
        for (let k = 1; k <= DRAFTS; k++) {
          const e = (1 - a ** (k + 1)) / (1 - a);
          const b = passBytes(plan, cfg, 1 + k, cat.census.expertBytes, moe) / e;
          if (b < best.bytes) best = { k, bytes: b };
        }
        return `${(pass / al / 1e9).toFixed(1)} GB (${(offBytes / (pass / al)).toFixed(2)}×); best k ${best.k}: ${(best.bytes / 1e9).toFixed(1)} GB (${(offBytes / best.bytes).toFixed(2)}×)`;
      });
      rows.push(`| ${preset} (${PRESETS[preset]! / 2 ** 30} GiB) | ${format} ${(draft.weightBytes / 2 ** 30).toFixed(2)} GiB | ${(offBytes / 1e9).toFixed(1)} GB | ${(off.streamedBytesPerToken / 1e9).toFixed(1)} → ${(plan.streamedBytesPerToken / 1e9).toFixed(1)} GB | ${(pass / 1e9).toFixed(1)} GB | ${cells.join(" | ")} |`);
    }
  }
  process.stdout.write(
    [
      `MODELLED (planner's counts, uniform routing, published acceptance; not measured). Context ${context}, chunk 32, 16 threads, ${DRAFTS} drafts per verify pass.`,
      "",
      `| preset | draft held | off: GB / token | streamed trunk per pass (off → with draft) | verify pass of ${1 + DRAFTS} (GB) | ${PUBLISHED.map(([n, al]) => `${n} (AL ${al} at 3 drafts): GB / generated token at 3 drafts; at the best k`).join(" | ")} |`,
      `|---|---|---|---|---|${PUBLISHED.map(() => "---|").join("")}`,
      ...rows,
      "",
    ].join("\n"),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
