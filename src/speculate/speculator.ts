// One generation's speculation: the setting (`--speculate auto|off|N`), the drafter, and the
// session's cost model. The engine asks `propose` before each decode pass and reports every pass
// back; everything that decides what is *generated* lives elsewhere (accept.ts, the sampler).
import { K3Error } from "../errors.ts";
import type { Draft, Drafter } from "./drafter.ts";
import type { SpeculationCost } from "./cost.ts";

/** "auto": the cost model decides each step (up to the engine's drafts per pass); "off"; N: verify
 *  up to N drafts whenever the drafter has them (no cost model). */
export type SpeculateSetting = "auto" | "off" | number;

/** Parse a `--speculate` value or a request field: auto | off | a positive integer. */
export function parseSpeculate(value: unknown, where = "--speculate"): SpeculateSetting {
  if (value === "auto" || value === "off") return value;
  const n = typeof value === "number" ? value : typeof value === "string" && /^[0-9]+$/.test(value) ? Number(value) : NaN;
  if (Number.isSafeInteger(n) && n >= 0) return n === 0 ? "off" : n;
  throw new K3Error("USAGE", `${where} must be auto, off or a number of drafts per pass (0 = off), got ${JSON.stringify(value)}`);
}

export interface SpeculationCounters {
  /** Drafted tokens that went through a verify pass. */
  draftedTokens: number;
  /** Of those, the ones the target model kept. */
  acceptedTokens: number;
  /** Decode passes over more than one position. */
  verifyPasses: number;
}

/** A drafter the speculator may ask, and what a drafted token costs it. */
export interface DrafterSlot {
  drafter: Drafter;
  /**
   * Bytes-equivalent (docs/SPECULATION.md §5) each drafted token costs to make: 0 for a drafter
   * that reads and multiplies nothing (asked every step, its proposal length then bounds k); > 0
   * for a model drafter (asked only when the cost model chose it and how far, since drafting is
   * the cost).
   */
  stepCost: number;
  /** Its evidence lane in the session's cost model (default the drafter's name). */
  lane?: string;
  /** Drafts its first verify pass may check (default 2). */
  firstDrafts?: number;
  /** Acceptance assumed before its first verified draft (default the cost model's, 0.7). */
  priorAcceptance?: number;
}

/** A proposal and who made it; `q`: the drafter's normalised distribution of each draft, when it
 *  drew them (a model drafter under the rejection rule, src/speculate/reject.ts); `acceptance`:
 *  with `auto`, the per-draft acceptance its drafter's lane expects (a batched step places draft
 *  rows by it and may verify fewer: src/speculate/step-drafts.ts). */
export type Proposal = Draft & { by?: string; q?: Float64Array[]; acceptance?: number };

export class Speculator {
  readonly counters: SpeculationCounters = { draftedTokens: 0, acceptedTokens: 0, verifyPasses: 0 };
  /** The same counters per drafter (by name). */
  readonly byDrafter: Record<string, SpeculationCounters> = {};

  /**
   * @param setting   the request's setting (already checked against the engine's room)
   * @param maxDrafts drafts per pass the engine has room for
   * @param slots     the drafters to choose from each step (their order breaks ties)
   * @param cost      the session's cost model (its acceptance and pass bytes persist across the
   *                  turns of one conversation; it decides only how far to draft, never an id)
   * @param vocab     the model's vocabulary size (a draft's ids must be below it)
   */
  constructor(
    private readonly setting: Exclude<SpeculateSetting, "off">,
    private readonly maxDrafts: number,
    private readonly slots: DrafterSlot[],
    private readonly cost: SpeculationCost,
    private readonly vocab: number,
  ) {
    for (const s of slots) cost.lane(laneOf(s), { firstDrafts: s.firstDrafts, priorAcceptance: s.priorAcceptance });
  }

  /**
   * Drafts to verify in the next pass (empty: decode one position plainly). `tokens` is the whole
   * sequence including the token about to be fed; `room` the most drafts that can still matter
   * (context left, tokens still wanted). With `auto`, each step takes the drafter and draft length
   * with the best expected tokens per cost, or none unless one beats plain decoding by the
   * cost model's margin; with N, the first drafter (in slot order) that proposes anything, N at most.
   */
  propose(tokens: readonly number[], room: number): Proposal {
    const cap = Math.min(room, this.setting === "auto" ? this.maxDrafts : Math.min(this.setting, this.maxDrafts));
    if (cap < 1) return { tokens: [] };
    const ask = (s: DrafterSlot, max: number): Proposal => {
      const raw = s.drafter.draft({ tokens, max }) as Proposal;
      const d = checkDraft(raw, max, this.vocab, s.drafter.name);
      return raw.q ? { ...d, q: raw.q } : d;
    };
    if (this.setting !== "auto") {
      for (const s of this.slots) {
        const d = ask(s, cap);
        if (d.tokens.length > 0) return { ...d, by: s.drafter.name };
      }
      return { tokens: [] };
    }
    let best: { slot: DrafterSlot; k: number; rate: number; draft?: Proposal } | undefined;
    for (const s of this.slots) {
      const free = s.stepCost <= 0;
      const draft = free ? ask(s, cap) : undefined; // a free drafter is asked; a paid one is priced first
      const n = draft ? draft.tokens.length : cap;
      if (n < 1) continue;
      const { k, rate } = this.cost.best(laneOf(s), n, s.stepCost);
      if (k > 0 && (!best || rate > best.rate)) best = { slot: s, k, rate, draft };
    }
    if (!best) return { tokens: [] };
    const d = best.draft ?? ask(best.slot, best.k);
    const acceptance = this.cost.lane(laneOf(best.slot)).acceptance.rate;
    return { tokens: d.tokens.slice(0, best.k), by: best.slot.drafter.name, acceptance, ...(d.q ? { q: d.q.slice(0, best.k) } : {}) };
  }

  /** A decode pass over `positions` positions read `bytes` (trunk, experts; undefined: not known
   *  for this pass alone — a batched step's bytes are the step's, which the scheduler's own cost
   *  model learns from); `drafted` of them were drafts (by drafter `by`), `accepted` kept. */
  observe(positions: number, bytes: [trunk: number, experts: number] | undefined, drafted: number, accepted: number, by?: string): void {
    if (bytes) this.cost.observePass(positions, bytes[0], bytes[1]);
    if (drafted > 0) {
      const slot = this.slots.find((s) => s.drafter.name === by) ?? this.slots[0]!;
      this.cost.observeVerdict(drafted, accepted, laneOf(slot));
      slot.drafter.observe?.(drafted, accepted);
      const per = (this.byDrafter[slot.drafter.name] ??= { draftedTokens: 0, acceptedTokens: 0, verifyPasses: 0 });
      for (const c of [this.counters, per]) {
        c.draftedTokens += drafted;
        c.acceptedTokens += accepted;
        c.verifyPasses++;
      }
    }
    this.cost.step();
  }
}

const laneOf = (s: DrafterSlot) => s.lane ?? s.drafter.name;

/**
 * A drafter's answer, checked where it enters the engine: a list of at most `max` token ids of
 * this vocabulary. Anything else is refused (K3Error USAGE naming the drafter and the first
 * problem) before the verify pass, so the session keeps its pending token and state: the next
 * turn is what a full recompute gives.
 */
export function checkDraft(draft: unknown, max: number, vocab: number, name: string): Draft {
  const bad = (why: string): never => {
    throw new K3Error("USAGE", `the drafter "${name}" proposed an invalid draft: ${why}`, ["a draft is { tokens: [...] }: at most `max` integer token ids in 0..vocab − 1 (src/speculate/drafter.ts)"]);
  };
  const tokens = (draft as { tokens?: unknown } | null | undefined)?.tokens;
  if (!Array.isArray(tokens)) return bad(`expected { tokens: number[] }, got ${describe(draft)}`);
  if (tokens.length > max) bad(`${tokens.length} tokens, more than the ${max} asked for`);
  tokens.forEach((t, i) => {
    if (!Number.isSafeInteger(t) || (t as number) < 0 || (t as number) >= vocab) bad(`token ${describe(t)} at offset ${i} is not a token id of this model (0..${vocab - 1})`);
  });
  return { tokens: tokens as number[] };
}

const describe = (x: unknown): string => (typeof x === "number" ? String(x) : (JSON.stringify(x) ?? String(x)).slice(0, 60));
