// The compact trunk's error, measured (issue 16): for each packed format, the next-token logits
// against the exact engine's at every position of one sequence.
//
//   bun bench/trunk-error.ts --model DIR [--positions 256] [--greedy 32] [--ram 12G] [--formats int8,int4] [--json OUT]
//
// Two walks per engine, each one token per forward pass:
//  - a text (a fixed English passage, tokenized by the model's tokenizer; the ids 5 17 300 42 …
//    cycle when the model has none) teacher-forced for --positions positions: at each, the
//    packed engine's next-token logits against the exact engine's: |Δlogit| (max and mean over
//    the vocabulary), KL(p_exact ‖ p_packed) of the softmax distributions (in double), and
//    whether the argmax agrees;
//  - greedy generation for --greedy tokens from four points of the text (after its first 8, 32,
//    64 and 128 tokens): the first token where the packed engine's greedy output differs from
//    the exact engine's (or none), for each start. Packs are made first if the
// model has none (k3 pack writes next to the model: give a folder that may take them).
import { writeFileAtomic, writeTarget } from "../src/files.ts";
import { Engine, packTrunk, type TrunkFormat } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";

export interface FormatError {
  format: TrunkFormat;
  positions: number;
  greedyTokens: number;
  maxAbsDelta: number;
  meanAbsDelta: number;
  meanKl: number;
  maxKl: number;
  top1Agree: number; // fraction of positions
  firstDivergence: (number | null)[]; // per greedy start: the first generated token (0-based) that differs, or null
  sPerToken: number; // teacher-forced decode, for scale only (not a benchmark arm)
}

export interface ErrorReport {
  model: string;
  text: "passage" | "ids"; // what was teacher-forced
  positions: number;
  greedyTokens: number;
  ram: string;
  exactSPerToken: number;
  formats: FormatError[];
}

/** Teacher-forced text: public domain (Lincoln, 1863), long enough for a few hundred tokens. */
const PASSAGE =
  "Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in Liberty, and dedicated to the proposition that all men are created equal. " +
  "Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived and so dedicated, can long endure. We are met on a great battle-field of that war. " +
  "We have come to dedicate a portion of that field, as a final resting place for those who here gave their lives that that nation might live. It is altogether fitting and proper that we should do this. " +
  "But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- this ground. The brave men, living and dead, who struggled here, have consecrated it, far above our poor power to add or detract. " +
  "The world will little note, nor long remember what we say here, but it can never forget what they did here. It is for us the living, rather, to be dedicated here to the unfinished work which they who fought here have thus far so nobly advanced. " +
  "It is rather for us to be here dedicated to the great task remaining before us -- that from these honored dead we take increased devotion to that cause for which they gave the last full measure of devotion -- " +
  "that we here highly resolve that these dead shall not have died in vain -- that this nation, under God, shall have a new birth of freedom -- and that government of the people, by the people, for the people, shall not perish from the earth.";
const IDS = [5, 17, 300, 42];
/** Greedy runs start after this many tokens of the text. */
const GREEDY_STARTS = [8, 32, 64, 128];

function softmax64(l: Float32Array): Float64Array {
  let m = -Infinity;
  for (let i = 0; i < l.length; i++) m = Math.max(m, l[i]!);
  const p = new Float64Array(l.length);
  let s = 0;
  for (let i = 0; i < l.length; i++) s += p[i] = Math.exp(l[i]! - m);
  for (let i = 0; i < l.length; i++) p[i]! /= s;
  return p;
}

/** From `prompt`, run `steps` forward passes, calling `pick(i, logits)` for the id fed next. */
function walk(engine: Engine, prompt: number[], steps: number, pick: (i: number, logits: Float32Array) => number): number {
  let i = 0;
  const sampler = { sample: (l: Float32Array) => pick(i++, l) };
  const it = engine.generate(engine.createSession(), prompt, { maxTokens: steps, sampler });
  let r = it.next();
  while (!r.done) r = it.next();
  return r.value.msPerToken / 1000;
}

/** The teacher-forced token sequence: the passage's ids (repeated to length), or cycled ids. */
function sequence(engine: Engine, n: number): { ids: number[]; text: ErrorReport["text"] } {
  let base: number[];
  let text: ErrorReport["text"] = "passage";
  try {
    base = engine.tokenizer().encode(PASSAGE);
  } catch {
    (base = IDS), (text = "ids");
  }
  return { ids: Array.from({ length: Math.max(n + 1, Math.max(...GREEDY_STARTS)) }, (_, i) => base[i % base.length]!), text };
}

export function measureTrunkError(model: string, opts: { positions?: number; greedy?: number; ram?: string; formats?: TrunkFormat[]; log?: (s: string) => void } = {}): ErrorReport {
  const positions = opts.positions ?? 256;
  const greedyN = opts.greedy ?? 32;
  const ram = opts.ram ?? "12G";
  const formats = opts.formats ?? ["int8", "int4"];
  const log = opts.log ?? ((s: string) => process.stderr.write(`[trunk-error] ${s}\n`));
  const k = loadKernels();
  const open = (trunk: TrunkFormat) => Engine.open(model, { ram, trunk, allowOverRam: true });
  const argmax = (l: Float32Array) => k.k3_argmax(l as any, l.length);

  log(`exact engine: ${positions} teacher-forced positions, ${greedyN} greedy tokens…`);
  const exactLogits: Float32Array[] = [];
  const exact = open("bf16");
  let seq: { ids: number[]; text: ErrorReport["text"] };
  const exactGreedy: number[][] = [];
  let exactS: number;
  try {
    seq = sequence(exact, positions);
    // Position i predicts seq[i + 1] from seq[0..i]; the walk feeds seq[i + 1] whatever was predicted.
    exactS = walk(exact, seq.ids.slice(0, 1), positions, (i, l) => (exactLogits.push(Float32Array.from(l)), seq.ids[i + 1]!));
    for (const start of GREEDY_STARTS) {
      const g: number[] = [];
      walk(exact, seq.ids.slice(0, start), greedyN, (_, l) => (g.push(argmax(l)), g.at(-1)!));
      exactGreedy.push(g);
    }
  } finally {
    exact.close();
  }
  const exactP = exactLogits.map(softmax64);

  const out: FormatError[] = [];
  for (const format of formats) {
    try {
      open(format).close();
    } catch {
      log(`packing ${format}…`);
      packTrunk(model, format as "int8" | "int4");
    }
    log(`${format}…`);
    const e = open(format);
    let maxAbs = 0;
    let sumAbs = 0;
    let sumKl = 0;
    let maxKl = 0;
    let agree = 0;
    const first: (number | null)[] = [];
    let s: number;
    try {
      s = walk(e, seq.ids.slice(0, 1), positions, (i, l) => {
        const x = exactLogits[i]!;
        for (let j = 0; j < l.length; j++) {
          const d = Math.abs(l[j]! - x[j]!);
          sumAbs += d;
          if (d > maxAbs) maxAbs = d;
        }
        const p = exactP[i]!;
        const q = softmax64(l);
        let kl = 0;
        for (let j = 0; j < l.length; j++) if (p[j]! > 0) kl += p[j]! * (Math.log(p[j]!) - Math.log(Math.max(q[j]!, 1e-300)));
        sumKl += kl;
        maxKl = Math.max(maxKl, kl);
        if (argmax(l) === argmax(x)) agree++;
        return seq.ids[i + 1]!;
      });
      GREEDY_STARTS.forEach((start, n) => {
        const mine: number[] = [];
        walk(e, seq.ids.slice(0, start), greedyN, (_, l) => (mine.push(argmax(l)), mine.at(-1)!));
        const d = mine.findIndex((id, i) => id !== exactGreedy[n]![i]);
        first.push(d < 0 ? null : d);
      });
    } finally {
      e.close();
    }
    const vocab = exactLogits[0]!.length;
    out.push({ format, positions, greedyTokens: greedyN, maxAbsDelta: maxAbs, meanAbsDelta: sumAbs / (positions * vocab), meanKl: sumKl / positions, maxKl, top1Agree: agree / positions, firstDivergence: first, sPerToken: s });
    log(`  max |Δ| ${maxAbs.toFixed(3)}, mean |Δ| ${(sumAbs / (positions * vocab)).toFixed(4)}, KL ${(sumKl / positions).toExponential(2)}, top-1 ${agree}/${positions}, first greedy divergence ${first.map((x) => x ?? "none").join(", ")}`);
  }
  return { model, text: seq.text, positions, greedyTokens: greedyN, ram, exactSPerToken: exactS, formats: out };
}

/** The error table in markdown. */
export function renderErrorTable(r: ErrorReport): string {
  const rows = r.formats.map(
    (f) =>
      `| ${f.format} | ${f.maxAbsDelta.toFixed(3)} | ${f.meanAbsDelta.toFixed(4)} | ${f.meanKl.toExponential(2)} | ${f.maxKl.toExponential(2)} | ${(f.top1Agree * 100).toFixed(1)}% (${Math.round(f.top1Agree * f.positions)}/${f.positions}) | ${f.firstDivergence.map((x) => x ?? "none").join(", ")} |`,
  );
  return [
    `Model ${r.model}; ${r.positions} positions teacher-forced along ${r.text === "passage" ? "an English passage (the Gettysburg Address, the model's tokenizer)" : "cycled ids 5 17 300 42 (no tokenizer)"}; greedy runs of ${r.greedyTokens} tokens after its first ${GREEDY_STARTS.join(", ")} tokens.`,
    "",
    "| trunk | max \\|Δlogit\\| | mean \\|Δlogit\\| | mean KL(exact ‖ packed) | max KL | top-1 agreement | first greedy divergence (token, per start) |",
    "|---|---:|---:|---:|---:|---:|---:|",
    ...rows,
  ].join("\n");
}

if (import.meta.main) {
  const argv = process.argv.slice(2);
  const get = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const model = get("--model");
  if (!model) throw new Error("usage: bun bench/trunk-error.ts --model DIR [--positions N] [--ram SIZE] [--formats int8,int4] [--json OUT]");
  const json = get("--json");
  if (json) writeTarget(json, "the --json output", "USAGE"); // a FIFO or folder there: refused now, not after the run
  const r = measureTrunkError(model, { positions: Number(get("--positions") ?? 256), greedy: Number(get("--greedy") ?? 32), ram: get("--ram"), formats: get("--formats")?.split(",") as TrunkFormat[] | undefined });
  if (json) writeFileAtomic(json, "the --json output", "USAGE", JSON.stringify(r, null, 2));
  process.stdout.write(`${renderErrorTable(r)}\n`);
}
