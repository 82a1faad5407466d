// The k3 progress extension of a stream (`stream_options: {include_progress: true}`): while the
// prompt is fed, one chunk per prefill step with the engine's own count of prompt tokens fed, the
// time so far and the time left at that rate, so a client (the chat page) can show a bar during
// a prefill that takes minutes on the real model. Off unless asked for: such a chunk has
// `choices: []` (like the usage chunk), which clients that do not ask for it need not expect.
//   {"object": "chat.completion.chunk", "choices": [], "k3": {"progress":
//     {"stage": "prefill", "done": 512, "total": 2048, "elapsed_ms": 8000, "eta_ms": 24000}}}
// `done` / `total` count the tokens this request feeds (what the session or the prefix cache
// already held is not fed again: usage.prompt_tokens_details.cached_tokens).

export interface ProgressJson {
  stage: "prefill";
  done: number;
  total: number;
  elapsed_ms: number;
  /** At the rate so far; 0 once done. */
  eta_ms: number;
}

export class PrefillProgress {
  private t0 = performance.now();
  private latest: ProgressJson | undefined;
  private over = false;
  /** The engine's prefill callback (undefined when progress was not asked for). */
  readonly onPrefill: ((done: number, total: number) => void) | undefined;

  constructor(on: boolean) {
    this.onPrefill = on ? (done, total) => this.step(done, total) : undefined;
  }

  /** The generation starts (after any wait in the queue): times count from here. */
  begin(): void {
    this.t0 = performance.now();
  }

  /** The first token is out: later prefills (a reasoning budget's few markup tokens) are not the prompt's. */
  firstToken(): void {
    this.over = true;
  }

  /** The progress not yet sent: none, or the latest step. */
  take(): ProgressJson[] {
    const p = this.latest;
    this.latest = undefined;
    return p ? [p] : [];
  }

  private step(done: number, total: number): void {
    if (this.over) return;
    const elapsed = performance.now() - this.t0;
    const eta = done > 0 ? (elapsed * (total - done)) / done : 0;
    this.latest = { stage: "prefill", done, total, elapsed_ms: Math.round(elapsed), eta_ms: Math.round(eta) };
  }
}
