// The forward pass and the matmul kernels' answers (issue 23): a kernel that refuses a size
// (K3_ERR_ARG: e.g. int8/int4 columns not a multiple of 32) stops the pass with an error naming
// the tensor, its format and shape, never a stale Y; and mm() refuses a tensor whose shape is not
// the one the pass multiplies by. Both through a provider that hands the pass a wrong tensor (no
// real checkpoint or pack can: the pack quantises only whole groups, the catalogue checks shapes).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { LM_MODEL_PREFIX } from "../src/checkpoint/shapes.ts";
import { K3Error } from "../src/errors.ts";
import { loadKernels } from "../src/kernels.ts";
import { Model } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { SessionState } from "../src/model/state.ts";
import type { LayerRef, TensorRef, WeightProvider } from "../src/model/weights.ts";
import { tinyModel } from "./helpers/models.ts";

const k = loadKernels();
let ck: ReturnType<typeof openCheckpoint>;
let inner: ResidentWeights;
beforeAll(async () => {
  ck = openCheckpoint(await tinyModel("tiny-a"));
  inner = new ResidentWeights(k, ck.config, ck.tensors);
});
afterAll(() => inner.close());

/** The resident weights with layer 0's `suffix` replaced by change(its ref). */
function withTensor(suffix: string, change: (t: TensorRef) => TensorRef): WeightProvider {
  const wrap = (lw: LayerRef): LayerRef => ({ layer: lw.layer, t: (s) => (lw.layer === 0 && s === suffix ? change(lw.t(s)) : lw.t(s)) });
  return Object.assign(Object.create(inner), { acquireLayer: (L: number) => wrap(inner.acquireLayer(L)) });
}

/** The error one forward pass of 5 tokens throws (and whether it left the session dirty). */
function forwardError(w: WeightProvider): { err: unknown; dirty: boolean } {
  const model = new Model(k, ck.config, w, 8, 64);
  const state = new SessionState(k, ck.config, 64);
  try {
    model.forward(state, [5, 17, 300, 42, 7]);
    return { err: null, dirty: state.dirty };
  } catch (err) {
    return { err, dirty: state.dirty };
  } finally {
    state.free();
    model.free();
  }
}

describe("matmul refusals reach the user by name", () => {
  test("an int8 matrix whose columns are not whole groups of 32: K3Error CHECKPOINT naming the tensor and its shape", () => {
    const cfg = ck.config;
    const D = cfg.kdaHeadDim;
    expect(D % 32).not.toBe(0); // tiny-a's f_b_proj [P, D] has D = 12 columns
    expect(cfg.layerKinds[0]).toBe("kda");
    const scales = new Float32Array(cfg.kdaHeads * D); // any memory: the kernel must refuse before reading it
    const { err, dirty } = forwardError(withTensor("self_attn.f_b_proj.weight", (t) => ({ ...t, dtype: "Q8", scales: scales as any })));
    expect(err).toBeInstanceOf(K3Error);
    const e = err as K3Error;
    expect(e.code).toBe("CHECKPOINT");
    expect(e.message).toContain(`${LM_MODEL_PREFIX}layers.0.self_attn.f_b_proj.weight (Q8 [${cfg.kdaHeads * D}, ${D}])`);
    expect(e.message).toContain("refused it for 5 tokens");
    expect(e.message).toContain("multiple of 32");
    expect(dirty).toBe(true); // the pass stopped part-way: the session is not silently reused
  });

  test("a tensor whose shape is not the one the pass multiplies by: refused naming both shapes", () => {
    const cfg = ck.config;
    const P = cfg.kdaHeads * cfg.kdaHeadDim;
    const { err } = forwardError(withTensor("self_attn.q_proj.weight", (t) => ({ ...t, shape: [P - 1, cfg.hidden] })));
    expect(err).toBeInstanceOf(K3Error);
    expect((err as K3Error).message).toContain(`${LM_MODEL_PREFIX}layers.0.self_attn.q_proj.weight is [${P - 1}, ${cfg.hidden}], the forward pass multiplies it as [${P}, ${cfg.hidden}]`);
  });

  test("the same provider without the change runs (the errors above come from the change)", () => {
    const { err, dirty } = forwardError(withTensor("self_attn.q_proj.weight", (t) => t));
    expect({ err, dirty }).toEqual({ err: null, dirty: false });
  });
});
