// config.json validation: the real release parses; every kind of bad field is refused with ONE
// K3Error("CONFIG") that lists every problem by JSON path.
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseConfig, readConfig } from "../src/checkpoint/config.ts";
import { catchK3, tempDir, tinyConfigJson } from "./helpers/checkpoint-fixture.ts";

const RELEASE_CONFIG = join(import.meta.dir, "../reference/k3/config.json");

function problemsOf(mutate: (j: any) => void) {
  const j = tinyConfigJson();
  mutate(j);
  const err = catchK3(() => parseConfig(j, "bad.json"));
  expect(err.code).toBe("CONFIG");
  expect(err.message).toContain("bad.json: invalid config");
  return err.problems;
}

describe("config: the release", () => {
  test("parses with the MODEL.md §2 values and the zero-based layer map", () => {
    const c = readConfig(RELEASE_CONFIG);
    expect(c.hidden).toBe(7168);
    expect(c.numLayers).toBe(93);
    expect(c.vocab).toBe(163840);
    expect(c.numExperts).toBe(896);
    expect(c.topK).toBe(16);
    expect(c.latent).toBe(3584);
    expect(c.kdaHeads).toBe(96);
    expect(c.kdaHeadDim).toBe(128);
    expect(c.bosTokenId).toBe(163584);
    expect(c.eosTokenId).toBe(163586);
    expect(c.padTokenId).toBe(163839);
    expect(c.rmsEps).toBe(1e-5);
    const mla = c.layerKinds.flatMap((k, i) => (k === "mla" ? [i] : []));
    expect(mla.length).toBe(24);
    expect(mla.slice(0, 3)).toEqual([3, 7, 11]);
    expect(mla.slice(-2)).toEqual([91, 92]); // one-based 92 and 93 (MODEL.md §7.8)
    expect(c.layerKinds.filter((k) => k === "kda").length).toBe(69);
  });
  test("the tiny fixture config parses", () => {
    const c = parseConfig(tinyConfigJson(), "tiny");
    expect(c.layerKinds).toEqual(["kda", "kda", "kda", "mla", "mla"]);
    expect(c.routedScaling).toBe(2.5);
  });
});

describe("config: refusals", () => {
  test("a missing field names its JSON path", () => {
    const p = problemsOf((j) => delete j.text_config.linear_attn_config.kda_layers);
    expect(p).toHaveLength(1);
    expect(p[0]).toContain("text_config.linear_attn_config.kda_layers: missing");
  });
  test("a mistyped field names its path and what was expected", () => {
    const p = problemsOf((j) => (j.text_config.hidden_size = "7168"));
    expect(p).toEqual([expect.stringContaining("text_config.hidden_size: expected an integer")]);
    const q = problemsOf((j) => (j.text_config.num_experts = 4.5));
    expect(q[0]).toContain("text_config.num_experts");
  });
  test("a missing top-level field and a missing text_config are named", () => {
    expect(problemsOf((j) => delete j.eos_token_id)).toEqual([expect.stringContaining("eos_token_id: missing")]);
    expect(problemsOf((j) => delete j.text_config)).toEqual([expect.stringContaining("text_config: missing")]);
  });
  test("three problems are reported together", () => {
    const p = problemsOf((j) => {
      delete j.text_config.vocab_size;
      j.text_config.rms_norm_eps = "tiny";
      j.text_config.num_experts_per_token = 5; // > 4 experts
    });
    expect(p).toHaveLength(3);
    expect(p.join("\n")).toContain("text_config.vocab_size");
    expect(p.join("\n")).toContain("text_config.rms_norm_eps");
    expect(p.join("\n")).toContain("top-k 5 exceeds num_experts 4");
  });
  test("layer index 0 (lists are one-based) is out of range", () => {
    const p = problemsOf((j) => (j.text_config.linear_attn_config.kda_layers = [0, 1, 2, 3]));
    expect(p.join("\n")).toMatch(/kda_layers: layer numbers are one-based 1\.\.5; out of range: 0/);
  });
  test("a layer number past num_hidden_layers is out of range, and the missing layer is named", () => {
    const p = problemsOf((j) => (j.text_config.linear_attn_config.full_attn_layers = [4, 6]));
    expect(p.join("\n")).toContain("out of range: 6");
    expect(p.join("\n")).toContain("in neither list: 5");
  });
  test("a layer in both lists is a duplicate", () => {
    const p = problemsOf((j) => (j.text_config.linear_attn_config.full_attn_layers = [3, 4, 5]));
    expect(p).toEqual([expect.stringContaining("listed more than once (in this or the other list): 3")]);
  });
  test("a layer in neither list is missing", () => {
    const p = problemsOf((j) => (j.text_config.linear_attn_config.kda_layers = [1, 3]));
    expect(p).toEqual([expect.stringContaining("in neither list: 2")]);
  });
  test("top-k greater than the expert count", () => {
    const p = problemsOf((j) => (j.text_config.num_experts_per_token = 9));
    expect(p).toEqual([expect.stringContaining("text_config.num_experts_per_token: top-k 9 exceeds num_experts 4")]);
  });
  test("more KDA heads than head_dim (A_log has head_dim entries)", () => {
    const p = problemsOf((j) => (j.text_config.linear_attn_config.num_heads = 5));
    expect(p).toEqual([expect.stringContaining("linear_attn_config.num_heads: 5 heads exceed head_dim 4")]);
  });
  test("unsupported forms are refused, each by name", () => {
    const p = problemsOf((j) => {
      j.text_config.hidden_act = "silu";
      j.text_config.moe_router_activation_func = "softmax";
      j.text_config.tie_word_embeddings = true;
      j.text_config.latent_moe_use_norm = false;
      j.text_config.mla_use_nope = false;
      j.text_config.num_expert_group = 8;
      j.text_config.first_k_dense_replace = 0;
    });
    const all = p.join("\n");
    for (const f of ["hidden_act", "moe_router_activation_func", "tie_word_embeddings", "latent_moe_use_norm", "mla_use_nope", "num_expert_group", "first_k_dense_replace"])
      expect(all).toContain(`text_config.${f}`);
    expect(p).toHaveLength(7);
  });
  test("grouping fields are only checked when grouped top-k is on", () => {
    const j = tinyConfigJson();
    j.text_config.use_grouped_topk = false;
    j.text_config.num_expert_group = 8;
    expect(parseConfig(j, "x").numExperts).toBe(4);
  });
  test("an expert size that is not a multiple of the MXFP4 group", () => {
    expect(problemsOf((j) => (j.text_config.routed_expert_hidden_size = 48))).toEqual([expect.stringContaining("not a multiple of the MXFP4 group 32")]);
  });
  test("readConfig: unreadable and non-JSON files are CONFIG errors naming the file", () => {
    const dir = tempDir("cfg");
    const bad = join(dir, "config.json");
    writeFileSync(bad, "{ not json");
    const e1 = catchK3(() => readConfig(bad));
    expect(e1.code).toBe("CONFIG");
    expect(e1.message).toContain(bad);
    const e2 = catchK3(() => readConfig(join(dir, "absent.json")));
    expect(e2.code).toBe("CONFIG");
    expect(e2.message).toContain("absent.json");
  });
});

describe("corrupt values are problems, never crashes", () => {
  test("a null quantization group and an absurd layer count are listed like any other problem", () => {
    const j = tinyConfigJson() as any;
    const groups = j.text_config.quantization_config.config_groups;
    groups[Object.keys(groups)[0]!] = null;
    j.text_config.num_hidden_layers = 1e15;
    const err = catchK3(() => parseConfig(j, "test"));
    expect(err.code).toBe("CONFIG");
    expect(err.problems.some((p) => p.includes("config_groups") && p.includes("null"))).toBe(true);
    expect(err.problems.some((p) => p.includes("num_hidden_layers") && p.includes("implausible"))).toBe(true);
  });
});
