// K3's pre-tokenizer: splits text into the pieces that byte-level BPE then encodes one by one.
//
// K3_PAT_STR is the release's tiktoken `pat_str` verbatim (Rust fancy-regex syntax, docs/TOKENIZER.md);
// the tiktoken core accepts it as is, so tests hand it to that core as the reference.
// K3_PRETOKENIZE_REGEX is the same language in JavaScript (`v` flag), translated by hand:
//   - `A&&[^\p{Han}]` (class intersection)  ->  `[[A]--\p{Script=Han}]` (v-flag set subtraction)
//   - `\p{Han}`  ->  `\p{Script=Han}`: Rust's bare script name means Script (not Script_Extensions);
//     JS needs the explicit `Script=`.
//   - `\s` / `\S`  ->  `\p{White_Space}` / `\P{White_Space}`: Rust's Unicode `\s` is exactly the
//     White_Space property; JS's `\s` differs (it adds U+FEFF and lacks U+0085), which would split
//     text containing those characters differently.
//   - `(?i:...)` is kept: Bun's engine supports inline modifiers, and under `v` both engines use
//     Unicode simple case folding (so `'ſ` matches `'s`, like in Rust).
// Alternation is leftmost-first in both engines, so the first matching alternative wins.

export const K3_PAT_STR = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");

const HAN = String.raw`\p{Script=Han}`;
const WS = String.raw`\p{White_Space}`;
const NOT_WS = String.raw`\P{White_Space}`;
const UPPERISH = String.raw`[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]--${HAN}]`;
const LOWERISH = String.raw`[[\p{Ll}\p{Lm}\p{Lo}\p{M}]--${HAN}]`;
const CONTRACTION = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)?`;

export const K3_PRETOKENIZE_SOURCE = [
  String.raw`[${HAN}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?${UPPERISH}*${LOWERISH}+${CONTRACTION}`,
  String.raw`[^\r\n\p{L}\p{N}]?${UPPERISH}+${LOWERISH}*${CONTRACTION}`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^${WS}\p{L}\p{N}]+[\r\n]*`,
  String.raw`${WS}*[\r\n]+`,
  String.raw`${WS}+(?!${NOT_WS})`,
  String.raw`${WS}+`,
].join("|");

/** Global sticky-free regex; callers must reset lastIndex (pieces() does). */
export const K3_PRETOKENIZE_REGEX = new RegExp(K3_PRETOKENIZE_SOURCE, "gv");

/**
 * The pre-tokenized pieces of `text`, in order. Every character of `text` lands in exactly one
 * piece (the last alternative `\s+` and the punctuation class cover everything the others miss),
 * so pieces concatenate back to `text`.
 */
export function pieces(text: string): string[] {
  const out: string[] = [];
  const re = K3_PRETOKENIZE_REGEX;
  re.lastIndex = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) out.push(m[0]);
  return out;
}
