// OpenAI-style error bodies. Every failure the server answers is one of these:
//   { "error": { "message", "type", "param", "code" } }
// with the HTTP status OpenAI (and vLLM / SGLang) use for the same situation, so client libraries
// raise their usual exception classes (openai.BadRequestError, NotFoundError, …).
import { K3Error } from "../errors.ts";

export type ApiErrorType = "invalid_request_error" | "authentication_error" | "not_found_error" | "server_error" | "overloaded_error";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: ApiErrorType = "invalid_request_error",
    readonly param: string | null = null,
    readonly code: string | null = null,
    /** Extra response headers (Retry-After on 503, WWW-Authenticate on 401). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "ApiError";
  }

  body() {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, message, "invalid_request_error", param, code);

/** Any thrown value → an ApiError. Library K3Error("USAGE") is the caller's fault (400); a prompt
 *  that does not fit the context gets OpenAI's `context_length_exceeded` code; everything else is
 *  ours (500) and keeps its message so the operator can find it in the log. */
export function toApiError(err: unknown, promptParam = "messages"): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof K3Error) {
    if (err.code === "USAGE") {
      const context = /context/i.test(err.message);
      return badRequest(err.message, context ? promptParam : null, context ? "context_length_exceeded" : null);
    }
    return new ApiError(500, err.message, "server_error", null, err.code.toLowerCase());
  }
  const message = err instanceof Error ? err.message : String(err);
  return new ApiError(500, `internal error: ${message}`, "server_error");
}

export function errorResponse(err: ApiError): Response {
  return Response.json(err.body(), { status: err.status, headers: err.headers });
}
