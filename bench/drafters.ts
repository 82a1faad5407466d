// Drafters for the speculation benchmark (bench/speculate.ts). The slice model has random
// weights: its greedy text never repeats and never copies from its prompt (docs/SPECULATION.md
// §measured), so the prompt-lookup drafter has nothing to find there. To measure what a verify
// pass buys when drafts are right, and what it costs when they are wrong, two arms draft from the
// reference continuation (the speculation-off arm's ids, known before the arm starts):
//   replay: the reference continuation itself: every draft right (the ceiling any drafter can
//           reach, e.g. a text that repeats or copies);
//   wrong:  the reference continuation with every id shifted by one: every draft wrong;
//   ngram:  the engine's default prompt-lookup drafter.
import type { Drafter } from "../src/engine.ts";
import { NgramDrafter } from "../src/speculate/ngram.ts";

export type DrafterChoice = { kind: "ngram" } | { kind: "replay" | "wrong"; reference: number[] };

export function makeDrafter(choice: DrafterChoice | undefined, vocab: number): Drafter | undefined {
  if (!choice || choice.kind === "ngram") return choice ? new NgramDrafter() : undefined;
  const ref = choice.reference;
  const shift = choice.kind === "wrong" ? 1 : 0;
  return {
    name: choice.kind,
    draft: ({ tokens, max }) => {
      // Only while the sequence is on the reference (it always is: greedy, same model).
      for (let i = tokens.length - 1; i >= 0 && i >= tokens.length - 8; i--) if (tokens[i] !== ref[i]) return { tokens: [] };
      return { tokens: ref.slice(tokens.length, tokens.length + max).map((t) => (t + shift) % vocab) };
    },
  };
}
