// The page's only way to the model: the server's own OpenAI-compatible API on this origin, with
// the API key (when the server wants one) as a bearer header, never in a URL. Streams are read
// from fetch (EventSource cannot POST or send a header) and parsed as SSE.

const KEY = "k3.apiKey";

export class Unauthorized extends Error {}

export function savedKey(): string | null {
  return localStorage.getItem(KEY);
}

export function saveKey(key: string | null): void {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

function headers(): Record<string, string> {
  const key = savedKey();
  return { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) };
}

/** An error answer's message (the server's OpenAI-shaped body), else the status line. */
async function failure(res: Response): Promise<Error> {
  if (res.status === 401) return new Unauthorized("the server wants an API key");
  try {
    const body = (await res.json()) as { error?: { message?: string } };
    if (body.error?.message) return new Error(`${res.status}: ${body.error.message}`);
  } catch {
    // not JSON
  }
  return new Error(`${res.status} ${res.statusText}`);
}

export async function getJson<T>(path: string): Promise<T> {
  const res = await fetch(path, { headers: headers() });
  if (!res.ok) throw await failure(res);
  return (await res.json()) as T;
}

/** POST `body` and hand every SSE `data:` payload to `onEvent` until [DONE] or the end. */
export async function postStream(path: string, body: unknown, signal: AbortSignal, onEvent: (data: any) => void): Promise<void> {
  const res = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  if (!res.ok) throw await failure(res);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    // Stop wins over events already received: none is handed on after the abort.
    signal.throwIfAborted();
    buf += dec.decode(value, { stream: true });
    let cut: number;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of frame.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const payload = line.slice(6);
        if (payload === "[DONE]") return;
        const data = JSON.parse(payload);
        if (data.error) throw new Error(data.error.message ?? "the generation failed");
        onEvent(data);
      }
    }
  }
}

/** What /v1/models says about the served model (the `k3` object is this server's extension). */
export interface ModelInfo {
  id: string;
  max_model_len: number;
  k3?: {
    demo?: boolean;
    parallel?: number;
    speculation?: { setting: string | number; max_drafts: number; drafters: string[]; per_request: boolean };
    defaults?: { temperature: number; reasoning_budget: number | null };
  };
}
