// `k3 run`: continue a prompt with the base model, streaming text to stdout as it comes.
// Greedy by default (identical output at any budget / thread count); sampling flags opt in.
// stdout carries only the generated text (or one JSON object with --json); logs, progress and the
// stats line go to stderr. Ctrl-C stops after the current token: what was printed stays, the
// stats line is printed, and the exit status is 130.
import { defineCommand } from "citty";
import { accessSync, constants, readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { streamCompletion, type CompletionResult, type GenOptions } from "../../conversation.ts";
import { Engine, type GenerationStats } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { log } from "../../log.ts";
import { engineArgs, engineOptions, formatBytes, parseIds, positiveInt, readStdin } from "../common.ts";
import { modelDirOrDemo } from "../demo.ts";
import { prefillProgress } from "../progress.ts";

/** Sampling flags shared by `run` and `chat` (`--stop` may repeat; citty keeps only the last, so
 *  stopStrings() reads them from the raw arguments). */
export const samplingArgs = {
  temperature: { type: "string", description: "sampling temperature (0 = greedy)" },
  "top-k": { type: "string", description: "keep the k most likely tokens (0 = off)" },
  "top-p": { type: "string", description: "nucleus sampling mass in (0, 1] (1 = off)" },
  "min-p": { type: "string", description: "drop tokens below min-p × the top probability (0 = off)" },
  seed: { type: "string", description: "sampling seed (default 0: same seed, same text)" },
  stop: { type: "string", description: "stop string, matched across tokens, not printed (repeatable)" },
} as const;

export interface SamplingArgs {
  temperature?: string;
  "top-k"?: string;
  "top-p"?: string;
  "min-p"?: string;
  seed?: string;
  stop?: string;
}

export function samplingOptions(args: SamplingArgs, rawArgs: string[], defaultTemperature: number): Omit<GenOptions, "maxTokens"> {
  return {
    temperature: num(args.temperature, "--temperature") ?? defaultTemperature,
    topK: int(args["top-k"], "--top-k"),
    topP: num(args["top-p"], "--top-p"),
    minP: num(args["min-p"], "--min-p"),
    seed: int(args.seed, "--seed"),
    stop: stopStrings(rawArgs),
  };
}

/** Every `--stop X` / `--stop=X` in order. */
export function stopStrings(rawArgs: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < rawArgs.length; i++) {
    const a = rawArgs[i]!;
    if (a === "--") break;
    if (a === "--stop") {
      const v = rawArgs[++i];
      if (v === undefined) throw new K3Error("USAGE", "--stop needs a string");
      out.push(v);
    } else if (a.startsWith("--stop=")) out.push(a.slice("--stop=".length));
  }
  return out;
}

function num(v: string | undefined, flag: string): number | undefined {
  if (v === undefined || v === "") return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new K3Error("USAGE", `${flag} must be a number, got "${v}"`);
  return n;
}

function int(v: string | undefined, flag: string): number | undefined {
  const n = num(v, flag);
  if (n !== undefined && !Number.isSafeInteger(n)) throw new K3Error("USAGE", `${flag} must be an integer, got "${v}"`);
  return n;
}

export default defineCommand({
  meta: { name: "run", description: "Continue a prompt (greedy by default), streamed to stdout; no model = the built-in demo" },
  args: {
    model: { type: "positional", required: false, description: "model directory (default: $K3_MODEL, else the demo model; `-` = demo/$K3_MODEL with the prompt on stdin)" },
    prompt: { type: "string", description: "prompt text" },
    "prompt-file": { type: "string", description: "read the prompt from a file (`-` = stdin)" },
    ids: { type: "string", description: "prompt as token ids, e.g. 1,2,3 (prints ids)" },
    gen: { type: "string", description: "tokens to generate (default 32)" },
    json: { type: "boolean", description: "print one JSON object (prompt_ids, generated_ids, generated_text, timings, stats)" },
    "load-session": { type: "string", description: "continue a session saved with --save-session (the prompt, if any, is appended)" },
    "save-session": { type: "string", description: "save the session (model state, position, tokens) to FILE when done" },
    ...samplingArgs,
    ...engineArgs,
  },
  async run({ args, rawArgs }) {
    const gen = positiveInt(args.gen, "--gen") ?? 32;
    const sampling = samplingOptions(args, rawArgs, 0);
    // Stop strings match decoded text: with --ids the output is ids, so the match could not be
    // shown as cut (the stop token's id would already be printed). Refuse rather than mislead.
    if (sampling.stop?.length && args.ids !== undefined) throw new K3Error("USAGE", "--stop matches text and cannot be combined with --ids");
    const stdinModel = args.model === "-";
    const sources = [args.prompt !== undefined, args["prompt-file"] !== undefined, args.ids !== undefined, stdinModel].filter(Boolean).length;
    if (sources > 1) throw new K3Error("USAGE", "give only one of --prompt, --prompt-file, --ids, -");
    let prompt: string | number[];
    if (args.ids !== undefined) prompt = parseIds(args.ids);
    else if (args.prompt !== undefined) prompt = args.prompt;
    else if (args["prompt-file"] !== undefined && args["prompt-file"] !== "-") prompt = readPromptFile(args["prompt-file"]);
    else if (stdinModel || args["prompt-file"] === "-" || !process.stdin.isTTY) prompt = stripOneNewline(await readStdin());
    else if (args["load-session"]) prompt = [];
    else throw new K3Error("USAGE", "no prompt: use --prompt, --prompt-file, --ids, or pipe text on stdin");
    if (prompt.length === 0 && !args["load-session"]) throw new K3Error("USAGE", "the prompt is empty");

    // A session file that cannot be written must fail now, not after the whole generation.
    if (args["save-session"]) {
      const target = resolve(args["save-session"]);
      try {
        accessSync(dirname(target), constants.W_OK);
      } catch {
        throw new K3Error("USAGE", `cannot write the session file ${target}: its folder does not exist or is not writable`);
      }
    }
    const dir = await modelDirOrDemo(stdinModel ? undefined : args.model);
    const engine = Engine.open(dir, engineOptions(args));
    try {
      if (sampling.stop?.length && !engine.tokenizerDir) throw new K3Error("TOKENIZER", `--stop needs a tokenizer to match text, and ${dir} has none`);
      const textOut = typeof prompt === "string";
      const session = args["load-session"] ? engine.loadSession(args["load-session"]) : engine.createSession();
      // A restored session continues: its tokens come first, the new prompt (if any) after them.
      const promptIds = typeof prompt === "string" ? (prompt.length ? engine.tokenizer().encode(prompt) : []) : prompt;
      const fullPrompt = args["load-session"] ? [...session.tokens, ...promptIds] : prompt;
      let cancelled = false;
      const onSigint = () => (cancelled = true);
      process.on("SIGINT", onSigint);
      const it = streamCompletion(engine, session, fullPrompt, {
        maxTokens: gen,
        ...sampling,
        shouldStop: () => cancelled,
        onPrefill: prefillProgress({ bytesRead: () => bytesRead(engine) }),
      });
      let result: CompletionResult;
      let printed = 0;
      try {
        for (;;) {
          const r = it.next();
          if (r.done) {
            result = r.value;
            break;
          }
          if (!args.json) {
            if (textOut) process.stdout.write(r.value.text);
            else for (const id of r.value.ids) process.stdout.write(`${printed++ > 0 ? " " : ""}${id}`);
          }
          // Let the event loop run between tokens so Ctrl-C is noticed within one token.
          await Bun.sleep(0);
        }
      } finally {
        process.off("SIGINT", onSigint);
      }
      const stats = result.stats;
      if (args["save-session"]) engine.saveSession(session, args["save-session"]);
      if (args.json) {
        const out: Record<string, unknown> = {
          prompt_ids: promptIds,
          generated_ids: result.ids,
          // Omitted (undefined) when the model has no tokenizer.
          generated_text: textOut ? result.text : engine.tokenizerDir ? engine.tokenizer().decode(result.ids) : undefined,
          finish_reason: result.finishReason,
          timings: timingsJson(stats),
          stats: statsJson(stats, engine),
        };
        process.stdout.write(`${JSON.stringify(out)}\n`);
      } else {
        process.stdout.write("\n");
        log.info(statsLine(stats, engine, result.finishReason));
      }
      if (cancelled) process.exitCode = 130;
    } finally {
      engine.close();
    }
  },
});

/** `echo "text" | k3 run` means the text, not the text plus the newline echo adds. */
function stripOneNewline(s: string): string {
  return s.endsWith("\r\n") ? s.slice(0, -2) : s.endsWith("\n") ? s.slice(0, -1) : s;
}

function readPromptFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new K3Error("USAGE", `cannot read the prompt file ${path}: ${(err as Error).message}`);
  }
}

function bytesRead(engine: Engine): number {
  const s = engine.stats();
  return s.trunkBytesRead + s.expertBytesRead;
}

export function timingsJson(s: GenerationStats) {
  return {
    prefill_ms: round(s.prefillMs),
    decode_ms: round(s.decodeMs),
    total_ms: round(s.prefillMs + s.decodeMs),
    ms_per_token: round(s.msPerToken),
    prefill_tokens_per_s: s.prefillMs > 0 ? round((s.promptTokens * 1000) / s.prefillMs) : null,
    decode_tokens_per_s: s.decodeMs > 0 && s.generatedTokens > 1 ? round(((s.generatedTokens - 1) * 1000) / s.decodeMs) : null,
  };
}

export function statsJson(s: GenerationStats, engine: Engine) {
  return {
    prompt_tokens: s.promptTokens,
    generated_tokens: s.generatedTokens,
    stop_reason: s.stopReason,
    prefill_ms: round(s.prefillMs),
    decode_ms: round(s.decodeMs),
    ms_per_token: round(s.msPerToken),
    bytes_read: s.io.trunkBytesRead + s.io.expertBytesRead,
    trunk_bytes_read: s.io.trunkBytesRead,
    expert_bytes_read: s.io.expertBytesRead,
    reads: s.io.reads,
    expert_requests: s.io.expertRequests,
    expert_hits: s.io.expertHits,
    lookahead_issued: s.io.lookaheadIssued,
    lookahead_used: s.io.lookaheadUsed,
    io_wait_ms: round(s.io.ioWaitMs),
    verify_ms: round(s.io.verifyMs),
    direct_io: s.io.directIo,
    bytes_read_per_token: Math.round(s.ioPerToken.bytesRead),
    peak_rss_bytes: s.peakRssBytes,
    threads: engine.threads,
  };
}

/** The final stats line (stderr): tokens, s/token, bytes read per token, hits, direct I/O, peak RSS. */
export function statsLine(s: GenerationStats, engine: Engine, finishReason: string = s.stopReason): string {
  return [
    `${s.generatedTokens} tokens (prompt ${s.promptTokens})`,
    `prefill ${(s.prefillMs / 1000).toFixed(2)} s`,
    `${(s.msPerToken / 1000).toFixed(3)} s/token`,
    `read ${formatBytes(s.ioPerToken.bytesRead)}/token`,
    `hits ${s.io.expertHits}/${s.io.expertRequests}`,
    `direct I/O ${s.io.directIo ? "on" : "off"}`,
    s.io.verifyMs > 0 ? `verify ${(s.io.verifyMs / 1000).toFixed(2)} s` : "",
    `peak RSS ${formatBytes(s.peakRssBytes)}`,
    `${engine.threads} threads`,
    finishReason === "length" ? "" : `stop: ${finishReason}`,
  ]
    .filter(Boolean)
    .join(" · ");
}

const round = (x: number) => Math.round(x * 100) / 100;
