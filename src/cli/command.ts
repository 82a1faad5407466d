// A k3 command: citty's command definition (meta, args, run) plus what `--help` shows besides the
// argument table — the usage line, examples, notes and the environment variables that apply.
// src/cli/args.ts parses strictly against `args`; src/cli/help.ts renders all of it.
import type { ArgsDef, CommandDef } from "citty";

export interface CommandHelp {
  /** Usage lines after "k3 NAME" (default: the operands and "[options]"). */
  usage?: string[];
  /** [command line, what it does]. The command lines run as written (README/docs tests use the same form). */
  examples?: [string, string][];
  /** Paragraphs after the options (rules that do not fit one option's line). */
  notes?: string[];
  /** Environment variables that apply, by name (src/cli/help.ts describes each). */
  env?: string[];
}

export type K3Command<T extends ArgsDef = ArgsDef> = CommandDef<T> & { help?: CommandHelp };

/** citty's defineCommand, with the help extras. */
export function defineCommand<const T extends ArgsDef = ArgsDef>(def: K3Command<T>): K3Command<T> {
  return def;
}
