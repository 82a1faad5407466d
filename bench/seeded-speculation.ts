// Seeded sampling with speculation on the trained demo model (issue 21, item 2): how often drafts
// are kept, and whether the ids are plain sampling's. For each prompt × temperature × seed, one
// `k3 run --speculate off` and one `--speculate 8` (the default n-gram drafter; verify every
// draft it has, so both rules see the same kind of drafts); the counters come from --json.
// Give `--k3 BIN` to measure another build (e.g. one from before the exact-match rule) the same
// way: the acceptance of the accept/resample rule vs exact match, and the id identity, side by side.
//
//   bun bench/seeded-speculation.ts [--k3 BIN]... [--seeds N] [--tokens N]
//
// Deterministic counters only (drafted, kept, identity): no timing, nothing to lock the machine for.
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");
const PROMPTS = [
  "The jury said it did find that the court had been given full power to act. The jury said it did find",
  "He said that the man was not in the house. He said that the man was not",
  "In the first place, the committee reported that the city had no plan for the schools. In the first place, the committee",
];
const TEMPERATURES = [0.2, 0.5];

function args(argv: string[]): { bins: string[]; seeds: number; tokens: number } {
  const out = { bins: [] as string[], seeds: 30, tokens: 128 };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1];
    if (argv[i] === "--k3" && v) out.bins.push(v), i++;
    else if (argv[i] === "--seeds" && v) (out.seeds = Number(v)), i++;
    else if (argv[i] === "--tokens" && v) (out.tokens = Number(v)), i++;
    else throw new Error(`usage: bun bench/seeded-speculation.ts [--k3 BIN]... [--seeds N] [--tokens N] (got ${argv[i]})`);
  }
  if (out.bins.length === 0) out.bins.push(join(ROOT, "dist", "k3"));
  return out;
}

interface Run {
  ids: number[];
  drafted: number;
  accepted: number;
  passes: number;
}

function run(bin: string, prompt: string, temperature: number, seed: number, tokens: number, speculate: string): Run {
  const p = Bun.spawnSync([bin, "run", "--prompt", prompt, "-n", String(tokens), "--json", "--temperature", String(temperature), "--seed", String(seed), "--speculate", speculate, "--threads", "1"], { stderr: "pipe" });
  if (p.exitCode !== 0) throw new Error(`${bin} failed (exit ${p.exitCode}): ${p.stderr.toString().slice(-400)}`);
  const j = JSON.parse(p.stdout.toString());
  return { ids: j.generated_ids, drafted: j.stats.drafted_tokens, accepted: j.stats.accepted_tokens, passes: j.stats.verify_passes };
}

const { bins, seeds, tokens } = args(process.argv.slice(2));
const rows: string[] = [];
for (const bin of bins)
  for (const temperature of TEMPERATURES) {
    const t = { drafted: 0, accepted: 0, passes: 0, same: 0, runs: 0 };
    for (const prompt of PROMPTS)
      for (let seed = 1; seed <= seeds; seed++) {
        const off = run(bin, prompt, temperature, seed, tokens, "off");
        const on = run(bin, prompt, temperature, seed, tokens, "8");
        t.drafted += on.drafted;
        t.accepted += on.accepted;
        t.passes += on.passes;
        t.runs++;
        if (JSON.stringify(on.ids) === JSON.stringify(off.ids)) t.same++;
      }
    // Per-draft acceptance with a binomial standard error (drafts within a pass are not
    // independent, so this understates the spread a little).
    const a = t.accepted / t.drafted;
    const se = Math.sqrt((a * (1 - a)) / t.drafted);
    rows.push(`| ${bin} | ${temperature} | ${t.runs} | ${t.passes} | ${t.drafted} | ${t.accepted} | ${(100 * a).toFixed(1)} % ± ${(100 * se).toFixed(1)} | ${t.same}/${t.runs} |`);
    process.stderr.write(`${rows.at(-1)}\n`);
  }
console.log(`${PROMPTS.length} prompts × ${seeds} seeds × ${tokens} tokens per temperature; \`--speculate 8\` vs \`off\`, --threads 1, the demo model.\n`);
console.log("| build | temperature | runs | verify passes | drafted | kept | kept per draft (± 1 s.e.) | ids = `off`'s |");
console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
for (const r of rows) console.log(r);
