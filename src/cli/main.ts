#!/usr/bin/env bun
// k3 command-line entry (the `bun build --compile` entrypoint). Each command is one file under
// commands/, imported lazily so `k3 --help` loads nothing heavy. This is the only place that
// maps errors to exit statuses and calls process.exit (docs/CLI.md lists the codes).
import { defineCommand, renderUsage, runCommand, showUsage, type CommandDef } from "citty";
import { EXIT_CODES, K3Error } from "../errors.ts";
import { log } from "../log.ts";
import { VERSION } from "../version.ts";

const lazy = (load: () => Promise<{ default: CommandDef<any> }>) => () => load().then((m) => m.default);

const main = defineCommand({
  meta: { name: "k3", version: VERSION, description: "Run Kimi K3 on one CPU machine, streaming its weights from disk" },
  subCommands: {
    info: lazy(() => import("./commands/info.ts")),
    tokenize: lazy(() => import("./commands/tokenize.ts")),
    detokenize: lazy(() => import("./commands/detokenize.ts")),
    run: lazy(() => import("./commands/run.ts")),
    chat: lazy(() => import("./commands/chat.ts")),
    verify: lazy(() => import("./commands/verify.ts")),
    bench: lazy(() => import("./commands/bench.ts")),
    "simulate-cache": lazy(() => import("./commands/simulate-cache.ts")),
    plan: lazy(() => import("./commands/plan.ts")),
    serve: lazy(() => import("./commands/serve.ts")),
  },
});

/** Exit status when stdout's reader went away (`k3 run … | head`): the shell's SIGPIPE code. */
const EXIT_BROKEN_PIPE = 141;

function isBrokenPipe(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === "EPIPE";
}

function fail(err: unknown): never {
  // The reader of stdout closed the pipe: nobody wants more output. Stop quietly.
  if (isBrokenPipe(err)) process.exit(EXIT_BROKEN_PIPE);
  if (err instanceof K3Error) {
    log.error(err.message);
    process.exit(EXIT_CODES[err.code]);
  }
  log.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
  process.exit(1);
}

/** citty's runMain exits 1 for every error; k3 needs distinct codes, so it is spelled out here. */
async function run(rawArgs: string[]): Promise<void> {
  const help = rawArgs.includes("--help") || rawArgs.includes("-h");
  if (help) {
    // Usage of the deepest subcommand named; citty resolves it from the raw args.
    await showUsage(...(await resolveForUsage(rawArgs)));
    return;
  }
  if (rawArgs.length === 1 && (rawArgs[0] === "--version" || rawArgs[0] === "-v")) {
    process.stdout.write(`${VERSION}\n`);
    return;
  }
  if (rawArgs.length === 0) {
    await showUsage(main);
    return;
  }
  const [cmd] = await resolveForUsage(rawArgs);
  if (cmd !== main) rejectUnknownOptions(cmd, rawArgs);
  try {
    await runCommand(main, { rawArgs });
  } catch (err) {
    // citty does not export CLIError; its errors carry name "CLIError" and a code.
    if (err instanceof Error && err.name === "CLIError") {
      process.stderr.write(`${await renderUsage(...(await resolveForUsage(rawArgs)))}\n`);
      log.error(err.message);
      process.exit(EXIT_CODES.USAGE);
    }
    throw err;
  }
}

/**
 * citty ignores options it does not know, so `--temprature 0.9` or `--max-tokens 2` would run
 * with defaults and say nothing. Every `--name` must be one of the command's options (booleans
 * also as `--no-name`); anything after `--` is an operand.
 */
function rejectUnknownOptions(cmd: CommandDef<any>, rawArgs: string[]): void {
  const defs = (cmd.args ?? {}) as Record<string, { type?: string; alias?: string | string[] }>;
  const known = new Set<string>();
  for (const [name, d] of Object.entries(defs)) {
    known.add(name);
    for (const a of [d.alias ?? []].flat()) known.add(a);
    if (d.type === "boolean") known.add(`no-${name}`);
  }
  const unknown: string[] = [];
  for (const a of rawArgs) {
    if (a === "--") break;
    if (!a.startsWith("--") || a === "--help") continue;
    const name = a.slice(2).split("=")[0]!;
    if (!known.has(name)) unknown.push(a.split("=")[0]!);
  }
  if (unknown.length) {
    const name = (cmd.meta as { name?: string } | undefined)?.name ?? "";
    throw new K3Error("USAGE", `unknown option${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")} for k3 ${name}`, [`see k3 ${name} --help`]);
  }
}

async function resolveForUsage(rawArgs: string[]): Promise<[CommandDef<any>, CommandDef<any>?]> {
  const subs = main.subCommands as Record<string, () => Promise<CommandDef<any>>>;
  const name = rawArgs.find((a) => !a.startsWith("-"));
  if (name && subs[name]) return [await subs[name](), main];
  return [main];
}

process.on("unhandledRejection", fail);
run(process.argv.slice(2)).then(
  () => process.exit(process.exitCode ?? 0),
  fail,
);
