// tools/gen/tokenizer.ts: the test tokenizer folders other tests and the model generator use.
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadCl100kTokens, writeTokenizerFolder } from "../tools/gen/tokenizer.ts";

function readFolder(vocab: number) {
  const dir = mkdtempSync(join(tmpdir(), "k3-tokgen-"));
  try {
    writeTokenizerFolder(dir, { vocab });
    const model = readFileSync(join(dir, "tiktoken.model"), "utf8");
    const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
    return { model, config };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function parseModel(text: string): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  for (const line of text.split("\n")) {
    if (!line) continue;
    const [b64, rank] = line.split(" ");
    out.set(Number(rank), Buffer.from(b64!, "base64"));
  }
  return out;
}

describe("writeTokenizerFolder", () => {
  for (const vocab of [768, 1000, 32768, 163840]) {
    test(`vocab ${vocab}: ranks, all 256 bytes, specials at the top`, () => {
      const { model, config } = readFolder(vocab);
      const ranks = parseModel(model);
      const nBpe = Math.min(vocab - 256, 100256);
      expect(ranks.size).toBe(nBpe);
      expect([...ranks.keys()]).toEqual(Array.from({ length: nBpe }, (_, i) => i));
      const singles = new Set([...ranks.values()].filter((b) => b.length === 1).map((b) => b[0]));
      expect(singles.size).toBe(256);
      // lowest ranks of the real cl100k, in order
      const cl = loadCl100kTokens();
      for (const r of [0, 255, nBpe - 1]) expect(Buffer.from(cl[r]!).equals(ranks.get(r)!)).toBe(true);
      const added = config.added_tokens_decoder as Record<string, { content: string; special: boolean }>;
      expect(Object.keys(added).length).toBe(256);
      expect(added[String(vocab - 256)]!.content).toBe("[BOS]");
      expect(added[String(vocab - 255)]!.content).toBe("[EOS]");
      expect(added[String(vocab - 254)]!.content).toBe("<|end_of_msg|>");
      expect(added[String(vocab - 1)]!.content).toBe("[PAD]");
      const names = Object.values(added).map((a) => a.content);
      expect(new Set(names).size).toBe(256);
      for (const n of ["<|open|>", "<|close|>", "<|sep|>", "<|media_begin|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>", "<|kimi_image_placeholder|>"]) {
        expect(names).toContain(n);
      }
      expect(Object.values(added).every((a) => a.special === true)).toBe(true);
      expect(config.bos_token).toBe("[BOS]");
      expect(config.pad_token).toBe("[PAD]");
    });
  }
  const releaseConfig = join(import.meta.dir, "../reference/k3/config.json");
  test.skipIf(!existsSync(releaseConfig))("release layout: media_pad is config.json's media_placeholder_token_id", () => {
    const { config } = readFolder(163840);
    const k3 = JSON.parse(readFileSync(releaseConfig, "utf8"));
    const added = config.added_tokens_decoder;
    expect(added[String(k3.bos_token_id)].content).toBe("[BOS]");
    expect(added[String(k3.eos_token_id)].content).toBe("<|end_of_msg|>");
    expect(added[String(k3.pad_token_id)].content).toBe("[PAD]");
    expect(added[String(k3.media_placeholder_token_id)].content).toBe("<|media_pad|>");
  });
  test("deterministic output", () => {
    const a = readFolder(4096);
    const b = readFolder(4096);
    expect(a.model).toBe(b.model);
    expect(JSON.stringify(a.config)).toBe(JSON.stringify(b.config));
  });
  test("rejects a vocab outside [768, 163840]", () => {
    expect(() => writeTokenizerFolder(join(tmpdir(), "never"), { vocab: 500 })).toThrow(/vocab/);
    expect(() => writeTokenizerFolder(join(tmpdir(), "never"), { vocab: 163841 })).toThrow(/vocab/);
  });
});
