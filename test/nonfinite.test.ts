// A NaN or infinite value that reaches an answer must stop generation with an error naming the
// step, never pick a token (issue 9 item 1: all-NaN logits printed `0 0 0 0 0 0` with exit 0).
// Each case damages one weight of a tiny model copy with a bf16 NaN (0x7fc0):
//  - the final norm → every logit NaN (greedy, sampled, and the CLI's exit status);
//  - one row of lm_head → one NaN logit among finite ones (greedy used to rank around it);
//  - one row of a router's gate → one NaN expert score (the router used to skip it silently).
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { closeSync, cpSync, openSync, writeSync } from "node:fs";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { LM_HEAD_NAME, LM_MODEL_PREFIX } from "../src/checkpoint/shapes.ts";
import { createSampler, Engine } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);
const PROMPT = [5, 6, 7];
const CLI = [process.execPath, "src/cli/main.ts"];

/** A copy of tiny-a with bf16 NaN written over element `index` of tensor `name`. */
async function withNaN(tag: string, name: string, index: number): Promise<string> {
  const d = scratchDir(tag);
  cpSync(await tinyModel("tiny-a"), d, { recursive: true });
  const te = openCheckpoint(d).tensors.get(name);
  if (!te || te.dtype !== "BF16") throw new Error(`${name} is not a bf16 tensor of tiny-a`);
  const fd = openSync(te.file, "r+");
  writeSync(fd, Buffer.from([0xc0, 0x7f]), 0, 2, te.offset + 2 * index);
  closeSync(fd);
  return d;
}

function generate(dir: string, sampled = false): { ids: number[]; error?: K3Error } {
  const e = Engine.open(dir, { threads: 1, resident: true });
  const ids: number[] = [];
  try {
    const sampler = sampled ? createSampler({ temperature: 1, seed: 1 }) : undefined;
    for (const t of e.generate(e.createSession(), PROMPT, { maxTokens: 6, sampler })) ids.push(t.id);
    return { ids };
  } catch (err) {
    if (!(err instanceof K3Error)) throw err;
    return { ids, error: err };
  } finally {
    e.close();
  }
}

let finalNorm = "";
beforeAll(async () => {
  finalNorm = await withNaN("nan-norm", `${LM_MODEL_PREFIX}norm.weight`, 0);
});

describe("non-finite logits are refused, naming the step", () => {
  test("all-NaN logits: greedy refuses before the first token", () => {
    const r = generate(finalNorm);
    expect(r.ids).toEqual([]);
    expect(r.error?.code).toBe("CHECKPOINT");
    expect(r.error?.message).toMatch(/logits after the prompt \(position 3\) are not finite: \d+ NaN/);
  });

  test("all-NaN logits: a sampler never sees them either", () => {
    const r = generate(finalNorm, true);
    expect(r.ids).toEqual([]);
    expect(r.error?.message).toMatch(/not finite/);
  });

  test("k3 run --ids on that model exits 4 (bad model data) with the error, printing no ids", () => {
    const p = Bun.spawnSync([...CLI, "run", finalNorm, "--ids", PROMPT.join(","), "--gen", "6", "--threads", "1"], { stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
    expect(p.exitCode).toBe(4);
    expect(p.stdout.toString().trim()).toBe("");
    expect(p.stderr.toString()).toMatch(/not finite/);
    expect(p.stderr.toString()).not.toMatch(/\n\s+at /); // no stack trace
  });

  test("one NaN logit among finite ones (a damaged lm_head row) is refused, naming the token", async () => {
    const hidden = openCheckpoint(finalNorm).config.hidden;
    const d = await withNaN("nan-head-row", LM_HEAD_NAME, 7 * hidden); // row of token 7
    const r = generate(d);
    expect(r.ids).toEqual([]);
    expect(r.error?.message).toMatch(/1 NaN and 0 infinite of \d+, the first at token id 7/);
  });

  test("a NaN expert score (a damaged router gate row) is refused, naming the layer", async () => {
    const cfg = openCheckpoint(finalNorm).config;
    const L = cfg.firstKDense;
    const d = await withNaN("nan-gate-row", `${LM_MODEL_PREFIX}layers.${L}.block_sparse_moe.gate.weight`, 3 * cfg.hidden); // expert 3's row
    const r = generate(d);
    expect(r.ids).toEqual([]);
    expect(r.error?.code).toBe("CHECKPOINT");
    expect(r.error?.message).toContain(`layer ${L}'s router: k3_router_topk was given NaN or infinite values`);
  });
});
