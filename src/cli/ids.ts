// Token ids as users write them: "1 2 3", "1,2,3", one per line, or JSON ([1,2,3] or
// {"ids":[1,2,3]} as `k3 tokenize --json` prints). One parser for `run --ids` and `detokenize`.
import { K3Error } from "../errors.ts";

/** Ids from the accepted spellings; `what` names the input in errors ("--ids", "stdin"). */
export function parseIds(input: string, what: string): number[] {
  const trimmed = input.trim();
  let values: unknown[];
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    let json: unknown;
    try {
      json = JSON.parse(trimmed);
    } catch {
      throw new K3Error("USAGE", `${what}: ids look like JSON but do not parse`);
    }
    const list = Array.isArray(json) ? json : (json as { ids?: unknown }).ids;
    if (!Array.isArray(list)) throw new K3Error("USAGE", `${what}: JSON ids must be [...] or {"ids":[...]}`);
    values = list;
  } else {
    // Separators are whitespace or one comma (spaces around it allowed): "5,,6", a leading or a
    // trailing comma is a missing id, refused, not skipped.
    const items = trimmed === "" ? [] : trimmed.split(/\s*,\s*|\s+/);
    if (items.includes("")) throw new K3Error("USAGE", `${what}: an empty id between commas in "${trimmed.length > 60 ? `${trimmed.slice(0, 57)}...` : trimmed}"`, ["separate ids with one comma or with spaces, e.g. 1,2,3"]);
    values = items.map((s) => (/^\d+$/.test(s) ? Number(s) : s));
  }
  const bad = values.filter((v) => typeof v !== "number" || !Number.isSafeInteger(v) || v < 0);
  if (bad.length) throw new K3Error("USAGE", `${what}: not token ids: ${bad.slice(0, 5).map((v) => JSON.stringify(v)).join(", ")} (expected non-negative integers)`);
  return values as number[];
}
