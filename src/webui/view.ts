// Drawing the conversation: one element per message, rebuilt when it changes (a streamed reply
// is redrawn per delta; conversations here are small). Reasoning sits in a collapsed <details>,
// tool calls in their own block, and each reply ends with its numbers.
import { renderMarkdown } from "./markdown.ts";
import type { Message, ReplyStats } from "./store.ts";

export interface MessageActions {
  copy(i: number): void;
  edit(i: number): void;
  regenerate(i: number): void;
  /** Whether message i's reasoning is shown (kept across redraws; collapsed by default). */
  reasoningOpen(i: number): boolean;
  toggleReasoning(i: number, open: boolean): void;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function button(label: string, cls: string, onClick: () => void): HTMLButtonElement {
  const b = el("button", cls, label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

const fmtBytes = (b: number) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : b >= 2 ** 20 ? `${(b / 2 ** 20).toFixed(1)} MiB` : `${(b / 1024).toFixed(1)} KiB`);

export function statsText(s: ReplyStats, finish: string | undefined): string {
  return [
    s.tokensPerS !== null ? `${s.tokensPerS.toFixed(2)} tokens/s` : "",
    s.ttftMs !== null ? `first token ${(s.ttftMs / 1000).toFixed(2)} s` : "",
    s.bytesPerToken !== null ? `read ${fmtBytes(s.bytesPerToken)}/token` : "",
    `${s.completionTokens} tokens (prompt ${s.promptTokens}, ${s.cachedTokens} cached)`,
    s.reasoningCut ? "reasoning cut by its budget" : "",
    s.seed !== null ? `seed ${s.seed}` : "",
    finish && finish !== "stop" ? finish : "",
  ]
    .filter(Boolean)
    .join(" · ");
}

function assistantBody(m: Message, i: number, box: HTMLElement, streaming: boolean, act: MessageActions): void {
  if (m.reasoning) {
    const d = el("details", "reasoning");
    d.open = act.reasoningOpen(i);
    d.addEventListener("toggle", () => act.toggleReasoning(i, d.open));
    d.append(el("summary", "", streaming && !m.content ? "Thinking…" : `Reasoning (${m.reasoning.length} characters)`), el("div", "reasoning-text", m.reasoning));
    box.append(d);
  }
  const content = el("div", "content");
  content.innerHTML = renderMarkdown(m.content);
  box.append(content);
  if (m.toolCalls?.length) {
    const t = el("div", "tool-calls");
    for (const c of m.toolCalls) {
      const call = el("div", "tool-call");
      call.append(el("span", "tool-name", `tool call: ${c.name}`), el("pre", "tool-args", c.arguments));
      t.append(call);
    }
    box.append(t);
  }
  if (m.error) box.append(el("div", "error", m.error));
  if (m.stats) box.append(el("div", "stats", statsText(m.stats, m.finish)));
  else if (m.finish === "stopped") box.append(el("div", "stats", "stopped"));
}

export function messageElement(m: Message, i: number, last: boolean, streaming: boolean, act: MessageActions): HTMLElement {
  const box = el("div", `msg ${m.role}`);
  box.dataset.index = String(i);
  if (m.role === "user") box.append(el("div", "content user-text", m.content));
  else assistantBody(m, i, box, streaming, act);
  if (!streaming) {
    const bar = el("div", "actions");
    bar.append(button("Copy", "copy", () => act.copy(i)));
    if (m.role === "user") bar.append(button("Edit", "edit", () => act.edit(i)));
    if (m.role === "assistant" && last) bar.append(button("Regenerate", "regenerate", () => act.regenerate(i)));
    box.append(bar);
  }
  return box;
}

/** An editor in place of user message `i`: resend (what follows it is dropped) or cancel. */
export function editorElement(text: string, onSend: (t: string) => void, onCancel: () => void): HTMLElement {
  const box = el("div", "msg user editing");
  const area = el("textarea", "edit-text");
  area.value = text;
  const bar = el("div", "actions");
  bar.append(button("Send", "edit-send", () => onSend(area.value)), button("Cancel", "edit-cancel", onCancel));
  box.append(area, bar);
  return box;
}

export function progressText(p: { done: number; total: number; elapsed_ms: number; eta_ms: number }): string {
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  return `reading the prompt: ${p.done}/${p.total} tokens · ${s(p.elapsed_ms)} · about ${s(p.eta_ms)} left`;
}
