// The server's sessions: one per parallel slot (engine.parallel), each holding one conversation's
// state between requests.
//
// Invariants:
//   - a session is lent to at most one generation at a time (the queue admits at most
//     engine.parallel generations, so a free session always exists when one is asked for);
//   - a request gets the free session that already holds the longest part of its prompt (its
//     conversation's last turn, usually), else the one idle longest: conversations keep their
//     sessions while there are enough of them, and the prefix cache (the engine's) keeps the
//     state of one that loses its session (Engine.reusePrefix stores it before it is replaced);
//   - output never depends on which session a request gets (incremental == full recompute).
import { heldPrefix, type Engine, type Session } from "../engine.ts";

interface Slot {
  session: Session;
  busy: boolean;
  /** When it was last handed back (for "idle longest"). */
  lastUse: number;
}

export class SessionPool {
  private readonly slots: Slot[];
  private clock = 0;

  constructor(engine: Engine, readonly size: number) {
    this.slots = Array.from({ length: size }, () => ({ session: engine.createSession(), busy: false, lastUse: 0 }));
  }

  get inUse(): number {
    return this.slots.filter((s) => s.busy).length;
  }

  /** Lend the free session best placed for a prompt of `ids` (see the header). */
  take(ids: number[]): Session {
    let best: Slot | undefined;
    let bestReuse = -1;
    for (const s of this.slots) {
      if (s.busy) continue;
      const reuse = heldPrefix(s.session, ids);
      if (reuse > bestReuse || (reuse === bestReuse && s.lastUse < best!.lastUse)) {
        best = s;
        bestReuse = reuse;
      }
    }
    if (!best) throw new Error("SessionPool.take with every session lent: the queue admitted too many generations");
    best.busy = true;
    return best.session;
  }

  /** A lent session comes back (its state stays: the next turn of its conversation may use it). */
  give(session: Session): void {
    const s = this.slots.find((x) => x.session === session);
    if (!s || !s.busy) throw new Error("SessionPool.give of a session that was not lent");
    s.busy = false;
    s.lastUse = ++this.clock;
  }

  close(): void {
    for (const s of this.slots) s.session.close();
  }
}
