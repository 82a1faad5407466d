// GET /: the chat page (src/webui/, built by tools/build/webui.ts into one file the binary embeds).
// The page itself holds no data and needs no key: a browser cannot send a bearer header when it
// navigates, so the page asks for the key (kept in the browser's localStorage) and sends it with
// every API call it makes, which the API checks like any other client's. Its Content-Security-Policy
// lets only its own inline script (by hash) and its own origin run and connect: markdown that
// slipped past the sanitiser still could not run a script or send a byte elsewhere.
// `--no-webui`: 404, like any unknown route.
import { createHash } from "node:crypto";
import page from "../../dist/webui/page.txt" with { type: "text" };
import type { ServerContext } from "./context.ts";
import { ApiError } from "./errors.ts";

const hash = (s: string) => `'sha256-${createHash("sha256").update(s, "utf8").digest("base64")}'`;

let headers: Record<string, string> | undefined;

function pageHeaders(): Record<string, string> {
  if (!headers) {
    const scripts = [...page.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => hash(m[1]!));
    const styles = [...page.matchAll(/<style>([\s\S]*?)<\/style>/g)].map((m) => hash(m[1]!));
    headers = {
      "Content-Type": "text/html; charset=utf-8",
      "Content-Security-Policy": `default-src 'none'; script-src ${scripts.join(" ")}; style-src ${styles.join(" ")}; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
      "X-Content-Type-Options": "nosniff",
      "Referrer-Policy": "no-referrer",
      "Cache-Control": "no-cache",
    };
  }
  return headers;
}

export function chatPage(ctx: ServerContext): Response {
  if (!ctx.webui) throw new ApiError(404, "no route for GET / (the chat page is off: --no-webui)", "not_found_error", null, "unknown_route");
  return new Response(page, { headers: pageHeaders() });
}
