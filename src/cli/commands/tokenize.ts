// `k3 tokenize DIR [TEXT | --file F | -] [--json] [--specials]`: print the token ids of a text.
// DIR is a model or tokenizer folder (tiktoken.model + tokenizer_config.json). Ids go to stdout,
// space-separated with a final newline, or as one JSON object {"ids":[...]}. With no TEXT and no
// --file, the text is stdin when stdin is not a terminal (like `k3 run`).
import { readFileSync } from "node:fs";
import { resolveModelFolder, Tokenizer } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { defineCommand } from "../command.ts";
import { readStdin } from "../common.ts";

export default defineCommand({
  meta: { name: "tokenize", description: "Print the token ids of a text (special tokens disabled unless --specials)" },
  args: {
    dir: { type: "positional", required: true, description: "model or tokenizer folder" },
    text: { type: "positional", required: false, description: "the text, or '-' for stdin (default when stdin is not a terminal)" },
    file: { type: "string", valueHint: "FILE", description: "read the text from FILE" },
    json: { type: "boolean", description: 'print {"ids":[...]} instead of space-separated ids' },
    specials: { type: "boolean", description: "recognise special token names such as <|open|> (chat debugging)" },
  },
  help: {
    examples: [
      ["k3 tokenize /models/Kimi-K3 'Hello, world'", "ids, space-separated"],
      ["k3 tokenize /models/Kimi-K3 --json < prompt.txt", "ids of a file's text as JSON (stdin)"],
    ],
  },
  async run({ args }) {
    const tok = Tokenizer.load(resolveModelFolder(args.dir).dir); // a Hugging Face repo folder: its snapshot
    const text = await readOneInput(args.text, args.file, "text");
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
