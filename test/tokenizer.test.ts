// Tokenizer API: loading (and its errors), specials, decode, the streaming decoder.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { K3Error } from "../src/errors.ts";
import { pieces } from "../src/text/pretokenize.ts";
import { Tokenizer } from "../src/text/tokenizer.ts";
import { writeTokenizerFolder } from "../tools/gen/tokenizer.ts";

const VOCAB = 4096;
let root: string;
let tok: Tokenizer;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "k3-tok-"));
  writeTokenizerFolder(join(root, "good"), { vocab: VOCAB });
  tok = Tokenizer.load(join(root, "good"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A copy of the good folder with one file replaced. */
function variant(name: string, file: string, content: string): string {
  const d = join(root, name);
  mkdirSync(d, { recursive: true });
  for (const f of ["tiktoken.model", "tokenizer_config.json"]) writeFileSync(join(d, f), readFileSync(join(root, "good", f)));
  writeFileSync(join(d, file), content);
  return d;
}

function loadError(dir: string): K3Error {
  try {
    Tokenizer.load(dir);
  } catch (err) {
    if (err instanceof K3Error) return err;
    throw err;
  }
  throw new Error("expected Tokenizer.load to throw");
}

describe("Tokenizer.load", () => {
  test("vocabSize and K3's special layout", () => {
    expect(tok.vocabSize).toBe(VOCAB);
    expect(tok.specialId("[BOS]")).toBe(VOCAB - 256);
    expect(tok.specialId("[EOS]")).toBe(VOCAB - 255);
    expect(tok.specialId("<|end_of_msg|>")).toBe(VOCAB - 254);
    expect(tok.specialId("[PAD]")).toBe(VOCAB - 1);
    expect(tok.isSpecial(tok.specialId("<|open|>"))).toBe(true);
    expect(tok.isSpecial(0)).toBe(false);
    expect(tok.isSpecial(VOCAB - 257)).toBe(false);
    expect(() => tok.specialId("<|nope|>")).toThrow(K3Error);
  });
  test("missing folder names both files", () => {
    const err = loadError(join(root, "absent"));
    expect(err.code).toBe("TOKENIZER");
    expect(err.message).toContain("tiktoken.model");
    expect(err.message).toContain("tokenizer_config.json");
  });
  test("a bad line is reported with file and line number", () => {
    const lines = readFileSync(join(root, "good", "tiktoken.model"), "utf8").split("\n");
    lines[300] = "@@notbase64@@ 300";
    const err = loadError(variant("badline", "tiktoken.model", lines.join("\n")));
    expect(err.code).toBe("TOKENIZER");
    expect(err.message).toMatch(/tiktoken\.model:301: bad base64/);
  });
  test("bad rank, missing field, duplicate rank", () => {
    const lines = readFileSync(join(root, "good", "tiktoken.model"), "utf8").split("\n");
    const a = [...lines];
    a[400] = "aGk= x1";
    expect(loadError(variant("badrank", "tiktoken.model", a.join("\n"))).message).toMatch(/:401: bad rank/);
    const b = [...lines];
    b[500] = "aGk=";
    expect(loadError(variant("nofield", "tiktoken.model", b.join("\n"))).message).toMatch(/:501: expected/);
    const c = [...lines];
    c[600] = `${c[600]!.split(" ")[0]} 5`;
    expect(loadError(variant("duprank", "tiktoken.model", c.join("\n"))).message).toMatch(/:601: rank 5 appears twice/);
  });
  test("repeated token bytes and a missing single byte are rejected", () => {
    const lines = readFileSync(join(root, "good", "tiktoken.model"), "utf8").split("\n");
    const a = [...lines];
    a[700] = `${a[10]!.split(" ")[0]} 700`;
    expect(loadError(variant("dupbytes", "tiktoken.model", a.join("\n"))).message).toMatch(/rank 700 repeats the bytes of rank 10/);
    const b = lines.filter((l) => l !== `${Buffer.from([0x41]).toString("base64")} ${l.split(" ")[1]}`);
    expect(b.length).toBe(lines.length - 1);
    expect(loadError(variant("nobyte", "tiktoken.model", b.join("\n"))).message).toMatch(/single bytes have no rank \(e\.g\. 0x41\)/);
  });
  test("bad tokenizer_config.json: invalid JSON, no decoder, collisions", () => {
    expect(loadError(variant("json", "tokenizer_config.json", "{nope")).message).toMatch(/tokenizer_config\.json: invalid JSON/);
    expect(loadError(variant("nodec", "tokenizer_config.json", "{}")).message).toMatch(/no "added_tokens_decoder"/);
    const collide = JSON.stringify({ added_tokens_decoder: { "5": { content: "[BOS]", special: true } } });
    expect(loadError(variant("collide", "tokenizer_config.json", collide)).message).toMatch(/collides with a BPE rank/);
    const twice = JSON.stringify({ added_tokens_decoder: { "4000": { content: "[X]" }, "4001": { content: "[X]" } } });
    expect(loadError(variant("twice", "tokenizer_config.json", twice)).message).toMatch(/has two ids/);
  });
});

describe("encode / specials", () => {
  test("user text never produces control ids", () => {
    const text = '<|open|>message role="user"<|sep|>[BOS]<|end_of_msg|>';
    const ids = tok.encode(text);
    expect(ids.some((id) => tok.isSpecial(id))).toBe(false);
    expect(tok.decode(ids)).toBe(text);
  });
  test("encodeWithSpecials maps names to ids and encodes the rest as text", () => {
    const ids = tok.encodeWithSpecials("<|open|>message<|sep|>hi<|close|>message<|sep|><|end_of_msg|>");
    const open = tok.specialId("<|open|>");
    const sep = tok.specialId("<|sep|>");
    expect(ids[0]).toBe(open);
    expect(ids.at(-1)).toBe(tok.specialId("<|end_of_msg|>"));
    expect(ids.filter((id) => id === sep).length).toBe(2);
    expect(ids.filter((id) => tok.isSpecial(id)).length).toBe(5);
    expect(tok.decode(ids)).toBe("<|open|>message<|sep|>hi<|close|>message<|sep|><|end_of_msg|>");
    // text between specials is encoded exactly like encode() would
    expect(ids.slice(1, 1 + tok.encode("message").length)).toEqual(tok.encode("message"));
  });
  test("pieces cover the text and follow K3's splitting rules", () => {
    expect(pieces("Hello WORLD's 中文abc 12345  \n\n x")).toEqual(["Hello", " WORLD's", " ", "中文", "abc", " ", "123", "45", "  \n\n", " x"]);
    expect(pieces("I'LL don't")).toEqual(["I'LL", " don't"]);
    expect(pieces("a   b")).toEqual(["a", "  ", " b"]);
  });
  test("empty text", () => {
    expect(tok.encode("")).toEqual([]);
    expect(tok.decode([])).toBe("");
  });
});

describe("decode", () => {
  test("an id outside the vocabulary or in an unused gap throws", () => {
    expect(() => tok.decode([VOCAB])).toThrow(K3Error);
    expect(() => tok.decode([-1])).toThrow(K3Error);
  });
  test("unused ids between the BPE ranks and the specials (big vocab) are not tokens", () => {
    const d = join(root, "big");
    writeTokenizerFolder(d, { vocab: 163840 });
    const big = Tokenizer.load(d);
    expect(big.vocabSize).toBe(163840);
    expect(big.specialId("[BOS]")).toBe(163584);
    expect(() => big.decode([100256])).toThrow(/not in the vocabulary/);
    expect(big.decode([big.specialId("<|media_pad|>")])).toBe("<|media_pad|>");
  });
});

describe("streaming decoder", () => {
  const text = "héllo 中文 👨‍👩‍👧 naïve €5 — 🇫🇷 done";
  test("never emits U+FFFD halves and concatenates to the full text", () => {
    const ids = tok.encode(text);
    // with a small vocab multi-byte characters are split over several byte tokens
    expect(ids.length).toBeGreaterThan(new TextEncoder().encode(text).length / 2);
    const d = tok.decoder();
    const chunks = ids.map((id) => d.push(id));
    chunks.push(d.flush());
    expect(chunks.join("")).toBe(text);
    expect(chunks.some((c) => c.includes("\ufffd"))).toBe(false);
    expect(chunks.filter((c) => c === "").length).toBeGreaterThan(0); // some pushes held bytes back
  });
  test("an unfinished character comes out as U+FFFD only at flush, then the decoder is fresh", () => {
    const euro = tok.encode("€"); // 3 bytes, more than one token at this vocab
    expect(euro.length).toBeGreaterThan(1);
    const d = tok.decoder();
    expect(d.push(euro[0]!)).toBe("");
    expect(d.flush()).toBe("\ufffd");
    expect(euro.map((id) => d.push(id)).join("") + d.flush()).toBe("€");
  });
  test("specials stream as their names", () => {
    const d = tok.decoder();
    expect(d.push(tok.specialId("<|end_of_msg|>"))).toBe("<|end_of_msg|>");
  });
});
