// The K3 tokenizer: tiktoken.model (byte-level BPE ranks) + tokenizer_config.json (added/special
// tokens) from a model or tokenizer folder. docs/TOKENIZER.md describes the format and choices.
//
// Ids: BPE ranks are token ids; added tokens (K3: 163584..163839) sit above them. vocabSize is
// 1 + the largest id of either kind. User text goes through encode() (specials disabled: the
// text "<|open|>" is ordinary characters); only the chat renderer uses encodeWithSpecials().
import { existsSync } from "node:fs";
import { join } from "node:path";
import { K3Error } from "../errors.ts";
import { readRegularFile } from "../files.ts";
import { bytePairEncode, RankTable } from "./bpe.ts";
import { K3_PRETOKENIZE_REGEX } from "./pretokenize.ts";

export const TIKTOKEN_FILE = "tiktoken.model";
export const CONFIG_FILE = "tokenizer_config.json";

/** Incremental detokenizer: push ids one at a time, get back only complete UTF-8 text. */
export interface StreamDecoder {
  /** Text that became complete with this id ("" while a multi-byte character is still split). */
  push(id: number): string;
  /** Whatever is pending (an unfinished UTF-8 sequence comes out as U+FFFD); resets the decoder. */
  flush(): string;
}

const MAX_CACHE = 1 << 16; // piece -> ids cache entries before it is cleared (bounded memory)
const utf8 = new TextEncoder();

export class Tokenizer {
  private readonly cache = new Map<string, number[]>();
  private scratch = new Uint8Array(1024);
  private readonly specialRegex: RegExp | null;

  private constructor(
    private readonly table: RankTable,
    /** added token name -> id */
    private readonly specials: ReadonlyMap<string, number>,
    /** id -> added token name */
    private readonly specialNames: ReadonlyMap<number, string>,
    /** number of ids: 1 + the largest rank or added id */
    readonly vocabSize: number,
  ) {
    // Longest name first so a name that is a prefix of another never wins early.
    const names = [...specials.keys()].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
    this.specialRegex = names.length ? new RegExp(names.map(escapeRegex).join("|"), "g") : null;
  }

  /** Loads DIR/tiktoken.model and DIR/tokenizer_config.json. Throws K3Error("TOKENIZER") naming the file and line. */
  static load(dir: string): Tokenizer {
    const modelPath = join(dir, TIKTOKEN_FILE);
    const configPath = join(dir, CONFIG_FILE);
    const missing = [modelPath, configPath].filter((p) => !existsSync(p));
    if (missing.length) throw new K3Error("TOKENIZER", `tokenizer files missing in ${dir}`, missing.map((p) => `${p}: not found`));
    // Regular files only: a FIFO in the model folder must be refused, not block the open forever.
    const tokens = parseTiktokenModel(readRegularFile(modelPath, "tokenizer file", "TOKENIZER"), modelPath);
    const specials = parseAddedTokens(readRegularFile(configPath, "tokenizer file", "TOKENIZER").toString("utf8"), configPath);
    return Tokenizer.fromParts(tokens, specials, `${modelPath} + ${configPath}`);
  }

  /** Builds a tokenizer from token bytes by rank and added tokens (name -> id). `origin` names the source in errors. */
  static fromParts(tokens: ReadonlyArray<Uint8Array | undefined>, specials: ReadonlyMap<string, number>, origin = "tokenizer"): Tokenizer {
    const problems: string[] = [];
    const seenByte = new Uint8Array(256);
    for (const t of tokens) if (t && t.length === 1) seenByte[t[0]!] = 1;
    const missingBytes = [...seenByte.keys()].filter((b) => !seenByte[b]);
    if (missingBytes.length) {
      problems.push(`${missingBytes.length} single bytes have no rank (e.g. 0x${missingBytes[0]!.toString(16).padStart(2, "0")}); byte-level BPE needs all 256`);
    }
    const names = new Map<number, string>();
    for (const [name, id] of specials) {
      if (tokens[id]) problems.push(`added token ${JSON.stringify(name)} id ${id} collides with a BPE rank`);
      if (names.has(id)) problems.push(`id ${id} is named twice (${JSON.stringify(names.get(id))}, ${JSON.stringify(name)})`);
      names.set(id, name);
    }
    const table = problems.length ? undefined : new RankTable(tokens);
    for (let id = 0; table && id < tokens.length && problems.length < 10; id++) {
      const t = tokens[id];
      // The index returns the first id inserted for a byte string: any other id is a repeat.
      const first = t ? table.rank(t, 0, t.length) : id;
      if (first !== id) problems.push(`rank ${id} repeats the bytes of rank ${first}`);
    }
    if (problems.length || !table) throw new K3Error("TOKENIZER", `invalid tokenizer (${origin})`, problems);
    let vocab = tokens.length;
    for (const id of specials.values()) vocab = Math.max(vocab, id + 1);
    return new Tokenizer(table, specials, names, vocab);
  }

  /** Ids of `text` with special tokens DISABLED: special names in the text are plain characters. */
  encode(text: string): number[] {
    const out: number[] = [];
    this.encodeOrdinaryInto(text, out);
    return out;
  }

  /** Ids of `text` where added-token names (e.g. "<|open|>") become their ids. For the chat renderer only. */
  encodeWithSpecials(text: string): number[] {
    const out: number[] = [];
    const re = this.specialRegex;
    if (!re) return this.encode(text);
    re.lastIndex = 0;
    let at = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      this.encodeOrdinaryInto(text.slice(at, m.index), out);
      out.push(this.specials.get(m[0])!);
      at = m.index + m[0].length;
    }
    this.encodeOrdinaryInto(text.slice(at), out);
    return out;
  }

  /** Id of an added token by name; throws K3Error("TOKENIZER") if this tokenizer has no such token. */
  specialId(name: string): number {
    const id = this.specials.get(name);
    if (id === undefined) throw new K3Error("TOKENIZER", `tokenizer has no special token ${JSON.stringify(name)}`);
    return id;
  }

  private longest = 0;
  /** Bytes of the longest token (an added token counts its name's bytes). Every id stands for at
   *  most this many bytes, so text of B UTF-8 bytes never encodes to fewer than
   *  ceil(B / maxTokenBytes) ids: a bound on a prompt's length known before encoding it. */
  get maxTokenBytes(): number {
    if (this.longest === 0) {
      for (let id = 0; id < this.table.size; id++) this.longest = Math.max(this.longest, this.table.bytes(id)?.length ?? 0);
      for (const name of this.specials.keys()) this.longest = Math.max(this.longest, utf8.encode(name).length);
    }
    return this.longest;
  }

  /** Whether `id` is an added/special token (not a BPE rank). */
  isSpecial(id: number): boolean {
    return this.specialNames.has(id);
  }

  /** Name of an added token id, or undefined. */
  specialName(id: number): string | undefined {
    return this.specialNames.get(id);
  }

  /** Whether `id` stands for a token (a BPE rank or an added token; ids in gaps do not). */
  hasToken(id: number): boolean {
    return this.table.bytes(id) !== undefined || this.specialNames.has(id);
  }

  /** Raw bytes of one id (a special's bytes are its name in UTF-8). Throws on an id with no token. */
  tokenBytes(id: number): Uint8Array {
    const b = this.table.bytes(id);
    if (b) return b;
    const name = this.specialNames.get(id);
    if (name !== undefined) return utf8.encode(name);
    throw new K3Error("TOKENIZER", `token id ${id} is not in the vocabulary (size ${this.vocabSize})`);
  }

  /** Text of `ids`; invalid UTF-8 (e.g. a cut multi-byte character) becomes U+FFFD. Specials decode to their names. */
  decode(ids: readonly number[]): string {
    let buf = new Uint8Array(Math.max(64, ids.length * 4)); // grows by doubling
    let at = 0;
    for (const id of ids) {
      const b = this.tokenBytes(id);
      if (at + b.length > buf.length) {
        const bigger = new Uint8Array(Math.max(buf.length * 2, at + b.length));
        bigger.set(buf.subarray(0, at));
        buf = bigger;
      }
      if (b.length === 1) buf[at] = b[0]!;
      else buf.set(b, at);
      at += b.length;
    }
    return new TextDecoder().decode(buf.subarray(0, at));
  }

  /** A streaming decoder: text comes out only when its UTF-8 is complete. */
  decoder(): StreamDecoder {
    // TextDecoder in stream mode keeps an unfinished trailing sequence for the next call.
    let td = new TextDecoder();
    return {
      push: (id) => td.decode(this.tokenBytes(id), { stream: true }),
      flush: () => {
        const rest = td.decode();
        td = new TextDecoder();
        return rest;
      },
    };
  }

  private encodeOrdinaryInto(text: string, out: number[]): void {
    if (!text) return;
    const re = K3_PRETOKENIZE_REGEX;
    re.lastIndex = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      const piece = m[0];
      const hit = this.cache.get(piece);
      if (hit) {
        for (const id of hit) out.push(id);
        continue;
      }
      const ids = this.encodePiece(piece);
      if (this.cache.size >= MAX_CACHE) this.cache.clear();
      this.cache.set(piece, ids);
      for (const id of ids) out.push(id);
    }
  }

  private encodePiece(piece: string): number[] {
    // UTF-8 is at most 3 bytes per UTF-16 code unit.
    if (this.scratch.length < piece.length * 3) this.scratch = new Uint8Array(piece.length * 3);
    const { written } = utf8.encodeInto(piece, this.scratch);
    const ids: number[] = [];
    bytePairEncode(this.table, this.scratch, written, ids);
    return ids;
  }
}

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\\/-]/g, "\\$&");
}

const B64 = new Int16Array(256).fill(-1);
for (let i = 0; i < 64; i++) B64["ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".charCodeAt(i)] = i;

/** Strict base64 (with optional "=" padding) of src[a..b), or null if malformed. */
function decodeBase64(src: Uint8Array, a: number, b: number): Uint8Array | null {
  while (b > a && src[b - 1] === 61 /* = */) b--;
  const len = b - a;
  if (len % 4 === 1) return null;
  const out = new Uint8Array((len * 3) >> 2);
  let acc = 0;
  let bits = 0;
  let o = 0;
  for (let i = a; i < b; i++) {
    const v = B64[src[i]!]!;
    if (v < 0) return null;
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
  }
  return out;
}

/**
 * Parses tiktoken.model: one `<base64 bytes> <rank>` per line (blank lines ignored).
 * Returns token bytes indexed by rank (gaps allowed). Errors name `path:line`. Repeated byte
 * strings are caught by fromParts (through the hash index, cheaper than a second map here).
 */
export function parseTiktokenModel(data: Uint8Array, path: string): (Uint8Array | undefined)[] {
  const tokens: (Uint8Array | undefined)[] = [];
  const problems: string[] = [];
  let lineNo = 0;
  let start = 0;
  while (start < data.length && problems.length < 10) {
    let end = data.indexOf(10, start);
    if (end < 0) end = data.length;
    lineNo++;
    let stop = end;
    if (stop > start && data[stop - 1] === 13) stop--; // tolerate CRLF
    if (stop > start) {
      const space = data.indexOf(32, start);
      const fail = (why: string) => problems.push(`${path}:${lineNo}: ${why}`);
      if (space < 0 || space >= stop) fail("expected '<base64> <rank>'");
      else {
        const bytes = decodeBase64(data, start, space);
        const rankText = new TextDecoder().decode(data.subarray(space + 1, stop));
        const rank = /^\d{1,9}$/.test(rankText) ? Number(rankText) : NaN;
        if (!bytes || bytes.length === 0) fail("bad base64 token");
        else if (!Number.isInteger(rank)) fail(`bad rank ${JSON.stringify(rankText.slice(0, 20))}`);
        else if (tokens[rank]) fail(`rank ${rank} appears twice`);
        else tokens[rank] = bytes;
      }
    }
    start = end + 1;
  }
  if (problems.length) throw new K3Error("TOKENIZER", `cannot read ${path}`, problems);
  if (tokens.length === 0) throw new K3Error("TOKENIZER", `cannot read ${path}`, [`${path}: no tokens`]);
  return tokens;
}

/** Parses tokenizer_config.json's added_tokens_decoder into name -> id. */
export function parseAddedTokens(text: string, path: string): Map<string, number> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new K3Error("TOKENIZER", `cannot read ${path}`, [`${path}: invalid JSON (${(err as Error).message})`]);
  }
  const decoder = (json as { added_tokens_decoder?: unknown } | null)?.added_tokens_decoder;
  if (!decoder || typeof decoder !== "object" || Array.isArray(decoder)) {
    throw new K3Error("TOKENIZER", `cannot read ${path}`, [`${path}: no "added_tokens_decoder" object`]);
  }
  const out = new Map<string, number>();
  const problems: string[] = [];
  for (const [key, entry] of Object.entries(decoder as Record<string, unknown>)) {
    const id = /^\d{1,9}$/.test(key) ? Number(key) : NaN;
    const content = (entry as { content?: unknown } | null)?.content;
    if (!Number.isInteger(id)) problems.push(`${path}: added_tokens_decoder key ${JSON.stringify(key)} is not an id`);
    else if (typeof content !== "string" || content.length === 0) problems.push(`${path}: added_tokens_decoder["${key}"].content is not a non-empty string`);
    else if (out.has(content)) problems.push(`${path}: added token ${JSON.stringify(content)} has two ids (${out.get(content)}, ${id})`);
    else out.set(content, id);
  }
  if (problems.length) throw new K3Error("TOKENIZER", `cannot read ${path}`, problems.slice(0, 10));
  return out;
}
