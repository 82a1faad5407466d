// `k3 chat`: talk to the model in the K3 chat format.
//   - stdin is a TTY: an interactive REPL (readline history; /reset /save /load /stats /think
//     /effort /help /exit). Reasoning is shown dimmed, apart from the answer. Ctrl-C during a reply
//     stops that reply (the conversation keeps what was said); Ctrl-C or Ctrl-D at the prompt exits.
//   - otherwise: read a conversation (a JSON array of messages, or JSONL: one message per line) on
//     stdin, write the assistant's answer to stdout (--json: {reasoning, content, tool_calls,
//     finish_reason, usage, stats}), exit.
// Default sampling: temperature 1.0 (Moonshot's recommendation for K3) with seed 0, so the same
// conversation gives the same reply; --temperature 0 is greedy. docs/CLI.md has the reasons.
import { defineCommand } from "citty";
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline/promises";
import { streamChat, type ChatOptions, type ChatResult } from "../../conversation.ts";
import { Engine, VALID_THINKING_EFFORTS, type ChatMessage, type Session } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { log } from "../../log.ts";
import { engineArgs, engineOptions, positiveInt, readStdin } from "../common.ts";
import { modelDirOrDemo } from "../demo.ts";
import { prefillProgress } from "../progress.ts";
import { samplingArgs, samplingOptions, statsJson, statsLine } from "./run.ts";

export const CHAT_DEFAULT_TEMPERATURE = 1.0;

export default defineCommand({
  meta: { name: "chat", description: "Chat with the model: a REPL on a terminal, or a JSON(L) conversation on stdin → the reply on stdout" },
  args: {
    model: { type: "positional", required: false, description: "model directory (default: $K3_MODEL, else the demo model)" },
    gen: { type: "string", description: "max tokens per reply (default 1024)" },
    think: { type: "boolean", default: true, description: "thinking channel on (--no-think to answer directly)" },
    effort: { type: "string", description: "thinking effort: low | high | max (default: none given to the model)" },
    system: { type: "string", description: "system message to start the conversation with" },
    json: { type: "boolean", description: "non-interactive: print {reasoning, content, tool_calls, finish_reason, usage, stats}" },
    "load-session": { type: "string", description: "start from a saved session (model state; in the REPL also its messages)" },
    "save-session": { type: "string", description: "save the session after the reply (REPL: after every reply)" },
    ...samplingArgs,
    ...engineArgs,
  },
  async run({ args, rawArgs }) {
    const maxTokens = positiveInt(args.gen, "--gen") ?? 1024;
    const effort = parseEffort(args.effort);
    const opts: ChatOptions = { maxTokens, thinking: args.think, thinkingEffort: effort, ...samplingOptions(args, rawArgs, CHAT_DEFAULT_TEMPERATURE) };
    const interactive = process.stdin.isTTY === true && !args.json;
    // Read the conversation before loading anything, so bad input fails fast.
    const piped = interactive ? undefined : parseConversation(await readStdin(), "stdin");
    const start: ChatMessage[] = args.system ? [{ role: "system", content: args.system }] : [];

    const files = { load: args["load-session"], save: args["save-session"] };
    const engine = Engine.open(await modelDirOrDemo(args.model), engineOptions(args));
    try {
      if (piped) await replyOnce(engine, [...start, ...piped], opts, args.json ?? false, files);
      else await repl(engine, start, opts, files);
    } finally {
      engine.close();
    }
  },
});

function parseEffort(v: string | undefined): string | undefined {
  if (v === undefined || v === "") return undefined;
  if (!(VALID_THINKING_EFFORTS as readonly string[]).includes(v)) throw new K3Error("USAGE", `--effort must be ${VALID_THINKING_EFFORTS.join(", ")}, got "${v}"`);
  return v;
}

/** A JSON array of messages, one JSON object ({messages: [...]} too), or JSONL (one message per line). */
export function parseConversation(text: string, where: string): ChatMessage[] {
  const trimmed = text.trim();
  if (trimmed === "") throw new K3Error("USAGE", `${where}: no conversation (expected a JSON array of messages or JSONL, one message per line)`);
  let messages: unknown;
  try {
    const whole = JSON.parse(trimmed) as unknown;
    messages = Array.isArray(whole) ? whole : whole && typeof whole === "object" && "messages" in whole ? (whole as { messages: unknown }).messages : [whole];
  } catch {
    messages = trimmed.split("\n").flatMap((line, i) => {
      if (line.trim() === "") return [];
      try {
        return [JSON.parse(line) as unknown];
      } catch (err) {
        throw new K3Error("USAGE", `${where}: line ${i + 1} is not JSON: ${(err as Error).message}`);
      }
    });
  }
  if (!Array.isArray(messages)) throw new K3Error("USAGE", `${where}: "messages" must be an array`);
  const problems: string[] = [];
  messages.forEach((m, i) => {
    if (!m || typeof m !== "object" || typeof (m as { role?: unknown }).role !== "string") problems.push(`message ${i + 1}: needs a string "role"`);
  });
  if (problems.length) throw new K3Error("USAGE", `${where}: not a conversation`, problems);
  return messages as ChatMessage[];
}

/** Saved session files of a chat. The state is reused only as far as the rendered conversation
 *  starts with the session's tokens (prefix reuse); anything else is fed again, never guessed. */
interface SessionFiles {
  load?: string;
  save?: string;
}

/** The messages a chat saved with its session (REPL), if any. */
function savedMessages(session: Session): ChatMessage[] | undefined {
  const meta = session.meta as { messages?: unknown } | undefined;
  return Array.isArray(meta?.messages) ? (meta!.messages as ChatMessage[]) : undefined;
}

async function replyOnce(engine: Engine, messages: ChatMessage[], opts: ChatOptions, json: boolean, files: SessionFiles = {}): Promise<void> {
  const session = files.load ? engine.loadSession(files.load) : engine.createSession();
  let cancelled = false;
  const onSigint = () => (cancelled = true);
  process.on("SIGINT", onSigint);
  let result: ChatResult;
  try {
    const it = streamChat(engine, session, messages, {
      ...opts,
      shouldStop: () => cancelled,
      onPrefill: prefillProgress(),
    });
    for (;;) {
      const r = it.next();
      if (r.done) {
        result = r.value;
        break;
      }
      if (!json && r.value.content) process.stdout.write(r.value.content);
      // A person watching sees the reasoning, dimmed, on stderr; stdout stays the answer alone.
      if (!json && r.value.reasoning && process.stderr.isTTY) process.stderr.write(`\x1b[2m${r.value.reasoning}\x1b[22m`);
      await Bun.sleep(0);
    }
  } finally {
    process.off("SIGINT", onSigint);
  }
  if (files.save && !session.dirty) {
    const assistant: ChatMessage = { role: "assistant", content: result.content, reasoning_content: result.reasoning || undefined };
    engine.saveSession(session, files.save, { messages: [...messages, assistant] });
  }
  if (json) {
    const out = {
      reasoning: result.reasoning,
      content: result.content,
      tool_calls: result.toolCalls.map((c) => ({ type: "function", function: { name: c.name, arguments: c.arguments } })),
      finish_reason: result.finishReason,
      usage: { prompt_tokens: result.usage.promptTokens, completion_tokens: result.usage.completionTokens, cached_tokens: result.usage.cachedTokens },
      stats: statsJson(result.stats, engine),
    };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } else {
    process.stdout.write("\n");
    log.info(statsLine(result.stats, engine, result.finishReason));
  }
  if (cancelled) process.exitCode = 130;
}

// ---------------------------------------------------------------------------------------------
// The REPL.

const HELP = `commands:
  /reset              forget the conversation
  /save FILE          save the conversation (JSON messages)
  /load FILE          load a conversation (JSON array or JSONL)
  /stats              stats of the last reply and of the whole run
  /think on|off       thinking channel
  /effort low|high|max|none   thinking effort
  /help               this text
  /exit               leave (also Ctrl-D)`;

async function repl(engine: Engine, start: ChatMessage[], opts: ChatOptions, files: SessionFiles = {}): Promise<void> {
  const color = process.stdout.isTTY && !process.env.NO_COLOR;
  const dim = (s: string) => (color ? `\x1b[2m${s}\x1b[22m` : s);
  const session: Session = files.load ? engine.loadSession(files.load) : engine.createSession();
  let messages: ChatMessage[] = (files.load && savedMessages(session)) || [...start];
  let last: ChatResult | undefined;
  let generating = false;
  let cancelled = false;
  const rl = createInterface({ input: process.stdin, output: process.stdout, historySize: 1000 });
  let closed = false;
  rl.on("close", () => (closed = true));
  // readline turns Ctrl-C into this event (raw mode): stop the reply, or leave at the prompt.
  rl.on("SIGINT", () => {
    if (generating) cancelled = true;
    else rl.close();
  });
  process.stderr.write(dim(`k3 chat — /help for commands, Ctrl-D to leave (thinking ${opts.thinking ? "on" : "off"})\n`));

  while (!closed) {
    let line: string;
    try {
      line = await rl.question("> ");
    } catch {
      break; // closed (Ctrl-D / Ctrl-C at the prompt)
    }
    const text = line.trim();
    if (text === "") continue;
    if (text.startsWith("/")) {
      const [cmd, ...rest] = text.split(/\s+/);
      const arg = rest.join(" ");
      try {
        switch (cmd) {
          case "/exit":
          case "/quit":
            rl.close();
            continue;
          case "/help":
            process.stderr.write(`${HELP}\n`);
            continue;
          case "/reset":
            messages = [...start];
            session.reset();
            process.stderr.write(dim("conversation cleared\n"));
            continue;
          case "/save":
            if (!arg) throw new K3Error("USAGE", "/save needs a file name");
            try {
              writeFileSync(arg, `${JSON.stringify(messages, null, 2)}\n`);
            } catch (err) {
              throw new K3Error("IO", `cannot save the conversation to ${arg}: ${(err as Error).message}`);
            }
            process.stderr.write(dim(`saved ${messages.length} messages to ${arg}\n`));
            continue;
          case "/load":
            if (!arg) throw new K3Error("USAGE", "/load needs a file name");
            messages = parseConversation(readText(arg), arg);
            process.stderr.write(dim(`loaded ${messages.length} messages from ${arg}\n`));
            continue;
          case "/stats":
            if (last) process.stderr.write(`last reply: ${statsLine(last.stats, engine, last.finishReason)}\n`);
            process.stderr.write(`${JSON.stringify(engine.stats())}\n`);
            continue;
          case "/think":
            if (arg !== "on" && arg !== "off") throw new K3Error("USAGE", "/think on|off");
            opts.thinking = arg === "on";
            process.stderr.write(dim(`thinking ${arg}\n`));
            continue;
          case "/effort":
            opts.thinkingEffort = arg === "none" ? undefined : parseEffort(arg);
            process.stderr.write(dim(`effort ${arg || "(none)"}\n`));
            continue;
          default:
            throw new K3Error("USAGE", `unknown command ${cmd} (/help lists them)`);
        }
      } catch (err) {
        if (!(err instanceof K3Error)) throw err;
        log.error(err.message);
        continue;
      }
    }

    const turn: ChatMessage[] = [...messages, { role: "user", content: line }];
    generating = true;
    cancelled = false;
    try {
      const it = streamChat(engine, session, turn, { ...opts, shouldStop: () => cancelled, onPrefill: prefillProgress() });
      let inReasoning = false;
      for (;;) {
        const r = it.next();
        if (r.done) {
          last = r.value;
          break;
        }
        if (r.value.reasoning) {
          process.stdout.write(dim(r.value.reasoning));
          inReasoning = true;
        }
        if (r.value.content) {
          if (inReasoning) process.stdout.write("\n\n");
          inReasoning = false;
          process.stdout.write(r.value.content);
        }
        await Bun.sleep(0);
      }
      process.stdout.write("\n");
      const toolCalls = last.toolCalls.map((c) => ({ id: `call_${c.index}`, type: "function", function: { name: c.name, arguments: c.arguments } }));
      messages = [...turn, { role: "assistant", content: last.content, reasoning_content: last.reasoning || undefined, tool_calls: toolCalls.length ? toolCalls : undefined }];
      if (files.save && !session.dirty) engine.saveSession(session, files.save, { messages });
      if (cancelled) process.stderr.write(dim("(stopped)\n"));
    } catch (err) {
      if (!(err instanceof K3Error)) throw err;
      log.error(err.message);
    } finally {
      generating = false;
    }
  }
  rl.close();
}

function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new K3Error("USAGE", `cannot read ${path}: ${(err as Error).message}`);
  }
}
