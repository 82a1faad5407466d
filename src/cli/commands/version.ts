// `k3 version`: the version string, as `k3 --version` prints it (one line, for scripts).
import { defineCommand } from "../command.ts";
import { VERSION } from "../../version.ts";

export default defineCommand({
  meta: { name: "version", description: "Print k3's version" },
  args: {},
  help: { examples: [["k3 version", `prints ${VERSION}`]] },
  run() {
    process.stdout.write(`${VERSION}\n`);
  },
});
