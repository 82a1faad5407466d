// Optional API key. The comparison is constant time: both sides are hashed to 32-byte SHA-256
// digests first, so timingSafeEqual always sees equal lengths and the time taken says nothing
// about how many leading characters (or what length) a guess got right.
import { createHash, timingSafeEqual } from "node:crypto";
import { ApiError } from "./errors.ts";

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

export function apiKeyChecker(key: string | undefined): (req: Request) => void {
  if (key === undefined || key === "") return () => {};
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
