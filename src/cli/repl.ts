// The `k3 chat` REPL on a terminal: readline for editing and history, src/cli/chat-input.ts for
// turning keystrokes and pastes into messages, src/cli/repl-commands.ts for the /commands.
// Reasoning streams dimmed (where colour is on), then a blank line, then the answer. Ctrl-C
// during a reply stops that reply (the conversation keeps what was said); Ctrl-C or Ctrl-D at
// the prompt leaves.
import { createInterface } from "node:readline";
import { streamChat, type ChatOptions, type ChatResult } from "../conversation.ts";
import type { ChatMessage, Engine, Session } from "../engine.ts";
import { K3Error } from "../errors.ts";
import { log } from "../log.ts";
import { stylesFor } from "../term.ts";
import { ChatInput } from "./chat-input.ts";
import { prefillProgress } from "./progress.ts";
import { runSlashCommand, type ReplState } from "./repl-commands.ts";

/** Saved session files of a chat. The state is reused only as far as the rendered conversation
 *  starts with the session's tokens (prefix reuse); anything else is fed again, never guessed. */
export interface SessionFiles {
  load?: string;
  save?: string;
}

/** Bracketed paste on/off (xterm and every common terminal): pastes arrive marked. */
const PASTE_ON = "\x1b[?2004h";
const PASTE_OFF = "\x1b[?2004l";

export async function repl(engine: Engine, start: ChatMessage[], opts: ChatOptions, files: SessionFiles = {}): Promise<void> {
  const st = stylesFor(process.stdout);
  const session: Session = files.load ? engine.loadSession(files.load) : engine.createSession();
  const state: ReplState = { engine, session, opts, start, messages: (files.load && savedMessages(session)) || [...start], last: undefined, quit: false };
  const input = new ChatInput(process.stdin); // before readline: it must see each input chunk first
  const rl = createInterface({ input: process.stdin, output: process.stdout, historySize: 1000 });
  input.attach(rl);
  let generating = false;
  let cancelled = false;
  // readline turns Ctrl-C into this event (raw mode): stop the reply, or leave at the prompt.
  rl.on("SIGINT", () => {
    if (generating) cancelled = true;
    else rl.close();
  });
  const pasteOff = () => process.stdout.write(PASTE_OFF);
  process.stdout.write(PASTE_ON);
  process.once("exit", pasteOff);
  process.stderr.write(st.dim(`k3 chat — /help for commands, Ctrl-D to leave (thinking ${opts.thinking ? "on" : "off"}); paste freely, or """ for several lines\n`));

  try {
    while (!state.quit) {
      rl.setPrompt("> ");
      rl.prompt();
      const message = await input.next();
      if (message === null) {
        // Ctrl-D / Ctrl-C at the prompt: end the prompt's line, so the shell's prompt starts on its own.
        process.stdout.write("\n");
        break;
      }
      const text = message.trim();
      if (text === "") continue;
      if (text.startsWith("/") && !text.includes("\n")) {
        try {
          runSlashCommand(text, state, st);
        } catch (err) {
          if (!(err instanceof K3Error)) throw err;
          log.error(err.message);
        }
        continue;
      }
      generating = true;
      cancelled = false;
      try {
        await turn(state, message.replace(/\s+$/, ""), () => cancelled, st.dim);
        if (files.save && !session.dirty) engine.saveSession(session, files.save, { messages: state.messages });
        if (cancelled) process.stderr.write(st.dim("(stopped)\n"));
      } catch (err) {
        if (!(err instanceof K3Error)) throw err;
        log.error(err.message);
      } finally {
        generating = false;
      }
    }
  } finally {
    rl.close();
    pasteOff();
    process.off("exit", pasteOff);
  }
}

/** One user message → the streamed reply; the conversation keeps both (a stopped reply too). */
async function turn(state: ReplState, content: string, stopped: () => boolean, dim: (s: string) => string): Promise<void> {
  const turnMessages: ChatMessage[] = [...state.messages, { role: "user", content }];
  const progress = prefillProgress();
  let last: ChatResult;
  try {
    const it = streamChat(state.engine, state.session, turnMessages, { ...state.opts, shouldStop: stopped, onPrefill: progress });
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
      if (r.value.reasoningCut) process.stdout.write(dim(`\n(reasoning cut at ${state.opts.reasoningBudget} tokens: --reasoning-budget)`));
      if (r.value.content) {
        if (inReasoning) process.stdout.write("\n\n");
        inReasoning = false;
        process.stdout.write(r.value.content);
      }
      await Bun.sleep(0);
    }
  } finally {
    progress?.clear();
  }
  process.stdout.write("\n");
  state.last = last;
  const toolCalls = last.toolCalls.map((c) => ({ id: `call_${c.index}`, type: "function", function: { name: c.name, arguments: c.arguments } }));
  state.messages = [...turnMessages, { role: "assistant", content: last.content, reasoning_content: last.reasoning || undefined, tool_calls: toolCalls.length ? toolCalls : undefined }];
}

/** The messages a chat saved with its session, if any. */
function savedMessages(session: Session): ChatMessage[] | undefined {
  const meta = session.meta as { messages?: unknown } | undefined;
  return Array.isArray(meta?.messages) ? (meta!.messages as ChatMessage[]) : undefined;
}
