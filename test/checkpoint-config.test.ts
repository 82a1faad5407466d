// config.json validation: the real release parses; every kind of bad field is refused with ONE
// K3Error("CONFIG") that lists every problem by JSON path.
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { CONFIG_BOUNDS, parseConfig, readConfig } from "../src/checkpoint/config.ts";
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

describe("every dimension is bounded, named by its JSON path (issue 9 item 6)", () => {
  // Each integer field with the bound it must not exceed: one past it is refused by name.
  const B = CONFIG_BOUNDS;
  const fields: [string, number][] = [
    ["text_config.hidden_size", B.hidden], ["text_config.num_hidden_layers", B.layers],
    ["text_config.vocab_size", B.vocab], ["text_config.max_position_embeddings", B.positions],
    ["text_config.attn_res_block_size", B.layers], ["text_config.first_k_dense_replace", B.layers],
    ["text_config.intermediate_size", B.denseInter], ["text_config.num_experts", B.experts],
    ["text_config.num_experts_per_token", B.experts], ["text_config.num_shared_experts", B.sharedExperts],
    ["text_config.moe_intermediate_size", B.expertDim], ["text_config.routed_expert_hidden_size", B.expertDim],
    ["text_config.num_attention_heads", B.heads], ["text_config.q_lora_rank", B.rank], ["text_config.kv_lora_rank", B.rank],
    ["text_config.qk_nope_head_dim", B.headDim], ["text_config.qk_rope_head_dim", B.headDim], ["text_config.v_head_dim", B.headDim],
    ["text_config.linear_attn_config.num_heads", B.heads], ["text_config.linear_attn_config.head_dim", B.headDim],
    ["text_config.linear_attn_config.short_conv_kernel_size", B.convKernel],
    ["bos_token_id", B.vocab - 1], ["eos_token_id", B.vocab - 1], ["pad_token_id", B.vocab - 1],
  ];
  const set = (j: any, path: string, v: unknown) => {
    const keys = path.split(".");
    let o = j;
    for (const k of keys.slice(0, -1)) o = o[k];
    o[keys.at(-1)!] = v;
  };
  for (const [path, max] of fields)
    test(`${path} above ${max} is refused`, () => {
      const p = problemsOf((j) => set(j, path, max + 1));
      expect(p.some((x) => x.startsWith(`${path}: ${max + 1} is implausible`))).toBe(true);
    });
  test("num_experts 1e6 is refused before any tensor list is built (it once took 9 GB)", () => {
    expect(problemsOf((j) => (j.text_config.num_experts = 1e6))).toContainEqual(expect.stringContaining("text_config.num_experts: 1000000 is implausible"));
  });
  test("routed experts (MoE layers × num_experts) are bounded together", () => {
    const p = problemsOf((j) => {
      j.text_config.num_experts = B.experts; // within its own bound; 5 MoE layers × 65536 is not
      j.text_config.num_hidden_layers = 6;
      j.text_config.linear_attn_config.full_attn_layers = [4, 5, 6];
    });
    expect(p).toEqual([expect.stringContaining(`text_config.num_experts: ${B.experts} experts × 5 MoE layers = ${5 * B.experts} routed experts is implausible`)]);
  });
  test("max_position_embeddings 0 and missing are refused", () => {
    expect(problemsOf((j) => (j.text_config.max_position_embeddings = 0))).toEqual([expect.stringContaining("text_config.max_position_embeddings: expected an integer from 1")]);
    expect(problemsOf((j) => delete j.text_config.max_position_embeddings)).toEqual([expect.stringContaining("text_config.max_position_embeddings: missing")]);
  });
  test("an eos/bos/pad id outside the vocabulary is refused; text_config's copy must agree", () => {
    expect(problemsOf((j) => (j.eos_token_id = 12))).toEqual(["eos_token_id: 12 is outside the vocabulary (vocab_size 12: ids 0..11)"]);
    expect(problemsOf((j) => (j.pad_token_id = 99))).toEqual([expect.stringContaining("pad_token_id: 99 is outside the vocabulary")]);
    expect(problemsOf((j) => (j.text_config.eos_token_id = 5))).toEqual([expect.stringContaining("text_config.eos_token_id: number 5 disagrees with the top-level eos_token_id number 2")]);
    const ok = tinyConfigJson();
    ok.text_config.eos_token_id = 2;
    expect(parseConfig(ok, "x").eosTokenId).toBe(2);
  });
  test("moe_renormalize false is refused (the router always renormalises; issue 17 item 3)", () => {
    expect(problemsOf((j) => (j.text_config.moe_renormalize = false))).toEqual([expect.stringContaining("text_config.moe_renormalize: false is not supported (expected true: the router always renormalises")]);
  });
});

describe("a config past what the kernels implement (issue 17 item 3)", () => {
  test("is refused by name before any work: experts, AttnRes sources, MXFP4 groups, conv width", async () => {
    const { checkKernelLimits } = await import("../src/model/forward.ts");
    const { kernelLimits, loadKernels } = await import("../src/kernels.ts");
    const k = loadKernels();
    const lim = kernelLimits(k);
    const ok = parseConfig(tinyConfigJson(), "tiny.json");
    expect(() => checkKernelLimits(k, ok)).not.toThrow();
    const past = { ...ok, numExperts: lim.routerExperts + 1, numLayers: lim.attnResSources, attnResBlock: 1, latent: 48, convKernel: lim.kdaConvWidth - 1 };
    const err = catchK3(() => checkKernelLimits(k, past));
    expect(err.code).toBe("CONFIG");
    expect(err.problems).toEqual([
      `num_experts ${lim.routerExperts + 1} > ${lim.routerExperts} (k3_router_topk's limit)`,
      `${lim.attnResSources + 1} AttnRes sources > ${lim.attnResSources} (k3_attnres_mix's limit)`,
      `routed_expert_hidden_size 48 and moe_intermediate_size ${ok.moeInter} must be multiples of ${lim.mxfp4Group} (MXFP4 groups)`,
      `short_conv_kernel_size ${lim.kdaConvWidth - 1}: the KDA conv kernel is width ${lim.kdaConvWidth}`,
    ]);
  });
});
