// One reply's figures, derived in ONE place from what a generation counted: time per token,
// tokens per second and the per-token I/O of the decode passes. Generation.stats() builds them
// from its counters; a chat reply that ran in two parts (a reasoning budget closed the think
// channel, src/conversation.ts) joins its parts' counters here and derives them again, so the
// CLI's stats line, `--json` and the server's `k3` object all read the same numbers.
import { addStats } from "../model/weights.ts";
import type { GenerationStats, SpeculationCounters } from "../engine.ts";

/** What a generation counts; GenerationStats is these plus what replyStats derives. */
export type ReplyCounters = Omit<GenerationStats, "msPerToken" | "ioPerToken" | "tokensPerS">;

/** The derived figures: per token the decode passes decided (speculation: more than one a pass).
 *  `stoppedInPrefill`: no token came out, so there is no time per token. */
export function replyStats(c: ReplyCounters, stoppedInPrefill = false): GenerationStats {
  const n = c.decodedTokens;
  const per = (x: number) => (n > 0 ? x / n : 0);
  const d = c.decodeIo;
  return {
    ...c,
    msPerToken: stoppedInPrefill ? 0 : n > 0 ? c.decodeMs / n : c.prefillMs,
    tokensPerS: n > 0 && c.decodeMs > 0 ? (1000 * n) / c.decodeMs : null,
    ioPerToken: {
      bytesRead: per(d.trunkBytesRead + d.expertBytesRead),
      trunkBytes: per(d.trunkBytesRead),
      expertBytes: per(d.expertBytesRead),
      reads: per(d.reads),
      hits: per(d.expertHits),
      requests: per(d.expertRequests),
    },
  };
}

/**
 * One reply from two generations of it (before and after a reasoning budget closed the think
 * channel). The second one's prefill (the few markup tokens) is one more decode step: it reads
 * the weights once, like a decode step, and decides one token.
 */
export function joinReplyStats(a: GenerationStats, b: GenerationStats): GenerationStats {
  return replyStats({
    promptTokens: a.promptTokens,
    generatedTokens: a.generatedTokens + b.generatedTokens,
    prefillMs: a.prefillMs,
    decodeMs: a.decodeMs + b.prefillMs + b.decodeMs,
    stopReason: b.stopReason,
    io: addStats(a.io, b.io),
    decodeIo: addStats(a.decodeIo, b.io),
    decodeSteps: a.decodeSteps + 1 + b.decodeSteps,
    decodedTokens: a.decodedTokens + 1 + b.decodedTokens,
    speculation: addCounters(a.speculation, b.speculation),
    drafters: Object.fromEntries([...new Set([...Object.keys(a.drafters), ...Object.keys(b.drafters)])].map((n) => [n, addCounters(a.drafters[n], b.drafters[n])])),
    draft: a.draft,
    peakRssBytes: Math.max(a.peakRssBytes, b.peakRssBytes),
    trunk: a.trunk,
  });
}

const ZERO: SpeculationCounters = { draftedTokens: 0, acceptedTokens: 0, verifyPasses: 0 };
/** Speculation counters of two runs, added (a drafter one run never used counts zero there). */
function addCounters(a: SpeculationCounters = ZERO, b: SpeculationCounters = ZERO): SpeculationCounters {
  return { draftedTokens: a.draftedTokens + b.draftedTokens, acceptedTokens: a.acceptedTokens + b.acceptedTokens, verifyPasses: a.verifyPasses + b.verifyPasses };
}
