// One line per request on stderr, when the answer is complete: method, path, status, tokens (a
// generation's prompt + completion), time. `--log-format text` (the default: a `k3: ` line like
// every other message) or `json` (one JSON object per line, for log collectors). A streamed
// answer is logged when its stream ends (its status is the 200 its headers carried; `finish`
// says how the generation ended), so its time and tokens are the whole generation's.
import { log } from "../log.ts";

export const LOG_FORMATS = ["text", "json"] as const;
export type LogFormat = (typeof LOG_FORMATS)[number] | "off";

interface Entry {
  method: string;
  path: string;
  t0: number;
  status?: number;
  prompt?: number;
  completion?: number;
  cached?: number;
  finish?: string;
  /** The stream ended (possibly before the handler's answer reached the edge). */
  ended?: boolean;
  done?: boolean;
}

export class AccessLog {
  private readonly entries = new WeakMap<Request, Entry>();

  constructor(
    private readonly format: LogFormat,
    private readonly write: (line: string) => void = (line) => process.stderr.write(line),
  ) {}

  begin(req: Request, path: string): void {
    if (this.format !== "off") this.entries.set(req, { method: req.method, path, t0: performance.now() });
  }

  /** What the request's generation did (called once it has run). */
  generated(req: Request, g: { prompt: number; completion: number; cached: number; finish: string }): void {
    const e = this.entries.get(req);
    if (e) Object.assign(e, { prompt: g.prompt, completion: g.completion, cached: g.cached, finish: g.finish });
  }

  /** The handler answered with `status`; a stream (an SSE generation) is logged later, by `ended`. */
  answered(req: Request, status: number, stream: boolean): void {
    const e = this.entries.get(req);
    if (!e) return;
    e.status = status;
    if (!stream || e.ended) this.line(e);
  }

  /** A stream has sent its last event (or stopped). */
  ended(req: Request): void {
    const e = this.entries.get(req);
    if (!e) return;
    e.ended = true;
    if (e.status !== undefined) this.line(e);
  }

  private line(e: Entry): void {
    if (e.done) return;
    e.done = true;
    const ms = Math.round(performance.now() - e.t0);
    const status = e.status ?? 200;
    if (this.format === "json") {
      const tokens = e.prompt === undefined ? {} : { prompt_tokens: e.prompt, completion_tokens: e.completion, cached_tokens: e.cached, finish_reason: e.finish };
      this.write(`${JSON.stringify({ time: new Date().toISOString(), method: e.method, path: e.path, status, ...tokens, ms })}\n`);
    } else {
      const tokens = e.prompt === undefined ? "" : ` ${e.prompt}+${e.completion} tokens (${e.cached} cached, ${e.finish})`;
      log.info(`${e.method} ${e.path} ${status}${tokens} ${ms} ms`);
    }
  }
}
