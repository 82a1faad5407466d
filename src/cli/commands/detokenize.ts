// `k3 detokenize [DIR] (IDS | --file F | -)`: print the text of token ids (no DIR: $K3_MODEL's
// tokenizer, else the demo's; the operand rule is tokenize's). IDS may be separated by
// spaces, commas or newlines, or be JSON ({"ids":[...]} or [...]) as `k3 tokenize --json` prints.
// The text goes to stdout exactly (no newline added), so tokenize | detokenize round-trips a file.
import { defineCommand } from "../command.ts";
import { parseIds } from "../ids.ts";
import { loadTokenizer, readOneInput, tokenizerOperands } from "./tokenize.ts";

export default defineCommand({
  meta: { name: "detokenize", description: "Print the text of token ids" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model or tokenizer folder (default: $K3_MODEL, else the demo model)" },
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
    const { dir, input } = tokenizerOperands(args.dir, args.ids);
    const tok = await loadTokenizer(dir);
    const ids = parseIds(await readOneInput(input, args.file, "ids"), input === undefined || input === "-" ? (args.file ?? "stdin") : "IDS");
    process.stdout.write(tok.decode(ids));
  },
});
