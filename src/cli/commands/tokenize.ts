// `k3 tokenize [DIR] [TEXT | --file F | -] [--json] [--specials]`: print the token ids of a text.
// DIR is a model or tokenizer folder (tiktoken.model + tokenizer_config.json); without one (one
// operand that is not a folder, or none) the tokenizer is $K3_MODEL's, else the demo's, as for
// `k3 run` (tokenizerOperands). Ids go to stdout,
// space-separated with a final newline, or as one JSON object {"ids":[...]}. With no TEXT and no
// --file, the text is stdin when stdin is not a terminal (like `k3 run`).
import { readFileSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { checkModelFolder, resolveModelFolder, Tokenizer } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { defineCommand } from "../command.ts";
import { readStdin } from "../common.ts";
import { modelDirOrDemo } from "../demo.ts";

export default defineCommand({
  meta: { name: "tokenize", description: "Print the token ids of a text (special tokens disabled unless --specials)" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model or tokenizer folder (default: $K3_MODEL, else the demo model)" },
    text: { type: "positional", required: false, valueHint: "TEXT", description: "the text, or '-' for stdin (default when stdin is not a terminal)" },
    file: { type: "string", valueHint: "FILE", description: "read the text from FILE" },
    json: { type: "boolean", description: 'print {"ids":[...]} instead of space-separated ids' },
    specials: { type: "boolean", description: "recognise special token names such as <|open|> (chat debugging)" },
  },
  help: {
    examples: [
      ["k3 tokenize /models/Kimi-K3 'Hello, world'", "ids, space-separated"],
      ["k3 tokenize 'Hello, world'", "with $K3_MODEL's tokenizer, else the demo's"],
      ["k3 tokenize /models/Kimi-K3 --json < prompt.txt", "ids of a file's text as JSON (stdin)"],
    ],
  },
  async run({ args }) {
    const { dir, input } = tokenizerOperands(args.dir, args.text);
    const tok = await loadTokenizer(dir);
    const text = await readOneInput(input, args.file, "text");
    const ids = args.specials ? tok.encodeWithSpecials(text) : tok.encode(text);
    process.stdout.write(args.json ? `${JSON.stringify({ ids })}\n` : `${ids.join(" ")}\n`);
  },
});

/** Input rule shared with `k3 detokenize`: one of a positional value, --file F, or stdin ("-", or
 *  nothing given while stdin is not a terminal). Stdin is taken exactly (no newline dropped). */
export async function readOneInput(positional: string | undefined, file: string | undefined, what: string): Promise<string> {
  if (positional !== undefined && file !== undefined) throw new K3Error("USAGE", `give ${what} either as an argument or with --file, not both`);
  if (file !== undefined) {
    try {
      return readFileSync(file, "utf8");
    } catch (err) {
      throw new K3Error("IO", `cannot read ${file}: ${(err as Error).message}`);
    }
  }
  if (positional === "-" || (positional === undefined && !process.stdin.isTTY)) return await readStdin();
  if (positional === undefined) throw new K3Error("USAGE", `no ${what}: pass it as an argument, with --file F, or on stdin`);
  return positional;
}

/** `[DIR] [INPUT]` of tokenize / detokenize: two operands are DIR and INPUT; one is DIR when it
 *  names an existing folder, else INPUT (one that looks like a path, with a / and no spaces, but
 *  does not exist is refused as a missing model folder, as `k3 run` does); none: neither. */
export function tokenizerOperands(first: string | undefined, second: string | undefined): { dir?: string; input?: string } {
  if (second !== undefined || first === undefined) return { dir: first, input: second };
  let isDir = false;
  try {
    isDir = statSync(first).isDirectory();
  } catch {
    if (/^[~.]|\//.test(first) && !/\s/.test(first)) checkModelFolder(resolve(first));
  }
  return isDir ? { dir: first } : { input: first };
}

/** The tokenizer of DIR (a Hugging Face repo folder: its snapshot), else $K3_MODEL's, else the demo's. */
export async function loadTokenizer(dir: string | undefined): Promise<Tokenizer> {
  const folder = resolveModelFolder(await modelDirOrDemo(dir));
  checkModelFolder(folder.dir);
  return Tokenizer.load(folder.dir);
}
