// `k3 serve`: an OpenAI-compatible HTTP server on one engine (docs/SERVER.md).
//
// This file is the HTTP edge: it binds, finds the route (routes.ts), applies what every request
// shares (API key, CORS, HEAD, body limits), counts answers, and turns every failure into an
// OpenAI-shaped error. JSON lives only in this layer: requests are parsed into native options
// (validate.ts) and answered in OpenAI's shapes (openai.ts). Up to engine.parallel generations run
// at once, batched in the engine's steps; the others wait in the FIFO queue (queue.ts). The server
// keeps a session per slot (sessions.ts), so a chat that continues an earlier one only feeds its
// new tokens (prefix reuse in conversation.ts, and the engine's prefix cache).
import type { Engine } from "../engine.ts";
import { K3Error } from "../errors.ts";
import { log } from "../log.ts";
import { AccessLog, type LogFormat } from "./access-log.ts";
import { apiKeyChecker } from "./auth.ts";
import { BodyReader, DEFAULT_BODY_LIMITS, DRAIN_BYTES, type BodyCounters, type BodyLimits } from "./body.ts";
import { ServerCounters, type GenerationRecord, type ServerContext } from "./context.ts";
import { CorsPolicy } from "./cors.ts";
import { ApiError, errorResponse, toApiError } from "./errors.ts";
import { ModelNames } from "./models.ts";
import { GenerationQueue } from "./queue.ts";
import { SessionPool } from "./sessions.ts";
import { allowed, matchRoute } from "./routes.ts";

export type { GenerationRecord } from "./context.ts";

export interface ServerOptions {
  /** Model id reported by /v1/models and accepted (any case) in requests. */
  modelName: string;
  /** More names requests may use for the model (any case). */
  aliases?: string[];
  host?: string;
  /** 0 = a free port. */
  port?: number;
  apiKey?: string;
  /** Requests allowed to wait while one generates (default 16). */
  queue?: number;
  /** Origins allowed to call from a browser ("*" = any); default none. */
  cors?: string[];
  /** Bounds on receiving request bodies (default DEFAULT_BODY_LIMITS). */
  bodies?: Partial<BodyLimits>;
  /** Temperature of a request that sends none (default: the model folder's
   *  generation_config.json, else DEFAULT_TEMPERATURE). */
  temperature?: number;
  /** Reasoning budget of a chat request that sends none: tokens, null = no limit (default: half
   *  of the request's max_tokens). */
  reasoningBudget?: number | null;
  /** The chat page at GET / (default true). */
  webui?: boolean;
  /** The model is k3's built-in demo (/v1/models says so, and the page shows it). */
  demo?: boolean;
  /** One line per request on stderr (default "off"; `k3 serve` logs "text" unless --log-format). */
  accessLog?: LogFormat;
}

/** OpenAI's default temperature (and k3 chat's), for a model folder that names none. */
export const DEFAULT_TEMPERATURE = 1.0;

export interface K3Server {
  url: string;
  port: number;
  queue: GenerationQueue;
  /** Most recent last. */
  recent: GenerationRecord[];
  /** Bodies being received now, and requests refused while receiving one. */
  bodies: BodyCounters;
  /** Stop listening, end the running generation at its next token, refuse the waiting ones, and
   *  close the server's sessions (their C memory is freed; the engine stays open: its owner's). */
  stop(): Promise<void>;
}

/** Bun's idle timeout is in whole seconds, at most 255. */
const idleSeconds = (ms: number) => Math.min(255, Math.ceil(ms / 1000) + 1);

export function startServer(engine: Engine, opts: ServerOptions): K3Server {
  // An empty host would bind every interface (while a log line says the host it was given).
  if (opts.host === "") throw new K3Error("USAGE", "the host to listen on is empty: give an address (127.0.0.1: this machine only; 0.0.0.0: every interface)");
  const cors = new CorsPolicy(opts.cors);
  const checkKey = apiKeyChecker(opts.apiKey);
  const limits = { ...DEFAULT_BODY_LIMITS, ...opts.bodies };
  const edge: Edge = { cors, checkKey, bodyTimeoutMs: limits.timeoutMs };
  let server: ReturnType<typeof Bun.serve> | undefined;
  // A generation may wait in the queue and then take minutes: no idle cut-off for it.
  const ctx = serverContext(engine, opts, limits, (req) => server?.timeout(req, 0));

  server = Bun.serve({
    hostname: opts.host ?? "127.0.0.1",
    port: opts.port ?? 8080,
    // Bun's own cut-off (an answer without a body, then a reset) only past what body.ts drains.
    maxRequestBodySize: Math.max(DRAIN_BYTES, limits.maxBytes),
    async fetch(req, srv) {
      ctx.counters.requests++;
      // An HTTP/1.0 request without Host reaches us with a bare path as its URL.
      const path = new URL(req.url, "http://localhost").pathname.replace(/\/+$/, "") || "/";
      ctx.access.begin(req, path);
      let res: Response;
      try {
        res = await route(ctx, edge, req, path, srv);
      } catch (err) {
        res = failure(ctx, err, req, path);
      }
      ctx.counters.answered(matchRoute(path)?.pattern ?? "other", res.status);
      for (const [k, v] of Object.entries(cors.headers(req))) res.headers.set(k, v);
      ctx.access.answered(req, res.status, res.headers.get("content-type")?.startsWith("text/event-stream") ?? false);
      return res;
    },
    // Last resort: anything that escapes fetch still gets an OpenAI-shaped 500, never a crash.
    error(err) {
      ctx.counters.errors++;
      log.error(`unhandled: ${err.stack ?? err.message}`);
      return errorResponse(toApiError(err));
    },
  });

  let stopped: Promise<void> | undefined;
  const host = server.hostname?.includes(":") ? `[${server.hostname}]` : server.hostname;
  return {
    url: `http://${host}:${server.port}`,
    port: server.port!,
    queue: ctx.queue,
    recent: ctx.counters.recent,
    bodies: ctx.bodies.counters,
    stop() {
      stopped ??= (async () => {
        // Waiters are answered 503, running generations end at their next token; no new
        // connections meanwhile. Then the sessions are freed; once every answer is out, whatever is
        // still open (a body still arriving) is cut rather than waited for.
        const idle = ctx.queue.close();
        void server!.stop(false);
        await idle;
        ctx.sessions.close();
        while (server!.pendingRequests > ctx.bodies.counters.receiving) await new Promise((r) => setImmediate(r));
        await server!.stop(true);
      })();
      return stopped;
    },
  };
}

/** Everything a route may use: the engine, its sessions and queue, names, bodies, counters, defaults. */
function serverContext(engine: Engine, opts: ServerOptions, limits: BodyLimits, holdOpen: ServerContext["holdOpen"]): ServerContext {
  return {
    engine,
    sessions: new SessionPool(engine, engine.parallel),
    queue: new GenerationQueue(opts.queue ?? 16, engine.parallel),
    names: new ModelNames(opts.modelName, opts.aliases),
    bodies: new BodyReader(limits),
    counters: new ServerCounters(),
    defaults: {
      // A model folder's generation_config.json that is wrong is refused here, at start.
      temperature: opts.temperature ?? engine.generationDefaults().temperature ?? DEFAULT_TEMPERATURE,
      reasoningBudget: opts.reasoningBudget,
    },
    access: new AccessLog(opts.accessLog ?? "off"),
    webui: opts.webui ?? true,
    demo: opts.demo ?? false,
    created: Math.floor(Date.now() / 1000),
    holdOpen,
  };
}

/** What every request passes through before its route. */
interface Edge {
  cors: CorsPolicy;
  checkKey: (req: Request) => void;
  bodyTimeoutMs: number;
}

/** Preflight, API key, route and method; then the route's handler. */
async function route(ctx: ServerContext, edge: Edge, req: Request, path: string, srv: Bun.Server<unknown>): Promise<Response> {
  const preflight = edge.cors.preflight(req);
  if (preflight) return preflight;
  const m = matchRoute(path);
  if (!m?.route.public) edge.checkKey(req);
  if (!m) throw new ApiError(404, `no route for ${req.method} ${path}`, "not_found_error", null, "unknown_route");
  if (req.method === "OPTIONS") return new Response(null, { status: 204, headers: { Allow: allowed(m.route) } });
  const handler = req.method === "GET" || req.method === "HEAD" ? m.route.GET : req.method === "POST" ? m.route.POST : undefined;
  if (!handler) {
    const takes = m.route.POST ? "POST" : "GET";
    throw new ApiError(405, `${path} takes ${takes}`, "invalid_request_error", null, "method_not_allowed", { Allow: allowed(m.route) });
  }
  // Receiving the body is bounded by its own deadline (body.ts), which must fire before Bun's
  // idle timeout would cut the connection without an answer.
  if (req.method === "POST") srv.timeout(req, idleSeconds(edge.bodyTimeoutMs));
  return handler(ctx, req, m.param);
}

/** A failure → its OpenAI-shaped answer; ours (5xx but a full queue) are counted and logged. */
function failure(ctx: ServerContext, err: unknown, req: Request, path: string): Response {
  const e = toApiError(err);
  if (e.status >= 500 && e.status !== 503) {
    ctx.counters.errors++;
    log.error(`${req.method} ${path}: ${e.message}`);
  } else if (e.status === 499) log.debug(`${req.method} ${path}: ${e.message}`);
  return errorResponse(e);
}
