// Messages typed into the chat REPL, one at a time, however they were entered:
//   - a line ended by Enter;
//   - a paste of several lines: ONE message, sent when Enter is pressed after it (never split
//     into turns, never lost). Terminals mark pastes (bracketed paste, ESC[200~ … ESC[201~,
//     switched on while the REPL runs); a terminal that does not is covered by the input's
//     chunking: every line break in a chunk of input except one that ends the chunk is part of
//     a paste (a person presses Enter one key at a time);
//   - a `"""` block: a typed line `"""` (or starting with `"""`), any lines, a line ending in `"""`.
// Lines typed while a reply is generating are queued, not dropped.
//
// readline still does the line editing and history; this module only decides which of its line
// events end a message. It reads the raw input chunks first (its 'data' listener is added before
// readline's) to know, for each line break readline will report, whether it was inside a paste.
import type { Interface } from "node:readline";

const PASTE_START = "\x1b[200~";
const PASTE_END = "\x1b[201~";
export const BLOCK = '"""';

export interface TtyInput {
  on(event: "data", fn: (chunk: Buffer | string) => void): unknown;
  off?(event: "data", fn: (chunk: Buffer | string) => void): unknown;
}

/** For each line break in `chunk` (\r\n counts once), whether it ends a message ("enter") or
 *  sits inside a paste ("paste"). `inPaste` carries the bracketed-paste state across chunks. */
export function classifyBreaks(chunk: string, state: { inPaste: boolean }): ("enter" | "paste")[] {
  const out: ("enter" | "paste")[] = [];
  let marked = false;
  for (let i = 0; i < chunk.length; i++) {
    if (chunk.startsWith(PASTE_START, i)) {
      state.inPaste = true;
      marked = true;
      i += PASTE_START.length - 1;
      continue;
    }
    if (chunk.startsWith(PASTE_END, i)) {
      state.inPaste = false;
      i += PASTE_END.length - 1;
      continue;
    }
    const c = chunk[i];
    if (c !== "\r" && c !== "\n") continue;
    if (c === "\r" && chunk[i + 1] === "\n") i++;
    const atEnd = i === chunk.length - 1;
    out.push(state.inPaste || (!marked && !atEnd) ? "paste" : "enter");
  }
  return out;
}

export class ChatInput {
  private breaks: ("enter" | "paste")[] = [];
  private state = { inPaste: false };
  private pasted: string[] = [];
  private block: string[] | null = null;
  private ready: string[] = [];
  private waiting: ((m: string | null) => void) | null = null;
  private closed = false;
  private readonly onData = (chunk: Buffer | string) => {
    this.breaks.push(...classifyBreaks(typeof chunk === "string" ? chunk : chunk.toString("utf8"), this.state));
  };

  /** `input` must be the stream readline reads, and this must be constructed before readline. */
  constructor(private readonly input: TtyInput) {
    input.on("data", this.onData);
  }

  /** Connect to readline's events (after creating the interface). */
  attach(rl: Interface): void {
    rl.on("line", (line: string) => this.line(line, rl));
    rl.on("close", () => {
      this.closed = true;
      this.input.off?.("data", this.onData);
      this.flush(null);
    });
  }

  /** The next message, or null when the input ended (Ctrl-D). */
  next(): Promise<string | null> {
    if (this.ready.length) return Promise.resolve(this.ready.shift()!);
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve) => (this.waiting = resolve));
  }

  private line(line: string, rl: Interface): void {
    // readline reports a line per break; a break we did not see in the raw input (a test
    // driving readline directly) ends a message.
    const kind = this.breaks.shift() ?? "enter";
    if (kind === "paste") {
      this.pasted.push(line);
      return;
    }
    const text = [...this.pasted, line].join("\n");
    this.pasted = [];
    this.message(text, rl);
  }

  private message(text: string, rl: Interface): void {
    if (this.block) {
      const t = text.trimEnd();
      if (t.endsWith(BLOCK)) {
        this.block.push(t.slice(0, -BLOCK.length));
        const whole = this.block.join("\n").replace(/\n$/, "");
        this.block = null;
        this.deliver(whole);
      } else {
        this.block.push(text);
        rl.setPrompt("... ");
        rl.prompt();
      }
      return;
    }
    // Only a typed line opens a block: pasted text that happens to start with """ is a message.
    if (!text.includes("\n") && text.trimStart().startsWith(BLOCK)) {
      const rest = text.trimStart().slice(BLOCK.length);
      if (rest.trimEnd().endsWith(BLOCK) && rest.trim().length >= BLOCK.length) return this.deliver(rest.trimEnd().slice(0, -BLOCK.length));
      this.block = rest === "" ? [] : [rest];
      rl.setPrompt("... ");
      rl.prompt();
      return;
    }
    this.deliver(text);
  }

  private deliver(message: string): void {
    if (this.waiting) this.flush(message);
    else this.ready.push(message);
  }

  private flush(m: string | null): void {
    const w = this.waiting;
    this.waiting = null;
    w?.(m);
  }
}
