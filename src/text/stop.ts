// Stop strings over a stream of decoded text deltas.
//
// A stop string may straddle token boundaries ("ab" + "c" with stop "bc"), so the matcher holds
// back any tail that could still grow into a stop string and emits only text that can no longer be
// part of one. Invariant: the concatenation of everything emitted equals the full text up to (not
// including) the earliest-starting occurrence of any stop string, or the full text if none occurs.

export interface StopResult {
  /** Text that is safe to show now. */
  text: string;
  /** A stop string was hit; nothing more will be emitted. */
  stopped: boolean;
}

export class StopMatcher {
  private readonly stops: string[];
  private held = "";
  private done = false;

  constructor(stops: string[]) {
    this.stops = stops.filter((s) => s.length > 0);
  }

  get stopped(): boolean {
    return this.done;
  }

  push(delta: string): StopResult {
    if (this.done) return { text: "", stopped: true };
    this.held += delta;
    return this.scan(false);
  }

  /** The stream ended: partial matches can no longer complete, so the held text is released. */
  flush(): StopResult {
    if (this.done) return { text: "", stopped: true };
    return this.scan(true);
  }

  private scan(final: boolean): StopResult {
    const s = this.held;
    let hit = -1;
    for (const stop of this.stops) {
      const at = s.indexOf(stop);
      if (at >= 0 && (hit < 0 || at < hit)) hit = at;
    }
    // Earliest position from which the text so far is a proper prefix of some stop string: such
    // a match could still complete and would start before `hit`.
    const limit = hit >= 0 ? hit : s.length;
    let partial = -1;
    if (!final) {
      for (let p = Math.max(0, s.length - this.maxStopLength() + 1); p < limit; p++) {
        const tail = s.slice(p);
        if (this.stops.some((stop) => stop.length > tail.length && stop.startsWith(tail))) {
          partial = p;
          break;
        }
      }
    }
    if (partial >= 0) {
      this.held = s.slice(partial);
      return { text: s.slice(0, partial), stopped: false };
    }
    if (hit >= 0) {
      this.done = true;
      this.held = "";
      return { text: s.slice(0, hit), stopped: true };
    }
    this.held = "";
    return { text: s, stopped: false };
  }

  private maxStopLength(): number {
    let m = 0;
    for (const s of this.stops) m = Math.max(m, s.length);
    return m;
  }
}
