// Strict command-line parsing against a command's citty argument table.
//
// citty's own parser is lax (node's parseArgs with strict: false): an unknown `-zzz` becomes a
// boolean, `-c 3` (no such short option) turns "3" into the model folder, extra operands vanish.
// A typo must never run with defaults and say nothing, so every argument is checked here first:
//   --name VALUE | --name=VALUE   a string option (the next argument is its value, whatever it
//                                 looks like: `--prompt -x` prompts "-x")
//   --name | --no-name            a boolean option (also --name=true / --name=false)
//   -x VALUE | -xVALUE | -x       a one-letter alias (llama.cpp style: -n 16, -t4); no bundling
//   -ngl VALUE                    llama.cpp's one-dash long flags in ONE_DASH_LONG, as written in
//                                 its recipes (else `-ngl 99` would be `-n gl` and the operand 99)
//   --                            everything after it is an operand
//   -                             an operand (stdin, for the commands that take it)
// Aliases come from the table: one letter → `-x`, longer → `--name` (e.g. --temp, --ctx-size).
// Unknown options and extra operands are USAGE errors naming them (with a suggestion). So are, for
// every option of every command (the class, not a list of flags):
//   - an empty value (`--ram ""`, `--ram=`, `-n=`): never "the default", never "no key";
//   - an option given twice (`--trunk a --trunk b`, `-n 4 --gen 8`), unless its description says
//     "(repeatable" (`--stop`, `--alias`, `--cors`): the help text and the parser cannot disagree.
import type { ArgDef, ArgsDef } from "citty";
import { K3Error } from "../errors.ts";

/** llama.cpp flags spelled with one dash and several letters that k3 takes as written, when the
 *  command's table has that long name (engineArgs: `-ngl`, accepted and ignored). */
const ONE_DASH_LONG = new Set(["ngl"]);

export interface OptionSpec {
  /** The option's name in the table (the key commands read). */
  name: string;
  type: "string" | "boolean";
  /** May be given more than once (every value is read with repeatedValues). */
  repeatable: boolean;
  /** Long spellings, the name first. */
  long: string[];
  /** One-letter spellings. */
  short: string[];
  def: ArgDef;
}

export interface ArgTable {
  options: OptionSpec[];
  byLong: Map<string, OptionSpec>;
  byShort: Map<string, OptionSpec>;
  /** Positional names in order. */
  positionals: { name: string; required: boolean; def: ArgDef }[];
}

export function argTable(defs: ArgsDef): ArgTable {
  const t: ArgTable = { options: [], byLong: new Map(), byShort: new Map(), positionals: [] };
  for (const [name, def] of Object.entries(defs)) {
    if (def.type === "positional") {
      t.positionals.push({ name, required: def.required !== false && def.default === undefined, def });
      continue;
    }
    const aliases = [(def as { alias?: string | string[] }).alias ?? []].flat();
    const spec: OptionSpec = {
      name,
      type: def.type === "boolean" ? "boolean" : "string",
      repeatable: isRepeatable(def),
      long: [name, ...aliases.filter((a) => a.length > 1)],
      short: aliases.filter((a) => a.length === 1),
      def,
    };
    t.options.push(spec);
    for (const l of spec.long) t.byLong.set(l, spec);
    for (const s of spec.short) t.byShort.set(s, spec);
  }
  return t;
}

export interface ParsedCommandLine {
  /** Option values by table name (defaults applied) and positionals by name; `_` = all operands. */
  args: Record<string, string | boolean | undefined> & { _: string[] };
  /** The same arguments in canonical long form: `--name=value`, `--name`, `--no-name`, then `--`
   *  and the operands. Commands that read a repeatable option (every `--stop`) read these. */
  rawArgs: string[];
}

/** Parse `argv` (the arguments after the command name) against the table; USAGE errors for
 *  unknown options, missing values, bad boolean values, missing or extra operands. */
export function parseCommandLine(table: ArgTable, argv: string[], command: string): ParsedCommandLine {
  const { values, canonical, operands, unknown, problems } = scanArgv(table, argv);
  if (unknown.length) {
    const hints = unknown.map((u) => suggest(u, table)).filter((s): s is string => s !== undefined);
    throw new K3Error("USAGE", `unknown option${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")} for k3 ${command}`, [...hints, `k3 ${command} --help lists the options`]);
  }
  if (problems.length) throw new K3Error("USAGE", problems[0]!, problems.slice(1));

  const args = values as ParsedCommandLine["args"];
  args._ = operands;
  table.positionals.forEach((p, i) => {
    if (operands[i] !== undefined) args[p.name] = operands[i];
    else if (p.required) throw new K3Error("USAGE", `k3 ${command} needs ${operandName(p)}`, [`k3 ${command} --help shows the usage`]);
  });
  if (operands.length > table.positionals.length) {
    const extra = operands.slice(table.positionals.length);
    throw new K3Error("USAGE", `unexpected argument${extra.length > 1 ? "s" : ""} ${extra.map((x) => JSON.stringify(x)).join(", ")} for k3 ${command}`, [
      table.positionals.length ? `k3 ${command} takes ${table.positionals.map(operandName).join(" and ")}; quote text that has spaces` : `k3 ${command} takes no operands`,
    ]);
  }
  for (const o of table.options) if (values[o.name] === undefined && o.def.default !== undefined) args[o.name] = o.def.default as string | boolean;
  return { args, rawArgs: [...canonical, "--", ...operands] };
}

/** An option that may repeat says so in its description ("(repeatable)", "(repeatable; …)"). */
export const isRepeatable = (def: ArgDef): boolean => /\(repeatable\b/.test(def.description ?? "");

/** One pass over `argv`: option values (and their canonical long form), operands, and what was
 *  wrong (unknown options, missing, empty, repeated or bad values), all collected for
 *  parseCommandLine to report. */
function scanArgv(table: ArgTable, argv: string[]) {
  const values: Record<string, string | boolean | undefined> = {};
  const canonical: string[] = [];
  const operands: string[] = [];
  const unknown: string[] = [];
  const problems: string[] = [];
  const given = new Map<string, string>(); // option name → the spelling first used
  const once = (o: OptionSpec, spelling: string): boolean => {
    const first = given.get(o.name);
    if (first !== undefined && !o.repeatable) {
      problems.push(`${spelling} given twice${first === spelling ? "" : ` (also as ${first})`}: it takes one value; give it once`);
      return false;
    }
    given.set(o.name, spelling);
    return true;
  };
  const setString = (o: OptionSpec, v: string, spelling: string) => {
    if (v === "") return void problems.push(`${spelling} needs a value, got an empty one`);
    if (!once(o, spelling)) return;
    values[o.name] = v;
    canonical.push(`--${o.name}=${v}`);
  };
  const setBool = (o: OptionSpec, v: boolean, spelling: string) => {
    if (!once(o, spelling)) return;
    values[o.name] = v;
    canonical.push(v ? `--${o.name}` : `--no-${o.name}`);
  };

  for (let i = 0; i < argv.length; i++) {
    // llama.cpp's `-ngl 99` is read as `--ngl 99` (ONE_DASH_LONG), not `-n gl` and an operand.
    const a = /^-[^-]/.test(argv[i]!) && ONE_DASH_LONG.has(argv[i]!.slice(1).split("=")[0]!) ? `-${argv[i]}` : argv[i]!;
    if (a === "--") {
      operands.push(...argv.slice(i + 1));
      break;
    }
    if (a.startsWith("--")) {
      const eq = a.indexOf("=");
      const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
      const inline = eq < 0 ? undefined : a.slice(eq + 1);
      const opt = table.byLong.get(name);
      const negated = !opt && name.startsWith("no-") ? table.byLong.get(name.slice(3)) : undefined;
      if (negated?.type === "boolean" && inline === undefined) {
        setBool(negated, false, `--${name}`);
        continue;
      }
      if (!opt) {
        unknown.push(`--${name}`);
        continue;
      }
      if (opt.type === "boolean") {
        if (inline === undefined || inline === "true") setBool(opt, true, `--${name}`);
        else if (inline === "false") setBool(opt, false, `--${name}`);
        else problems.push(`--${name} takes no value (got "${inline}")`);
        continue;
      }
      const v = inline ?? argv[++i];
      if (v === undefined) problems.push(`--${name} needs a value`);
      else setString(opt, v, `--${name}`);
      continue;
    }
    if (a.startsWith("-") && a.length > 1) {
      const opt = table.byShort.get(a[1]!);
      if (!opt || (opt.type === "boolean" && a.length > 2)) {
        unknown.push(a);
        continue;
      }
      if (opt.type === "boolean") {
        setBool(opt, true, a);
        continue;
      }
      const v = a.length > 2 ? a.slice(a[2] === "=" ? 3 : 2) : argv[++i];
      if (v === undefined) problems.push(`${a} needs a value`);
      else setString(opt, v, a.slice(0, 2));
      continue;
    }
    operands.push(a);
  }
  return { values, canonical, operands, unknown, problems };
}

/** Every value of a repeatable option (`--stop`, `--alias`), in order: citty keeps only the last,
 *  so commands read them from the rawArgs they receive (canonical `--name=value`; `--name value`
 *  is read too). Nothing after `--`. */
export function repeatedValues(rawArgs: string[], flag: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < rawArgs.length; i++) {
    const a = rawArgs[i]!;
    if (a === "--") break;
    if (a === flag) {
      const v = rawArgs[++i];
      if (v === undefined) throw new K3Error("USAGE", `${flag} needs a value`);
      out.push(v);
    } else if (a.startsWith(`${flag}=`)) out.push(a.slice(flag.length + 1));
  }
  return out;
}

/** How help and errors name an operand: its value hint (DIR, PROMPT), else its name in capitals. */
export function operandName(p: { name: string; def: ArgDef }): string {
  return (p.def as { valueHint?: string }).valueHint ?? p.name.toUpperCase();
}

/** "did you mean --temperature?" for a near miss (edit distance ≤ 2, or a prefix). */
function suggest(given: string, table: ArgTable): string | undefined {
  const bare = given.replace(/^-+/, "").split("=")[0]!;
  if (bare.length < 2) return undefined;
  let best: string | undefined;
  let bestD = 3;
  for (const o of table.options)
    for (const l of o.long) {
      const d = l.startsWith(bare) ? 1 : distance(bare, l);
      if (d < bestD) {
        bestD = d;
        best = `--${o.name}`;
      }
    }
  return best && `did you mean ${best}?`;
}

function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length]![b.length]!;
}
