// Prompt-lookup drafter: continue the sequence the way an earlier occurrence of its last few
// tokens continued (prompt and output alike). Reads no weights; costs one backwards scan of the
// session's tokens per step (microseconds for thousands of tokens, against seconds per pass).
//
// Strictness is the point (AMORTISE.md): a naive n-gram drafter ran at 0.91× on real code
// because wrong drafts cost verify positions. So a draft needs evidence:
//   1. Take the last n = 4 tokens (then 3 if the 4-gram never occurred before) and find their
//      most recent earlier occurrences (up to `maxOccurrences`).
//   2. Two or more occurrences: draft what they all agree follows, token by token, stopping at
//      the first disagreement (disagreement at the first token = no draft).
//   3. One occurrence of the 4-gram: draft only if the match runs back at least `singleMatch`
//      tokens (a long verbatim copy, as in "repeat this" or code edits); a lone 3-gram never.
//   4. Where occurrences exist but fail these rules, stop: a shorter n-gram is weaker evidence.
// Continuations may run into the draft itself (seq(i) = draft[i − len] past the end), so a
// repeating cycle of period p drafts whole periods, as many as `max` allows.
import type { Draft, DraftRequest, Drafter } from "./drafter.ts";

export interface NgramOptions {
  /** Longest suffix looked up (default 4). */
  maxN?: number;
  /** Shortest suffix looked up (default 3). */
  minN?: number;
  /** Most recent occurrences compared (default 4): all of them must agree. */
  maxOccurrences?: number;
  /** Occurrences needed for a draft (default 2), unless one occurrence matches `singleMatch` back. */
  minAgree?: number;
  /** A single occurrence of the longest n-gram drafts when this many tokens match before the
   *  end (default 8). */
  singleMatch?: number;
}

export class NgramDrafter implements Drafter {
  readonly name = "ngram";
  private readonly maxN: number;
  private readonly minN: number;
  private readonly maxOcc: number;
  private readonly minAgree: number;
  private readonly singleMatch: number;

  constructor(opts: NgramOptions = {}) {
    this.maxN = opts.maxN ?? 4;
    this.minN = opts.minN ?? 3;
    this.maxOcc = opts.maxOccurrences ?? 4;
    this.minAgree = opts.minAgree ?? 2;
    this.singleMatch = opts.singleMatch ?? 8;
    if (!(this.minN >= 1 && this.maxN >= this.minN && this.maxOcc >= this.minAgree && this.minAgree >= 1 && this.singleMatch >= this.maxN))
      throw new RangeError(`inconsistent n-gram drafter options ${JSON.stringify(opts)}`);
  }

  draft({ tokens, max }: DraftRequest): Draft {
    const len = tokens.length;
    if (max < 1) return { tokens: [] };
    for (let n = this.maxN; n >= this.minN; n--) {
      if (len < n + 1) continue;
      const occ = this.occurrences(tokens, n);
      if (occ.length === 0) continue;
      const enough = occ.length >= this.minAgree || (n === this.maxN && matchLength(tokens, occ[0]!, this.singleMatch) >= this.singleMatch);
      return { tokens: enough ? agreedContinuation(tokens, occ, max) : [] };
    }
    return { tokens: [] };
  }

  /** End positions e (exclusive, e < len) of the most recent earlier occurrences of the last n tokens. */
  private occurrences(tokens: readonly number[], n: number): number[] {
    const len = tokens.length;
    const out: number[] = [];
    const last = tokens[len - 1]!;
    for (let e = len - 1; e >= n && out.length < this.maxOcc; e--) {
      if (tokens[e - 1] !== last) continue;
      let i = 1;
      while (i < n && tokens[e - 1 - i] === tokens[len - 1 - i]) i++;
      if (i === n) out.push(e);
    }
    return out;
  }
}

/** How many tokens before end position e equal the tokens before the sequence's end (capped). */
function matchLength(tokens: readonly number[], e: number, cap: number): number {
  const len = tokens.length;
  let i = 0;
  while (i < cap && e - 1 - i >= 0 && tokens[e - 1 - i] === tokens[len - 1 - i]) i++;
  return i;
}

/** The tokens every occurrence agrees follow it, up to `max`; continuations past the end read the draft. */
function agreedContinuation(tokens: readonly number[], occ: number[], max: number): number[] {
  const len = tokens.length;
  const draft: number[] = [];
  const at = (i: number) => (i < len ? tokens[i]! : draft[i - len]!);
  for (let j = 0; j < max; j++) {
    const t = at(occ[0]! + j);
    for (let o = 1; o < occ.length; o++) if (at(occ[o]! + j) !== t) return draft;
    draft.push(t);
  }
  return draft;
}
