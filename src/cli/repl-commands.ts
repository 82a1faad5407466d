// The chat REPL's /commands: one table, so /help and the dispatcher cannot disagree.
import { readFileSync } from "node:fs";
import { writeFileAtomic } from "../files.ts";
import type { ChatOptions, ChatResult } from "../conversation.ts";
import type { ChatMessage, Engine, Session } from "../engine.ts";
import { K3Error } from "../errors.ts";
import { engineStatsJson, statsLine } from "../report.ts";
import type { Styles } from "../term.ts";
import { parseConversation, parseEffort } from "./chat-options.ts";

/** What the commands may read and change. */
export interface ReplState {
  engine: Engine;
  session: Session;
  opts: ChatOptions;
  /** The conversation's start (--system), what /reset returns to. */
  start: ChatMessage[];
  messages: ChatMessage[];
  last: ChatResult | undefined;
  quit: boolean;
}

interface Command {
  usage: string;
  what: string;
  run(arg: string, s: ReplState, say: (line: string) => void): void;
}

const COMMANDS: Record<string, Command> = {
  "/reset": {
    usage: "/reset",
    what: "forget the conversation",
    run(_arg, s, say) {
      s.messages = [...s.start];
      s.session.reset();
      say("conversation cleared");
    },
  },
  "/save": {
    usage: "/save FILE",
    what: "save the conversation (JSON messages)",
    run(arg, s, say) {
      if (!arg) throw new K3Error("USAGE", "/save needs a file name");
      try {
        writeFileAtomic(arg, "the conversation", "IO", `${JSON.stringify(s.messages, null, 2)}\n`);
      } catch (err) {
        throw err instanceof K3Error ? err : new K3Error("IO", `cannot save the conversation to ${arg}: ${(err as Error).message}`);
      }
      say(`saved ${s.messages.length} messages to ${arg}`);
    },
  },
  "/load": {
    usage: "/load FILE",
    what: "load a conversation (JSON array or JSONL)",
    run(arg, s, say) {
      if (!arg) throw new K3Error("USAGE", "/load needs a file name");
      let text: string;
      try {
        text = readFileSync(arg, "utf8");
      } catch (err) {
        throw new K3Error("USAGE", `cannot read ${arg}: ${(err as Error).message}`);
      }
      s.messages = parseConversation(text, arg);
      say(`loaded ${s.messages.length} messages from ${arg}`);
    },
  },
  "/stats": {
    usage: "/stats",
    what: "stats of the last reply and the engine's counters since start (JSON)",
    run(_arg, s) {
      if (s.last) process.stderr.write(`last reply: ${statsLine(s.last.stats, s.engine.computeThreads, s.last.finishReason)}\n`);
      process.stderr.write(`${JSON.stringify(engineStatsJson(s.engine.stats()))}\n`);
    },
  },
  "/think": {
    usage: "/think on|off",
    what: "thinking channel",
    run(arg, s, say) {
      if (arg !== "on" && arg !== "off") throw new K3Error("USAGE", "/think on|off");
      s.opts.thinking = arg === "on";
      say(`thinking ${arg}`);
    },
  },
  "/effort": {
    usage: "/effort low|high|max|none",
    what: "thinking effort",
    run(arg, s, say) {
      s.opts.thinkingEffort = parseEffort(arg);
      say(`effort ${arg || "(none)"}`);
    },
  },
  "/help": {
    usage: "/help",
    what: "this text",
    run() {
      process.stderr.write(`${helpText()}\n`);
    },
  },
  "/exit": {
    usage: "/exit",
    what: "leave (also /quit, /bye, Ctrl-D)",
    run(_arg, s) {
      s.quit = true;
    },
  },
};
COMMANDS["/quit"] = COMMANDS["/exit"]!;
COMMANDS["/bye"] = COMMANDS["/exit"]!; // ollama's spelling

export function helpText(): string {
  const rows = Object.entries(COMMANDS).filter(([name]) => name !== "/quit" && name !== "/bye");
  const w = Math.max(...rows.map(([, c]) => c.usage.length));
  return [
    "commands:",
    ...rows.map(([, c]) => `  ${c.usage.padEnd(w)}  ${c.what}`),
    'several lines: paste them (one message), or a line """, the lines, then """',
  ].join("\n");
}

/** Run one /command line; K3Error for an unknown command or a bad argument. */
export function runSlashCommand(line: string, state: ReplState, st: Styles): void {
  const [name, ...rest] = line.trim().split(/\s+/);
  const cmd = COMMANDS[name!];
  if (!cmd) throw new K3Error("USAGE", `unknown command ${name} (/help lists them)`);
  cmd.run(rest.join(" "), state, (s) => process.stderr.write(st.dim(`${s}\n`)));
}
