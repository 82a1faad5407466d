// Request bodies → native option objects, early (llama.cpp server rule: JSON stays at the HTTP
// edge). Every wrong field is a 400 naming the field in `param`; unknown fields are ignored, as
// OpenAI-compatible servers do, so clients that send extra knobs keep working.
import { deeperThan, MAX_JSON_DEPTH, parseSpeculate, type ChatMessage, type SpeculateSetting } from "../engine.ts";
import { badRequest } from "./errors.ts";

export interface SamplingRequest {
  model: string | undefined;
  stream: boolean;
  includeUsage: boolean;
  /** k3 extension `stream_options.include_progress`: progress chunks while the prompt is fed. */
  includeProgress: boolean;
  /** undefined: until the model ends its turn or the context is full. */
  maxTokens: number | undefined;
  temperature: number | undefined;
  topP: number | undefined;
  topK: number | undefined;
  minP: number | undefined;
  seed: number | undefined;
  stop: string[];
  /** k3 extension: "auto" | "off" | drafts per pass (default: the server's --speculate). */
  speculate: SpeculateSetting | undefined;
}

export interface ChatRequest extends SamplingRequest {
  messages: ChatMessage[];
  tools: unknown[] | undefined;
  toolChoice: unknown;
  responseFormat: unknown;
  thinking: boolean | undefined;
  thinkingEffort: string | undefined;
  /** k3 extension `reasoning_budget`: tokens, null = no limit, undefined = the server's default. */
  reasoningBudget: number | null | undefined;
}

export interface CompletionRequest extends SamplingRequest {
  /** One prompt: text or token ids. */
  prompt: string | number[];
}

type Body = Record<string, unknown>;

/** A request body parsed as a JSON object, or a 400. */
export function parseJsonObject(text: string): Body {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (e) {
    throw badRequest(`request body is not valid JSON: ${(e as Error).message}`, null, "invalid_json");
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw badRequest("request body must be a JSON object");
  // Deeper JSON than any real request (tool schemas included) would only reach recursive code (the
  // chat renderer) to overflow its stack: refuse it here, naming the field, before it waits in the
  // queue. The renderer applies the same bound to what it is given (k3 chat).
  const at = deeperThan(body, MAX_JSON_DEPTH, "");
  if (at) throw badRequest(`'${at}' nests deeper than ${MAX_JSON_DEPTH} levels`, at.replace(/…$/, ""), "invalid_value");
  return body as Body;
}

const typeName = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);
const wrongType = (param: string, want: string, v: unknown) => badRequest(`'${param}' must be ${want}, got ${typeName(v)}`, param, "invalid_type");

function optNumber(b: Body, key: string, lo: number, hi: number): number | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v)) throw wrongType(key, "a number", v);
  if (v < lo || v > hi) throw badRequest(`'${key}' must be between ${lo} and ${hi}, got ${v}`, key, "invalid_value");
  return v;
}

function optInt(b: Body, key: string, lo: number, hi = Number.MAX_SAFE_INTEGER): number | undefined {
  const v = optNumber(b, key, lo, hi);
  if (v !== undefined && !Number.isInteger(v)) throw wrongType(key, "an integer", v);
  return v;
}

function optBool(b: Body, key: string): boolean | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw wrongType(key, "a boolean", v);
  return v;
}

function optString(b: Body, key: string): string | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw wrongType(key, "a string", v);
  return v;
}

function parseStop(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  if (typeof v === "string") return [v];
  if (Array.isArray(v) && v.every((s) => typeof s === "string")) {
    if (v.length > 16) throw badRequest("'stop' may hold at most 16 strings", "stop", "invalid_value");
    return v as string[];
  }
  throw wrongType("stop", "a string or an array of strings", v);
}

function parseSpeculateField(v: unknown): SpeculateSetting | undefined {
  if (v === undefined || v === null) return undefined;
  try {
    return parseSpeculate(v, "'speculate'");
  } catch (err) {
    throw badRequest((err as Error).message, "speculate", "invalid_value");
  }
}

function parseSampling(b: Body): SamplingRequest {
  const model = optString(b, "model");
  const n = optInt(b, "n", 1);
  if (n !== undefined && n !== 1) throw badRequest("only n=1 is supported (one generation at a time)", "n", "invalid_value");
  // max_completion_tokens is the newer name; both are accepted, the newer wins.
  const maxTokens = optInt(b, "max_completion_tokens", 1) ?? optInt(b, "max_tokens", 1);
  const streamOptions = b.stream_options;
  if (streamOptions !== undefined && streamOptions !== null && (typeof streamOptions !== "object" || Array.isArray(streamOptions)))
    throw wrongType("stream_options", "an object", streamOptions);
  const topK = optInt(b, "top_k", -1); // -1 = off, as in vLLM
  const includeUsage = streamOptions ? optBool(streamOptions as Body, "include_usage") : undefined;
  const includeProgress = streamOptions ? optBool(streamOptions as Body, "include_progress") : undefined;
  return {
    model,
    stream: optBool(b, "stream") ?? false,
    includeUsage: includeUsage ?? false,
    includeProgress: includeProgress ?? false,
    maxTokens,
    temperature: optNumber(b, "temperature", 0, 2),
    topP: optNumber(b, "top_p", Number.MIN_VALUE, 1),
    // top_k / min_p are not OpenAI fields but vLLM, SGLang and llama.cpp accept them.
    topK: topK === -1 ? undefined : topK,
    minP: optNumber(b, "min_p", 0, 1),
    seed: optInt(b, "seed", Number.MIN_SAFE_INTEGER),
    stop: parseStop(b.stop),
    speculate: parseSpeculateField(b.speculate),
  };
}

const ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);
/** Image part types of the OpenAI chat and responses APIs, and of the K3 encoder. */
const IMAGE_PARTS = new Set(["image_url", "image", "input_image"]);

export function parseChatRequest(b: Body): ChatRequest {
  const s = parseSampling(b);
  const raw = b.messages;
  if (raw === undefined) throw badRequest("'messages' is required", "messages", "missing_required_parameter");
  if (!Array.isArray(raw)) throw wrongType("messages", "an array", raw);
  if (raw.length === 0) throw badRequest("'messages' must not be empty", "messages", "invalid_value");
  const messages = raw.map((m, i) => parseMessage(m, i));
  const tools = b.tools;
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw wrongType("tools", "an array", tools);
  // K3-specific knobs, spelled the way vLLM / SGLang take them: `chat_template_kwargs`
  // {thinking, thinking_effort}; `reasoning_effort` (OpenAI's name) is accepted for the effort.
  const kwargs = b.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && (typeof kwargs !== "object" || Array.isArray(kwargs)))
    throw wrongType("chat_template_kwargs", "an object", kwargs);
  const kw = (kwargs ?? {}) as Body;
  const thinking = optBool(kw, "thinking") ?? optBool(b, "thinking");
  const thinkingEffort = optString(kw, "thinking_effort") ?? optString(b, "reasoning_effort");
  // -1 is llama.cpp's spelling of "no limit" (as for k3 chat's --reasoning-budget).
  const budget = optInt(b, "reasoning_budget", -1);
  return {
    ...s,
    messages,
    tools: (tools as unknown[] | null) ?? undefined,
    toolChoice: b.tool_choice ?? undefined,
    responseFormat: b.response_format ?? undefined,
    thinking,
    thinkingEffort,
    reasoningBudget: budget === -1 ? null : budget,
  };
}

function parseMessage(m: unknown, i: number): ChatMessage {
  const param = `messages[${i}]`;
  if (m === null || typeof m !== "object" || Array.isArray(m)) throw wrongType(param, "an object", m);
  const msg = m as Body;
  if (typeof msg.role !== "string") throw wrongType(`${param}.role`, "a string", msg.role);
  if (!ROLES.has(msg.role)) throw badRequest(`${param}.role: unknown role '${msg.role}'`, `${param}.role`, "invalid_value");
  const c = msg.content;
  if (c !== undefined && c !== null && typeof c !== "string" && !Array.isArray(c))
    throw wrongType(`${param}.content`, "a string or an array of content parts", c);
  if (Array.isArray(c)) {
    c.forEach((part, k) => {
      const at = `${param}.content[${k}]`;
      if (part === null || typeof part !== "object" || typeof (part as Body).type !== "string")
        throw wrongType(at, "a content part object with a 'type'", part);
      // K3 here reads text only: an image must not silently become placeholder text.
      const type = (part as Body).type as string;
      if (IMAGE_PARTS.has(type)) throw badRequest(`images are not supported: ${at} is an '${type}' part (this server reads text only)`, at, "invalid_value");
      if (type !== "text") throw badRequest(`content parts of type '${type}' are not supported (${at}); only 'text' is`, at, "invalid_value");
    });
  }
  const calls = msg.tool_calls;
  if (calls !== undefined && calls !== null && !Array.isArray(calls)) throw wrongType(`${param}.tool_calls`, "an array", calls);
  // OpenAI's newer "developer" role is the system role of older models.
  return { ...(msg as unknown as ChatMessage), role: msg.role === "developer" ? "system" : msg.role };
}

export function parseCompletionRequest(b: Body): CompletionRequest {
  const s = parseSampling(b);
  return { ...s, prompt: parsePrompt(b.prompt) };
}

/** OpenAI allows a string, an array of strings, an array of token ids, or an array of arrays of
 *  ids. One generation at a time means one prompt: a one-element batch is unwrapped, a larger
 *  batch is refused. */
function parsePrompt(p: unknown): string | number[] {
  if (p === undefined || p === null) throw badRequest("'prompt' is required", "prompt", "missing_required_parameter");
  if (typeof p === "string") return p;
  if (!Array.isArray(p)) throw wrongType("prompt", "a string, an array of strings or an array of token ids", p);
  if (p.length === 0) throw badRequest("'prompt' must not be empty", "prompt", "invalid_value");
  if (p.every((x) => typeof x === "number")) {
    if (!p.every((x) => Number.isInteger(x) && x >= 0)) throw badRequest("token ids must be non-negative integers", "prompt", "invalid_value");
    return p as number[];
  }
  if (p.length > 1) throw badRequest("only one prompt per request is supported", "prompt", "invalid_value");
  const only = p[0];
  if (typeof only !== "string" && !Array.isArray(only)) throw wrongType("prompt", "a string, an array of strings or an array of token ids", p);
  if (Array.isArray(only) && !only.every((x) => typeof x === "number")) throw wrongType("prompt[0]", "an array of token ids", only);
  return parsePrompt(only);
}


/** POST /tokenize, in llama-server's shape: `content` (required), `with_pieces`, `add_special`
 *  (checked but without effect: a K3 prompt starts with no special token). */
export function parseTokenizeRequest(b: Body): { content: string; withPieces: boolean } {
  if (b.content === undefined) throw badRequest("'content' is required", "content", "missing_required_parameter");
  const content = optString(b, "content")!;
  optBool(b, "add_special");
  return { content, withPieces: optBool(b, "with_pieces") ?? false };
}

/** POST /detokenize, in llama-server's shape: `tokens`, an array of token ids. */
export function parseDetokenizeRequest(b: Body): number[] {
  const t = b.tokens;
  if (t === undefined) throw badRequest("'tokens' is required", "tokens", "missing_required_parameter");
  if (!Array.isArray(t)) throw wrongType("tokens", "an array of token ids", t);
  const bad = t.findIndex((x) => typeof x !== "number" || !Number.isInteger(x) || x < 0);
  if (bad >= 0) throw badRequest(`tokens[${bad}] must be a non-negative integer token id, got ${JSON.stringify(t[bad])}`, `tokens[${bad}]`, "invalid_value");
  return t as number[];
}
