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

function fail(err: unknown): never {
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
