// `k3 tokenize DIR (TEXT | --file F | -) [--json] [--specials]`: print the token ids of a text.
// DIR is a model or tokenizer folder (tiktoken.model + tokenizer_config.json). Ids go to stdout,
// space-separated with a final newline, or as one JSON object {"ids":[...]}.
import { readFileSync } from "node:fs";
import { defineCommand } from "citty";
import { K3Error } from "../../errors.ts";
import { resolveModelFolder, Tokenizer } from "../../engine.ts";

export default defineCommand({
  meta: { name: "tokenize", description: "Print the token ids of a text (special tokens disabled unless --specials)" },
  args: {
    dir: { type: "positional", required: true, description: "model or tokenizer folder" },
    text: { type: "positional", required: false, description: "the text, or '-' to read stdin" },
    file: { type: "string", description: "read the text from this file" },
    json: { type: "boolean", description: 'print {"ids":[...]} instead of space-separated ids' },
    specials: { type: "boolean", description: "recognise special token names such as <|open|> (chat debugging)" },
  },
  async run({ args }) {
    const tok = Tokenizer.load(resolveModelFolder(args.dir).dir); // a Hugging Face repo folder: its snapshot
    const text = await readOneInput(args.text, args.file, "text");
    const ids = args.specials ? tok.encodeWithSpecials(text) : tok.encode(text);
    process.stdout.write(args.json ? `${JSON.stringify({ ids })}\n` : `${ids.join(" ")}\n`);
  },
});

/** Input rule shared with `k3 detokenize`: exactly one of a positional value, --file F, or "-" (stdin). */
export async function readOneInput(positional: string | undefined, file: string | undefined, what: string): Promise<string> {
  if (positional !== undefined && file !== undefined) throw new K3Error("USAGE", `give ${what} either as an argument or with --file, not both`);
  if (file !== undefined) {
    try {
      return readFileSync(file, "utf8");
    } catch (err) {
      throw new K3Error("IO", `cannot read ${file}: ${(err as Error).message}`);
    }
  }
  if (positional === undefined) throw new K3Error("USAGE", `no ${what}: pass it as an argument, with --file F, or '-' for stdin`);
  if (positional === "-") return await Bun.stdin.text();
  return positional;
}
