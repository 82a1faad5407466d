#!/usr/bin/env bun
// k3 command-line entry (the `bun build --compile` entrypoint). Each command is one file under
// commands/, listed in registry.ts and imported lazily. Arguments are parsed strictly here
// (args.ts) before a command runs. This is the only place that maps errors to exit statuses and
// calls process.exit (docs/CLI.md lists the codes), and the only place an unexpected error is
// turned into a message: no stack trace reaches a user (K3_LOG_LEVEL=debug shows it).
import { EXIT_CODES, K3Error } from "../errors.ts";
import { log, parseLogLevel } from "../log.ts";
import { VERSION } from "../version.ts";
import { argTable, parseCommandLine } from "./args.ts";
import { renderCommandHelp, renderMainHelp } from "./help.ts";
import { clearProgressLines } from "./progress.ts";
import { allCommands, COMMANDS } from "./registry.ts";

/** Exit status when stdout's reader went away (`k3 run … | head`): the shell's SIGPIPE code. */
const EXIT_BROKEN_PIPE = 141;

/** Node/Bun system errors that are the user's environment, not a k3 bug: said plainly, with the
 *  exit status of a failed read or write (IO). */
const SYSTEM_ERRORS: Record<string, string> = {
  ENOENT: "no such file or folder",
  EISDIR: "is a folder, not a file",
  ENOTDIR: "is not a folder",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOSPC: "no space left on the device",
  EROFS: "read-only file system",
  EMFILE: "too many open files",
  EEXIST: "already exists",
};

function fail(err: unknown): never {
  const code = typeof err === "object" && err !== null ? (err as { code?: unknown }).code : undefined;
  // The reader of stdout closed the pipe: nobody wants more output. Stop quietly.
  if (code === "EPIPE") process.exit(EXIT_BROKEN_PIPE);
  clearProgressLines();
  // Ctrl-C while loading: the user knows; no error line, the shell's status for an interrupt.
  if (err instanceof K3Error && err.code === "CANCELLED") process.exit(EXIT_CODES.CANCELLED);
  if (err instanceof K3Error) {
    log.error(err.message);
    process.exit(EXIT_CODES[err.code]);
  }
  const message = err instanceof Error ? err.message : String(err);
  const system = typeof code === "string" && code in SYSTEM_ERRORS;
  if (system) {
    const path = (err as { path?: unknown }).path;
    log.error(typeof path === "string" ? `${path}: ${SYSTEM_ERRORS[code]} (${code})` : `${message}`);
  } else {
    log.error(`internal error: ${message}`);
    log.info("this is a bug in k3: please report it with the command line (K3_LOG_LEVEL=debug shows where it happened)");
  }
  if (err instanceof Error && err.stack) log.debug(err.stack);
  process.exit(system ? EXIT_CODES.IO : EXIT_CODES.INTERNAL);
}

async function main(argv: string[]): Promise<void> {
  if (parseLogLevel(process.env.K3_LOG_LEVEL) === undefined)
    throw new K3Error("USAGE", `K3_LOG_LEVEL must be silent, error, warn, info, debug or trace (or 0-5), got "${process.env.K3_LOG_LEVEL}"`);
  const [first, ...rest] = argv;
  if (first === undefined || first === "--help" || first === "-h") {
    if (rest.length) return await main(["help", ...rest]);
    process.stdout.write(renderMainHelp(await allCommands()));
    return;
  }
  if (first === "--version" || first === "-v") {
    if (rest.length) throw new K3Error("USAGE", `${first} takes no arguments`);
    process.stdout.write(`${VERSION}\n`);
    return;
  }
  if (first.startsWith("-")) throw new K3Error("USAGE", `unknown option ${first}: a command comes first`, ["k3 --help lists the commands"]);
  const load = COMMANDS[first];
  if (!load) {
    const near = Object.keys(COMMANDS).find((c) => c.startsWith(first) || first.startsWith(c));
    throw new K3Error("USAGE", `unknown command "${first}"`, [...(near ? [`did you mean k3 ${near}?`] : []), "k3 --help lists the commands"]);
  }
  const cmd = await load();
  const beforeOperands = rest.indexOf("--") < 0 ? rest : rest.slice(0, rest.indexOf("--"));
  if (beforeOperands.includes("--help") || beforeOperands.includes("-h")) {
    process.stdout.write(renderCommandHelp(first, cmd));
    return;
  }
  const parsed = parseCommandLine(argTable((cmd.args ?? {}) as never), rest, first);
  await cmd.run?.({ args: parsed.args as never, rawArgs: parsed.rawArgs, cmd });
}

process.on("unhandledRejection", fail);
process.on("uncaughtException", fail);
main(process.argv.slice(2)).then(
  () => process.exit(process.exitCode ?? 0),
  fail,
);
