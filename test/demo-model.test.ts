// The trained demo model that ships inside k3 (assets/demo/, made by tools/train; docs/TEST-MODELS.md
// "The trained demo"): k3's logits on it equal the float64 reference values recorded from the
// PyTorch model it was trained as (assets/demo/reference.json), within the tolerance of
// docs/NUMERICS.md §4; greedy ids on three prompts are pinned; the pack refuses damage.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { unpackDemo } from "../src/cli/demo-pack.ts";
import { Engine } from "../src/engine.ts";
import { engineGreedy, logitTolerance, maxAbsDiff } from "../tools/train/check.ts";

setDefaultTimeout(120_000);

const ASSETS = join(import.meta.dir, "..", "assets", "demo");
const pack = new Uint8Array(readFileSync(join(ASSETS, "k3-demo.pack.zst")));
const reference = JSON.parse(readFileSync(join(ASSETS, "reference.json"), "utf8")) as {
  prompts: Array<{ text: string; ids: number[]; greedy: number[]; logits_f32_base64: string }>;
};
const refLogits = (b64: string) => {
  const b = Buffer.from(b64, "base64");
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
};

const tmp = mkdtempSync(join(tmpdir(), "k3-demo-model-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function unpacked(name: string): string {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  unpackDemo(pack, dir);
  return dir;
}

/** Overwrites a tensor's bytes in place (safetensors header lookup), for the sensitivity check. */
function overwriteTensor(dir: string, name: string, fill: (bytes: Uint8Array) => void): void {
  const index = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
  const file = join(dir, index.weight_map[name]!);
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const [a, b] = (JSON.parse(buf.subarray(8, 8 + n).toString("utf8")) as Record<string, { data_offsets: [number, number] }>)[name]!.data_offsets;
  const bytes = new Uint8Array(buf.subarray(8 + n + a, 8 + n + b));
  fill(bytes);
  const fd = openSync(file, "r+");
  writeSync(fd, bytes, 0, bytes.length, 8 + n + a);
  closeSync(fd);
}

describe("the trained demo model (assets/demo)", () => {
  test("k3's last-position logits equal the recorded float64 reference within the derived tolerance; greedy ids on 3 prompts pinned", () => {
    const engine = Engine.open(unpacked("good"), { threads: 1 });
    try {
      expect(reference.prompts).toHaveLength(3);
      for (const p of reference.prompts) {
        const want = refLogits(p.logits_f32_base64);
        const got = Float32Array.from(engine.prefill(engine.createSession(), p.ids));
        const maxLogit = want.reduce((a, v) => Math.max(a, Math.abs(v)), 0);
        expect(maxLogit).toBeGreaterThan(2); // not flat: agreement means something
        expect(maxAbsDiff(got, want)).toBeLessThanOrEqual(logitTolerance(engine.config, maxLogit));
        expect(engineGreedy(engine, p.ids, p.greedy.length)).toEqual(p.greedy);
      }
    } finally {
      engine.close();
    }
  });

  test("the router bias ships and matters: zeroing it moves the logits far beyond the tolerance", () => {
    const dir = unpacked("no-bias");
    const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")).text_config;
    for (let l = cfg.first_k_dense_replace; l < cfg.num_hidden_layers; l++)
      overwriteTensor(dir, `language_model.model.layers.${l}.block_sparse_moe.gate.e_score_correction_bias`, (b) => b.fill(0));
    const engine = Engine.open(dir, { threads: 1 });
    try {
      let worst = 0;
      let tol = Infinity;
      for (const p of reference.prompts) {
        const want = refLogits(p.logits_f32_base64);
        const got = Float32Array.from(engine.prefill(engine.createSession(), p.ids));
        worst = Math.max(worst, maxAbsDiff(got, want));
        tol = Math.min(tol, logitTolerance(engine.config, want.reduce((a, v) => Math.max(a, Math.abs(v)), 0)));
      }
      expect(worst).toBeGreaterThan(10 * tol);
    } finally {
      engine.close();
    }
  });

  test("the pack refuses damage instead of unpacking a different model", () => {
    const bad = pack.slice();
    bad[Math.floor(bad.length / 2)] ^= 0x5a;
    const dir = join(tmp, "damaged");
    mkdirSync(dir, { recursive: true });
    expect(() => unpackDemo(bad, dir)).toThrow(/demo model is damaged/);
  });
});
