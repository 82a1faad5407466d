// Loading a draft (src/checkpoint/draft.ts, draft-config.ts): every check runs before a weight is
// read, and every broken draft tools/gen/draft.ts makes is refused naming the field or tensor, with
// the error code that gives docs/CLI.md's exit status (CONFIG → 2, CHECKPOINT → 4). The embedding
// is shared exactly when the draft's table equals the target's on the sampled rows.
import { describe, expect, test } from "bun:test";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { embedSampleRows, openDraftCheckpoint, sameEmbedding } from "../src/checkpoint/draft.ts";
import { K3Error } from "../src/errors.ts";
import { DRAFT_BREAKS } from "../tools/gen/draft-plan.ts";
import { flipByte, scratchDir, tinyDraft, tinyModel } from "./helpers/models.ts";

/** The error opening `draftDir` for the tiny-a target gives: its code, message and details in one string. */
async function refusal(draftDir: string): Promise<{ code: string; text: string }> {
  const cfg = openCheckpoint(await tinyModel("tiny-a")).config;
  try {
    openDraftCheckpoint(draftDir, cfg);
  } catch (err) {
    if (!(err instanceof K3Error)) throw err;
    return { code: err.code, text: err.message }; // the message carries every problem
  }
  throw new Error(`${draftDir} was accepted`);
}

/** What each broken draft must be refused with: the error code and words that name the defect. */
const EXPECTED: Record<(typeof DRAFT_BREAKS)[number], { code: string; names: RegExp }> = {
  "missing-tensor": { code: "CHECKPOINT", names: /layers\.0\.self_attn\.kv_b_proj\.weight: missing/ },
  "wrong-shape": { code: "CHECKPOINT", names: /fc\.weight: BF16 \[64,128\], expected BF16 \[64,192\]/ },
  "wrong-dtype": { code: "CHECKPOINT", names: /norm\.weight: F32 \[64\], expected BF16/ },
  "ids-out-of-range": { code: "CONFIG", names: /eagle_aux_hidden_state_layer_ids: 9 outside the target's completed layers 1\.\.8/ },
  "ids-zero": { code: "CONFIG", names: /eagle_aux_hidden_state_layer_ids: 0 outside the target's completed layers 1\.\.8/ },
  "ids-not-increasing": { code: "CONFIG", names: /eagle_aux_hidden_state_layer_ids: ids must be ascending and distinct/ },
  "hidden-mismatch": { code: "CONFIG", names: /hidden_size: 32, the target's is 64/ },
  "vocab-mismatch": { code: "CONFIG", names: /vocab_size: 512, the target's is 1024/ },
  "fc-norm-mismatch": { code: "CONFIG", names: /fc_norm: true, but the checkpoint has no fc_norm\.\*\.weight tensors/ },
  "missing-field": { code: "CONFIG", names: /qk_rope_head_dim: missing/ },
  "format-b": { code: "CHECKPOINT", names: /NeMo Automodel's K3 EAGLE-3 draft \("format B"\)/ },
  truncated: { code: "CHECKPOINT", names: /model\.safetensors/ },
};

describe("broken drafts are refused by name, before any weight is read", () => {
  for (const brk of DRAFT_BREAKS)
    test(brk, async () => {
      const got = await refusal(await tinyDraft("tiny-a", { break: brk }));
      const want = EXPECTED[brk];
      expect(got.code).toBe(want.code);
      expect(got.text).toMatch(want.names);
    });

  test("every tensor problem at once (a draft with two defects names both)", async () => {
    const dir = join(scratchDir("draft-two"), "d");
    cpSync(await tinyDraft("tiny-a", { break: "missing-tensor" }), dir, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    writeFileSync(join(dir, "config.json"), JSON.stringify({ ...cfg, intermediate_size: cfg.intermediate_size * 2 }));
    const got = await refusal(dir);
    expect(got.text).toMatch(/kv_b_proj\.weight: missing/);
    expect(got.text).toMatch(/mlp\.gate_proj\.weight: BF16 \[128,64\], expected BF16 \[256,64\]/);
  });

  test("config fields the math depends on: a YaRN block without beta_fast, a compressed vocabulary, two layers, another activation", async () => {
    const base = await tinyDraft("tiny-a", {});
    const edits: [Record<string, unknown>, RegExp][] = [
      [{ rope_scaling: { type: "yarn", factor: 32, original_max_position_embeddings: 32768, beta_slow: 1, mscale: 1, mscale_all_dim: 1 } }, /rope_scaling\.beta_fast: missing/],
      [{ draft_vocab_size: 32000 }, /draft_vocab_size: number 32000: a compressed draft vocabulary/],
      [{ num_hidden_layers: 2 }, /num_hidden_layers: 2 is not supported/],
      [{ hidden_act: "situ" }, /hidden_act: "situ" is not supported/],
      [{ rope_scaling: { type: "linear", factor: 2 } }, /rope_scaling\.type: the string "linear" is not supported/],
      [{ architectures: ["DeepseekV3ForCausalLM"] }, /"DeepseekV3ForCausalLM" is not a draft k3 runs/],
    ];
    for (const [edit, names] of edits) {
      const dir = join(scratchDir("draft-cfg"), "d");
      cpSync(base, dir, { recursive: true });
      const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
      writeFileSync(join(dir, "config.json"), JSON.stringify({ ...cfg, ...edit }));
      const got = await refusal(dir);
      expect({ edit, code: got.code }).toEqual({ edit, code: "CONFIG" });
      expect(got.text).toMatch(names);
    }
  });

  test("eagle_config nested under text_config is read (DRAFTERS.md §1.2); a folder without config.json is not a draft", async () => {
    const dir = join(scratchDir("draft-nested"), "d");
    cpSync(await tinyDraft("tiny-a", {}), dir, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    const { eagle_config, ...rest } = cfg;
    writeFileSync(join(dir, "config.json"), JSON.stringify({ ...rest, text_config: { eagle_config } }));
    const target = openCheckpoint(await tinyModel("tiny-a")).config;
    expect(openDraftCheckpoint(dir, target).config.captureLayers).toEqual(eagle_config.eagle_aux_hidden_state_layer_ids);
    const empty = scratchDir("draft-empty");
    expect((await refusal(empty)).code).toBe("CONFIG");
  });
});

describe("a released-format draft loads, its embedding shared when equal", () => {
  test("eagle3.1 and eagle3, YaRN and plain: config read as written", async () => {
    const target = openCheckpoint(await tinyModel("tiny-a")).config;
    const a = openDraftCheckpoint(await tinyDraft("tiny-a", { variant: "eagle3.1", rope: "yarn" }), target);
    expect({ variant: a.config.variant, fcNorm: a.config.fcNorm, normOutput: a.config.normOutput, rope: a.config.rope.kind, ids: a.config.captureLayers, tensors: a.tensors.size }).toEqual({
      variant: "eagle3.1", fcNorm: true, normOutput: true, rope: "yarn", ids: [2, 4, 5], tensors: 19,
    });
    const b = openDraftCheckpoint(await tinyDraft("tiny-a", { variant: "eagle3", rope: "default-dict" }), target);
    expect({ variant: b.config.variant, fcNorm: b.config.fcNorm, normOutput: b.config.normOutput, rope: b.config.rope.kind, tensors: b.tensors.size }).toEqual({ variant: "eagle3", fcNorm: false, normOutput: false, rope: "default", tensors: 16 });
  });

  test("sameEmbedding: true for a copy of the target's table, false for another, false when one sampled row differs", async () => {
    const targetDir = await tinyModel("tiny-a");
    const ck = openCheckpoint(targetDir);
    const table = ck.tensors.get("language_model.model.embed_tokens.weight")!;
    const same = openDraftCheckpoint(await tinyDraft("tiny-a", {}), ck.config);
    const other = openDraftCheckpoint(await tinyDraft("tiny-a", { embedding: "differ" }), ck.config);
    expect(sameEmbedding(same.embed!, table)).toBe(true);
    expect(sameEmbedding(other.embed!, table)).toBe(false);
    // One flipped byte in a sampled row is seen; the check reads only the sampled rows.
    const dir = join(scratchDir("draft-emb"), "d");
    cpSync(await tinyDraft("tiny-a", {}), dir, { recursive: true });
    const d = openDraftCheckpoint(dir, ck.config);
    const rows = embedSampleRows(ck.config.vocab);
    expect(rows.length).toBe(64);
    flipByte(d.file, d.embed!.offset + rows[7]! * ck.config.hidden * 2 + 3);
    expect(sameEmbedding(d.embed!, table)).toBe(false);
  });
});
