// What `k3 chat` reads besides its flags' plain values: the thinking effort, the reasoning
// budget, and the conversation on stdin (JSON messages or plain text). Shared by the command and
// the REPL's /commands.
import { VALID_THINKING_EFFORTS, type ChatMessage } from "../engine.ts";
import { K3Error } from "../errors.ts";
import { positiveInt } from "./common.ts";

export function parseEffort(v: string | undefined): string | undefined {
  if (v === undefined || v === "" || v === "none") return undefined;
  if (!(VALID_THINKING_EFFORTS as readonly string[]).includes(v)) throw new K3Error("USAGE", `--effort must be ${VALID_THINKING_EFFORTS.join(", ")} or none, got "${v}"`);
  return v;
}

/** --reasoning-budget: N ≥ 0 tokens, `none` (or -1, llama.cpp's spelling) for no limit; default half of --gen. */
export function reasoningBudget(v: string | undefined, gen: number): number | undefined {
  if (v === undefined || v === "") return Math.floor(gen / 2);
  return reasoningBudgetFlag(v);
}

/** A --reasoning-budget value given: N ≥ 0 tokens, or undefined for `none` / -1 (no limit). */
export function reasoningBudgetFlag(v: string): number | undefined {
  if (v === "none" || v === "-1") return undefined;
  if (v === "0") return 0;
  return positiveInt(v, "--reasoning-budget");
}

/**
 * What stdin holds: JSON messages (starts with [ or {), else plain text = one user message.
 * `text` forces plain text. Input that starts like JSON but is not is refused, not sent as text.
 */
export function parseChatInput(input: string, where: string, text: boolean): ChatMessage[] {
  const t = input.trim();
  if (t === "") throw new K3Error("USAGE", `${where}: no conversation (JSON messages, or plain text for one user message)`);
  if (text || !/^[[{]/.test(t)) return [{ role: "user", content: input.replace(/\r?\n$/, "") }];
  return parseConversation(input, where);
}

/** A JSON array of messages, one JSON object ({messages: [...]} too), or JSONL (one message per line). */
export function parseConversation(text: string, where: string): ChatMessage[] {
  const trimmed = text.trim();
  if (trimmed === "") throw new K3Error("USAGE", `${where}: no conversation (expected a JSON array of messages or JSONL, one message per line)`);
  let messages: unknown;
  try {
    const whole = JSON.parse(trimmed) as unknown;
    messages = Array.isArray(whole) ? whole : whole && typeof whole === "object" && "messages" in whole ? (whole as { messages: unknown }).messages : [whole];
  } catch {
    messages = trimmed.split("\n").flatMap((line, i) => {
      if (line.trim() === "") return [];
      try {
        return [JSON.parse(line) as unknown];
      } catch (err) {
        throw new K3Error("USAGE", `${where}: line ${i + 1} is not JSON: ${(err as Error).message}`, ["plain text that starts with { or [ needs --text"]);
      }
    });
  }
  if (!Array.isArray(messages)) throw new K3Error("USAGE", `${where}: "messages" must be an array`);
  const problems: string[] = [];
  messages.forEach((m, i) => {
    if (!m || typeof m !== "object" || typeof (m as { role?: unknown }).role !== "string") problems.push(`message ${i + 1}: needs a string "role"`);
  });
  if (problems.length) throw new K3Error("USAGE", `${where}: not a conversation`, problems);
  return messages as ChatMessage[];
}
