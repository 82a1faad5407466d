// Prefill progress on a terminal: "prefill 96/480 tokens · 20% · 14.2 MB read · ETA 3.1 s".
//
// Quiet unless stderr is a TTY (pipes and logs get no carriage-return noise), and quiet for
// prefills that finish within SHOW_AFTER_MS, so short prompts print nothing. Redraws at most every
// REDRAW_MS and erases its line when done, so the stats line that follows starts clean.
import { formatBytes } from "./common.ts";

const SHOW_AFTER_MS = 400;
const REDRAW_MS = 100;

export interface ProgressOptions {
  /** Where to draw; default process.stderr. */
  stream?: { isTTY?: boolean; write(s: string): unknown };
  /** Bytes read so far (for the "MB read" field), e.g. from engine.stats(). */
  bytesRead?: () => number;
  /** Clock in ms (tests inject one). */
  now?: () => number;
  /** Draw even when the stream is not a TTY (tests). */
  force?: boolean;
}

/** An onPrefill callback for the conversation layer, or undefined when progress stays quiet. */
export function prefillProgress(opts: ProgressOptions = {}): ((done: number, total: number) => void) | undefined {
  const stream = opts.stream ?? process.stderr;
  if (!opts.force && !stream.isTTY) return undefined;
  const now = opts.now ?? (() => performance.now());
  const bytes0 = opts.bytesRead?.() ?? 0;
  let start = -1;
  let lastDraw = -Infinity;
  let drawn = false;
  return (done, total) => {
    const t = now();
    if (start < 0) start = t;
    if (done >= total) {
      if (drawn) stream.write("\r\x1b[2K");
      drawn = false;
      start = -1; // a later prefill (next chat turn) starts its own clock
      return;
    }
    const elapsed = t - start;
    if (elapsed < SHOW_AFTER_MS || t - lastDraw < REDRAW_MS) return;
    lastDraw = t;
    drawn = true;
    stream.write(`\r\x1b[2K${progressLine(done, total, elapsed, opts.bytesRead ? opts.bytesRead() - bytes0 : undefined)}`);
  };
}

/** The text of one progress line (pure, for tests). ETA assumes the rate so far continues. */
export function progressLine(done: number, total: number, elapsedMs: number, bytesRead?: number): string {
  const pct = total > 0 ? Math.floor((100 * done) / total) : 0;
  const parts = [`prefill ${done}/${total} tokens`, `${pct}%`];
  if (bytesRead !== undefined) parts.push(`${formatBytes(bytesRead)} read`);
  if (done > 0) parts.push(`ETA ${(((total - done) * elapsedMs) / done / 1000).toFixed(1)} s`);
  return parts.join(" · ");
}

/**
 * A progress bar for long non-token work (indexing shards, loading pinned layers, checksumming):
 * "indexing shards [##########          ] 48/96". Quiet unless stderr is a TTY; erased when done.
 */
export function barProgress(opts: ProgressOptions = {}): ((label: string, done: number, total: number) => void) | undefined {
  const stream = opts.stream ?? process.stderr;
  if (!opts.force && !stream.isTTY) return undefined;
  const now = opts.now ?? (() => performance.now());
  let lastDraw = -Infinity;
  return (label, done, total) => {
    const t = now();
    if (done >= total) {
      stream.write("\r\x1b[2K");
      lastDraw = -Infinity;
      return;
    }
    if (t - lastDraw < REDRAW_MS) return;
    lastDraw = t;
    stream.write(`\r\x1b[2K${barLine(label, done, total)}`);
  };
}

/** The text of one bar line (pure, for tests). */
export function barLine(label: string, done: number, total: number, width = 30): string {
  const filled = total > 0 ? Math.round((width * Math.min(done, total)) / total) : 0;
  return `${label} [${"#".repeat(filled)}${" ".repeat(width - filled)}] ${done}/${total}`;
}
