// GET /metrics: the server's counters in the Prometheus text exposition format (version 0.0.4),
// for people who run the server under monitoring. Counters count since the server started; the
// engine's I/O counters since the engine opened (read directly from engine.stats()).
import type { DeviceStats, WeightStats } from "../engine.ts";
import type { ServerContext } from "./context.ts";

type Sample = [labels: Record<string, string>, value: number];

const escapeLabel = (v: string) => v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");

function family(out: string[], name: string, type: "counter" | "gauge", help: string, samples: Sample[] | number): void {
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  for (const [labels, value] of typeof samples === "number" ? ([[{}, samples]] as Sample[]) : samples) {
    const l = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
    out.push(`${name}${l.length ? `{${l.join(",")}}` : ""} ${Number.isFinite(value) ? value : 0}`);
  }
}

/** Per device the engine reads from (docs/STREAMING.md "Routing"): rates follow from bytes and busy time. */
function deviceFamilies(out: string[], io: WeightStats): void {
  const per = (f: (d: DeviceStats) => number): Sample[] => io.devices.map((d) => [{ device: d.name }, f(d)]);
  family(out, "k3_device_bytes_read_total", "counter", "Weight bytes read from each device (hedges and retries included).", per((d) => d.bytesRead));
  family(out, "k3_device_reads_total", "counter", "Reads served by each device.", per((d) => d.reads));
  family(out, "k3_device_busy_seconds_total", "counter", "Time each device had a read queued or running.", per((d) => d.busyMs / 1000));
  family(out, "k3_device_errors_total", "counter", "Reads that failed on each device.", per((d) => d.errors));
  family(out, "k3_device_retries_total", "counter", "Reads each device served after another copy failed.", per((d) => d.retries));
  family(out, "k3_device_hedges_total", "counter", "Late reads re-issued on each device, and of them the ones that answered first.", [
    ...io.devices.map((d): Sample => [{ device: d.name, outcome: "issued" }, d.hedgesIssued]),
    ...io.devices.map((d): Sample => [{ device: d.name, outcome: "won" }, d.hedgesWon]),
  ]);
}

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export function metricsText(ctx: ServerContext): string {
  const c = ctx.counters;
  const io = ctx.engine.stats();
  const out: string[] = [];
  const responses: Sample[] = [...c.responses].map(([key, n]) => {
    const [route, code] = key.split(" ") as [string, string];
    return [{ route, code }, n];
  });
  family(out, "k3_requests_total", "counter", "HTTP requests answered, by route and status code.", responses);
  family(out, "k3_generations_total", "counter", "Generations run, by how they ended.", [...c.finishes].map(([reason, n]) => [{ finish_reason: reason }, n] as Sample));
  family(out, "k3_prompt_tokens_total", "counter", "Prompt tokens of all generations (reused ones included).", c.tokens.prompt);
  family(out, "k3_prompt_tokens_cached_total", "counter", "Prompt tokens served from the session instead of being fed again.", c.tokens.cached);
  family(out, "k3_generated_tokens_total", "counter", "Tokens generated.", c.tokens.generated);
  family(out, "k3_bytes_read_total", "counter", "Weight bytes read from disk, by kind.", [
    [{ kind: "trunk" }, io.trunkBytesRead],
    [{ kind: "expert" }, io.expertBytesRead],
  ]);
  family(out, "k3_reads_total", "counter", "Read requests issued for weights.", io.reads);
  family(out, "k3_expert_requests_total", "counter", "Expert weights the router asked for.", io.expertRequests);
  family(out, "k3_expert_hits_total", "counter", "Expert requests served from the RAM cache.", io.expertHits);
  family(out, "k3_io_wait_seconds_total", "counter", "Time compute waited for weight reads.", io.ioWaitMs / 1000);
  deviceFamilies(out, io);
  family(out, "k3_queue_running", "gauge", "Generations running (at most k3_parallel_sessions, batched in the engine's steps).", ctx.queue.running);
  family(out, "k3_parallel_sessions", "gauge", "Generations that may run at once (--parallel).", ctx.queue.slots);
  family(out, "k3_queue_waiting", "gauge", "Requests waiting for the engine.", ctx.queue.waiting);
  family(out, "k3_queue_capacity", "gauge", "Requests allowed to wait (--queue).", ctx.queue.capacity);
  family(out, "k3_http_bodies_receiving", "gauge", "Request bodies being received now.", ctx.bodies.counters.receiving);
  family(out, "k3_http_refused_total", "counter", "Requests refused while receiving their body, by reason.", [
    [{ reason: "too_many_connections" }, ctx.bodies.counters.tooMany],
    [{ reason: "request_timeout" }, ctx.bodies.counters.timedOut],
    [{ reason: "request_too_large" }, ctx.bodies.counters.tooLarge],
  ]);
  const b = ctx.engine.batchStats();
  family(out, "k3_batch_steps_total", "counter", "Forward passes run by the batch scheduler.", b.steps);
  family(out, "k3_batch_step_sessions_total", "counter", "Forward passes by the number of sessions they carried.", b.sessionsPerStep.flatMap((n, k) => (k === 0 ? [] : [[{ sessions: String(k) }, n] as Sample])));
  family(out, "k3_batch_tokens_total", "counter", "Tokens fed through batched passes, by kind.", [
    [{ kind: "decode" }, b.decodeTokens],
    [{ kind: "prefill" }, b.prefillTokens],
    [{ kind: "draft" }, b.draftTokens],
  ]);
  family(out, "k3_batch_verify_segments_total", "counter", "Verify segments (one session's pending token and drafts) batched passes carried.", b.verifySegments);
  family(out, "k3_batch_drafts_accepted_total", "counter", "Drafted tokens verified in batched passes that their generations kept.", b.acceptedDrafts);
  family(out, "k3_batch_shared_verify_steps_total", "counter", "Batched passes that verified drafts of two sessions or more.", b.sharedVerifySteps);
  const p = ctx.engine.prefixStats();
  if (p) {
    family(out, "k3_prefix_cache_hits_total", "counter", "Prompts that restored a cached prefix, by tier.", [
      [{ tier: "ram" }, p.ramHits],
      [{ tier: "disk" }, p.diskHits],
    ]);
    family(out, "k3_prefix_cache_lookups_total", "counter", "Prompts looked up in the prefix cache.", p.lookups);
    family(out, "k3_prefix_cache_tokens_saved_total", "counter", "Prompt tokens restored from the prefix cache instead of fed.", p.tokensSaved);
    family(out, "k3_prefix_cache_bytes", "gauge", "Bytes the prefix cache holds, by tier.", [
      [{ tier: "ram" }, p.ramBytes],
      [{ tier: "disk" }, p.diskBytes],
    ]);
    family(out, "k3_prefix_cache_dropped_total", "counter", "Prefix cache entries dropped because they failed a check.", p.dropped);
    family(out, "k3_prefix_cache_write_failures_total", "counter", "Prefix cache disk writes that failed (full disk, …).", p.writeFailures);
  }
  family(out, "k3_context_tokens", "gauge", "Context limit of the engine, tokens.", ctx.engine.context);
  family(out, "k3_peak_rss_bytes", "gauge", "Peak resident set size of the process.", io.peakRssBytes);
  return out.join("\n") + "\n";
}
