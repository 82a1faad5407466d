// `k3 --help`, `k3 help [COMMAND]`, `k3 COMMAND --help`: rendered from the commands' own tables
// (src/cli/registry.ts), so help cannot drift from what the parser accepts. Plain text unless
// stdout is a terminal with colour allowed (src/term.ts).
import type { ArgDef } from "citty";
import { EXIT_CODES, type ErrorCode } from "../errors.ts";
import { stylesFor, type Styles } from "../term.ts";
import { VERSION } from "../version.ts";
import { argTable, operandName, type OptionSpec } from "./args.ts";
import type { K3Command } from "./command.ts";
import { engineArgs } from "./common.ts";
import { samplingArgs } from "./sampling-args.ts";

/** Every environment variable k3 reads, and what for. */
export const ENVIRONMENT: Record<string, string> = {
  K3_MODEL: "model folder used when none is given",
  K3_API_KEY: "API key `k3 serve` requires (instead of --api-key, which `ps` shows)",
  K3_LOG_LEVEL: "silent, error, warn, info (default), debug, trace (or 0-5)",
  XDG_CACHE_HOME: "cache root (default ~/.cache): the demo model, index and checksum caches under k3/",
  K3_KERNELS: "path of another build of the kernel library (libkernels.so)",
  NO_COLOR: "any non-empty value: no colour",
  FORCE_COLOR: "0 or false: no colour; other values: colour even when not a terminal",
};
const ALWAYS_ENV = ["K3_LOG_LEVEL", "NO_COLOR", "FORCE_COLOR"];

/** What each exit status means (docs/CLI.md has the same table). */
export function exitCodeLines(): [string, string][] {
  const why: Record<ErrorCode, string> = {
    USAGE: "bad flags or input",
    CONTEXT: "a prompt over the context limit",
    CONFIG: "a folder that is not a model (config.json)",
    TOKENIZER: "a missing or bad tokenizer",
    CHECKPOINT: "a bad model (shards, config, a path that does not exist)",
    IO: "a read or write failed",
    VERIFY: "a checksum mismatch",
    SESSION: "a bad session file",
    BUDGET: "the RAM budget does not fit",
    INTERNAL: "an internal error (a bug in k3: please report it)",
    CANCELLED: "interrupted (Ctrl-C) while loading or generating; what was printed stays",
  };
  const byCode = new Map<number, string[]>();
  for (const [code, status] of Object.entries(EXIT_CODES)) byCode.set(status, [...(byCode.get(status) ?? []), why[code as ErrorCode]]);
  const lines: [string, string][] = [["0", "success"]];
  for (const status of [...byCode.keys()].sort((a, b) => a - b)) lines.push([String(status), byCode.get(status)!.join("; ")]);
  lines.push(["141", "stdout closed by its reader (`k3 run … | head`)"]);
  return lines;
}

function columns(rows: [string, string][], st: Styles, indent = "  "): string[] {
  const w = Math.min(Math.max(0, ...rows.map(([a]) => a.length)), 34);
  return rows.map(([a, b]) => (a.length > w ? `${indent}${st.cyan(a)}\n${indent}${" ".repeat(w + 2)}${b}` : `${indent}${st.cyan(a.padEnd(w))}  ${b}`));
}

function hint(o: OptionSpec): string {
  if (o.type === "boolean") return "";
  return ` ${(o.def as { valueHint?: string }).valueHint ?? o.name.toUpperCase().replace(/-/g, "_")}`;
}

function optionRow(o: OptionSpec): [string, string] {
  const names = [...o.short.map((s) => `-${s}`), ...o.long.map((l) => `--${l}`)];
  if (o.type === "boolean" && o.def.default === true) names.push(`--no-${o.name}`);
  return [`${names.join(", ")}${hint(o)}`, o.def.description ?? ""];
}

export function renderCommandHelp(name: string, cmd: K3Command<any>, stream: { isTTY?: boolean } = process.stdout): string {
  const st = stylesFor(stream);
  const meta = (cmd.meta ?? {}) as { description?: string };
  const table = argTable((cmd.args ?? {}) as Record<string, ArgDef>);
  const h = cmd.help ?? {};
  const out: string[] = [`${st.bold(`k3 ${name}`)}: ${meta.description ?? ""}`, ""];
  const operands = table.positionals.map((p) => (p.required ? operandName(p) : `[${operandName(p)}]`)).join(" ");
  out.push(st.bold("Usage:"), ...(h.usage ?? [`${operands}${operands ? " " : ""}[options]`]).map((u) => `  k3 ${name} ${u}`), "");
  if (table.positionals.length) {
    out.push(st.bold("Arguments:"), ...columns(table.positionals.map((p) => [operandName(p), p.def.description ?? ""]), st), "");
  }
  const groups: [string, OptionSpec[]][] = [
    ["Options", table.options.filter((o) => !(o.name in samplingArgs) && !(o.name in engineArgs))],
    ["Sampling options", table.options.filter((o) => o.name in samplingArgs)],
    ["Engine options", table.options.filter((o) => o.name in engineArgs)],
  ];
  groups[0]![1].push({ name: "help", type: "boolean", repeatable: false, long: ["help"], short: ["h"], def: { type: "boolean", description: "show this help" } });
  for (const [title, opts] of groups) if (opts.length) out.push(st.bold(`${title}:`), ...columns(opts.map(optionRow), st), "");
  for (const n of h.notes ?? []) out.push(wrap(n, 96), "");
  if (h.examples?.length) out.push(st.bold("Examples:"), ...h.examples.flatMap(([c, what]) => [`  ${st.cyan(c)}`, `      ${what}`]), "");
  const env = [...(h.env ?? []), ...ALWAYS_ENV];
  out.push(st.bold("Environment:"), ...columns(env.map((e) => [e, ENVIRONMENT[e] ?? ""]), st), "");
  out.push(st.bold("Exit codes:"), ...columns(exitCodeLines(), st), "");
  out.push(`Every command, flag and exit code: docs/CLI.md (k3 ${VERSION}).`);
  return `${out.join("\n")}\n`;
}

/** `k3 --help`'s examples (run by test/docs-examples.test.ts, like every command's). */
export const MAIN_EXAMPLES: [string, string][] = [
  ['k3 run "The capital of France is"', "continue a prompt (no model given: the built-in demo, a tiny model trained on English text, not K3)"],
  ['k3 run /models/Kimi-K3 "Once upon a time" -n 64', "64 tokens from a real download"],
  ["echo '{\"role\":\"user\",\"content\":\"hi\"}' | k3 chat --json --gen 64", "one chat reply as JSON"],
  ["k3 chat /models/Kimi-K3", "interactive chat (/help inside)"],
  ["k3 plan --config reference/k3/config.json --index reference/k3/model.safetensors.index.json.gz --preset laptop", "what an 8 GiB budget does, without weights"],
];

export function renderMainHelp(commands: [string, K3Command<any>][], stream: { isTTY?: boolean } = process.stdout): string {
  const st = stylesFor(stream);
  const out: string[] = [
    `${st.bold("k3")} ${VERSION}: run Kimi K3 on one CPU machine, streaming its weights from disk`,
    "",
    st.bold("Usage:"),
    "  k3 COMMAND [ARGUMENTS] [options]",
    "  k3 help COMMAND          (or k3 COMMAND --help)",
    "",
    st.bold("Commands:"),
    ...columns(commands.map(([n, c]) => [n, ((c.meta ?? {}) as { description?: string }).description ?? ""]), st),
    "",
    st.bold("Examples:"),
    ...MAIN_EXAMPLES.flatMap(([c, what]) => [`  ${st.cyan(c)}`, `      ${what}`]),
    "",
    st.bold("Environment:"),
    ...columns(Object.entries(ENVIRONMENT), st),
    "",
    st.bold("Exit codes:"),
    ...columns(exitCodeLines(), st),
    "",
    "Every command, flag and exit code: docs/CLI.md.",
  ];
  return `${out.join("\n")}\n`;
}

function wrap(text: string, width: number, indent = ""): string {
  const words = text.split(/\s+/);
  const lines: string[] = [];
  let line = "";
  for (const w of words) {
    if (line && indent.length + line.length + 1 + w.length > width) {
      lines.push(indent + line);
      line = w;
    } else line = line ? `${line} ${w}` : w;
  }
  if (line) lines.push(indent + line);
  return lines.join("\n");
}
