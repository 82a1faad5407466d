// Tests of the float64 reference (tools/reference/): each op on tiny hand-computed inputs, then
// (when tools/gen/ exists) the whole model on generated tiny checkpoints, including every trap.
import { describe, expect, test } from "bun:test";
import * as ops from "../tools/reference/ops.ts";
import { closeSync, copyFileSync, existsSync, mkdtempSync, openSync, readFileSync, readdirSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SafetensorsDir } from "../tools/reference/safetensors.ts";
import { ALL_TRAPS, LOUD_TRAPS, ReferenceModel } from "../tools/reference/model.ts";
import { MARGIN_PROMPT, maxAbsDiff, trapMargins } from "../tools/reference/margins.ts";

const f64 = (xs: number[]) => Float64Array.from(xs);
const close = (a: ArrayLike<number>, b: number[], digits = 12) => {
  expect(a.length).toBe(b.length);
  for (let i = 0; i < b.length; i++) expect(a[i]).toBeCloseTo(b[i], digits);
};

describe("decoding", () => {
  test("bf16 bit patterns", () => {
    expect(ops.bf16ToNumber(0x3f80)).toBe(1);
    expect(ops.bf16ToNumber(0xbfc0)).toBe(-1.5);
    expect(ops.bf16ToNumber(0x4049)).toBe(3.140625);
    expect(ops.bf16ToNumber(0x0000)).toBe(0);
    expect(ops.bf16ToNumber(0x0001)).toBe(2 ** -133); // smallest subnormal
    expect(ops.bf16ToNumber(0x7f80)).toBe(Infinity);
    expect(ops.bf16ToNumber(0x7fc0)).toBeNaN();
  });
  test("decodeBF16 is little-endian and agrees with bf16ToNumber", () => {
    const bytes = new Uint8Array([0x80, 0x3f, 0xc0, 0xbf, 0x49, 0x40, 0x23, 0x41]);
    close(ops.decodeBF16(bytes), [1, -1.5, 3.140625, ops.bf16ToNumber(0x4123)]);
    // unaligned view (odd byteOffset) must decode the same
    const big = new Uint8Array(9);
    big.set(bytes, 1);
    close(ops.decodeBF16(big.subarray(1)), [1, -1.5, 3.140625, ops.bf16ToNumber(0x4123)]);
  });
  test("decodeF32 from an unaligned view", () => {
    const src = new Float32Array([0.1, -2, 1e30]);
    const big = new Uint8Array(13);
    big.set(new Uint8Array(src.buffer), 1);
    close(ops.decodeF32(big.subarray(1)), [Math.fround(0.1), -2, Math.fround(1e30)]);
  });
  test("MXFP4: low nibble first, sign bit, E8M0 scale, 255 → 0", () => {
    // one row of 64 values = 32 bytes + 2 scale bytes
    const packed = new Uint8Array(32);
    packed[0] = 0x72; // element 0 = 0x2 (1.0), element 1 = 0x7 (6.0)
    packed[1] = 0x9f; // element 2 = 0xf (−6), element 3 = 0x9 (−0.5)
    packed[16] = 0x31; // elements 32, 33 = 0.5, 1.5 (group 1)
    const scales = new Uint8Array([128, 255]); // group 0: 2^1; group 1: NaN → 0
    const W = ops.decodeMXFP4(packed, scales, 1, 64);
    close(W.subarray(0, 4), [2, 12, -12, -1]);
    expect(W[32]).toBe(0);
    expect(W[33]).toBe(0);
    const swapped = ops.decodeMXFP4(packed, scales, 1, 64, { nibbleSwap: true });
    close(swapped.subarray(0, 4), [12, 2, -1, -12]);
    const nan = ops.decodeMXFP4(packed, scales, 1, 64, { nanNotZeroed: true });
    close(nan.subarray(32, 34), [0.5 * 2 ** 128, 1.5 * 2 ** 128], 0);
  });
  test("MXFP4: second row uses its own scales; sizes are checked", () => {
    const packed = new Uint8Array(32);
    packed[16] = 0x02; // row 1, element 0 = 1.0
    const scales = new Uint8Array([127, 120]); // row 1 scale 2^-7
    const W = ops.decodeMXFP4(packed, scales, 2, 32);
    expect(W[32]).toBe(2 ** -7);
    expect(() => ops.decodeMXFP4(packed, scales, 2, 64)).toThrow();
  });
});

describe("linear algebra and activations", () => {
  test("matvec is W·x with W row-major", () => {
    close(ops.matvec(f64([1, 2, 3, 4, 5, 6]), 2, 3, f64([1, 0, -1])), [-2, -2]);
  });
  test("rmsnorm puts eps inside the root and multiplies by w", () => {
    // x = [3, 4]: mean(x²) = 12.5
    close(ops.rmsnorm(f64([3, 4]), f64([1, 2]), 0.5), [3 / Math.sqrt(13), 8 / Math.sqrt(13)]);
  });
  test("l2normalize uses a SUM of squares", () => {
    close(ops.l2normalize(f64([3, 4]), 0), [0.6, 0.8]);
    close(ops.l2normalize(f64([3, 4]), 11), [0.5, 4 / 6]);
  });
  test("sigmoid, silu, situGlu", () => {
    expect(ops.sigmoid(0)).toBe(0.5);
    expect(ops.silu(2)).toBeCloseTo(2 / (1 + Math.exp(-2)), 14);
    const g = 1,
      u = 3;
    const want = 4 * Math.tanh(1 / 4) * ops.sigmoid(1) * 25 * Math.tanh(3 / 25);
    close(ops.situGlu(f64([g, 1000]), f64([u, 1000]), 4, 25), [want, 100]);
  });
});

describe("KDA pieces", () => {
  test("shortConvSilu: tap 3 on the current token, history oldest first, inputs untouched", () => {
    const w = f64([1, 10, 100, 1000]); // C = 1
    const hist = [f64([1]), f64([2]), f64([3])];
    const xs = [f64([4]), f64([5])];
    const ys = ops.shortConvSilu(xs, w, hist);
    // t0: 1·1 + 10·2 + 100·3 + 1000·4 = 4321; t1: 1·2 + 10·3 + 100·4 + 1000·5 = 5432
    close(ys.map((y) => y[0]), [ops.silu(4321), ops.silu(5432)]);
    expect(hist[0][0]).toBe(1);
    expect(xs[0][0]).toBe(4);
    const zero = [f64([0]), f64([0]), f64([0])];
    close(ops.shortConvSilu([f64([0.5])], w, zero)[0], [ops.silu(500)]);
  });
  test("kdaGate indexes A_log per head", () => {
    // H = 2, D = 2; A_log = [0, ln 2, 5, 5] (tail must be ignored)
    const g = ops.kdaGate(f64([1, 2, 3, 4]), f64([0, 0, 0, 1]), f64([0, Math.log(2), 5, 5]), 2, 2, -5);
    close(g, [-5 * ops.sigmoid(1), -5 * ops.sigmoid(2), -5 * ops.sigmoid(6), -5 * ops.sigmoid(10)]);
    const gc = ops.kdaGate(f64([1, 2, 3, 4]), f64([0, 0, 0, 1]), f64([0, Math.log(2), 5, 5]), 2, 2, -5, {
      perChannel: true,
    });
    close(gc, [-5 * ops.sigmoid(1), -5 * ops.sigmoid(4), -5 * ops.sigmoid(3), -5 * ops.sigmoid(10)]);
  });
  test("kdaStep: decay, delta rule, read from the updated state", () => {
    // H = 1, D = 2. S = [[1, 2], [3, 4]] (S[i][j]); g = ln[0.5, 1]; k = [1, 0]; q = [0, 1]; v = [10, 20]; β = 0.5
    const S = f64([1, 2, 3, 4]);
    const o = ops.kdaStep(S, f64([0, 1]), f64([1, 0]), f64([10, 20]), f64([Math.log(0.5), 0]), f64([0.5]), 1, 2);
    // decay: [[0.5, 1], [3, 4]]; u = Sᵀk = [0.5, 1]; S += k ⊗ 0.5·([10, 20] − u) → row 0 += [4.75, 9.5]
    close(S, [5.25, 10.5, 3, 4]);
    close(o, [3, 4]); // Sᵀq = row 1
    const S2 = f64([1, 2, 3, 4]);
    const o2 = ops.kdaStep(S2, f64([1, 0]), f64([1, 0]), f64([10, 20]), f64([Math.log(0.5), 0]), f64([0.5]), 1, 2, {
      readBeforeUpdate: true,
    });
    close(o2, [1, 2]);
    close(S2, [5.25, 10.5, 3, 4]);
  });
});

describe("MLA attention", () => {
  test("one head: causal softmax over [nope | rope] dims, values rebuilt from the latent", () => {
    // Hm = 1, dn = 1, dr = 1, dv = 1, R = 2; kvB rows: k_nope = c[0], v = c[1]
    const kvB = f64([1, 0, 0, 1]);
    const q = [f64([1, 1]), f64([1, 2])];
    const ckv = [f64([0, 10]), f64([1, 20])];
    const kr = [f64([0]), f64([1])];
    const out = ops.mlaAttention(q, ckv, kr, kvB, 1, 1, 1, 1, 2, 0.5);
    expect(out[0][0]).toBeCloseTo(10, 12); // only itself
    // p = 1: scores s0 = 0.5·(1·0 + 2·0) = 0, s1 = 0.5·(1·1 + 2·1) = 1.5
    const p1 = Math.exp(1.5) / (1 + Math.exp(1.5));
    expect(out[1][0]).toBeCloseTo(10 * (1 - p1) + 20 * p1, 12);
  });
});

describe("AttnRes mix", () => {
  test("softmax of normed-source scores, mixes RAW sources", () => {
    const bank = [f64([2, 0])];
    const P = f64([0, 4]);
    const proj = f64([1, 1]);
    const norm = f64([1, 3]);
    // normed bank = [2, 0]/sqrt(2) = [√2, 0] → score √2; normed P = [0, 3·√2] → score 3√2
    const a = ops.attnResMix(P, bank, proj, norm, 0);
    const pb = 1 / (1 + Math.exp(2 * Math.SQRT2));
    close(a, [2 * pb, 4 * (1 - pb)]);
    const b = ops.attnResMix(P, bank, proj, norm, 0, { normedSources: true });
    close(b, [Math.SQRT2 * pb, 3 * Math.SQRT2 * (1 - pb)]);
    // single source (empty bank) → P itself
    close(ops.attnResMix(P, [], proj, norm, 1e-5), [0, 4]);
  });
});

describe("router", () => {
  test("bias steers selection only; weights are renormalised unbiased sigmoids times scaling", () => {
    const logits = f64([0, 1, 2, -1]);
    const bias = f64([0, 0, 0, 10]);
    const r = ops.routerTopK(logits, bias, 2, 2.5);
    expect(r.idx).toEqual([3, 2]);
    const s3 = ops.sigmoid(-1),
      s2 = ops.sigmoid(2);
    close(r.w, [(2.5 * s3) / (s3 + s2), (2.5 * s2) / (s3 + s2)]);
    const wrong = ops.routerTopK(logits, bias, 2, 2.5, { biasInWeights: true });
    expect(wrong.idx).toEqual([3, 2]);
    expect(Math.abs(wrong.w[0] - r.w[0])).toBeGreaterThan(0.5);
  });
  test("ties go to the lowest expert id", () => {
    const r = ops.routerTopK(f64([1, 3, 3, 3, 0]), f64([0, 0, 0, 0, 0]), 2, 1);
    expect(r.idx).toEqual([1, 2]);
    const t = ops.routerTopK(f64([0, 0, 0]), f64([0, 0.5, 0.5]), 1, 1);
    expect(t.idx).toEqual([1]);
    close(t.w, [1]);
  });
});

// ───────────────────────────── safetensors reader ─────────────────────────────

/** A shard from a raw header object and a data section (no validation: tests feed it bad headers). */
function writeShard(path: string, header: object, data: Uint8Array) {
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(path, Buffer.concat([len, json, data]));
}

describe("safetensors reader", () => {
  const data = new Uint8Array([0x80, 0x3f, 0x00, 0x40, 1, 2, 3, 4]); // bf16 [1, 2], u8 [1..4]
  test("reads tensors via the index and skips __metadata__", () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-ref-st-"));
    writeShard(join(dir, "a.safetensors"), {
      __metadata__: { format: "pt" },
      w: { dtype: "BF16", shape: [2], data_offsets: [0, 4] },
      u: { dtype: "U8", shape: [2, 2], data_offsets: [4, 8] },
    }, data);
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ weight_map: { w: "a.safetensors", u: "a.safetensors" } }));
    const st = SafetensorsDir.open(dir);
    expect(st.names().sort()).toEqual(["u", "w"]);
    close(ops.decodeBF16(st.read("w")), [1, 2]);
    expect([...st.read("u")]).toEqual([1, 2, 3, 4]);
    expect(() => st.read("missing")).toThrow(/missing/);
  });
  const bad: [string, object][] = [
    ["size disagrees with shape", { w: { dtype: "BF16", shape: [3], data_offsets: [0, 4] } }],
    ["unknown dtype", { w: { dtype: "Q4", shape: [4], data_offsets: [0, 4] } }],
    ["runs past the file", { w: { dtype: "U8", shape: [16], data_offsets: [0, 16] } }],
    ["overlap", { w: { dtype: "BF16", shape: [2], data_offsets: [0, 4] }, v: { dtype: "U8", shape: [2], data_offsets: [2, 4] } }],
  ];
  for (const [what, header] of bad)
    test(`refuses a shard whose tensor ${what}`, () => {
      const dir = mkdtempSync(join(tmpdir(), "k3-ref-st-"));
      writeShard(join(dir, "a.safetensors"), header, data);
      expect(() => SafetensorsDir.open(dir)).toThrow();
    });
});

// ───────────────────────────── the whole model on generated checkpoints ─────────────────────────────

const HAVE_GEN = existsSync(join(import.meta.dir, "../tools/gen/generate.ts"));
const PRESETS = ["tiny-a", "tiny-b", "tiny-c"] as const;
const PROMPT = MARGIN_PROMPT; // 16 ids < every tiny vocab

async function generated(preset: string): Promise<string> {
  const { generateModel } = await import("../tools/gen/generate.ts");
  const dir = mkdtempSync(join(tmpdir(), `k3-ref-${preset}-`));
  await generateModel(dir, { preset });
  return dir;
}

describe.skipIf(!HAVE_GEN)("ReferenceModel on generated tiny checkpoints", () => {
  const dirs = new Map<string, string>();
  const truth = new Map<string, Float64Array>();
  const get = async (preset: string) => {
    if (!dirs.has(preset)) {
      dirs.set(preset, await generated(preset));
      truth.set(preset, ReferenceModel.open(dirs.get(preset)!).forward(PROMPT));
    }
    return { dir: dirs.get(preset)!, logits: truth.get(preset)! };
  };

  for (const preset of PRESETS) {
    test(`${preset}: finite logits with a spread; greedy is argmax and deterministic`, async () => {
      const { dir, logits } = await get(preset);
      expect(logits.every(Number.isFinite)).toBe(true);
      const mean = logits.reduce((a, b) => a + b, 0) / logits.length;
      const std = Math.sqrt(logits.reduce((a, b) => a + (b - mean) ** 2, 0) / logits.length);
      expect(std).toBeGreaterThan(0.5);
      const m = ReferenceModel.open(dir);
      const ids = m.greedy(PROMPT.slice(0, 4), 16);
      expect(ids.length).toBe(16);
      expect(ids.every((id) => Number.isInteger(id) && id >= 0 && id < logits.length)).toBe(true);
      // first id = argmax of forward(prompt); the sequence is not one repeated token
      const l4 = m.forward(PROMPT.slice(0, 4));
      expect(l4[ids[0]]).toBe(Math.max(...l4));
      expect(new Set(ids).size).toBeGreaterThan(1);
      expect(ReferenceModel.open(dir).greedy(PROMPT.slice(0, 4), 16)).toEqual(ids);
      // full recompute: the forward of a prefix does not depend on what came before in this object
      expect(maxAbsDiff(m.forward(PROMPT), logits)).toBe(0);
    });
  }

  // An engine with a trap must fail its comparison: the trap's margin must dwarf any f32-vs-f64
  // tolerance on at least one preset (> 2 logits), and be clearly nonzero on every preset (> 0.1).
  test("every trap moves the last-position logits (margins per preset)", async () => {
    const margins = new Map<string, Map<string, number>>();
    for (const preset of PRESETS) {
      const { dir, logits } = await get(preset);
      margins.set(preset, trapMargins(dir, PROMPT, logits));
    }
    const weak: string[] = [];
    for (const trap of ALL_TRAPS) {
      const per = PRESETS.map((p) => margins.get(p)!.get(trap)!);
      if (Math.max(...per) <= 2 || Math.min(...per) <= 0.1) weak.push(`${trap}: ${per.map((m) => m.toFixed(4)).join(", ")}`);
    }
    expect(weak).toEqual([]);
  });

  test("loud traps refuse to open (their wrong model needs tensors a valid checkpoint lacks)", async () => {
    for (const preset of PRESETS) {
      const { dir } = await get(preset);
      for (const trap of LOUD_TRAPS) expect(() => ReferenceModel.open(dir, { trap })).toThrow(/missing/);
    }
  });

  test("A_log: only the first H entries are read", async () => {
    const { dir, logits } = await get("tiny-a"); // random tail
    const copy = mkdtempSync(join(tmpdir(), "k3-ref-alog-"));
    for (const f of readdirSync(dir)) if (f.endsWith(".json") || f.endsWith(".safetensors")) copyFileSync(join(dir, f), join(copy, f));
    const cfg = JSON.parse(readFileSync(join(copy, "config.json"), "utf8")).text_config.linear_attn_config;
    const layer = cfg.kda_layers[0] - 1;
    const name = `language_model.model.layers.${layer}.self_attn.A_log`;
    const e = SafetensorsDir.open(copy).entry(name);
    const poke = (index: number, value: number) => {
      const fd = openSync(e.file, "r+");
      writeSync(fd, new Uint8Array(new Float32Array([value]).buffer), 0, 4, e.offset + 4 * index);
      closeSync(fd);
    };
    poke(cfg.num_heads, 7.5); // first tail entry: must not matter
    expect(maxAbsDiff(ReferenceModel.open(copy).forward(PROMPT), logits)).toBe(0);
    poke(0, 3.0); // head 0's entry: must matter
    expect(maxAbsDiff(ReferenceModel.open(copy).forward(PROMPT), logits)).toBeGreaterThan(1e-3);
  });

  test("config: every missing field is named at once; one-based lists are checked", async () => {
    const { dir } = await get("tiny-c");
    const copy = mkdtempSync(join(tmpdir(), "k3-ref-cfg-"));
    const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    delete cfg.text_config.rms_norm_eps;
    delete cfg.text_config.linear_attn_config.gate_lower_bound;
    writeFileSync(join(copy, "config.json"), JSON.stringify(cfg));
    expect(() => ReferenceModel.open(copy)).toThrow(/rms_norm_eps is missing[\s\S]*gate_lower_bound is missing/);
    const cfg2 = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    cfg2.text_config.linear_attn_config.kda_layers.push(cfg2.text_config.linear_attn_config.full_attn_layers[0]);
    writeFileSync(join(copy, "config.json"), JSON.stringify(cfg2));
    expect(() => ReferenceModel.open(copy)).toThrow(/exactly 1/);
  });
});
