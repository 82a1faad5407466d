// When k3 writes ANSI styles: only to a terminal, and never when the user said no.
//
// The rule (one place; help, logs, the chat REPL's dimmed reasoning and progress bars all use it):
//   1. FORCE_COLOR set and non-empty decides: "0" or "false" → never, anything else → always
//      (Node's precedence: FORCE_COLOR wins over NO_COLOR);
//   2. NO_COLOR set and non-empty (no-color.org) → never;
//   3. TERM=dumb → never;
//   4. otherwise only when the stream is a terminal (pipes and files get plain text).
// Read at each call, not at import, so a test (or a command) sees the environment it runs in.

export interface Stream {
  isTTY?: boolean;
}

export function colorEnabled(stream: Stream, env: NodeJS.ProcessEnv = process.env): boolean {
  const force = env.FORCE_COLOR;
  if (force !== undefined && force !== "") return !["0", "false"].includes(force.toLowerCase());
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== "") return false;
  if (env.TERM === "dumb") return false;
  return stream.isTTY === true;
}

export type Style = (s: string) => string;
export interface Styles {
  bold: Style;
  dim: Style;
  underline: Style;
  red: Style;
  yellow: Style;
  cyan: Style;
  gray: Style;
}

const sgr = (open: number, close: number): Style => (s) => `\x1b[${open}m${s}\x1b[${close}m`;
const ON: Styles = { bold: sgr(1, 22), dim: sgr(2, 22), underline: sgr(4, 24), red: sgr(31, 39), yellow: sgr(33, 39), cyan: sgr(36, 39), gray: sgr(90, 39) };
const plain: Style = (s) => s;
const OFF: Styles = { bold: plain, dim: plain, underline: plain, red: plain, yellow: plain, cyan: plain, gray: plain };

/** Styles for text written to `stream`: real ones when colour is enabled for it, identity otherwise. */
export function stylesFor(stream: Stream, env: NodeJS.ProcessEnv = process.env): Styles {
  return colorEnabled(stream, env) ? ON : OFF;
}

/** Erase the current terminal line (progress bars). Not a colour: written only to terminals. */
export const ERASE_LINE = "\r\x1b[2K";
