// The chat page k3 serve answers at / (docs/SERVER.md, "The chat page"): conversations kept in
// this browser, replies streamed from /v1/chat/completions with the k3 progress extension, stop,
// regenerate, edit and resend, copy, and the settings a request can carry.
import { getJson, postStream, saveKey, Unauthorized, type ModelInfo } from "./api.ts";
import { loadConversations, loadSettings, newConversation, saveConversations, saveSettings, type Conversation, type Message, type Settings } from "./store.ts";
import { editorElement, messageElement, progressText } from "./view.ts";
import { initSettings } from "./settings.ts";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

const state = {
  all: loadConversations(),
  current: undefined as Conversation | undefined,
  settings: loadSettings(),
  model: undefined as ModelInfo | undefined,
  /** The reply being generated: its controller (Stop aborts it). */
  running: undefined as AbortController | undefined,
  editing: -1,
  /** Messages of the current conversation whose reasoning the user opened. */
  opened: new Set<number>(),
};

function persist(): void {
  saveConversations(state.all);
}

function conversation(): Conversation {
  if (!state.current) {
    state.current = newConversation();
    state.all.unshift(state.current);
  }
  return state.current;
}

function drawList(): void {
  const ul = $("conversations");
  ul.replaceChildren(
    ...state.all.map((c) => {
      const li = document.createElement("li");
      li.textContent = c.title;
      li.className = c === state.current ? "current" : "";
      li.addEventListener("click", () => select(c));
      const del = document.createElement("button");
      del.type = "button";
      del.className = "delete";
      del.textContent = "×";
      del.title = "delete this conversation";
      del.addEventListener("click", (e) => {
        e.stopPropagation();
        remove(c);
      });
      li.append(del);
      return li;
    }),
  );
}

function draw(): void {
  drawList();
  const msgs = state.current?.messages ?? [];
  const act = { copy, edit, regenerate, reasoningOpen: (i: number) => state.opened.has(i), toggleReasoning: (i: number, open: boolean) => void (open ? state.opened.add(i) : state.opened.delete(i)) };
  $("messages").replaceChildren(
    ...msgs.map((m, i) =>
      i === state.editing ? editorElement(m.content, (t) => resendEdited(i, t), cancelEdit) : messageElement(m, i, i === msgs.length - 1, state.running !== undefined && i === msgs.length - 1, act),
    ),
  );
  $("send").textContent = state.running ? "Stop" : "Send";
  $("messages").scrollTop = $("messages").scrollHeight;
}

function select(c: Conversation): void {
  if (state.running) return;
  state.current = c;
  state.editing = -1;
  state.opened.clear();
  draw();
}

function remove(c: Conversation): void {
  if (state.running && c === state.current) return;
  state.all = state.all.filter((x) => x !== c);
  if (state.current === c) state.current = undefined;
  persist();
  draw();
}

async function copy(i: number): Promise<void> {
  const m = state.current!.messages[i]!;
  try {
    await navigator.clipboard.writeText(m.content);
  } catch {
    // No clipboard permission: select the text so Ctrl-C copies it.
    const node = document.querySelector(`.msg[data-index="${i}"] .content`);
    if (node) getSelection()?.selectAllChildren(node);
  }
}

function edit(i: number): void {
  if (state.running) return;
  state.editing = i;
  draw();
}

function cancelEdit(): void {
  state.editing = -1;
  draw();
}

function resendEdited(i: number, text: string): void {
  const c = conversation();
  c.messages = [...c.messages.slice(0, i), { role: "user", content: text }];
  state.editing = -1;
  void reply();
}

function regenerate(i: number): void {
  if (state.running) return;
  const c = conversation();
  c.messages = c.messages.slice(0, i);
  void reply();
}

/** The request for the conversation so far, with the settings that are set. */
function request(messages: Message[], s: Settings): Record<string, unknown> {
  const num = (v: string) => (v.trim() === "" ? undefined : Number(v));
  const body: Record<string, unknown> = {
    messages: messages.map((m) => ({ role: m.role, content: m.content, ...(m.reasoning ? { reasoning_content: m.reasoning } : {}) })),
    stream: true,
    stream_options: { include_usage: true, include_progress: true },
    chat_template_kwargs: { thinking: s.thinking === "on", ...(s.effort ? { thinking_effort: s.effort } : {}) },
    temperature: num(s.temperature),
    max_tokens: num(s.maxTokens),
    reasoning_budget: num(s.reasoningBudget),
    seed: num(s.seed),
  };
  if (s.speculate) body.speculate = /^\d+$/.test(s.speculate) ? Number(s.speculate) : s.speculate;
  return body;
}

/** Stream the assistant's reply to the conversation as it stands. */
async function reply(): Promise<void> {
  const c = conversation();
  if (c.title === "New chat" && c.messages[0]) c.title = c.messages[0].content.slice(0, 40) || "New chat";
  const m: Message = { role: "assistant", content: "" };
  const history = [...c.messages];
  c.messages.push(m);
  c.updated = Date.now();
  const ctl = new AbortController();
  state.running = ctl;
  persist();
  draw();
  const t0 = performance.now();
  let ttft: number | null = null;
  try {
    await postStream("/v1/chat/completions", request(history, state.settings), ctl.signal, (ev) => {
      if (ev.k3?.progress) return showProgress(ev.k3.progress);
      const d = ev.choices?.[0]?.delta;
      if (d?.reasoning_content || d?.content) {
        ttft ??= performance.now() - t0;
        hideProgress();
      }
      applyEvent(m, ev, ttft);
      redrawSoon();
    });
  } catch (err) {
    if (ctl.signal.aborted) m.finish = "stopped";
    else if (err instanceof Unauthorized) {
      c.messages.pop();
      state.running = undefined;
      askKey("This server needs its API key.", () => void reply());
      return;
    } else {
      m.finish = "error";
      m.error = (err as Error).message;
    }
  } finally {
    hideProgress();
  }
  state.running = undefined;
  redrawNow();
}

// While a reply streams, the page is redrawn and saved at most once per REDRAW_MS, not once per
// event: a redraw renders every message's markdown and a save writes every conversation, so per
// event a long reply cost O(n²) and, with the events already buffered, kept the main thread busy
// until the whole reply was in: a click on Stop waited behind it (the reply ran to its end).
const REDRAW_MS = 50;
let redrawTimer: ReturnType<typeof setTimeout> | undefined;

function redrawSoon(): void {
  redrawTimer ??= setTimeout(redrawNow, REDRAW_MS);
}

function redrawNow(): void {
  if (redrawTimer !== undefined) clearTimeout(redrawTimer);
  redrawTimer = undefined;
  persist();
  draw();
}

/** One stream event into the reply: text deltas, tool calls, the final numbers. */
function applyEvent(m: Message, ev: any, ttft: number | null): void {
  const ch = ev.choices?.[0];
  const d = ch?.delta ?? {};
  if (d.reasoning_content) m.reasoning = (m.reasoning ?? "") + d.reasoning_content;
  if (d.content) m.content += d.content;
  if (d.tool_calls) m.toolCalls = d.tool_calls.map((t: any) => ({ name: t.function.name, arguments: t.function.arguments }));
  if (ch?.finish_reason) m.finish = ch.finish_reason;
  const k = ev.k3;
  if (k && k.stop_reason) {
    m.stats = {
      tokensPerS: k.tokens_per_s ?? null,
      ttftMs: ttft,
      bytesPerToken: k.decode_steps > 0 ? k.bytes_read_per_token : null,
      completionTokens: k.generated_tokens,
      promptTokens: k.prompt_tokens,
      cachedTokens: 0,
      seed: k.seed ?? null,
      reasoningCut: k.reasoning_cut === true,
    };
  }
  if (ev.usage && m.stats) {
    m.stats.promptTokens = ev.usage.prompt_tokens;
    m.stats.cachedTokens = ev.usage.prompt_tokens_details?.cached_tokens ?? 0;
  }
}

function showProgress(p: { done: number; total: number; elapsed_ms: number; eta_ms: number }): void {
  $("progress").hidden = false;
  const bar = $<HTMLProgressElement>("progress-bar");
  bar.max = p.total;
  bar.value = p.done;
  $("progress-text").textContent = progressText(p);
}

function hideProgress(): void {
  $("progress").hidden = true;
}

function send(e: Event): void {
  e.preventDefault();
  if (state.running) {
    state.running.abort();
    return;
  }
  const box = $<HTMLTextAreaElement>("prompt");
  const text = box.value.trim();
  if (!text) return;
  box.value = "";
  conversation().messages.push({ role: "user", content: text });
  void reply();
}

function askKey(why: string, then: () => void): void {
  const dlg = $<HTMLDialogElement>("key-dialog");
  $("key-why").textContent = `${why} It is kept in this browser only and sent as a bearer header.`;
  dlg.onclose = () => {
    const key = $<HTMLInputElement>("key-input").value.trim();
    if (!key) return;
    saveKey(key);
    then();
  };
  dlg.showModal();
}

async function loadModel(): Promise<void> {
  try {
    const list = await getJson<{ data: ModelInfo[] }>("/v1/models");
    state.model = list.data[0];
    $("model").textContent = state.model?.id ?? "k3";
    $("demo-badge").hidden = !state.model?.k3?.demo;
    $("server-state").textContent = `context ${state.model?.max_model_len} tokens`;
    initSettings(state.settings, state.model, () => saveSettings(state.settings));
  } catch (err) {
    if (err instanceof Unauthorized) askKey("This server needs its API key.", () => void loadModel());
    else $("server-state").textContent = `server unreachable: ${(err as Error).message}`;
  }
}

function start(): void {
  state.current = state.all[0];
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) send(e);
  });
  $("new-chat").addEventListener("click", () => {
    if (state.running) return;
    state.current = undefined;
    draw();
    $("prompt").focus();
  });
  $("open-settings").addEventListener("click", () => $<HTMLDialogElement>("settings").showModal());
  $("forget-key").addEventListener("click", () => {
    saveKey(null);
    $("forget-key").textContent = "forgotten";
  });
  draw();
  void loadModel();
}

start();
