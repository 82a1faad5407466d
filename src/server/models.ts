// The names the served model answers to: its id (the directory's name or --model-name) and any
// --alias, compared without regard to case, so clients configured with `kimi-k3`, `Kimi-K3` or
// `moonshotai/Kimi-K3` all reach it. Responses always name the model by its id.
import { ApiError } from "./errors.ts";

export class ModelNames {
  private readonly known: Set<string>;

  constructor(
    readonly id: string,
    readonly aliases: readonly string[] = [],
  ) {
    this.known = new Set([id, ...aliases].map((n) => n.toLowerCase()));
  }

  serves(name: string): boolean {
    return this.known.has(name.toLowerCase());
  }

  /** A request's `model` field, if given, must name this model. OpenAI answers 404 here. */
  check(requested: string | undefined): void {
    if (requested !== undefined && !this.serves(requested)) throw this.notFound(requested);
  }

  notFound(requested: string): ApiError {
    const also = this.aliases.length > 0 ? ` (or ${this.aliases.map((a) => `'${a}'`).join(", ")})` : "";
    return new ApiError(404, `The model '${requested}' does not exist; this server serves '${this.id}'${also}`, "not_found_error", "model", "model_not_found");
  }
}
