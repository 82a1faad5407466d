// The engine's EAGLE-3 draft (src/model/draft.ts) against the float64 reference
// (tools/reference/draft.ts, which imports nothing from src/): the target's captured taps, the
// committed cache rows, and the chain's logits step by step, within a tolerance derived below (and
// in docs/NUMERICS.md §6); the drafts themselves equal the reference's argmax wherever the
// reference's top-2 gap is larger than twice the tolerance. Every variant that changes the math
// runs: eagle3.1 (fc_norm, post-norm feedback) and eagle3 (pre-norm feedback), YaRN and plain RoPE,
// shared and own embedding, on tiny targets with different widths.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { openDraftCheckpoint, sameEmbedding } from "../src/checkpoint/draft.ts";
import type { ModelConfig } from "../src/checkpoint/types.ts";
import { loadKernels } from "../src/kernels.ts";
import { DraftModel } from "../src/model/draft.ts";
import { DraftWeights } from "../src/model/draft-weights.ts";
import { releasedDraftSources } from "../src/memory/draft-plan.ts";
import { Model } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { SessionState } from "../src/model/state.ts";
import { draftChain, ReferenceDraft } from "../tools/reference/draft.ts";
import { ReferenceModel } from "../tools/reference/model.ts";
import { scratchDir, tinyDraft, tinyModel } from "./helpers/models.ts";
import { draftTolerance } from "./helpers/tolerance.ts";

setDefaultTimeout(120_000);

const k = loadKernels();
const PROMPT = [5, 17, 300, 42, 7, 99, 3, 700, 12, 64, 250, 9];
const K = 4;

interface Engine {
  cfg: ModelConfig;
  model: Model;
  draft: DraftModel;
  weights: ResidentWeights;
  close(): void;
}

/** The target (resident) with capture, and the draft on it, at the model level. */
function open(targetDir: string, draftDir: string, chunk = 64): Engine {
  const ck = openCheckpoint(targetDir);
  const cfg = ck.config;
  const weights = new ResidentWeights(k, cfg, ck.tensors);
  const dck = openDraftCheckpoint(draftDir, cfg);
  const shared = dck.embed !== undefined && sameEmbedding(dck.embed, ck.tensors.get("language_model.model.embed_tokens.weight")!);
  const dw = new DraftWeights(k, releasedDraftSources(dck), shared ? undefined : dck.embed);
  const draft = new DraftModel(k, cfg, dck, dw, shared ? (id, dst) => weights.embedRow(id, dst) : (id, dst) => dw.embedRow(id, dst), 256, K);
  const model = new Model(k, cfg, weights, chunk, 256, K, 1, dck.config.captureLayers);
  model.tapSink = draft;
  return { cfg, model, draft, weights, close: () => (model.free(), draft.free(), weights.close()) };
}

function session(e: Engine): SessionState {
  const s = new SessionState(k, e.cfg, 256);
  s.draft = e.draft.newState();
  return s;
}

/** A copy of a draft whose rms_norm_eps is large: a norm that ignores the config's eps (the target's
 *  LoRA norms use 1e-6, the draft's must not) then moves the logits far past the tolerance. */
async function largeEpsDraft(preset: string): Promise<string> {
  const src = await tinyDraft(preset, { variant: "eagle3.1", rope: "yarn", seed: 3 });
  const dir = join(scratchDir("draft-eps"), "d");
  cpSync(src, dir, { recursive: true });
  const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  writeFileSync(join(dir, "config.json"), JSON.stringify({ ...cfg, rms_norm_eps: 0.5 }));
  return dir;
}

const CASES: { preset: string; opts: Record<string, string>; dir?: (preset: string) => Promise<string> }[] = [
  { preset: "tiny-a", opts: { variant: "eagle3.1", rope: "yarn" } },
  { preset: "tiny-a", opts: { variant: "eagle3", rope: "plain" } },
  { preset: "tiny-b", opts: { variant: "eagle3.1", rope: "default-dict" } },
  { preset: "tiny-c", opts: { variant: "eagle3", rope: "yarn", embedding: "differ" } },
  { preset: "tiny-a", opts: { rms_norm_eps: "0.5" }, dir: largeEpsDraft },
];

describe("draft logits against the float64 reference", () => {
  for (const c of CASES)
    test(`${c.preset} ${JSON.stringify(c.opts)}: the chain of ${K} after a ${PROMPT.length}-token prompt, every step within the tolerance`, async () => {
      const targetDir = await tinyModel(c.preset);
      const draftDir = c.dir ? await c.dir(c.preset) : await tinyDraft(c.preset, c.opts);
      const e = open(targetDir, draftDir);
      try {
        const s = session(e);
        const logits = e.model.forward(s, PROMPT)!;
        const next = k.k3_argmax(logits, logits.length);
        const got = e.draft.propose(s, next, K, { logits: true });
        const target = ReferenceModel.open(targetDir);
        const rdraft = ReferenceDraft.open(draftDir); // its own table: equal to the target's unless "differ"
        const ref = draftChain(target, rdraft, PROMPT, K);
        expect(ref.next).toBe(next);
        expect(got.tokens.length).toBe(K);
        const tol = draftTolerance(e.cfg, e.draft.cfg, K);
        for (let i = 0; i < K; i++) {
          const want = ref.steps[i]!.logits;
          const maxLogit = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
          let err = 0;
          for (let v = 0; v < want.length; v++) err = Math.max(err, Math.abs(got.logits[i]![v]! - want[v]!));
          expect({ step: i, within: err <= tol * Math.max(1, maxLogit) }).toEqual({ step: i, within: true });
          // The draft token: the reference's argmax where its top-2 gap is clearly above the error.
          const sorted = [...want].sort((a, b) => b - a);
          if (sorted[0]! - sorted[1]! > 2 * tol * Math.max(1, maxLogit)) expect({ step: i, draft: got.tokens[i] }).toEqual({ step: i, draft: ref.drafts[i]! });
          // The chain follows the engine's own drafts: compare only while they agree.
          if (got.tokens[i] !== ref.drafts[i]) break;
        }
      } finally {
        e.close();
      }
    });
});
