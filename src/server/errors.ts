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
    /** Extra response headers (Retry-After on 503, WWW-Authenticate on 401, Connection: close). */
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

/** Any thrown value → an ApiError, by the K3Error's code (never by its message text):
 *  CONTEXT (the prompt does not fit) is OpenAI's 400 `context_length_exceeded` blamed on
 *  `promptParam`; USAGE is the caller's fault (400); everything else is ours (500) and keeps its
 *  message and code so the operator can find it in the log. */
export function toApiError(err: unknown, promptParam = "messages"): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof K3Error) {
    if (err.code === "CONTEXT") return badRequest(err.message, promptParam, "context_length_exceeded");
    if (err.code === "USAGE") return badRequest(err.message);
    return new ApiError(500, err.message, "server_error", null, err.code.toLowerCase());
  }
  const message = err instanceof Error ? err.message : String(err);
  return new ApiError(500, `internal error: ${message}`, "server_error");
}

export function errorResponse(err: ApiError): Response {
  return Response.json(err.body(), { status: err.status, headers: err.headers });
}

/** nginx's 499: nobody reads it, but it keeps a vanished client out of the 5xx error counts and
 *  out of the error log. */
export const clientGone = (when: string) => new ApiError(499, `client closed the request ${when}`, "invalid_request_error", null, "client_closed");
