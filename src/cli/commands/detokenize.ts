// `k3 detokenize DIR (IDS | --file F | -)`: print the text of token ids. IDS may be separated by
// spaces, commas or newlines, or be JSON ({"ids":[...]} or [...]) as `k3 tokenize --json` prints.
// The text goes to stdout exactly (no newline added), so tokenize | detokenize round-trips a file.
import { defineCommand } from "../command.ts";
import { parseIds } from "../ids.ts";
import { readOneInput } from "./tokenize.ts";
import { resolveModelFolder, Tokenizer } from "../../engine.ts";

export default defineCommand({
  meta: { name: "detokenize", description: "Print the text of token ids" },
  args: {
    dir: { type: "positional", required: true, description: "model or tokenizer folder" },
    ids: { type: "positional", required: false, description: "ids ('1 2 3', '1,2,3' or JSON), or '-' for stdin (default when stdin is not a terminal)" },
    file: { type: "string", valueHint: "FILE", description: "read the ids from FILE" },
  },
  help: {
    examples: [
      ["k3 detokenize /models/Kimi-K3 '1 2 3'", "the text of three ids"],
      ["k3 tokenize /models/Kimi-K3 'Hello' --json | k3 detokenize /models/Kimi-K3", "a round trip through stdin"],
    ],
  },
  async run({ args }) {
    const tok = Tokenizer.load(resolveModelFolder(args.dir).dir); // a Hugging Face repo folder: its snapshot
    const ids = parseIds(await readOneInput(args.ids, args.file, "ids"), args.ids === undefined || args.ids === "-" ? (args.file ?? "stdin") : "IDS");
    process.stdout.write(tok.decode(ids));
  },
});
