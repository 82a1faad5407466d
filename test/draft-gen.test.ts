// Tests of the EAGLE-3 draft generator (tools/gen/draft.ts): the released format (DRAFTERS.md §1,
// format A) read back with a tiny parser below, not with the generator's own code; determinism;
// the embedding shared byte for byte with the target; the release's exact header size; and one
// broken variant per loader check, each refused by the float64 reference's reader.
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DRAFT_BREAKS, draftDims, RELEASE_DRAFT } from "../tools/gen/draft-plan.ts";
import { DRAFT_METADATA, generateDraft, planDraft } from "../tools/gen/draft.ts";
import { generateModel } from "../tools/gen/generate.ts";
import { buildHeader } from "../tools/gen/safetensors-writer.ts";
import { checkDraftTarget, ReferenceDraft } from "../tools/reference/draft.ts";
import { ReferenceModel } from "../tools/reference/model.ts";
import { scratchDir, tinyDraft, tinyModel } from "./helpers/models.ts";

interface Entry { dtype: string; shape: number[]; begin: number; end: number }

/** Independent parse of model.safetensors: 8-byte LE length, padded JSON, offsets tiling the data. */
function parse(dir: string): { meta: unknown; names: string[]; entries: Map<string, Entry>; bytes: Uint8Array; headerLen: number } {
  const bytes = new Uint8Array(readFileSync(join(dir, "model.safetensors")));
  const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
  const entries = new Map<string, Entry>();
  let at = 0;
  const names: string[] = [];
  for (const [name, v] of Object.entries<any>(header)) {
    if (name === "__metadata__") continue;
    expect(v.data_offsets[0]).toBe(at); // in file order, no gap
    at = v.data_offsets[1];
    names.push(name);
    entries.set(name, { dtype: v.dtype, shape: v.shape, begin: 8 + n + v.data_offsets[0], end: 8 + n + v.data_offsets[1] });
  }
  expect(8 + n + at).toBe(bytes.length);
  return { meta: header.__metadata__, names, entries, bytes, headerLen: n };
}

/** DRAFTERS.md §1.3 in symbols: H hidden, n_h heads, r_q/r_kv ranks, dn/dr/dv, I, V. */
function expectedRoster(d: ReturnType<typeof draftDims>, fcNorm: boolean): Record<string, number[]> {
  const H = d.hidden, a = "layers.0.self_attn.";
  return {
    "embed_tokens.weight": [d.vocab, H],
    "fc.weight": [H, 3 * H],
    ...(fcNorm ? { "fc_norm.0.weight": [H], "fc_norm.1.weight": [H], "fc_norm.2.weight": [H] } : {}),
    "layers.0.hidden_norm.weight": [H],
    "layers.0.input_layernorm.weight": [H],
    [a + "q_a_proj.weight"]: [d.qLoraRank, 2 * H],
    [a + "q_a_layernorm.weight"]: [d.qLoraRank],
    [a + "q_b_proj.weight"]: [d.heads * (d.qkNope + d.qkRope), d.qLoraRank],
    [a + "kv_a_proj_with_mqa.weight"]: [d.kvLoraRank + d.qkRope, 2 * H],
    [a + "kv_a_layernorm.weight"]: [d.kvLoraRank],
    [a + "kv_b_proj.weight"]: [d.heads * (d.qkNope + d.vHead), d.kvLoraRank],
    [a + "o_proj.weight"]: [H, d.heads * d.vHead],
    "layers.0.post_attention_layernorm.weight": [H],
    "layers.0.mlp.gate_proj.weight": [d.intermediate, H],
    "layers.0.mlp.up_proj.weight": [d.intermediate, H],
    "layers.0.mlp.down_proj.weight": [H, d.intermediate],
    "norm.weight": [H],
    "lm_head.weight": [d.vocab, H],
  };
}

const targetEmbedding = async (preset: string, seed = 1): Promise<Uint8Array> => {
  const dir = scratchDir(`target-${preset}-${seed}`);
  const r = await generateModel(dir, { preset, seed });
  return r.tensors.get("language_model.model.embed_tokens.weight")!.data!;
};

describe("draft generator: the released format", () => {
  for (const variant of ["eagle3.1", "eagle3"] as const) {
    test(`${variant}: every tensor of DRAFTERS.md §1.3, BF16, sorted by name, padded header, release metadata`, async () => {
      const dir = await tinyDraft("tiny-a", { variant });
      const f = parse(dir);
      const want = expectedRoster(draftDims({ hidden: 64, vocab: 1024 }), variant === "eagle3.1");
      expect(f.names).toEqual(Object.keys(want).sort());
      expect(f.names.length).toBe(variant === "eagle3.1" ? 20 : 17); // 20 − 3 fc_norm (DRAFTERS.md says 19: docs/DRAFT.md)
      for (const [name, shape] of Object.entries(want)) expect([name, f.entries.get(name)!.dtype, f.entries.get(name)!.shape]).toEqual([name, "BF16", shape]);
      expect(f.headerLen % 8).toBe(0);
      expect(f.meta).toEqual(DRAFT_METADATA);
      const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
      expect([cfg.fc_norm, cfg.norm_output]).toEqual(variant === "eagle3.1" ? [true, true] : [false, false]);
    });
  }

  test("config.json has every field of DRAFTERS.md §1.2 (one-based capture ids, the release's YaRN block)", async () => {
    const cfg = JSON.parse(readFileSync(join(await tinyDraft("tiny-a"), "config.json"), "utf8"));
    expect(cfg).toMatchObject({
      architectures: ["Eagle3DeepseekV2ForCausalLM"],
      model_type: "kimi_k2",
      hidden_size: 64,
      num_hidden_layers: 1,
      num_key_value_heads: cfg.num_attention_heads,
      hidden_act: "silu",
      rms_norm_eps: 1e-5,
      vocab_size: 1024,
      draft_vocab_size: 1024,
      torch_dtype: "bfloat16",
      rope_theta: 50000,
      max_position_embeddings: 1048576,
      mla_use_nope: true,
      tie_word_embeddings: false,
      bos_token_id: 1024 - 256,
      eos_token_id: 1024 - 254,
      pad_token_id: 0,
      rope_scaling: { type: "yarn", factor: 32, original_max_position_embeddings: 32768, beta_fast: 32, beta_slow: 1, mscale: 1, mscale_all_dim: 1 },
      eagle_config: { eagle_aux_hidden_state_layer_ids: [2, 4, 5], use_aux_hidden_state: true, use_input_layernorm_in_first_layer: true, use_last_layernorm: true, use_mtp_layernorm: false },
    });
    for (const k of ["intermediate_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]) expect(Number.isInteger(cfg[k])).toBe(true);
    const plain = JSON.parse(readFileSync(join(await tinyDraft("tiny-a", { rope: "plain" }), "config.json"), "utf8"));
    expect("rope_scaling" in plain).toBe(false);
    const dict = JSON.parse(readFileSync(join(await tinyDraft("tiny-a", { rope: "default-dict" }), "config.json"), "utf8"));
    expect(dict.rope_scaling).toEqual({ rope_type: "default", rope_theta: 50000 });
  });

  test("at K3's sizes the header is the release's 2,128 bytes and the file 6,031,253,592 bytes (eagle3.1)", () => {
    const k3 = { hidden: 7168, vocab: 163840, layers: 93 };
    const { spec, tensors } = planDraft({ target: {} }, k3);
    expect(spec.layerIds).toEqual([2, 46, 90]);
    expect(spec.dims).toMatchObject(RELEASE_DRAFT);
    const h = buildHeader(tensors, DRAFT_METADATA);
    expect(h.header.length - 8).toBe(2128);
    expect(h.header.length + h.dataBytes).toBe(6_031_253_592);
    const e3 = buildHeader(planDraft({ target: {}, variant: "eagle3" }, k3).tensors, DRAFT_METADATA);
    expect(e3.dataBytes / 2).toBe(3_015_604_224); // DRAFTERS.md §1.3's eagle3 parameter count
  });

  test("capture ids: the release's rule [2, ⌊L/2⌋, L−3], the last three layers for shallow targets", () => {
    const ids = (layers: number) => planDraft({ target: {} }, { hidden: 64, vocab: 1024, layers }).spec.layerIds;
    expect([ids(93), ids(8), ids(9), ids(7), ids(6), ids(4)]).toEqual([[2, 46, 90], [2, 4, 5], [2, 4, 6], [2, 3, 4], [4, 5, 6], [2, 3, 4]]);
  });
});

describe("draft generator: determinism and the shared embedding", () => {
  test("same target + options + seed → byte-identical files; another seed → other weights, same embedding", async () => {
    const a = scratchDir("draft-a"), b = scratchDir("draft-b"), c = scratchDir("draft-c");
    await generateDraft(a, { target: { preset: "tiny-b" } });
    await generateDraft(b, { target: { preset: "tiny-b" } });
    await generateDraft(c, { target: { preset: "tiny-b" }, seed: 2 });
    for (const f of ["config.json", "model.safetensors"]) expect(Buffer.compare(readFileSync(join(a, f)), readFileSync(join(b, f)))).toBe(0);
    const [pa, pc] = [parse(a), parse(c)];
    const slice = (p: ReturnType<typeof parse>, n: string) => p.bytes.subarray(p.entries.get(n)!.begin, p.entries.get(n)!.end);
    expect(Buffer.compare(slice(pa, "fc.weight"), slice(pc, "fc.weight"))).not.toBe(0);
    expect(Buffer.compare(slice(pa, "embed_tokens.weight"), slice(pc, "embed_tokens.weight"))).toBe(0);
  });

  test("embed_tokens is byte-identical to the target's (preset + seed, or read from the target folder); --embedding differ makes it differ", async () => {
    const emb = (dir: string) => {
      const p = parse(dir);
      const e = p.entries.get("embed_tokens.weight")!;
      return p.bytes.subarray(e.begin, e.end);
    };
    const seed1 = await targetEmbedding("tiny-a"), seed2 = await targetEmbedding("tiny-a", 2);
    expect(Buffer.compare(emb(await tinyDraft("tiny-a")), seed1)).toBe(0);
    expect(Buffer.compare(emb(await tinyDraft("tiny-a", { targetSeed: 2 })), seed2)).toBe(0);
    expect(Buffer.compare(seed1, seed2)).not.toBe(0);
    const fromDir = scratchDir("draft-from-dir");
    await generateDraft(fromDir, { target: { dir: await tinyModel("tiny-a") } });
    expect(Buffer.compare(readFileSync(join(fromDir, "model.safetensors")), readFileSync(join(await tinyDraft("tiny-a"), "model.safetensors")))).toBe(0);
    expect(Buffer.compare(emb(await tinyDraft("tiny-a", { embedding: "differ" })), seed1)).not.toBe(0);
  });

  test("the command line writes the same files and refuses a bad flag with exit 2, naming it", async () => {
    const out = scratchDir("draft-cli");
    const ok = Bun.spawnSync([process.execPath, "tools/gen/draft.ts", "--target", "tiny-c", "--variant", "eagle3", "--rope", "plain", "--out", out], { stderr: "pipe" });
    expect(ok.exitCode).toBe(0);
    const api = scratchDir("draft-api");
    await generateDraft(api, { target: { preset: "tiny-c" }, variant: "eagle3", rope: "plain" });
    expect(Buffer.compare(readFileSync(join(out, "model.safetensors")), readFileSync(join(api, "model.safetensors")))).toBe(0);
    const bad = Bun.spawnSync([process.execPath, "tools/gen/draft.ts", "--target", "tiny-c", "--rope", "neox", "--out", out], { stderr: "pipe" });
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr.toString()).toContain("--rope must be one of yarn, plain, default-dict, got neox");
  });
});

/** What each broken draft must make a reader say (the float64 reference's reader here). */
const REFUSAL: Record<(typeof DRAFT_BREAKS)[number], string> = {
  "missing-tensor": "layers.0.self_attn.kv_b_proj.weight is missing",
  "wrong-shape": "fc.weight: shape [64,128], want [64,192]",
  "wrong-dtype": "norm.weight: dtype F32, want BF16",
  "ids-out-of-range": "9 outside the target's one-based layers 1..8",
  "ids-zero": "must be strictly increasing one-based layer ids (≥ 1)",
  "ids-not-increasing": "must be strictly increasing one-based layer ids (≥ 1)",
  "hidden-mismatch": "hidden_size 32 ≠ the target's 64",
  "vocab-mismatch": "vocab_size 512 ≠ the target's 1024",
  "fc-norm-mismatch": "fc_norm.0.weight is missing",
  "missing-field": "qk_rope_head_dim must be a positive integer (missing)",
  "format-b": 'architectures[0] must be "Eagle3DeepseekV2ForCausalLM" (format A), got "LlamaEagle3DraftModel"',
  truncated: "runs past the file",
};

describe("draft generator: one broken variant per loader check", () => {
  for (const brk of DRAFT_BREAKS) {
    test(`${brk}: refused, naming the field or tensor`, async () => {
      const dir = await tinyDraft("tiny-a", { break: brk });
      expect(existsSync(join(dir, "model.safetensors"))).toBe(true);
      const target = ReferenceModel.open(await tinyModel("tiny-a"));
      expect(() => checkDraftTarget(ReferenceDraft.open(dir), target)).toThrow(REFUSAL[brk]);
    });
  }

  test("the unbroken draft passes the same checks (each refusal above is the break's doing)", async () => {
    const target = ReferenceModel.open(await tinyModel("tiny-a"));
    for (const opts of [{}, { variant: "eagle3" as const }, { rope: "plain" as const }, { rope: "default-dict" as const }, { embedding: "differ" as const }]) {
      const dir = await tinyDraft("tiny-a", opts);
      expect(() => checkDraftTarget(ReferenceDraft.open(dir), target)).not.toThrow();
    }
  });
});
