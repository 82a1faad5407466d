// `k3 run`: continue a prompt with the base model, streaming text to stdout as it comes.
// Greedy by default (identical output at any budget / thread count); sampling flags opt in.
// stdout carries only the generated text (or ids, or one JSON object with --json); logs, progress
// and the stats line go to stderr. Ctrl-C stops after the current token: what was printed stays,
// the stats line is printed, and the exit status is 130.
import { readFileSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { streamCompletion, type CompletionResult, type GenOptions } from "../../conversation.ts";
import type { Engine, Session } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { log } from "../../log.ts";
import { statsJson, statsLine, timingsJson } from "../../report.ts";
import { defineCommand } from "../command.ts";
import { checkWritableFile, engineArgs, engineOptions, genFlag, modelOption, openEngine, pickModel, readStdin } from "../common.ts";
import { modelDirOrDemo, withDemoDraft } from "../demo.ts";
import { parseIds } from "../ids.ts";
import { prefillProgress } from "../progress.ts";
import { samplingArgs, samplingOptions } from "../sampling-args.ts";

const RUN_OPERAND_RULE =
  "DIR and PROMPT: with two operands the first is the model folder and the second the prompt. With one, it is the model folder " +
  "if -m, --prompt, --prompt-file or --ids is given, or if it names an existing folder; otherwise it is the prompt, and the model is " +
  "$K3_MODEL, else the built-in demo. One operand that is a file, or looks like a path (has a / and no spaces) but does not exist, " +
  "is refused rather than sent to the model as text. `-` alone means: prompt on stdin, model from $K3_MODEL or the demo.";

export default defineCommand({
  meta: { name: "run", description: "Continue a prompt (greedy by default), streamed to stdout; no model = the built-in demo" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (default: $K3_MODEL, else the demo model; see the rule below)" },
    text: { type: "positional", required: false, valueHint: "PROMPT", description: "the prompt text (or --prompt, --prompt-file, --ids, stdin)" },
    ...modelOption,
    prompt: { type: "string", alias: ["p"], valueHint: "TEXT", description: "prompt text" },
    "prompt-file": { type: "string", alias: ["f", "file"], valueHint: "FILE", description: "read the prompt from FILE (`-` = stdin)" },
    ids: { type: "string", valueHint: "IDS", description: "prompt as token ids, e.g. 1,2,3 (prints ids)" },
    gen: { type: "string", alias: ["n", "n-predict"], valueHint: "N", description: "tokens to generate (default 32; -1: until the end or the context is full)" },
    json: { type: "boolean", description: "print one JSON object (prompt_ids, generated_ids, generated_text, finish_reason, timings, stats)" },
    "load-session": { type: "string", valueHint: "FILE", description: "continue a session saved with --save-session (a prompt, if any, is appended)" },
    "save-session": { type: "string", valueHint: "FILE", description: "save the session (model state, position, tokens) to FILE when done" },
    ...samplingArgs,
    ...engineArgs,
  },
  help: {
    usage: ["[DIR] [PROMPT] [options]", "[DIR] < prompt.txt", "-m DIR -p TEXT -n N"],
    notes: [RUN_OPERAND_RULE, "Output: text, or ids when the prompt is --ids or the model has no tokenizer."],
    examples: [
      ['k3 run "The capital of France is"', "32 greedy tokens on the demo model (no model given)"],
      ['k3 run /models/Kimi-K3 "Once upon a time" -n 64 --temp 0.8', "a real model, 64 sampled tokens"],
      ['echo "Once upon a time" | k3 run --gen 32', "prompt on stdin"],
      ["k3 run -m /models/Kimi-K3 -p \"Hello\" -c 8192 -t 16", "llama.cpp-style flags"],
      ["k3 run --ids 1,2,3 --gen 8 --json", "token ids in, one JSON object out"],
    ],
    env: ["K3_MODEL", "XDG_CACHE_HOME", "K3_KERNELS"],
  },
  async run({ args, rawArgs }) {
    // Every flag first: a typo fails before stdin is read or a model is opened.
    const gen = genFlag(args.gen, 32);
    const sampling = samplingOptions(args, rawArgs, 0);
    const opts = engineOptions(args, rawArgs);
    const { dir: dirOperand, text } = splitOperands(args.dir, args.text, args.model, {
      prompt: args.prompt !== undefined || args["prompt-file"] !== undefined || args.ids !== undefined,
    });
    // Stop strings match decoded text: with --ids the output is ids, so the match could not be
    // shown as cut (the stop token's id would already be printed). Refuse rather than mislead.
    if (sampling.stop?.length && args.ids !== undefined) throw new K3Error("USAGE", "--stop matches text and cannot be combined with --ids");
    const stdinPrompt = dirOperand === "-";
    const prompt = await readPrompt({ text, prompt: args.prompt, file: args["prompt-file"], ids: args.ids, stdin: stdinPrompt, loadSession: args["load-session"] });
    if (args["save-session"]) checkWritableFile(args["save-session"], "--save-session");

    const dir = await modelDirOrDemo(pickModel(stdinPrompt ? undefined : dirOperand, args.model));
    const engine = await openEngine(dir, withDemoDraft(dir, opts));
    try {
      if (sampling.stop?.length && !engine.tokenizerDir) throw new K3Error("TOKENIZER", `--stop needs a tokenizer to match text, and ${dir} has none`);
      // Ids out for an id prompt and for a model without a tokenizer (its text cannot be decoded).
      const idsOut = typeof prompt !== "string" && (args.ids !== undefined || !engine.tokenizerDir);
      const session = args["load-session"] ? engine.loadSession(args["load-session"]) : engine.createSession();
      // A restored session continues: its tokens come first, the new prompt (if any) after them.
      const promptIds = typeof prompt === "string" ? engine.tokenizer().encode(prompt) : prompt;
      const fullPrompt = args["load-session"] ? [...session.tokens, ...promptIds] : prompt;
      const { result, cancelled } = await generateToStdout(engine, session, fullPrompt, { maxTokens: gen === "context" ? engine.context : gen, ...sampling }, args.json ? "nothing" : idsOut ? "ids" : "text");
      const stats = result.stats;
      if (args["save-session"]) engine.saveSession(session, args["save-session"]);
      if (args.json) {
        const out = {
          prompt_ids: promptIds,
          generated_ids: result.ids,
          // Omitted (undefined) when the model has no tokenizer.
          generated_text: engine.tokenizerDir ? (idsOut ? engine.tokenizer().decode(result.ids) : result.text) : undefined,
          finish_reason: result.finishReason,
          timings: timingsJson(stats),
          stats: statsJson(stats),
        };
        process.stdout.write(`${JSON.stringify(out)}\n`);
      } else {
        process.stdout.write("\n");
        log.info(statsLine(stats, engine.computeThreads, result.finishReason));
      }
      if (cancelled) process.exitCode = 130;
    } finally {
      engine.close();
    }
  },
});

/** The prompt from its one source (PROMPT, --prompt, --prompt-file, --ids, or stdin); [] when a
 *  restored session continues without one. */
async function readPrompt(from: { text?: string; prompt?: string; file?: string; ids?: string; stdin: boolean; loadSession?: string }): Promise<string | number[]> {
  const sources = [from.text !== undefined, from.prompt !== undefined, from.file !== undefined, from.ids !== undefined, from.stdin].filter(Boolean).length;
  if (sources > 1) throw new K3Error("USAGE", "give only one prompt: PROMPT, --prompt, --prompt-file, --ids or -");
  let prompt: string | number[];
  if (from.ids !== undefined) {
    prompt = parseIds(from.ids, "--ids");
    if (prompt.length === 0) throw new K3Error("USAGE", "--ids needs at least one token id");
  } else if (from.text !== undefined) prompt = from.text;
  else if (from.prompt !== undefined) prompt = from.prompt;
  else if (from.file !== undefined && from.file !== "-") prompt = readPromptFile(from.file);
  else if (from.stdin || from.file === "-" || !process.stdin.isTTY) prompt = stripOneNewline(await readStdin());
  else if (from.loadSession) prompt = [];
  else throw new K3Error("USAGE", 'no prompt: k3 run [DIR] "text", --prompt, --prompt-file, --ids, or text on stdin', ["k3 run --help shows the rules"]);
  // A restored session may continue without new text (an empty stdin included).
  if (prompt.length === 0) {
    if (!from.loadSession) throw new K3Error("USAGE", "the prompt is empty");
    prompt = [];
  }
  return prompt;
}

/** Generate, writing each piece to stdout as it comes (`print`: its text, its ids, or nothing for
 *  --json); Ctrl-C stops after the current token (`cancelled`). */
async function generateToStdout(engine: Engine, session: Session, prompt: string | number[], opts: GenOptions, print: "text" | "ids" | "nothing"): Promise<{ result: CompletionResult; cancelled: boolean }> {
  let cancelled = false;
  const onSigint = () => (cancelled = true);
  process.on("SIGINT", onSigint);
  const progress = prefillProgress({ bytesRead: () => bytesRead(engine) });
  const it = streamCompletion(engine, session, prompt, { ...opts, shouldStop: () => cancelled, onPrefill: progress });
  let printed = 0;
  try {
    for (;;) {
      const r = it.next();
      if (r.done) return { result: r.value, cancelled };
      if (print === "text") process.stdout.write(r.value.text);
      else if (print === "ids") for (const id of r.value.ids) process.stdout.write(`${printed++ > 0 ? " " : ""}${id}`);
      // Let the event loop run between tokens so Ctrl-C is noticed within one token.
      await Bun.sleep(0);
    }
  } finally {
    progress?.clear();
    process.off("SIGINT", onSigint);
  }
}

/**
 * Which operand is the model folder and which the prompt (RUN_OPERAND_RULE). `other.prompt`: a
 * prompt came from a flag. Throws USAGE when one operand cannot be told apart safely.
 */
function splitOperands(first: string | undefined, second: string | undefined, modelFlag: string | undefined, other: { prompt: boolean }): { dir?: string; text?: string } {
  if (modelFlag !== undefined) {
    if (second !== undefined) throw new K3Error("USAGE", `with -m/--model, give at most one operand (the prompt); got "${first}" and "${second}"`);
    if (first === "-") return { dir: "-" };
    return { text: first };
  }
  if (second !== undefined) return { dir: first, text: second };
  if (first === undefined || first === "-" || other.prompt) return { dir: first };
  let isDir = false;
  let exists = false;
  try {
    const st = statSync(first);
    exists = true;
    isDir = st.isDirectory();
  } catch {
    // not there: a prompt, unless it looks like a path (below)
  }
  if (isDir) return { dir: first };
  if (exists)
    throw new K3Error("USAGE", `"${first}" is a file, not a model folder`, [`for a prompt in a file: k3 run --prompt-file ${first}`, `for the text itself: k3 run --prompt "${first}"`]);
  // The same error (and exit status, 4) as a missing folder given with -m or $K3_MODEL.
  if (/^[~.]|\//.test(first) && !/\s/.test(first))
    throw new K3Error("CHECKPOINT", `${resolve(first)}: no such model folder (it does not exist)`, [`to send "${first}" to the model as the prompt: k3 run --prompt "${first}"`]);
  return { text: first };
}

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
