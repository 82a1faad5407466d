// Writes a K3-format tokenizer folder (tiktoken.model + tokenizer_config.json) for a test model
// with `vocab` embedding rows. The real K3 vocabulary is not available, so the BPE part is a REAL
// byte-level BPE (OpenAI's cl100k_base, shipped in the tiktoken npm package) truncated to its
// lowest ranks; the 256 special slots mirror K3's layout (docs/TOKENIZER.md has the table).
//
// Invariants of the output (for every vocab in [768, 163840]):
//   - BPE ranks are 0..nBpe-1 with nBpe = min(vocab - 256, 100256); all 256 single bytes have a rank
//     (so every byte string is encodable); ranks keep cl100k's merge order.
//   - ids nBpe..vocab-257 (only when vocab - 256 > 100256) are unused rows: no token decodes to them.
//   - specials occupy vocab-256..vocab-1, named exactly like K3's release ([BOS] first, [PAD] last).
//   - output is a pure function of `vocab` (byte-identical across runs).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
// Imported, not read from node_modules at run time: `bun build --compile` bundles it, so the
// compiled k3 can generate its demo model with no node_modules next to it (test/binary.test.ts).
import cl100k from "tiktoken/encoders/cl100k_base.json";

/** Number of special/reserved slots at the top of K3's vocabulary (163584..163839 in the release). */
export const SPECIAL_SLOTS = 256;
export const MIN_VOCAB = 768;
export const MAX_VOCAB = 163840;

/**
 * Named specials by offset from the first special id (vocab - 256). Offsets 0-2 and 255 are the
 * release's documented ids ([BOS] 163584, [EOS] 163585, <|end_of_msg|> 163586, pad 163839), and
 * <|media_pad|> at 21 matches config.json's media_placeholder_token_id 163605 (the chat cases put
 * <|media_pad|> where the image features go). The other offsets are this project's choice: the
 * real ids are unknown, and code must look every id up by name anyway.
 */
export const SPECIAL_OFFSETS: ReadonlyArray<readonly [offset: number, name: string]> = [
  [0, "[BOS]"],
  [1, "[EOS]"],
  [2, "<|end_of_msg|>"],
  [3, "<|open|>"],
  [4, "<|close|>"],
  [5, "<|sep|>"],
  [18, "<|media_begin|>"],
  [19, "<|media_content|>"],
  [20, "<|media_end|>"],
  [21, "<|media_pad|>"],
  [22, "<|kimi_image_placeholder|>"],
  [SPECIAL_SLOTS - 1, "[PAD]"],
];

/** Name of special slot `offset` for a model with `vocab` rows (`<|reserved_token_ID|>` if unnamed). */
export function specialName(vocab: number, offset: number): string {
  for (const [o, name] of SPECIAL_OFFSETS) if (o === offset) return name;
  return `<|reserved_token_${vocab - SPECIAL_SLOTS + offset}|>`;
}

let cl100kCache: Uint8Array[] | undefined;

/** cl100k_base's tokens in rank order (index = rank). The npm file is one line:
 *  "! 0 <b64 rank 0> <b64 rank 1> ..." — "! N" starts a run of consecutive ranks at N. */
export function loadCl100kTokens(): Uint8Array[] {
  if (cl100kCache) return cl100kCache;
  const { bpe_ranks } = cl100k as { bpe_ranks: string };
  const fields = bpe_ranks.split(/\s+/).filter((f) => f.length > 0);
  const tokens: Uint8Array[] = [];
  let rank = 0;
  for (let i = 0; i < fields.length; i++) {
    if (fields[i] === "!") {
      rank = Number(fields[++i]);
      continue;
    }
    tokens[rank++] = Uint8Array.from(Buffer.from(fields[i]!, "base64"));
  }
  for (let r = 0; r < tokens.length; r++) if (!tokens[r]) throw new Error(`cl100k_base: rank ${r} missing`);
  cl100kCache = tokens;
  return tokens;
}

/**
 * The lowest `count` ranks of cl100k re-ranked 0..count-1, but with every single byte kept: a
 * truncated rank table is still a valid tiktoken BPE as long as each byte has a rank, because
 * merging starts from bytes and only ever produces tokens that are in the table.
 */
export function truncatedRanks(count: number): Uint8Array[] {
  const all = loadCl100kTokens();
  if (count < SPECIAL_SLOTS) throw new Error(`BPE part needs at least 256 ranks, got ${count}`);
  count = Math.min(count, all.length);
  const singles = all.filter((t) => t.length === 1).length;
  let multiBudget = count - singles; // multi-byte tokens we may keep, lowest rank first
  const out: Uint8Array[] = [];
  for (const t of all) {
    if (t.length === 1) out.push(t);
    else if (multiBudget > 0) {
      out.push(t);
      multiBudget--;
    }
  }
  if (singles !== 256) throw new Error(`cl100k_base has ${singles} single-byte tokens, expected 256`);
  return out;
}

export interface TokenizerFolderOptions {
  /** embedding rows of the model: BPE ranks fill 0..vocab-257 (as far as cl100k goes), specials the top 256 */
  vocab: number;
}

/** Text of tiktoken.model: `<base64 bytes> <rank>` per line. */
export function tiktokenModelText(vocab: number): string {
  const ranks = truncatedRanks(vocab - SPECIAL_SLOTS);
  const lines = ranks.map((t, r) => `${Buffer.from(t).toString("base64")} ${r}`);
  return `${lines.join("\n")}\n`;
}

/** tokenizer_config.json content, shaped like the release's (added_tokens_decoder by id string). */
export function tokenizerConfig(vocab: number): Record<string, unknown> {
  const first = vocab - SPECIAL_SLOTS;
  const added: Record<string, { content: string; lstrip: boolean; normalized: boolean; rstrip: boolean; single_word: boolean; special: true }> = {};
  for (let o = 0; o < SPECIAL_SLOTS; o++) {
    added[String(first + o)] = { content: specialName(vocab, o), lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
  }
  return {
    added_tokens_decoder: added,
    bos_token: "[BOS]",
    eos_token: "[EOS]",
    pad_token: "[PAD]",
    unk_token: null,
    model_max_length: 1048576,
    tokenizer_class: "TikTokenTokenizer",
    comment: "test tokenizer written by tools/gen/tokenizer.ts: cl100k_base ranks + K3 special names",
  };
}

/** Writes tiktoken.model and tokenizer_config.json into `dir` (created if missing). */
export function writeTokenizerFolder(dir: string, opts: TokenizerFolderOptions): void {
  const { vocab } = opts;
  if (!Number.isInteger(vocab) || vocab < MIN_VOCAB || vocab > MAX_VOCAB) {
    throw new Error(`writeTokenizerFolder: vocab must be an integer in [${MIN_VOCAB}, ${MAX_VOCAB}], got ${vocab}`);
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "tiktoken.model"), tiktokenModelText(vocab));
  writeFileSync(join(dir, "tokenizer_config.json"), `${JSON.stringify(tokenizerConfig(vocab), null, 2)}\n`);
}

if (import.meta.main) {
  const [dir, vocabArg] = process.argv.slice(2);
  if (!dir) {
    process.stderr.write("usage: bun tools/gen/tokenizer.ts DIR [VOCAB=163840]\n");
    process.exit(2);
  }
  writeTokenizerFolder(dir, { vocab: Number(vocabArg ?? MAX_VOCAB) });
}
