// Shapes the config implies (MODEL.md §3), checked on the real release config by explicit values.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { readConfig } from "../src/checkpoint/config.ts";
import { computeCensus } from "../src/checkpoint/census.ts";
import { expectedTensors, expertBytes, expertTensorNames, tensorBytes, unitMatrices } from "../src/checkpoint/shapes.ts";
import { tinyConfig } from "./helpers/checkpoint-fixture.ts";

const cfg = readConfig(join(import.meta.dir, "../reference/k3/config.json"));
const specs = expectedTensors(cfg);
const byName = new Map(specs.map((s) => [s.name, s]));
const spec = (n: string) => byName.get(`language_model.model.${n}`);

describe("shapes of the release", () => {
  test("counts: 2,460 non-expert and 494,592 expert tensors, no duplicate names", () => {
    expect(specs.filter((s) => s.cls !== "expert").length).toBe(2460);
    expect(specs.filter((s) => s.cls === "expert").length).toBe(494592);
    expect(byName.size).toBe(specs.length);
  });
  test("one expert is 17,547,264 bytes in six U8 tensors", () => {
    expect(expertBytes(cfg)).toBe(17547264);
    const names = expertTensorNames(5, 7);
    expect(names[0]).toBe("language_model.model.layers.5.block_sparse_moe.experts.7.w1.weight_packed");
    expect(names.map((n) => n.split("experts.7.")[1])).toEqual([
      "w1.weight_packed", "w1.weight_scale", "w2.weight_packed", "w2.weight_scale", "w3.weight_packed", "w3.weight_scale",
    ]);
    const six = names.map((n) => byName.get(n)!);
    expect(six.map((s) => s.shape)).toEqual([[3072, 1792], [3072, 112], [3584, 1536], [3584, 96], [3072, 1792], [3072, 112]]);
    expect(six.every((s) => s.dtype === "U8" && s.layer === 5 && s.expert === 7 && s.cls === "expert")).toBe(true);
    expect(six.reduce((a, s) => a + tensorBytes(s), 0)).toBe(17547264);
  });
  test("KDA tensors: A_log has head_dim entries, conv1d is [P,1,4] F32", () => {
    expect(spec("layers.0.self_attn.A_log")).toMatchObject({ shape: [128], dtype: "F32", cls: "trunk", layer: 0 });
    expect(spec("layers.1.self_attn.q_conv1d.weight")).toMatchObject({ shape: [12288, 1, 4], dtype: "F32" });
    expect(spec("layers.1.self_attn.dt_bias")).toMatchObject({ shape: [12288], dtype: "F32" });
    expect(spec("layers.1.self_attn.o_norm.weight")).toMatchObject({ shape: [128], dtype: "F32" });
    expect(spec("layers.1.self_attn.f_b_proj.weight")).toMatchObject({ shape: [12288, 128], dtype: "BF16" });
    expect(spec("layers.1.self_attn.b_proj.weight")).toMatchObject({ shape: [96, 7168], dtype: "BF16" });
    expect(spec("layers.1.self_attn.o_proj.weight")).toMatchObject({ shape: [7168, 12288] });
  });
  test("MLA tensors (layer 3) and no KDA tensors there", () => {
    expect(spec("layers.3.self_attn.q_b_proj.weight")!.shape).toEqual([96 * 192, 1536]);
    expect(spec("layers.3.self_attn.kv_a_proj_with_mqa.weight")!.shape).toEqual([576, 7168]);
    expect(spec("layers.3.self_attn.kv_b_proj.weight")!.shape).toEqual([96 * 256, 512]);
    expect(spec("layers.3.self_attn.o_proj.weight")!.shape).toEqual([7168, 96 * 128]);
    expect(spec("layers.3.self_attn.A_log")).toBeUndefined();
    expect(spec("layers.92.self_attn.q_a_layernorm.weight")!.shape).toEqual([1536]);
  });
  test("dense layer 0 and MoE layers", () => {
    expect(spec("layers.0.mlp.down_proj.weight")!.shape).toEqual([7168, 33792]);
    expect(spec("layers.0.block_sparse_moe.gate.weight")).toBeUndefined();
    expect(spec("layers.1.mlp.down_proj.weight")).toBeUndefined();
    expect(spec("layers.1.block_sparse_moe.gate.e_score_correction_bias")).toMatchObject({ shape: [896], dtype: "F32" });
    expect(spec("layers.1.block_sparse_moe.shared_experts.down_proj.weight")!.shape).toEqual([7168, 6144]);
    expect(spec("layers.1.block_sparse_moe.routed_expert_up_proj.weight")!.shape).toEqual([7168, 3584]);
  });
  test("globals: untied lm_head under its own prefix", () => {
    expect(byName.get("language_model.lm_head.weight")).toMatchObject({ shape: [163840, 7168], cls: "head" });
    expect(spec("embed_tokens.weight")).toMatchObject({ shape: [163840, 7168], cls: "embed" });
    expect(spec("output_attn_res_proj.weight")).toMatchObject({ shape: [1, 7168], cls: "final" });
  });
  test("census: trunk, experts, embedding + lm_head", () => {
    const c = computeCensus(cfg);
    expect(c.trunkBytes).toBe(108_811_877_376);
    expect(c.expertCount).toBe(82_432);
    expect(c.embedBytes + c.headBytes).toBe(4_697_620_480);
    expect(c.nonExpertTensors).toBe(2460);
    const sum = specs.reduce((a, s) => a + tensorBytes(s), 0);
    expect(c.totalBytes).toBe(sum);
  });
  test("tiny config: expert shapes follow latent and moe_intermediate_size", () => {
    const t = tinyConfig();
    // w1/w3: [32, 64/2] + [32, 64/32]; w2: [64, 32/2] + [64, 32/32]
    expect(expertBytes(t)).toBe(2 * (32 * 32 + 32 * 2) + (64 * 16 + 64 * 1));
  });
});

describe("the trunk table (issue 23: one table for the forward pass, the planner and the packer)", () => {
  const walk = (L: number) => unitMatrices(cfg, L).map((s) => s.name.replace(`language_model.model.layers.${L}.`, ""));
  test("each unit's matrices in the order the forward pass multiplies by them, with their shape and role", () => {
    const kda = cfg.layerKinds.indexOf("kda"), mla = cfg.layerKinds.indexOf("mla"), moe = cfg.firstKDense;
    expect(walk(kda).slice(0, 8)).toEqual(["q", "k", "v", "f_a", "f_b", "b", "g", "o"].map((n) => `self_attn.${n}_proj.weight`));
    expect(walk(mla).slice(0, 6)).toEqual(["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "g_proj", "o_proj"].map((n) => `self_attn.${n}.weight`));
    expect(walk(0).slice(-3)).toEqual(["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]);
    expect(walk(moe).slice(-5)).toEqual(["routed_expert_down_proj", "shared_experts.gate_proj", "shared_experts.up_proj", "shared_experts.down_proj", "routed_expert_up_proj"].map((n) => `block_sparse_moe.${n}.weight`));
    expect(unitMatrices(cfg, cfg.numLayers).map((s) => [s.name, s.shape])).toEqual([["language_model.lm_head.weight", [cfg.vocab, cfg.hidden]]]);
    // kv_b is read whole and as bf16 by k3_mla_attend; every other matrix may be sliced and packed
    const roles = unitMatrices(cfg, mla).map((s) => [s.name.split(".").at(-2), s.matrix.sliceable, s.matrix.packable]);
    expect(roles.filter(([, sl, pk]) => !sl || !pk)).toEqual([["kv_b_proj", false, false]]);
    // the router gate is multiplied but small: the unit's core, never a walk matrix
    expect(walk(moe)).not.toContain("block_sparse_moe.gate.weight");
  });
  test("the table's matrices are the trunk's 2-D bf16 tensors the catalogue checks, shapes included", () => {
    for (let L = 0; L < cfg.numLayers; L++)
      for (const s of unitMatrices(cfg, L)) expect({ n: s.name, shape: byName.get(s.name)?.shape, dtype: s.dtype }).toEqual({ n: s.name, shape: s.shape, dtype: "BF16" });
  });
});
