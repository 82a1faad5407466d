// What every route of one server shares: the engine and its sessions, the queue, the names
// the model answers to, the body reader, and the counters behind /k3/stats and /metrics.
import type { Engine } from "../engine.ts";
import { log } from "../log.ts";
import type { AccessLog } from "./access-log.ts";
import type { BodyReader } from "./body.ts";
import type { ModelNames } from "./models.ts";
import type { GenerationQueue } from "./queue.ts";
import type { SessionPool } from "./sessions.ts";
import { parseJsonObject } from "./validate.ts";

/** One finished generation, kept for /k3/stats (the last RECENT of them). */
export interface GenerationRecord {
  id: string;
  kind: "chat" | "completion";
  finish_reason: string;
  prompt_tokens: number;
  cached_tokens: number;
  completion_tokens: number;
  max_tokens: number;
  ms: number;
}
const RECENT = 64;

/** Counters since the server started. */
export class ServerCounters {
  requests = 0;
  generations = 0;
  cancelled = 0;
  errors = 0;
  /** Answers by "route status" (route: the matched route's pattern, or "other"). */
  readonly responses = new Map<string, number>();
  /** Generations by engine finish reason (stop, length, context, cancelled, tool_calls). */
  readonly finishes = new Map<string, number>();
  readonly tokens = { prompt: 0, cached: 0, generated: 0 };
  /** Most recent last. */
  readonly recent: GenerationRecord[] = [];

  answered(route: string, status: number): void {
    const key = `${route} ${status}`;
    this.responses.set(key, (this.responses.get(key) ?? 0) + 1);
  }

  generated(r: GenerationRecord): void {
    this.generations++;
    if (r.finish_reason === "cancelled") this.cancelled++;
    this.finishes.set(r.finish_reason, (this.finishes.get(r.finish_reason) ?? 0) + 1);
    this.tokens.prompt += r.prompt_tokens;
    this.tokens.cached += r.cached_tokens;
    this.tokens.generated += r.completion_tokens;
    this.recent.push(r);
    if (this.recent.length > RECENT) this.recent.shift();
    log.debug(`${r.id}: ${r.kind} ${r.prompt_tokens}+${r.completion_tokens} tokens, ${r.finish_reason}, ${r.ms.toFixed(0)} ms`);
  }
}

/** What a request gets for the fields it leaves out (docs/SERVER.md, "Defaults"). */
export interface RequestDefaults {
  /** `--temperature`, else the model folder's generation_config.json, else 1.0. */
  temperature: number;
  /** Reasoning tokens of a chat reply: a number, null = no limit, undefined = half its max_tokens. */
  reasoningBudget: number | null | undefined;
}

export interface ServerContext {
  engine: Engine;
  /** One session per parallel slot: a request that continues one feeds only its new tokens. */
  sessions: SessionPool;
  /** At most engine.parallel generations run at once; the rest wait here. */
  queue: GenerationQueue;
  names: ModelNames;
  bodies: BodyReader;
  counters: ServerCounters;
  defaults: RequestDefaults;
  /** One line per request on stderr (or none). */
  access: AccessLog;
  /** Whether GET / serves the chat page (--no-webui: 404). */
  webui: boolean;
  /** The served model is k3's built-in demo (the page says so). */
  demo: boolean;
  /** Unix seconds at start (the model's `created`). */
  created: number;
  /** Lifts the idle timeout of a request that may wait in the queue and then generate for minutes. */
  holdOpen(req: Request): void;
}

/** The request's body as a JSON object (received within the body limits), or an ApiError. */
export async function readJson(ctx: ServerContext, req: Request): Promise<Record<string, unknown>> {
  return parseJsonObject(await ctx.bodies.text(req));
}
