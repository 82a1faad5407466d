// The route table: each path pattern and its handlers by method. HEAD is answered by the GET
// handler (Bun sends the headers without the body); a known path with another method is 405.
import { batchStatsJson, draftJson, engineStatsJson, prefixCacheJson } from "../report.ts";
import type { ServerContext } from "./context.ts";
import { chat, completion } from "./generation.ts";
import { METRICS_CONTENT_TYPE, metricsText } from "./metrics.ts";
import { detokenize, tokenize } from "./tokens.ts";
import { chatPage } from "./webui.ts";

type Handler = (ctx: ServerContext, req: Request, param: string | undefined) => Response | Promise<Response>;

export interface Route {
  GET?: Handler;
  POST?: Handler;
  /** Answered without the API key (load balancers and probes). */
  public?: boolean;
}

// `trunk`: which trunk weights answer ("bf16": the release's, from the shards; "exact": packed,
// the same bits; "int8"/"int4": packed, lossy).
// `draft`: the draft model speculation may verify (--draft; null without one; never changes output).
// `k3`: what a client (the chat page) can offer its user: whether this is the demo model, the
// defaults a request gets, and the speculation a request may choose (docs/SERVER.md).
const modelJson = (ctx: ServerContext) => ({
  id: ctx.names.id,
  object: "model",
  created: ctx.created,
  owned_by: "k3",
  max_model_len: ctx.engine.context,
  trunk: ctx.engine.trunk,
  draft: draftJson(ctx.engine.draft),
  k3: {
    demo: ctx.demo,
    parallel: ctx.engine.parallel,
    speculation: {
      setting: ctx.engine.speculate,
      max_drafts: ctx.engine.maxDrafts,
      drafters: ctx.engine.drafters,
      // Every batched generation speculates, several sessions' drafts in one step (docs/SERVER.md, "How
      // a step is filled"): a request's own `speculate` is honoured whenever the engine has drafts.
      per_request: ctx.engine.maxDrafts > 0,
    },
    defaults: { temperature: ctx.defaults.temperature, reasoning_budget: ctx.defaults.reasoningBudget === undefined ? "half of max_tokens" : ctx.defaults.reasoningBudget },
  },
});

export const ROUTES: Record<string, Route> = {
  // The chat page: public, since it holds nothing; every API call it makes carries the key.
  "/": { public: true, GET: chatPage },
  "/health": {
    public: true,
    GET: (ctx) => Response.json({ status: "ok", model: ctx.names.id, busy: ctx.queue.running > 0, running: ctx.queue.running, slots: ctx.queue.slots, waiting: ctx.queue.waiting }),
  },
  "/v1/models": { GET: (ctx) => Response.json({ object: "list", data: [modelJson(ctx)] }) },
  "/v1/models/{id}": {
    GET: (ctx, _req, id) => {
      if (id === undefined || !ctx.names.serves(id)) throw ctx.names.notFound(id ?? "");
      return Response.json(modelJson(ctx));
    },
  },
  "/v1/chat/completions": { POST: chat },
  "/v1/completions": { POST: completion },
  "/tokenize": { POST: tokenize },
  "/detokenize": { POST: detokenize },
  "/metrics": { GET: (ctx) => new Response(metricsText(ctx), { headers: { "Content-Type": METRICS_CONTENT_TYPE } }) },
  "/k3/stats": {
    GET: (ctx) => {
      const c = ctx.counters;
      return Response.json({
        model: ctx.names.id,
        draft: draftJson(ctx.engine.draft),
        engine: engineStatsJson(ctx.engine.stats()),
        server: {
          requests: c.requests,
          generations: c.generations,
          cancelled: c.cancelled,
          errors: c.errors,
          queue: { running: ctx.queue.running, slots: ctx.queue.slots, waiting: ctx.queue.waiting, capacity: ctx.queue.capacity },
          bodies: { receiving: ctx.bodies.counters.receiving, too_many: ctx.bodies.counters.tooMany, timed_out: ctx.bodies.counters.timedOut, too_large: ctx.bodies.counters.tooLarge },
        },
        batch: batchStatsJson(ctx.engine.batchStats()),
        prefix_cache: prefixCacheJson(ctx.engine.prefixStats(), ctx.engine.batchStats()),
        recent: c.recent,
      });
    },
  },
};

/** The route a path names, with its pattern (the metrics label) and the `{id}` it carries. */
export function matchRoute(path: string): { pattern: string; route: Route; param?: string } | undefined {
  const exact = ROUTES[path];
  if (exact) return { pattern: path, route: exact };
  const prefix = "/v1/models/";
  if (path.startsWith(prefix)) {
    let id: string;
    try {
      id = decodeURIComponent(path.slice(prefix.length));
    } catch {
      id = path.slice(prefix.length); // malformed %-escapes: an id no model has
    }
    return { pattern: "/v1/models/{id}", route: ROUTES["/v1/models/{id}"]!, param: id };
  }
  return undefined;
}

/** The methods a route answers, for Allow headers. */
export const allowed = (r: Route) => [...(r.GET ? ["GET", "HEAD"] : []), ...(r.POST ? ["POST"] : []), "OPTIONS"].join(", ");
