// The compact trunk's error, measured (issue 16): for each packed format, the next-token logits
// against the exact engine's at every position of one sequence.
//
//   bun bench/trunk-error.ts --model DIR [--positions 256] [--ram 12G] [--formats int8,int4] [--json OUT]
//
// The sequence is the exact engine's own greedy continuation of a short prompt (ids 5 17 300 42),
// and every packed engine is teacher-forced along it (its sampler returns the sequence's next
// id), so position i compares the same context. Because the sequence is the exact model's greedy
// choice, a packed engine's free-running greedy output equals it up to the first position where
// its own argmax differs: "first divergence" is that position (or none).
// Per position: |Δlogit| (max and mean over the vocabulary), KL(p_exact ‖ p_packed) of the
// softmax distributions (in double), and whether the argmax agrees. Packs are made first if the
// model has none (k3 pack writes next to the model: give a folder that may take them).
import { writeFileSync } from "node:fs";
import { Engine, packTrunk, type TrunkFormat } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";

export interface FormatError {
  format: TrunkFormat;
  positions: number;
  maxAbsDelta: number;
  meanAbsDelta: number;
  meanKl: number;
  maxKl: number;
  top1Agree: number; // fraction of positions
  firstDivergence: number | null; // 0-based position of the first argmax disagreement
  sPerToken: number; // teacher-forced decode, for scale only (not a benchmark arm)
}

export interface ErrorReport {
  model: string;
  prompt: number[];
  positions: number;
  ram: string;
  exactSPerToken: number;
  formats: FormatError[];
}

const PROMPT = [5, 17, 300, 42];

function softmax64(l: Float32Array): Float64Array {
  let m = -Infinity;
  for (let i = 0; i < l.length; i++) m = Math.max(m, l[i]!);
  const p = new Float64Array(l.length);
  let s = 0;
  for (let i = 0; i < l.length; i++) s += p[i] = Math.exp(l[i]! - m);
  for (let i = 0; i < l.length; i++) p[i]! /= s;
  return p;
}

/** Run `positions` steps, calling `pick(i, logits)` for the id to feed next; returns s/token. */
function walk(engine: Engine, positions: number, pick: (i: number, logits: Float32Array) => number): number {
  let i = 0;
  const sampler = { sample: (l: Float32Array) => pick(i++, l) };
  const it = engine.generate(engine.createSession(), PROMPT, { maxTokens: positions, sampler });
  let r = it.next();
  while (!r.done) r = it.next();
  return r.value.msPerToken / 1000;
}

export function measureTrunkError(model: string, opts: { positions?: number; ram?: string; formats?: TrunkFormat[]; log?: (s: string) => void } = {}): ErrorReport {
  const positions = opts.positions ?? 256;
  const ram = opts.ram ?? "12G";
  const formats = opts.formats ?? ["int8", "int4"];
  const log = opts.log ?? ((s: string) => process.stderr.write(`[trunk-error] ${s}\n`));
  const k = loadKernels();
  const open = (trunk: TrunkFormat) => Engine.open(model, { ram, trunk, allowOverRam: true });

  log(`exact engine: ${positions} greedy positions…`);
  const exactLogits: Float32Array[] = [];
  const seq: number[] = [];
  const exact = open("bf16");
  let exactS: number;
  try {
    exactS = walk(exact, positions, (_, l) => {
      exactLogits.push(Float32Array.from(l));
      const id = k.k3_argmax(l as any, l.length);
      seq.push(id);
      return id;
    });
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
    log(`${format}: teacher-forced along the exact sequence…`);
    const e = open(format);
    let maxAbs = 0;
    let sumAbs = 0;
    let sumKl = 0;
    let maxKl = 0;
    let agree = 0;
    let first: number | null = null;
    let s: number;
    try {
      s = walk(e, positions, (i, l) => {
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
        if (k.k3_argmax(l as any, l.length) === seq[i]) agree++;
        else first ??= i;
        return seq[i]!;
      });
    } finally {
      e.close();
    }
    const vocab = exactLogits[0]!.length;
    out.push({ format, positions, maxAbsDelta: maxAbs, meanAbsDelta: sumAbs / (positions * vocab), meanKl: sumKl / positions, maxKl, top1Agree: agree / positions, firstDivergence: first, sPerToken: s });
    log(`  max |Δ| ${maxAbs.toFixed(3)}, mean |Δ| ${(sumAbs / (positions * vocab)).toFixed(4)}, KL ${(sumKl / positions).toExponential(2)}, top-1 ${agree}/${positions}, first divergence ${first ?? "none"}`);
  }
  return { model, prompt: PROMPT, positions, ram, exactSPerToken: exactS, formats: out };
}

/** The error table in markdown. */
export function renderErrorTable(r: ErrorReport): string {
  const rows = r.formats.map(
    (f) =>
      `| ${f.format} | ${f.maxAbsDelta.toFixed(3)} | ${f.meanAbsDelta.toFixed(4)} | ${f.meanKl.toExponential(2)} | ${f.maxKl.toExponential(2)} | ${(f.top1Agree * 100).toFixed(1)}% (${Math.round(f.top1Agree * f.positions)}/${f.positions}) | ${f.firstDivergence ?? "none"} |`,
  );
  return [
    `Model ${r.model}; ${r.positions} positions after the prompt ${r.prompt.join(" ")}, along the exact engine's greedy output (teacher-forced).`,
    "",
    "| trunk | max \\|Δlogit\\| | mean \\|Δlogit\\| | mean KL(exact ‖ packed) | max KL | top-1 agreement | first greedy divergence (position) |",
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
  const r = measureTrunkError(model, { positions: Number(get("--positions") ?? 256), ram: get("--ram"), formats: get("--formats")?.split(",") as TrunkFormat[] | undefined });
  const json = get("--json");
  if (json) writeFileSync(json, JSON.stringify(r, null, 2));
  process.stdout.write(`${renderErrorTable(r)}\n`);
}
