// `k3 detokenize DIR (IDS | --file F | -)`: print the text of token ids. IDS may be separated by
// spaces, commas or newlines, or be JSON ({"ids":[...]} or [...]) as `k3 tokenize --json` prints.
// The text goes to stdout exactly (no newline added), so tokenize | detokenize round-trips a file.
import { defineCommand } from "citty";
import { K3Error } from "../../errors.ts";
import { readOneInput } from "./tokenize.ts";
import { resolveModelFolder, Tokenizer } from "../../engine.ts";

/** Ids from the accepted spellings; throws USAGE on anything else. */
export function parseIds(input: string): number[] {
  const trimmed = input.trim();
  let values: unknown[];
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    let json: unknown;
    try {
      json = JSON.parse(trimmed);
    } catch {
      throw new K3Error("USAGE", "ids look like JSON but do not parse");
    }
    const list = Array.isArray(json) ? json : (json as { ids?: unknown }).ids;
    if (!Array.isArray(list)) throw new K3Error("USAGE", 'JSON ids must be [...] or {"ids":[...]}');
    values = list;
  } else {
    values = trimmed === "" ? [] : trimmed.split(/[\s,]+/).map((s) => (/^\d+$/.test(s) ? Number(s) : s));
  }
  const bad = values.filter((v) => typeof v !== "number" || !Number.isSafeInteger(v) || v < 0);
  if (bad.length) throw new K3Error("USAGE", `not token ids: ${bad.slice(0, 5).map((v) => JSON.stringify(v)).join(", ")}`);
  return values as number[];
}

export default defineCommand({
  meta: { name: "detokenize", description: "Print the text of token ids" },
  args: {
    dir: { type: "positional", required: true, description: "model or tokenizer folder" },
    ids: { type: "positional", required: false, description: "ids ('1 2 3', '1,2,3' or JSON), or '-' to read stdin" },
    file: { type: "string", description: "read the ids from this file" },
  },
  async run({ args }) {
    const tok = Tokenizer.load(resolveModelFolder(args.dir).dir); // a Hugging Face repo folder: its snapshot
    const ids = parseIds(await readOneInput(args.ids, args.file, "ids"));
    process.stdout.write(tok.decode(ids));
  },
});
