// Opt-in CORS (`--cors ORIGIN`, repeatable, or `--cors '*'`), for browser pages on another origin.
//
// Without --cors no response carries CORS headers, so browsers keep other origins out. With it:
//   - a response to a request whose Origin is allowed carries Access-Control-Allow-Origin (the
//     origin itself, with `Vary: Origin`, or `*`) and exposes Retry-After;
//   - a preflight (OPTIONS with Origin and Access-Control-Request-Method) from an allowed origin is
//     answered 204 with the methods, the headers the browser asked for (the OpenAI SDKs send their
//     own x-stainless-* headers besides Authorization), and a max age; it needs no API key, as
//     browsers never send credentials on a preflight;
//   - a preflight from any other origin is 403 with an error body saying how to allow it.
import { K3Error } from "../errors.ts";
import { ApiError } from "./errors.ts";

const METHODS = "GET, HEAD, POST, OPTIONS";

/** K3Error USAGE unless every entry is "*" or an origin (scheme://host[:port], no path): what a
 *  browser sends in its Origin header, so anything else could never match. */
export function checkOrigins(origins: string[]): void {
  for (const o of origins) {
    if (o !== "*" && !/^https?:\/\/[^/\s?#]+$/.test(o))
      throw new K3Error("USAGE", `--cors must be '*' or an origin such as https://app.example.com (scheme://host[:port], no path), got "${o}"`);
  }
}
const MAX_AGE_S = "600";

export class CorsPolicy {
  private readonly any: boolean;
  private readonly origins: Set<string>;

  /** `origins`: "*" or full origins (see checkOrigins). */
  constructor(origins: string[] = []) {
    checkOrigins(origins);
    this.any = origins.includes("*");
    this.origins = new Set(origins.map((o) => o.toLowerCase()));
  }

  get enabled(): boolean {
    return this.any || this.origins.size > 0;
  }

  private allows(origin: string | null): origin is string {
    return origin !== null && (this.any || this.origins.has(origin.toLowerCase()));
  }

  /** Headers to add to the response of `req` (none when its origin is not allowed). */
  headers(req: Request): Record<string, string> {
    const origin = req.headers.get("origin");
    if (!this.allows(origin)) return {};
    return this.any
      ? { "Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": "Retry-After" }
      : { "Access-Control-Allow-Origin": origin, Vary: "Origin", "Access-Control-Expose-Headers": "Retry-After" };
  }

  /** The answer to a preflight request, or undefined when `req` is not one. */
  preflight(req: Request): Response | undefined {
    const origin = req.headers.get("origin");
    const method = req.headers.get("access-control-request-method");
    if (req.method !== "OPTIONS" || origin === null || method === null) return undefined;
    if (!this.allows(origin)) {
      const how = this.enabled ? `add --cors ${origin}` : `start k3 serve with --cors ${origin}`;
      throw new ApiError(403, `cross-origin requests from ${origin} are not allowed (${how})`, "invalid_request_error", null, "cors_origin_not_allowed");
    }
    const asked = req.headers.get("access-control-request-headers");
    return new Response(null, {
      status: 204,
      headers: {
        ...this.headers(req),
        "Access-Control-Allow-Methods": METHODS,
        ...(asked ? { "Access-Control-Allow-Headers": asked } : {}),
        "Access-Control-Max-Age": MAX_AGE_S,
        Vary: this.any ? "Access-Control-Request-Headers" : "Origin, Access-Control-Request-Headers",
      },
    });
  }
}
