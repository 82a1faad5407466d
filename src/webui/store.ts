// Conversations live in this browser (localStorage), never on the server: the server keeps no
// chat history, only the sessions and prefix cache that make a resent conversation cheap.

export interface ReplyStats {
  /** Decode tokens per second (the engine's ms_per_token). */
  tokensPerS: number | null;
  /** From sending the request to the first token, as this page saw it. */
  ttftMs: number | null;
  bytesPerToken: number | null;
  completionTokens: number;
  promptTokens: number;
  cachedTokens: number;
  seed: number | null;
  reasoningCut: boolean;
}

export interface Message {
  role: "user" | "assistant";
  content: string;
  reasoning?: string;
  toolCalls?: { name: string; arguments: string }[];
  /** How the reply ended: stop, length, tool_calls, cancelled, "stopped" (by you), "error". */
  finish?: string;
  error?: string;
  stats?: ReplyStats;
}

export interface Conversation {
  id: string;
  title: string;
  messages: Message[];
  updated: number;
}

const KEY = "k3.conversations";

export function loadConversations(): Conversation[] {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) ?? "[]");
    return Array.isArray(v) ? v : [];
  } catch {
    return [];
  }
}

export function saveConversations(all: Conversation[]): void {
  localStorage.setItem(KEY, JSON.stringify(all));
}

export function newConversation(): Conversation {
  return { id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`, title: "New chat", messages: [], updated: Date.now() };
}

export interface Settings {
  temperature: string;
  thinking: "on" | "off";
  effort: string;
  maxTokens: string;
  reasoningBudget: string;
  seed: string;
  /** "" = the server's default; "auto", "off" or a number of drafts. */
  speculate: string;
}

const SETTINGS = "k3.settings";
const DEFAULTS: Settings = { temperature: "", thinking: "on", effort: "", maxTokens: "", reasoningBudget: "", seed: "", speculate: "" };

export function loadSettings(): Settings {
  try {
    return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(SETTINGS) ?? "{}") };
  } catch {
    return { ...DEFAULTS };
  }
}

export function saveSettings(s: Settings): void {
  localStorage.setItem(SETTINGS, JSON.stringify(s));
}
