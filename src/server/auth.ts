// Optional API key. The comparison is constant time: both sides are hashed to 32-byte SHA-256
// digests first, so timingSafeEqual always sees equal lengths and the time taken says nothing
// about how many leading characters (or what length) a guess got right.
import { createHash, timingSafeEqual } from "node:crypto";
import { K3Error } from "../errors.ts";
import { ApiError } from "./errors.ts";

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

/**
 * Refuse, at start, a key no client could ever send (`source` names where it came from:
 * "--api-key", "K3_API_KEY"). Empty: it would read as "no key" and switch authentication off.
 * Surrounding whitespace: HTTP trims it from the Authorization header. Control characters and
 * non-ASCII: not sendable in a header as the same bytes. What is left is printable ASCII.
 */
export function checkApiKey(key: string, source: string): void {
  const why =
    key === "" ? "is empty (that would switch authentication off); unset it to serve without a key"
    : key.trim() !== key ? "has spaces or tabs around it, which HTTP strips from the Authorization header, so no request could match"
    : /[\x00-\x1f\x7f]/.test(key) ? "holds a control character, which no HTTP header can carry"
    : /[^\x20-\x7e]/.test(key) ? "holds non-ASCII characters, which HTTP headers do not carry as the same text"
    : undefined;
  if (why) throw new K3Error("USAGE", `${source}: the API key ${why}`, ["use printable ASCII without surrounding spaces, e.g. a random hex string"]);
}

export function apiKeyChecker(key: string | undefined): (req: Request) => void {
  if (key === undefined) return () => {};
  checkApiKey(key, "apiKey");
  const want = digest(key);
  return (req) => {
    const header = req.headers.get("authorization") ?? "";
    const m = /^Bearer\s+(.+)$/i.exec(header.trim());
    const got = digest(m ? m[1]! : "");
    if (!m || !timingSafeEqual(got, want)) {
      throw new ApiError(401, "invalid or missing API key (send Authorization: Bearer <key>)", "authentication_error", null, "invalid_api_key", {
        "WWW-Authenticate": "Bearer",
      });
    }
  };
}
