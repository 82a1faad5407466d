// Progress lines on a terminal (stderr): the prefill ("prefill 96/480 tokens · 20% · 14.20 MiB
// read · ETA 3.1 s") and bars for long steps at open ("loading pinned layers [####      ]
// 2.10 GiB/7.00 GiB · 150.00 MiB/s · ETA 32.0 s").
//
// Quiet unless the stream is a TTY (pipes and logs get no carriage-return noise). Each line is
// erased when its step ends, when the step is cancelled (clear()), and before an error message
// (main.ts calls clearProgressLines()), so what follows starts on a clean line.
import { formatBytes, formatSeconds } from "../format.ts";
import { ERASE_LINE } from "../term.ts";

const SHOW_AFTER_MS = 400;
const REDRAW_MS = 100;

export interface ProgressStream {
  isTTY?: boolean;
  write(s: string): unknown;
}

export interface ProgressOptions {
  /** Where to draw; default process.stderr. */
  stream?: ProgressStream;
  /** Bytes read so far (for the "read" field), e.g. from engine.stats(). */
  bytesRead?: () => number;
  /** Clock in ms (tests inject one). */
  now?: () => number;
  /** Draw even when the stream is not a TTY (tests). */
  force?: boolean;
}

/** Streams that show a progress line right now. */
const shown = new Set<ProgressStream>();

function draw(stream: ProgressStream, line: string): void {
  stream.write(`${ERASE_LINE}${line}`);
  shown.add(stream);
}

function erase(stream: ProgressStream): void {
  if (shown.delete(stream)) stream.write(ERASE_LINE);
}

/** Erase every progress line still shown (before an error message, on exit). */
export function clearProgressLines(): void {
  for (const s of [...shown]) erase(s);
}

/**
 * Prefill time after n tokens, fitted as t(n) = a·n + b·n² (a, b ≥ 0): each token costs its share
 * of the weights plus attention over every position before it, and the second term grows with
 * the position — a straight-line ETA is too short on long prompts (7.8 s shown for 18.4 s taken).
 * Least squares over every (tokens done, ms) point seen; with one point, or when the fit would
 * make a term negative, it falls back to the one-term fits.
 */
export class PrefillFit {
  private s2 = 0; // Σ n²
  private s3 = 0; // Σ n³
  private s4 = 0; // Σ n⁴
  private t1 = 0; // Σ t·n
  private t2 = 0; // Σ t·n²
  private points = 0;

  add(n: number, ms: number): void {
    this.s2 += n * n;
    this.s3 += n ** 3;
    this.s4 += n ** 4;
    this.t1 += ms * n;
    this.t2 += ms * n * n;
    this.points++;
  }

  /** [a, b] of t(n) = a·n + b·n². */
  coefficients(): [number, number] {
    if (this.points === 0) return [0, 0];
    const det = this.s2 * this.s4 - this.s3 * this.s3;
    if (this.points >= 2 && det > 0) {
      const a = (this.t1 * this.s4 - this.t2 * this.s3) / det;
      const b = (this.s2 * this.t2 - this.s3 * this.t1) / det;
      if (a >= 0 && b >= 0) return [a, b];
      if (b < 0) return [this.t1 / this.s2, 0];
      return [0, this.t2 / this.s4];
    }
    return [this.t1 / this.s2, 0];
  }

  /** Predicted ms from `done` tokens to `total`. */
  remainingMs(done: number, total: number): number {
    const [a, b] = this.coefficients();
    return a * (total - done) + b * (total * total - done * done);
  }
}

export type PrefillProgress = ((done: number, total: number) => void) & { clear(): void };

/** An onPrefill callback for one prefill (its clock starts now), or undefined when quiet. */
export function prefillProgress(opts: ProgressOptions = {}): PrefillProgress | undefined {
  const stream = opts.stream ?? process.stderr;
  if (!opts.force && !stream.isTTY) return undefined;
  const now = opts.now ?? (() => performance.now());
  const bytes0 = opts.bytesRead?.() ?? 0;
  const start = now();
  let lastDraw = -Infinity;
  const fit = new PrefillFit();
  const cb = (done: number, total: number) => {
    if (done >= total) return erase(stream);
    const t = now();
    fit.add(done, t - start);
    if (t - start < SHOW_AFTER_MS || t - lastDraw < REDRAW_MS) return;
    lastDraw = t;
    draw(stream, progressLine(done, total, fit.remainingMs(done, total), opts.bytesRead ? opts.bytesRead() - bytes0 : undefined));
  };
  return Object.assign(cb, { clear: () => erase(stream) });
}

/** The text of one prefill line (pure, for tests). */
export function progressLine(done: number, total: number, remainingMs: number | undefined, bytesRead?: number): string {
  const pct = total > 0 ? Math.floor((100 * done) / total) : 0;
  const parts = [`prefill ${done}/${total} tokens`, `${pct}%`];
  if (bytesRead !== undefined) parts.push(`${formatBytes(bytesRead)} read`);
  if (done > 0 && remainingMs !== undefined) parts.push(`ETA ${formatSeconds(remainingMs / 1000)}`);
  return parts.join(" · ");
}

/**
 * A bar for long non-token work at open (indexing shards, loading pinned layers, checksumming).
 * With unit "bytes" it shows bytes, the rate and an ETA from the rate since the step began.
 */
export function barProgress(opts: ProgressOptions = {}): ((label: string, done: number, total: number, unit?: "bytes") => void) | undefined {
  const stream = opts.stream ?? process.stderr;
  if (!opts.force && !stream.isTTY) return undefined;
  const now = opts.now ?? (() => performance.now());
  let lastDraw = -Infinity;
  let step: { label: string; t0: number; done0: number } | undefined;
  return (label, done, total, unit) => {
    const t = now();
    if (step?.label !== label) step = { label, t0: t, done0: done };
    if (done >= total) {
      erase(stream);
      step = undefined;
      lastDraw = -Infinity;
      return;
    }
    if (t - lastDraw < REDRAW_MS) return;
    lastDraw = t;
    const secs = (t - step.t0) / 1000;
    const rate = secs > 0 && done > step.done0 ? (done - step.done0) / secs : undefined;
    draw(stream, barLine(label, done, total, { unit, rate }));
  };
}

/** The text of one bar line (pure, for tests). `rate` is per second, in the bar's unit. */
export function barLine(label: string, done: number, total: number, o: { unit?: "bytes"; rate?: number; width?: number } = {}): string {
  const width = o.width ?? 30;
  const filled = total > 0 ? Math.round((width * Math.min(done, total)) / total) : 0;
  const count = o.unit === "bytes" ? `${formatBytes(done)}/${formatBytes(total)}` : `${done}/${total}`;
  const parts = [`${label} [${"#".repeat(filled)}${" ".repeat(width - filled)}] ${count}`];
  if (o.rate !== undefined && o.rate > 0) {
    if (o.unit === "bytes") parts.push(`${formatBytes(o.rate)}/s`);
    parts.push(`ETA ${formatSeconds((total - done) / o.rate)}`);
  }
  return parts.join(" · ");
}
