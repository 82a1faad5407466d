// The commands, in the order `k3 --help` lists them. Each is imported on first use, so
// `k3 --version` or a usage error loads nothing heavy.
import type { K3Command } from "./command.ts";

type Loader = () => Promise<K3Command<any>>;
const lazy = (load: () => Promise<{ default: K3Command<any> }>): Loader => () => load().then((m) => m.default);

export const COMMANDS: Record<string, Loader> = {
  run: lazy(() => import("./commands/run.ts")),
  chat: lazy(() => import("./commands/chat.ts")),
  serve: lazy(() => import("./commands/serve.ts")),
  info: lazy(() => import("./commands/info.ts")),
  plan: lazy(() => import("./commands/plan.ts")),
  disks: lazy(() => import("./commands/disks.ts")),
  verify: lazy(() => import("./commands/verify.ts")),
  pack: lazy(() => import("./commands/pack.ts")),
  bench: lazy(() => import("./commands/bench.ts")),
  "simulate-cache": lazy(() => import("./commands/simulate-cache.ts")),
  tokenize: lazy(() => import("./commands/tokenize.ts")),
  detokenize: lazy(() => import("./commands/detokenize.ts")),
  completion: lazy(() => import("./commands/completion.ts")),
  help: lazy(() => import("./commands/help.ts")),
  version: lazy(() => import("./commands/version.ts")),
};

/** Every command, loaded (help, completion scripts). */
export async function allCommands(): Promise<[string, K3Command<any>][]> {
  return await Promise.all(Object.entries(COMMANDS).map(async ([n, load]) => [n, await load()] as [string, K3Command<any>]));
}
