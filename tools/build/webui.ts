// Builds the chat page k3 serve answers at / (src/webui/) into ONE self-contained file,
// dist/webui/page.txt: the HTML with its CSS and its script (the page's code, marked and DOMPurify,
// bundled and minified by Bun) inline, so the binary embeds it (src/server/webui.ts imports it as
// text) and the page needs nothing from the network. Run by `npm run build` (before the CLI).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
const SRC = join(ROOT, "src", "webui");
export const PAGE_FILE = join(ROOT, "dist", "webui", "page.txt");

export async function buildPage(): Promise<string> {
  const out = await Bun.build({ entrypoints: [join(SRC, "app.ts")], target: "browser", format: "iife", minify: true });
  if (!out.success) throw new Error(`building the page failed:\n${out.logs.map(String).join("\n")}`);
  // Inline: a "</script" inside the bundle's strings would end the element early.
  const js = (await out.outputs[0]!.text()).replaceAll("</script", "<\\/script");
  const css = readFileSync(join(SRC, "style.css"), "utf8");
  const html = readFileSync(join(SRC, "index.html"), "utf8");
  return html.replace("/*K3_STYLE*/", () => css).replace("/*K3_SCRIPT*/", () => js);
}

if (import.meta.main) {
  const page = await buildPage();
  mkdirSync(join(ROOT, "dist", "webui"), { recursive: true });
  writeFileSync(PAGE_FILE, page);
  console.error(`dist/webui/page.txt: ${(page.length / 1024).toFixed(1)} KiB (${(Bun.gzipSync(page).length / 1024).toFixed(1)} KiB gzipped)`);
}
