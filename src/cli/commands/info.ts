import { defineCommand } from "citty";
export default defineCommand({
  meta: { name: "info", description: "Describe a checkpoint: architecture, layer map, byte census, layout" },
  args: { dir: { type: "positional", required: false, description: "model directory" } },
  run() {
    throw new Error("not implemented yet");
  },
});
