// `k3 help [COMMAND]`: the same text as `k3 --help` / `k3 COMMAND --help`.
import { K3Error } from "../../errors.ts";
import { defineCommand } from "../command.ts";
import { renderCommandHelp, renderMainHelp } from "../help.ts";
import { allCommands, COMMANDS } from "../registry.ts";

export default defineCommand({
  meta: { name: "help", description: "Show help for k3 or for one command" },
  args: {
    command: { type: "positional", required: false, description: "the command to explain (default: list them all)" },
  },
  help: { examples: [["k3 help run", "every option of k3 run, with examples"]] },
  async run({ args }) {
    if (!args.command) {
      process.stdout.write(renderMainHelp(await allCommands()));
      return;
    }
    const load = COMMANDS[args.command];
    if (!load) throw new K3Error("USAGE", `unknown command "${args.command}"`, ["k3 help lists the commands"]);
    process.stdout.write(renderCommandHelp(args.command, await load()));
  },
});
