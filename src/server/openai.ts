// Response objects in OpenAI's exact shapes (chat.completion, chat.completion.chunk,
// text_completion), plus the `k3` extension object carrying the engine's stats. Fields follow
// the OpenAI API reference and what vLLM / SGLang send, so clients written for either parse ours.
import type { ParsedToolCall } from "../engine.ts";
import { statsJson } from "../report.ts";
import type { ChatResult, CompletionResult, Usage } from "../conversation.ts";

export type OpenAiFinish = "stop" | "length" | "tool_calls" | "cancelled";

/** The engine's reasons → OpenAI's. Hitting the context limit is "length" (vLLM does the same).
 *  A generation cut short by the server (it is stopping) is "cancelled", as `k3.stop_reason`
 *  says: never "stop", which would tell the client the model had finished its answer. */
export function openAiFinish(r: ChatResult["finishReason"] | CompletionResult["finishReason"]): OpenAiFinish {
  if (r === "length" || r === "context") return "length";
  if (r === "tool_calls" || r === "cancelled") return r;
  return "stop";
}

export function usageJson(u: Usage) {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedTokens },
  };
}

/** The `k3` extension: what this generation cost (bytes read, cache hits, time per token) — the
 *  same object `k3 run --json` and `k3 chat --json` print as `stats` (src/report.ts). */
export const k3Json = statsJson;

export function toolCallsJson(calls: ParsedToolCall[], requestId: string) {
  return calls.map((c, i) => ({
    id: `call_${requestId.slice(-12)}_${i}`,
    type: "function" as const,
    function: { name: c.name, arguments: c.arguments },
  }));
}

export interface Envelope {
  id: string;
  created: number;
  model: string;
}

export function chatCompletionJson(e: Envelope, r: ChatResult) {
  const toolCalls = toolCallsJson(r.toolCalls, e.id);
  return {
    id: e.id,
    object: "chat.completion",
    created: e.created,
    model: e.model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          // OpenAI sends null content on a pure tool-call turn.
          content: r.content === "" && toolCalls.length > 0 ? null : r.content,
          reasoning_content: r.reasoning === "" ? null : r.reasoning,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        logprobs: null,
        finish_reason: openAiFinish(r.finishReason),
      },
    ],
    usage: usageJson(r.usage),
    k3: k3Json(r.stats),
  };
}

export function chatChunkJson(e: Envelope, delta: Record<string, unknown>, finish: OpenAiFinish | null, extra: Record<string, unknown> = {}) {
  return {
    id: e.id,
    object: "chat.completion.chunk",
    created: e.created,
    model: e.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...extra,
  };
}

/** A k3 progress chunk (stream_options.include_progress, src/server/progress.ts): no choices. */
export function progressChunkJson(e: Envelope, object: string, progress: unknown) {
  return { id: e.id, object, created: e.created, model: e.model, choices: [], k3: { progress } };
}

/** The trailing usage chunk of `stream_options: {include_usage: true}`: no choices. */
export function usageChunkJson(e: Envelope, object: string, u: Usage) {
  return { id: e.id, object, created: e.created, model: e.model, choices: [], usage: usageJson(u) };
}

export function completionJson(e: Envelope, r: CompletionResult) {
  return {
    id: e.id,
    object: "text_completion",
    created: e.created,
    model: e.model,
    choices: [{ index: 0, text: r.text, logprobs: null, finish_reason: openAiFinish(r.finishReason) }],
    usage: usageJson(r.usage),
    // The generated ids: the only output of a model without a tokenizer, and exact for any model.
    k3: { ...k3Json(r.stats), token_ids: r.ids },
  };
}

export function completionChunkJson(e: Envelope, text: string, finish: OpenAiFinish | null, extra: Record<string, unknown> = {}) {
  return {
    id: e.id,
    object: "text_completion",
    created: e.created,
    model: e.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
    ...extra,
  };
}
