// `k3 chat`: talk to the model in the K3 chat format.
//   - stdin is a terminal: the REPL (src/cli/repl.ts).
//   - otherwise: read the conversation on stdin — JSON (an array of messages, {messages: [...]},
//     one message, or JSONL: one message per line), or plain text, which is one user message —
//     write the assistant's answer to stdout (--json: one object), exit.
// Default sampling: temperature 1.0 (Moonshot's recommendation for K3) with seed 0, so the same
// conversation gives the same reply; --temperature 0 is greedy. Reasoning has a budget (default
// half of --gen) so a reply always has room for its answer. docs/CLI.md has the reasons.
import { streamChat, type ChatOptions, type ChatResult } from "../../conversation.ts";
import type { ChatMessage, Engine } from "../../engine.ts";
import { log } from "../../log.ts";
import { statsJson, statsLine } from "../../report.ts";
import { stylesFor } from "../../term.ts";
import { defineCommand } from "../command.ts";
import { checkWritableFile, engineArgs, engineOptions, genFlag, modelOption, openEngine, pickModel, readStdin } from "../common.ts";
import { modelDirOrDemo, withDemoDraft } from "../demo.ts";
import { prefillProgress } from "../progress.ts";
import { repl, type SessionFiles } from "../repl.ts";
import { samplingArgs, samplingOptions } from "../sampling-args.ts";
import { parseChatInput, parseEffort, reasoningBudget } from "../chat-options.ts";

export const CHAT_DEFAULT_TEMPERATURE = 1.0;
export const CHAT_DEFAULT_GEN = 1024;

export default defineCommand({
  meta: { name: "chat", description: "Chat with the model: a REPL on a terminal, or a conversation on stdin → the reply on stdout" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (default: $K3_MODEL, else the demo model)" },
    ...modelOption,
    gen: { type: "string", alias: ["n", "n-predict"], valueHint: "N", description: `max tokens per reply, reasoning included (default ${CHAT_DEFAULT_GEN}; -1: until the end or the context is full)` },
    think: { type: "boolean", default: true, description: "thinking channel on (--no-think: answer directly)" },
    "reasoning-budget": { type: "string", valueHint: "N", description: "reasoning tokens before the think channel is closed and the answer starts (default: half of --gen; none = no limit)" },
    effort: { type: "string", valueHint: "LEVEL", description: "thinking effort: low | high | max (default: none given to the model)" },
    system: { type: "string", alias: ["system-prompt"], valueHint: "TEXT", description: "system message to start the conversation with" },
    json: { type: "boolean", description: "non-interactive: print {reasoning, reasoning_cut, content, tool_calls, finish_reason, usage, stats}" },
    text: { type: "boolean", description: "stdin is one user message as plain text, even if it starts with { or [" },
    "load-session": { type: "string", valueHint: "FILE", description: "start from a saved session (model state; in the REPL also its messages)" },
    "save-session": { type: "string", valueHint: "FILE", description: "save the session after the reply (REPL: after every reply)" },
    ...samplingArgs,
    ...engineArgs,
  },
  help: {
    notes: [
      "Stdin that is not a terminal is the conversation: JSON messages (array, {\"messages\": [...]}, one object, or one per line), " +
        "or plain text, which becomes one user message. On a terminal: a REPL; paste multi-line text freely (it is one message), " +
        'or type """ on a line, then any lines, then """ again. /help inside lists the commands.',
    ],
    examples: [
      ["k3 chat", "interactive chat with the demo model (or $K3_MODEL)"],
      ["echo '{\"role\":\"user\",\"content\":\"hi\"}' | k3 chat --json --gen 64", "one reply as JSON (reasoning: at most 32 tokens)"],
      ["echo 'Name three colours.' | k3 chat --gen 64", "plain text in, the answer out"],
      ["k3 chat /models/Kimi-K3 --effort high --reasoning-budget 2048", "think longer on a real model"],
    ],
    env: ["K3_MODEL", "XDG_CACHE_HOME", "K3_KERNELS"],
  },
  async run({ args, rawArgs }) {
    const gen = genFlag(args.gen, CHAT_DEFAULT_GEN);
    reasoningBudget(args["reasoning-budget"], 0); // a bad value fails before anything is loaded
    // -n -1: the reply may run to the end of the context; set once the model (its context) is open.
    const opts: ChatOptions = {
      maxTokens: gen === "context" ? 0 : gen,
      thinking: args.think,
      thinkingEffort: parseEffort(args.effort),
      ...samplingOptions(args, rawArgs, CHAT_DEFAULT_TEMPERATURE),
    };
    const engineOpts = engineOptions(args, rawArgs);
    if (args["save-session"]) checkWritableFile(args["save-session"], "--save-session");
    const interactive = process.stdin.isTTY === true && !args.json;
    // Read the conversation before loading anything, so bad input fails fast.
    const piped = interactive ? undefined : parseChatInput(await readStdin(), "stdin", args.text ?? false);
    const start: ChatMessage[] = args.system ? [{ role: "system", content: args.system }] : [];

    const files = { load: args["load-session"], save: args["save-session"] };
    const dir = await modelDirOrDemo(pickModel(args.dir, args.model));
    const engine = await openEngine(dir, withDemoDraft(dir, engineOpts));
    if (gen === "context") opts.maxTokens = engine.context;
    opts.reasoningBudget = reasoningBudget(args["reasoning-budget"], opts.maxTokens);
    try {
      if (piped) await replyOnce(engine, [...start, ...piped], opts, args.json ?? false, files);
      else await repl(engine, start, opts, files);
    } finally {
      engine.close();
    }
  },
});

async function replyOnce(engine: Engine, messages: ChatMessage[], opts: ChatOptions, json: boolean, files: SessionFiles): Promise<void> {
  const session = files.load ? engine.loadSession(files.load) : engine.createSession();
  let cancelled = false;
  const onSigint = () => (cancelled = true);
  process.on("SIGINT", onSigint);
  // A person watching sees the reasoning on stderr (dimmed where colour is on); stdout stays the answer alone.
  const showReasoning = !json && process.stderr.isTTY === true;
  const st = stylesFor(process.stderr);
  const progress = prefillProgress();
  let result: ChatResult;
  try {
    const it = streamChat(engine, session, messages, { ...opts, shouldStop: () => cancelled, onPrefill: progress });
    for (;;) {
      const r = it.next();
      if (r.done) {
        result = r.value;
        break;
      }
      if (r.value.reasoningCut && !json) log.info(`reasoning cut at ${opts.reasoningBudget} tokens (--reasoning-budget); the answer follows`);
      if (!json && r.value.content) process.stdout.write(r.value.content);
      if (showReasoning && r.value.reasoning) process.stderr.write(st.dim(r.value.reasoning));
      await Bun.sleep(0);
    }
  } finally {
    progress?.clear();
    process.off("SIGINT", onSigint);
  }
  if (files.save && !session.dirty) {
    const assistant: ChatMessage = { role: "assistant", content: result.content, reasoning_content: result.reasoning || undefined };
    engine.saveSession(session, files.save, { messages: [...messages, assistant] });
  }
  if (json) {
    const out = {
      reasoning: result.reasoning,
      reasoning_cut: result.reasoningCut,
      content: result.content,
      tool_calls: result.toolCalls.map((c) => ({ type: "function", function: { name: c.name, arguments: c.arguments } })),
      finish_reason: result.finishReason,
      usage: { prompt_tokens: result.usage.promptTokens, completion_tokens: result.usage.completionTokens, cached_tokens: result.usage.cachedTokens },
      stats: statsJson(result.stats),
    };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } else {
    process.stdout.write("\n");
    log.info(statsLine(result.stats, engine.computeThreads, result.finishReason));
  }
  if (cancelled) process.exitCode = 130;
}
