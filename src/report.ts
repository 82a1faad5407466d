// The numbers a user sees about a generation and an engine, built in one place so `k3 run
// --json`, `k3 chat --json`, `k3 bench --json`, the chat REPL's /stats, the server's `k3` object
// and GET /k3/stats carry the same fields under the same names: snake_case (as the OpenAI API
// writes its own), times in ms, bytes in bytes. The one-line summary on stderr is here too.
// Field meanings: docs/CLI.md ("Stats") and docs/CACHE.md (the counters).
import type { BatchStats, ComputeThreads, DeviceStats, DraftInfo, Engine, GenerationStats, PrefixCacheStats, SpeculationCounters, WeightStats } from "./engine.ts";
import { formatBytes } from "./format.ts";

const round2 = (x: number) => Math.round(x * 100) / 100;

/** I/O counters (a generation's, or an engine's since open); `wallMs` is the time they cover
 *  (a device's busy fraction is of it). */
function ioJson(io: WeightStats, wallMs: number) {
  return {
    bytes_read: io.trunkBytesRead + io.expertBytesRead,
    trunk_bytes_read: io.trunkBytesRead,
    expert_bytes_read: io.expertBytesRead,
    reads: io.reads,
    expert_requests: io.expertRequests,
    expert_hits: io.expertHits,
    lookahead_issued: io.lookaheadIssued,
    lookahead_used: io.lookaheadUsed,
    io_wait_ms: round2(io.ioWaitMs),
    verify_ms: round2(io.verifyMs),
    verified_bytes: io.verifiedBytes,
    // Read a second time: hedges on a mirror, retries after a failed read (docs/STREAMING.md "Routing").
    extra_reads: io.extraReads,
    extra_bytes_read: io.extraBytesRead,
    hedges_issued: io.hedgesIssued,
    hedges_won: io.hedgesWon,
    retries: io.retries,
    direct_io: io.directIo,
    io_mode: io.ioMode, // O_DIRECT | F_NOCACHE (macOS) | buffered
    devices: io.devices.map((d) => deviceJson(d, wallMs)),
  };
}

/** A device's counters and what follows from them: busy fraction of `wallMs`, GB/s while busy. */
export function deviceJson(d: DeviceStats, wallMs: number) {
  return {
    name: d.name,
    bytes_read: d.bytesRead,
    reads: d.reads,
    busy_ms: round2(d.busyMs),
    busy_fraction: wallMs > 0 ? round2(Math.min(1, d.busyMs / wallMs)) : null,
    gb_per_s: d.busyMs > 0 ? round2(d.bytesRead / d.busyMs / 1e6) : null, // 1e9 bytes/s while busy
    hedges_issued: d.hedgesIssued,
    hedges_won: d.hedgesWon,
    retries: d.retries,
    rerouted: d.rerouted,
    errors: d.errors,
    threads: d.threads,
    files: d.files,
    direct_io: d.directIo,
    io_mode: d.ioMode,
  };
}

/** One generation: tokens, time, what it read (prefill + decode), and per decoded token. */
export function statsJson(s: GenerationStats) {
  return {
    prompt_tokens: s.promptTokens,
    generated_tokens: s.generatedTokens,
    stop_reason: s.stopReason,
    prefill_ms: round2(s.prefillMs),
    decode_ms: round2(s.decodeMs),
    ms_per_token: round2(s.msPerToken),
    // Tokens the decode passes decided per second (null without decode): src/engine/reply-stats.ts.
    tokens_per_s: s.tokensPerS === null ? null : round2(s.tokensPerS),
    decode_steps: s.decodeSteps,
    ...ioJson(s.io, s.prefillMs + s.decodeMs),
    // Decode steps only (the prefill reads each weight once per chunk, not per token).
    bytes_read_per_token: Math.round(s.ioPerToken.bytesRead),
    trunk_bytes_per_token: Math.round(s.ioPerToken.trunkBytes),
    expert_bytes_per_token: Math.round(s.ioPerToken.expertBytes),
    reads_per_token: round2(s.ioPerToken.reads),
    // Speculative decoding (docs/SPECULATION.md): per-token figures above are per generated token.
    drafted_tokens: s.speculation.draftedTokens,
    accepted_tokens: s.speculation.acceptedTokens,
    verify_passes: s.speculation.verifyPasses,
    // A verify pass decides its accepted drafts plus one token (null: no verify pass).
    tokens_per_verify_pass: tokensPerPass(s.speculation),
    drafters: Object.fromEntries(Object.entries(s.drafters).map(([name, c]) => [name, { drafted_tokens: c.draftedTokens, accepted_tokens: c.acceptedTokens, verify_passes: c.verifyPasses, tokens_per_verify_pass: tokensPerPass(c) }])),
    draft: draftJson(s.draft), // the engine's draft model (--draft), null without one
    peak_rss_bytes: s.peakRssBytes,
    trunk: s.trunk, // "bf16" (the release's, from the shards), "exact" (packed, the same bits) or "int8" / "int4" (packed, lossy)
  };
}

const tokensPerPass = (c: SpeculationCounters) => (c.verifyPasses > 0 ? round2((c.acceptedTokens + c.verifyPasses) / c.verifyPasses) : null);

/** The draft model an engine holds (--draft), or null: stats, /k3/stats and /v1/models name it so. */
export function draftJson(d: DraftInfo | undefined) {
  return d ? { name: d.name, variant: d.variant, format: d.format, capture_layers: d.captureLayers, shared_embedding: d.sharedEmbedding } : null;
}

/** Rates and totals of one generation (`k3 run --json`'s `timings`). */
export function timingsJson(s: GenerationStats) {
  return {
    prefill_ms: round2(s.prefillMs),
    decode_ms: round2(s.decodeMs),
    total_ms: round2(s.prefillMs + s.decodeMs),
    ms_per_token: round2(s.msPerToken),
    prefill_tokens_per_s: s.prefillMs > 0 ? round2((s.promptTokens * 1000) / s.prefillMs) : null,
    // Per token the decode passes decided (a verify pass decides several).
    decode_tokens_per_s: s.tokensPerS === null ? null : round2(s.tokensPerS),
  };
}

/** An engine's counters since it opened, and its pools (Engine.stats()). */
export function engineStatsJson(e: ReturnType<Engine["stats"]>) {
  return {
    ...ioJson(e, e.uptimeMs),
    uptime_ms: round2(e.uptimeMs),
    peak_rss_bytes: e.peakRssBytes,
    threads: e.threads,
    hardware_threads: e.hardwareThreads,
    thread_limit: e.limit,
    io_threads: e.ioThreads,
    trunk: e.trunk,
    draft: draftJson(e.draft),
  };
}

/**
 * A value with every object key in snake_case (`budgetSource` → `budget_source`): the JSON that
 * `k3 info`, `k3 plan`, `k3 verify` and `k3 simulate-cache` print comes from internal objects
 * whose fields are camelCase. Only for objects whose keys are field names, never data (a map
 * keyed by tensor names would be renamed).
 */
export function snakeKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(snakeKeys);
  if (v === null || typeof v !== "object") return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), snakeKeys(x)]));
}

/** How a generation ended, in words for the stats line ("" for the usual --gen limit). */
export function finishWords(reason: string): string {
  const words: Record<string, string> = {
    length: "",
    stop: "ended by the model or a stop string",
    tool_calls: "ended with tool calls",
    context: "context full",
    cancelled: "cancelled",
  };
  return words[reason] ?? reason;
}

/** "16 threads"; on a machine with more hardware threads than the pool takes, says why it stopped
 *  there ("64 threads (the pool's limit; 128 hardware threads)"). */
export function threadsWords(pool: ComputeThreads): string {
  const capped = pool.threads === pool.limit && pool.hardwareThreads > pool.limit;
  return `${pool.threads} threads${capped ? ` (the pool's limit; ${pool.hardwareThreads} hardware threads)` : ""}`;
}

/** The stats line (stderr): tokens, prefill time, s/token, bytes read per token, hits, direct
 *  I/O, peak RSS, threads, and how it ended when that is not the --gen limit. */
export function statsLine(s: GenerationStats, pool: ComputeThreads, finishReason: string = s.stopReason): string {
  return [
    `${s.generatedTokens} tokens (prompt ${s.promptTokens})`,
    `prefill ${(s.prefillMs / 1000).toFixed(2)} s`,
    `${(s.msPerToken / 1000).toFixed(3)} s/token`,
    s.tokensPerS === null ? "" : `${s.tokensPerS.toFixed(2)} tokens/s`,
    `read ${formatBytes(s.ioPerToken.bytesRead)}/token`,
    `hits ${s.io.expertHits}/${s.io.expertRequests}`,
    s.speculation.verifyPasses > 0 ? `drafts kept ${s.speculation.acceptedTokens}/${s.speculation.draftedTokens} in ${s.speculation.verifyPasses} passes${draftersWords(s)}` : "",
    s.draft && !s.drafters.model ? `draft ${s.draft.name} loaded, not used (the cost model found no pass where it pays)` : "",
    `direct I/O ${s.io.directIo ? `on (${s.io.ioMode})` : "off"}`,
    drivesWords(s.io, s.prefillMs + s.decodeMs),
    s.io.verifyMs > 0 ? `verify ${(s.io.verifyMs / 1000).toFixed(2)} s` : "",
    `peak RSS ${formatBytes(s.peakRssBytes)}`,
    threadsWords(pool),
    s.trunk === "bf16" ? "" : s.trunk === "exact" ? "exact trunk (packed, same bits)" : `${s.trunk} trunk (lossy)`,
    finishWords(finishReason),
  ]
    .filter(Boolean)
    .join(" · ");
}

/** With more than one device (or a hedge or retry): "drives sda 2.10 GB/s 81% busy, sdb 0.52 GB/s
 *  99% busy; hedges won 3/5; 1 retry" — each device's rate while busy and its busy fraction. */
export function drivesWords(io: WeightStats, wallMs: number): string {
  if (io.devices.length < 2 && io.hedgesIssued === 0 && io.retries === 0) return "";
  const each = io.devices.map((d) => {
    const j = deviceJson(d, wallMs);
    return `${d.name} ${j.gb_per_s === null ? "idle" : `${j.gb_per_s.toFixed(2)} GB/s ${Math.round((j.busy_fraction ?? 0) * 100)}% busy`}`;
  });
  return [
    `drives ${each.join(", ")}`,
    io.hedgesIssued > 0 ? `hedges won ${io.hedgesWon}/${io.hedgesIssued}` : "",
    io.retries > 0 ? `${io.retries} ${io.retries === 1 ? "retry" : "retries"}` : "",
  ]
    .filter(Boolean)
    .join("; ");
}

/** " (model 9/12, n-gram 3/3)": kept/drafted per drafter, when more than one drafted. */
function draftersWords(s: GenerationStats): string {
  const names = Object.keys(s.drafters);
  if (names.length < 2 && !s.draft) return "";
  return ` (${names.map((n) => `${n === "ngram" ? "n-gram" : n} ${s.drafters[n]!.acceptedTokens}/${s.drafters[n]!.draftedTokens}`).join(", ")})`;
}

/** Batched generation (Engine.batchStats()): steps, sessions per step, the recent steps. */
export function batchStatsJson(b: BatchStats) {
  return {
    steps: b.steps,
    rows: b.rows,
    // Index n: steps that carried n sessions.
    sessions_per_step: b.sessionsPerStep,
    decode_tokens: b.decodeTokens,
    prefill_tokens: b.prefillTokens,
    // Speculation inside steps: drafted rows verified, verify segments, the drafts kept, steps
    // that verified two sessions' drafts or more, and the rollback slots held now (of how many).
    draft_tokens: b.draftTokens,
    verify_segments: b.verifySegments,
    accepted_drafts: b.acceptedDrafts,
    shared_verify_steps: b.sharedVerifySteps,
    verify_slots: { holding: b.holding, slots: b.verifySlots },
    bytes_read: b.bytesRead,
    waiting: b.waiting,
    recent_steps: b.recent.map((r) => ({
      at: r.at,
      sessions: r.sessions,
      decode_rows: r.decodeRows,
      prefill_rows: r.prefillRows,
      draft_rows: r.draftRows,
      // Each verify segment: the session (numbered by first use), drafts verified, drafts kept.
      verify: r.verify.map((v) => ({ session: v.session, drafts: v.drafts, accepted: v.accepted ?? null })),
      bytes_read: r.bytesRead,
      ms: r.ms,
    })),
  };
}

/**
 * The prefix cache's counters (null without one), and an estimate of the weight bytes its hits
 * saved: prompt tokens restored × the weight bytes batched passes read per prefill token so far
 * (each pass's bytes split by rows), i.e. what feeding those tokens would most likely have cost.
 */
export function prefixCacheJson(p: PrefixCacheStats | undefined, b: BatchStats) {
  if (!p) return null;
  const perPrefillToken = b.prefillTokens > 0 ? b.prefillBytesRead / b.prefillTokens : 0;
  return {
    lookups: p.lookups,
    hits: p.hits,
    ram_hits: p.ramHits,
    disk_hits: p.diskHits,
    tokens_saved: p.tokensSaved,
    estimated_weight_bytes_saved: Math.round(p.tokensSaved * perPrefillToken),
    state_bytes_restored: p.bytesRestored,
    stores: p.stores,
    dropped: p.dropped,
    write_failures: p.writeFailures,
    evicted_ram: p.evictedRam,
    evicted_disk: p.evictedDisk,
    ram: { entries: p.ramEntries, bytes: p.ramBytes, cap_bytes: p.ramCapBytes },
    disk: { entries: p.diskEntries, bytes: p.diskBytes, cap_bytes: p.diskCapBytes, writable: p.diskWritable },
  };
}
