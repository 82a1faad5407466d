// The one logger. Every level goes to stderr (k3's stdout carries only generated text or JSON),
// one line per message, "k3: " first so it stands out among other tools' output:
//   k3: error: <message>      k3: warning: <message>      k3: <info message>
// Colour follows src/term.ts (terminal only; NO_COLOR, FORCE_COLOR). The level comes from
// $K3_LOG_LEVEL: a name (silent, error, warn, info, debug, trace) or consola's number (0–5).
import { createConsola, type ConsolaReporter } from "consola";
import { stylesFor } from "./term.ts";

/** consola's numeric levels by name ("warning" too, since that is what the lines say). */
export const LOG_LEVELS = { silent: -999, error: 0, warn: 1, warning: 1, info: 3, debug: 4, trace: 5 } as const;
const DEFAULT_LEVEL = LOG_LEVELS.info;

/** The level $K3_LOG_LEVEL asks for; undefined when it is set to something that is not a level
 *  (src/cli/main.ts refuses that as a usage error before anything runs). */
export function parseLogLevel(v: string | undefined): number | undefined {
  if (v === undefined || v.trim() === "") return DEFAULT_LEVEL;
  const s = v.trim().toLowerCase();
  if (s in LOG_LEVELS) return LOG_LEVELS[s as keyof typeof LOG_LEVELS];
  if (/^-?\d+$/.test(s) && ((Number(s) >= 0 && Number(s) <= 5) || Number(s) === -999)) return Number(s);
  return undefined;
}

const reporter: ConsolaReporter = {
  log(obj) {
    const st = stylesFor(process.stderr);
    const text = obj.args.map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : JSON.stringify(a))).join(" ");
    const label =
      obj.level <= 0 ? st.red(st.bold("error:")) + " " : obj.level === 1 ? st.yellow(st.bold("warning:")) + " " : obj.level >= 4 ? st.gray(`${obj.type}:`) + " " : "";
    process.stderr.write(`${st.gray("k3:")} ${label}${text}\n`);
  },
};

export const log = createConsola({
  level: parseLogLevel(process.env.K3_LOG_LEVEL) ?? DEFAULT_LEVEL,
  reporters: [reporter],
});
