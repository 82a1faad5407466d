// Arguments and helpers shared by the commands that open a model (run, chat, serve, bench).
// Every flag is checked before a model is opened (here, or by Engine.open before it reads
// anything: the thread limits of the kernel library): a typo or an impossible value is a usage
// error (exit 2) in milliseconds, never a failure after minutes of loading.
import type { ArgsDef } from "citty";
import { accessSync, constants, statSync } from "node:fs";
import { writeTarget } from "../files.ts";
import { availableParallelism } from "node:os";
import { dirname, resolve } from "node:path";
import { Engine, ISA_NAMES, parseSpeculate, POLICY_NAMES, TRUNK_FORMATS, type EngineOptions } from "../engine.ts";
import { PRESETS } from "../inspect.ts";
import { K3Error } from "../errors.ts";
import { log } from "../log.ts";
import { repeatedValues } from "./args.ts";
import { barProgress, clearProgressLines } from "./progress.ts";

/** Counts (--gen, --context, --chunk, …) above this are refused: no run gets near it, and a
 *  bigger number is a typo, not a request (JS numbers lose integers past 2^53). */
export const MAX_COUNT = 2 ** 31 - 1;

/** Fixed choices of flags, for errors, help and shell completion. */
export const CHOICES: Record<string, readonly string[]> = {
  isa: ["auto", ...ISA_NAMES],
  policy: POLICY_NAMES,
  preset: [...Object.keys(PRESETS), "auto"],
  effort: ["low", "high", "max", "none"],
  trunk: ["auto", ...TRUNK_FORMATS],
  draftFormat: ["auto", "bf16", "int8", "int4"],
};

/** `-m DIR` (llama.cpp's spelling) as an option; the positional DIR works too. */
export const modelOption = {
  model: { type: "string", alias: ["m"], valueHint: "DIR", description: "model folder (same as the DIR operand)" },
} satisfies ArgsDef;

export const engineArgs = {
  threads: { type: "string", alias: ["t"], valueHint: "N", description: "compute threads (default: all cores; bit-identical at any count)" },
  context: { type: "string", alias: ["c", "ctx-size"], valueHint: "N", description: "context limit in tokens (default 4096)" },
  chunk: { type: "string", alias: ["b", "batch-size"], valueHint: "N", description: "prefill chunk in tokens (default: the planner's choice, see k3 plan)" },
  isa: { type: "string", valueHint: "ISA", description: `force a kernel path: ${CHOICES.isa!.join(" | ")}` },
  preset: { type: "string", valueHint: "NAME", description: `RAM budget: ${Object.entries(PRESETS).map(([n, b]) => `${n} (${b / 2 ** 30}G)`).join(" | ")} | auto` },
  ram: { type: "string", valueHint: "SIZE", description: "RAM budget as a size, e.g. 12G (G = 2^30; wins over --preset)" },
  prefetch: { type: "boolean", default: true, description: "read the next layer while one computes" },
  lookahead: { type: "boolean", default: true, description: "router lookahead during decode" },
  "direct-io": { type: "boolean", default: true, description: "O_DIRECT reads (--no-direct-io: the page cache)" },
  policy: { type: "string", valueHint: "NAME", description: `expert cache policy: ${CHOICES.policy!.join(" | ")} (default lfru)` },
  "io-threads": { type: "string", valueHint: "N", description: "I/O threads (default 4)" },
  verify: { type: "boolean", description: "check every read against the checksums `k3 verify --record` wrote" },
  trace: { type: "string", valueHint: "FILE", description: "write per-token expert routing (JSONL) to FILE" },
  "allow-over-ram": { type: "boolean", description: "open even when --ram / --preset is more than this machine's usable RAM (it may swap)" },
  speculate: { type: "string", valueHint: "MODE", description: "speculative decoding: auto (default) | off | N drafts per pass (same output; fewer passes over the weights where text repeats)" },
  trunk: { type: "string", valueHint: "FORMAT", description: `trunk weights: auto | ${TRUNK_FORMATS.join(" | ")} (default auto: the exact pack from \`k3 pack --trunk exact\` where it reads fewer bytes, else bf16 — the same bits; int8/int4 are lossy)` },
  "n-gpu-layers": { type: "string", alias: ["ngl", "gpu-layers"], valueHint: "N", description: "llama.cpp's GPU layers (-ngl 99): accepted and ignored, k3 runs on the CPU" },
  mirror: { type: "string", valueHint: "DIR", description: "a folder with copies of some or all shards on another drive (repeatable; checked to be the same bytes): reads go to the copy that finishes first (docs/DRIVES.md)" },
  draft: { type: "string", valueHint: "DIR|none", description: "a draft model (a released K3 EAGLE-3 draft folder) whose drafts speculation may verify; none: no draft (same output either way)" },
  "draft-format": { type: "string", valueHint: "FORMAT", description: "the draft's weights: auto (default: whichever reads the fewest bytes) | bf16 | int8 | int4 (packs made by `k3 pack DRAFT --draft int8|int4`)" },
} satisfies ArgsDef;

/** A positive integer flag; refused: 0, signs, decimals, exponents, hex, and anything above `max`. */
export function positiveInt(v: string | undefined, flag: string, max = MAX_COUNT, why = ""): number | undefined {
  if (v === undefined || v === "") return undefined;
  if (!/^\d+$/.test(v) || Number(v) < 1) throw new K3Error("USAGE", `${flag} must be a positive integer, got "${v}"`);
  const n = Number(v);
  if (n > max) throw new K3Error("USAGE", `${flag} must be at most ${max}${why}, got ${v}`);
  return n;
}

/** --gen / -n: a positive count, or -1 (llama.cpp's "until the end"): until the model ends its
 *  reply or the context is full ("context"; the caller knows the context once the model is open). */
export function genFlag(v: string | undefined, fallback: number): number | "context" {
  if (v === "-1") return "context";
  return positiveInt(v, "--gen", MAX_COUNT, " (or -1: until the end)") ?? fallback;
}

/** `--ram` must carry a unit below 1 MiB: "12" would be 12 bytes, which nobody means. */
export function ramFlag(v: string | undefined): string | undefined {
  if (v === undefined || v === "") return undefined;
  const bare = /^\s*(\d+(?:\.\d+)?)\s*$/.exec(v);
  if (bare && Number(bare[1]) < 2 ** 20)
    throw new K3Error("USAGE", `--ram ${v} has no unit, so it means ${v} bytes`, [`did you mean --ram ${bare[1]}G (${bare[1]} GiB)? Units: K/M/G/T binary (G = 2^30), KB/MB/GB/TB decimal`]);
  return v;
}

function oneOf(v: string | undefined, flag: string, name: string, fallback: string): string {
  const x = v ?? fallback;
  const choices = CHOICES[name]!;
  if (!choices.includes(x)) throw new K3Error("USAGE", `${flag} must be ${choices.join(", ")}; got "${x}"`);
  return x;
}

export interface EngineArgs {
  threads?: string;
  context?: string;
  chunk?: string;
  isa?: string;
  preset?: string;
  ram?: string;
  prefetch?: boolean;
  lookahead?: boolean;
  "direct-io"?: boolean;
  policy?: string;
  "io-threads"?: string;
  verify?: boolean;
  trace?: string;
  "allow-over-ram"?: boolean;
  speculate?: string;
  trunk?: string;
  "n-gpu-layers"?: string;
  mirror?: string;
  draft?: string;
  "draft-format"?: string;
}

/** -ngl N (llama.cpp's layers offloaded to a GPU): a recipe's flag that means nothing here. Its
 *  value is still checked (a typo is not waved through), then a note says it was ignored. */
function gpuLayersFlag(v: string | undefined): void {
  if (v === undefined) return;
  if (!/^(-1|\d+|auto|all)$/.test(v)) throw new K3Error("USAGE", `-ngl / --n-gpu-layers must be a number of layers (or -1, auto, all), got "${v}"`);
  log.info(`-ngl ${v} ignored: k3 runs on the CPU and streams what does not fit in RAM (there are no GPU layers to offload)`);
}

/** Compute threads from --threads (Engine.open refuses more than the pool's limit); more than this
 *  machine's cores works (same output) but is slower, so it warns. */
export function threadsFlag(v: string | undefined): number | undefined {
  const threads = positiveInt(v, "--threads");
  const cores = availableParallelism();
  if (threads !== undefined && threads > cores) log.warn(`--threads ${threads} is more than this machine's ${cores} cores: the output is the same, but it will run slower than --threads ${cores}`);
  return threads;
}

/** The engine's options from the flags; `rawArgs` for the repeatable ones (every --mirror). */
export function engineOptions(args: EngineArgs, rawArgs: string[] = []): EngineOptions {
  if (args.preset !== undefined) oneOf(args.preset, "--preset", "preset", "auto");
  gpuLayersFlag(args["n-gpu-layers"]);
  return {
    threads: threadsFlag(args.threads),
    context: positiveInt(args.context, "--context"),
    chunk: positiveInt(args.chunk, "--chunk"),
    isa: oneOf(args.isa, "--isa", "isa", "auto") as EngineOptions["isa"],
    preset: args.preset,
    ram: ramFlag(args.ram),
    prefetch: args.prefetch ?? true,
    lookahead: args.lookahead ?? true,
    direct: args["direct-io"] ?? true,
    policy: oneOf(args.policy, "--policy", "policy", "lfru") as EngineOptions["policy"],
    ioThreads: positiveInt(args["io-threads"], "--io-threads"),
    verify: args.verify ?? false,
    trace: args.trace === undefined ? undefined : (checkWritableFile(args.trace, "--trace"), args.trace),
    allowOverRam: args["allow-over-ram"] ?? false,
    speculate: parseSpeculate(args.speculate ?? "auto", "--speculate"),
    trunk: oneOf(args.trunk, "--trunk", "trunk", "auto") as EngineOptions["trunk"],
    mirrors: repeatedValues(rawArgs, "--mirror"),
    draft: args.draft,
    draftFormat: oneOf(args["draft-format"], "--draft-format", "draftFormat", "auto") as EngineOptions["draftFormat"],
    onProgress: barProgress(),
  };
}

/**
 * Open the model for a command, loading with the event loop running between pinned trunk pieces,
 * so Ctrl-C stops the load after the piece landing now (K3Error CANCELLED → exit 130) and the
 * progress bar is erased, instead of the process dying with the bar left on the terminal.
 */
export async function openEngine(dir: string, opts: EngineOptions): Promise<Engine> {
  const interrupt = new AbortController();
  const onSigint = () => interrupt.abort();
  process.on("SIGINT", onSigint);
  try {
    return await Engine.openAsync(dir, { ...opts, signal: interrupt.signal });
  } catch (err) {
    clearProgressLines();
    throw err;
  } finally {
    process.off("SIGINT", onSigint);
  }
}

/** The model folder: -m/--model, else the DIR operand, else $K3_MODEL (both given: refused). */
export function resolveModelDir(operand: string | undefined, option?: string): string {
  const dir = pickModel(operand, option) || process.env.K3_MODEL;
  if (!dir) throw new K3Error("USAGE", "no model folder: pass DIR (or -m DIR), or set $K3_MODEL");
  return dir;
}

/** `k3 info` and `k3 plan`: a model folder (DIR, -m DIR, else $K3_MODEL), or the release's
 *  metadata alone (--config F --index F, which wins over $K3_MODEL). */
export function folderOrMetadata(
  args: { dir?: string; model?: string; config?: string; index?: string },
  command: string,
): { dir: string } | { config: string; index: string } {
  const operand = pickModel(args.dir, args.model);
  if (args.config !== undefined || args.index !== undefined) {
    if (operand !== undefined) throw new K3Error("USAGE", "give a model folder or --config and --index, not both");
    if (!args.config || !args.index) throw new K3Error("USAGE", "--config and --index go together");
    return { config: args.config, index: args.index };
  }
  const dir = operand || process.env.K3_MODEL;
  if (!dir) throw new K3Error("USAGE", `no model folder: k3 ${command} DIR (or -m DIR, or $K3_MODEL), or k3 ${command} --config F --index F`);
  return { dir };
}

export function pickModel(operand: string | undefined, option: string | undefined): string | undefined {
  if (operand !== undefined && option !== undefined) throw new K3Error("USAGE", `two model folders: "${operand}" and -m "${option}"; give one`);
  return option ?? operand;
}

/** Read all of stdin as UTF-8 text. */
export async function readStdin(): Promise<string> {
  return await new Response(Bun.stdin.stream()).text();
}

/** A file k3 will write after a long load or generation (--save-session, --trace): refuse now what
 *  would fail then. Only a regular file or a new path is written (src/files.ts): a device node,
 *  FIFO, socket or directory there is refused, as is a missing or read-only folder. */
export function checkWritableFile(path: string, flag: string): void {
  const target = resolve(path);
  let st;
  try {
    st = statSync(target);
  } catch {
    // does not exist yet: its folder must
  }
  if (st?.isDirectory()) throw new K3Error("USAGE", `${flag} ${path} is a folder; name a file in it (e.g. ${path.replace(/\/$/, "")}/${flag === "--trace" ? "trace.jsonl" : "session.k3s"})`);
  writeTarget(path, `the ${flag} file`, "USAGE");
  try {
    accessSync(st ? target : dirname(target), constants.W_OK);
  } catch {
    throw new K3Error("USAGE", `${flag} ${path}: cannot write ${st ? "this file" : "there (its folder does not exist or is not writable)"}`);
  }
}
