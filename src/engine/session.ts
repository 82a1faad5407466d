// One conversation's handle (Session) and the rules for reusing what a session already holds.
// Part of the public API: src/engine.ts re-exports all of it.
import type { SessionState } from "../model/state.ts";
import type { SpeculationCost } from "../speculate/cost.ts";

/** Frees a session's C memory if its owner dropped it without close() (backstop, not the plan). */
const sessionFinalizer = new FinalizationRegistry<SessionState>((state) => state.free());

/** One conversation / sequence: model state plus tokens not yet fed to the model. */
export class Session {
  /** A sampled token that has been emitted but not yet run through the model. */
  pending: number[] = [];
  /** Metadata restored by Engine.loadSession (what saveSession was given), else undefined. */
  meta: unknown;
  constructor(readonly state: SessionState) {
    sessionFinalizer.register(this, state, this);
  }
  /** Release the session's state memory (KDA state, MLA cache). The session is unusable after. */
  close(): void {
    sessionFinalizer.unregister(this);
    this.state.free();
  }
  get position(): number {
    return this.state.pos;
  }
  /** Every token of the sequence: processed ones, then pending ones. */
  get tokens(): number[] {
    return [...this.state.history, ...this.pending];
  }
  /** Start over: no tokens, and no speculation history (the next conversation learns its own). */
  reset(): void {
    this.state.reset();
    this.pending = [];
    this.speculationCost = undefined;
  }
  /** A failed forward pass left the state inconsistent: reset() before using it again. */
  get dirty(): boolean {
    return this.state.dirty;
  }
  get closed(): boolean {
    return this.state.freed;
  }
  /** The session's speculation cost model (pass bytes, acceptance): it persists across the turns
   *  of one conversation and is dropped when the session starts another (reset, or a prefix of
   *  another conversation restored into it). It decides how far to draft, never a token. */
  speculationCost?: SpeculationCost;
  /** C memory this session's state holds (KDA state, conv history, MLA cache). */
  get allocatedBytes(): number {
    return this.state.bytes;
  }
}

/** Length of the session's tokens when they are a proper prefix of `ids`, else 0. A prefix equal
 *  to the whole prompt is not reusable: the engine needs at least one new token for logits. */
export function reusablePrefix(seen: number[], ids: number[]): number {
  if (seen.length === 0 || seen.length >= ids.length) return 0;
  for (let i = 0; i < seen.length; i++) if (seen[i] !== ids[i]) return 0;
  return seen.length;
}

/**
 * Prompt tokens of `ids` that `session` already holds, without touching it: all of them when its
 * tokens (history + pending) are exactly `ids` (a restored session continues), the length of its
 * tokens when they are a proper prefix of `ids`, else 0 (also for a dirty or closed session).
 */
export function heldPrefix(session: Session, ids: number[]): number {
  if (session.dirty || session.closed) return 0;
  const tokens = session.tokens;
  if (session.pending.length > 0 && tokens.length === ids.length && tokens.every((t, i) => t === ids[i])) return ids.length;
  return reusablePrefix(tokens, ids);
}
