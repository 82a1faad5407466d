// What the benchmark orchestrators (bench/run.ts, bench/speculate.ts) share: the common
// arguments, one arm run in its own `bun bench/stream.ts` process, and replacing a generated
// section of a doc between markers.
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { join, resolve } from "node:path";
import type { ArmResult, ArmSpec } from "./stream.ts";
import type { DiskResult } from "./disk.ts";

export const ROOT = resolve(import.meta.dir, "..");

/** Median of a list of numbers (NaN when empty). */
export const median = (xs: number[]): number => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
/** The value after flag `name` on the command line (`--runs 3` → "3"), else `dflt`. A flag given
 *  twice or with no value is refused (exit 2) rather than one occurrence silently winning. */
export const arg = (name: string, dflt: string): string => {
  const at = process.argv.flatMap((a, i) => (a === name ? [i] : []));
  if (!at.length) return dflt;
  const refuse = (why: string): never => {
    process.stderr.write(`${name}: ${why}\n`);
    process.exit(2);
  };
  if (at.length > 1) refuse(`given ${at.length} times; give it once (lists are comma-separated: ${name} a,b)`);
  const v = process.argv[at[0]! + 1];
  return v === undefined ? refuse("needs a value") : v;
};
/** A disk measurement that ran (not its error). */
export const isDisk = (d: DiskResult | { error: string }): d is DiskResult => !("error" in d);
const BUN = process.execPath;

export interface CommonArgs {
  quick: boolean;
  runs: number;
  tokens: number; // generated tokens per run: 1 from prefill + (tokens − 1) decode steps
  model: string;
  docs: boolean;
}

/**
 * --quick, --runs N, --tokens N, --model DIR, --no-docs; `extra(flag, value)` takes the others
 * (value() reads the next argument) and returns false for an unknown one.
 */
export function parseCommonArgs(
  argv: string[],
  d: { tokens: number; minTokens: number; quickTokens: number },
  usage: string,
  extra: (flag: string, value: () => string) => boolean = () => false,
): CommonArgs {
  const a: CommonArgs = { quick: false, runs: 3, tokens: d.tokens, model: join(ROOT, "models/slice"), docs: true };
  let runsSet = false;
  let tokensSet = false;
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i]!;
    const value = () => argv[++i] ?? "";
    const num = () => {
      const n = Number(value());
      if (!Number.isInteger(n) || n < 1) throw new Error(`${x} needs a positive integer`);
      return n;
    };
    if (x === "--quick") a.quick = true;
    else if (x === "--runs") (a.runs = num()), (runsSet = true);
    else if (x === "--tokens") (a.tokens = Math.max(d.minTokens, num())), (tokensSet = true);
    else if (x === "--model") a.model = resolve(value());
    else if (x === "--no-docs") a.docs = false;
    else if (!extra(x, value)) throw new Error(`unknown argument ${x} (${usage})`);
  }
  if (a.quick) {
    if (!runsSet) a.runs = 1;
    if (!tokensSet) a.tokens = d.quickTokens;
  }
  return a;
}

/** One arm run in a child process; a crash (OOM kill, signal, timeout) is a result, not a throw. */
export async function runArmChild(spec: ArmSpec, scratch: string, file: string, timeoutMs: number): Promise<ArmResult & { wallMs: number; loadavg: number[] }> {
  const specPath = join(scratch, `arm-${file}.json`);
  const outPath = join(scratch, `out-${file}.json`);
  writeFileSync(specPath, JSON.stringify(spec));
  // Other work on the machine skews timings: record the load average each run started under.
  const loadavg = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).map(Number);
  const t0 = performance.now();
  const p = Bun.spawn([BUN, join(ROOT, "bench/stream.ts"), specPath, outPath], { stdout: "inherit", stderr: "inherit", cwd: ROOT, env: { ...process.env }, timeout: timeoutMs });
  const code = await p.exited;
  const wallMs = performance.now() - t0;
  if (existsSync(outPath)) return { ...(JSON.parse(readFileSync(outPath, "utf8")) as ArmResult), wallMs, loadavg };
  return { spec, ok: false, error: `child exited ${code}${p.signalCode ? ` (${p.signalCode})` : ""} without a result`, wallMs, loadavg };
}

/** Replace the part of `doc` (repo-relative) between `<!-- NAME:begin -->` and `<!-- NAME:end -->`. */
export function updateDocSection(doc: string, name: string, md: string, say: (s: string) => void): void {
  const path = join(ROOT, doc);
  const begin = `<!-- ${name}:begin -->`;
  const end = `<!-- ${name}:end -->`;
  const text = existsSync(path) ? readFileSync(path, "utf8") : `# Benchmarks\n\n${begin}\n${end}\n`;
  const i = text.indexOf(begin);
  const j = text.indexOf(end);
  if (i < 0 || j < i) {
    say(`${doc} has no ${begin} … ${end} markers: not updated`);
    return;
  }
  writeFileSync(path, text.slice(0, i + begin.length) + `\n${md}\n` + text.slice(j));
  say(`updated ${doc}`);
}

/** Write a run's raw numbers (JSON) and its markdown to bench/out/PREFIX-STAMP.{json,md}; print the markdown. */
export function writeReport(prefix: string, stamp: string, report: unknown, md: string, say: (s: string) => void): void {
  mkdirSync(join(ROOT, "bench/out"), { recursive: true });
  const jsonPath = join(ROOT, `bench/out/${prefix}-${stamp}.json`);
  writeFileSync(jsonPath, JSON.stringify(report, null, 2) + "\n");
  writeFileSync(jsonPath.replace(/\.json$/, ".md"), md);
  process.stdout.write(md);
  say(`wrote ${jsonPath} (+ .md)`);
}

/**
 * Every arm uses one frozen copy of the kernel library: others may rebuild zig-out/ while a
 * bench runs, and arms compared bit for bit must run the same code. Sets $K3_KERNELS for the
 * children; returns where it came from and its sha256.
 */
export function freezeKernels(scratch: string): { source: string; sha256: string } {
  const source = process.env.K3_KERNELS ?? join(ROOT, "zig-out/lib/libkernels.so");
  const lib = join(scratch, "libkernels.so");
  copyFileSync(source, lib);
  process.env.K3_KERNELS = lib;
  return { source, sha256: createHash("sha256").update(readFileSync(lib)).digest("hex") };
}

/** The disk's read bandwidth on the model's own shards (bench/disk.ts in a child process). */
export async function runDisk(dir: string, quick: boolean): Promise<DiskResult | { error: string }> {
  const p = Bun.spawn([BUN, join(ROOT, "bench/disk.ts"), dir, ...(quick ? ["--quick"] : [])], { stdout: "pipe", stderr: "inherit", cwd: ROOT, env: { ...process.env } });
  const text = await new Response(p.stdout).text();
  const code = await p.exited;
  if (code !== 0) return { error: `disk bench exited ${code}` };
  try {
    return JSON.parse(text) as DiskResult;
  } catch {
    return { error: `disk bench printed no JSON: ${text.slice(0, 200)}` };
  }
}
