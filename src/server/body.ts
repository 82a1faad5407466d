// Receiving request bodies with bounds, so a slow, huge or never-finishing upload costs the server
// one bounded slot for a bounded time and gets a proper answer:
//   - at most `maxConcurrent` bodies are received at once; one more is answered 503 at once and
//     its connection closed (requests without a body, /health included, are never refused);
//   - a body must arrive whole within `timeoutMs` (total, not idle: a client trickling one byte a
//     second is cut too) → 408, connection closed;
//   - a body over `maxBytes` → 413. It is still read (and thrown away, never kept) up to
//     DRAIN_BYTES, because a client that is still sending when the server closes gets a
//     connection reset instead of the 413 (Python's http.client: BrokenPipeError);
//   - a client that goes away mid-upload is not an error of ours (499, not logged as an error).
import { ApiError, clientGone } from "./errors.ts";

export interface BodyLimits {
  /** Largest body accepted, bytes. */
  maxBytes: number;
  /** Time allowed to receive a whole body, ms. */
  timeoutMs: number;
  /** Bodies received at once. */
  maxConcurrent: number;
}

/** Default 32 MiB: a prompt filling a 256K-token context, sent as JSON with every character
 *  \u-escaped, is well under it; a body this size parses in tens of milliseconds. */
export const DEFAULT_BODY_LIMITS: BodyLimits = { maxBytes: 32 << 20, timeoutMs: 60_000, maxConcurrent: 64 };

/** Oversized bodies up to this size are drained so their client reads the 413; larger ones are
 *  cut at once (Bun's own limit, set to this, answers them). */
export const DRAIN_BYTES = 1 << 30;

/** Counters for /metrics and /k3/stats. */
export interface BodyCounters {
  receiving: number;
  tooMany: number;
  timedOut: number;
  tooLarge: number;
}

export class BodyReader {
  readonly counters: BodyCounters = { receiving: 0, tooMany: 0, timedOut: 0, tooLarge: 0 };

  constructor(readonly limits: BodyLimits) {}

  /** The body as UTF-8 text, or an ApiError (503 / 408 / 413 / 499). */
  async text(req: Request): Promise<string> {
    const c = this.counters;
    if (c.receiving >= this.limits.maxConcurrent) {
      c.tooMany++;
      throw new ApiError(503, `server busy: ${c.receiving} requests are already sending their bodies`, "overloaded_error", null, "too_many_connections", {
        "Retry-After": "1",
        Connection: "close",
      });
    }
    c.receiving++;
    try {
      return await this.receive(req);
    } finally {
      c.receiving--;
    }
  }

  private async receive(req: Request): Promise<string> {
    const { maxBytes, timeoutMs } = this.limits;
    const declared = Number(req.headers.get("content-length") ?? NaN);
    if (!req.body) return "";
    const reader = req.body.getReader();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      reader.cancel().catch(() => {});
    }, timeoutMs);
    const chunks: Uint8Array[] = [];
    let received = 0;
    // A declared length over the limit is known to be refused: drain from the first byte.
    let draining = declared > maxBytes;
    try {
      for (;;) {
        let r: Awaited<ReturnType<typeof reader.read>>;
        try {
          r = await reader.read();
        } catch {
          if (timedOut) break;
          throw clientGone("while sending its body");
        }
        if (r.done || timedOut) break;
        received += r.value.byteLength;
        if (received > maxBytes) draining = true;
        if (draining) {
          chunks.length = 0;
          if (received > DRAIN_BYTES) break;
        } else chunks.push(r.value);
      }
    } finally {
      clearTimeout(timer);
    }
    if (timedOut) {
      this.counters.timedOut++;
      throw new ApiError(408, `the request body did not arrive within ${timeoutMs / 1000} s`, "invalid_request_error", null, "request_timeout", { Connection: "close" });
    }
    if (draining) {
      this.counters.tooLarge++;
      const size = Number.isFinite(declared) ? `${declared} bytes` : `more than ${maxBytes} bytes`;
      throw new ApiError(413, `the request body (${size}) is over the server's limit of ${maxBytes} bytes`, "invalid_request_error", null, "request_too_large", {
        Connection: "close",
      });
    }
    return Buffer.concat(chunks, received).toString("utf8");
  }
}
