// Typed errors: library code throws these (never exits); only src/cli/main.ts maps `code` to an
// exit status. `detail` names the file / tensor / field that failed.
export type ErrorCode =
  | "USAGE" // bad command-line input (exit 2)
  | "CONTEXT" // the prompt does not fit the context limit (exit 2; the server's context_length_exceeded)
  | "CONFIG" // config.json missing/invalid fields (exit 2)
  | "CHECKPOINT" // shard/tensor/layout problems (exit 1)
  | "BUDGET" // RAM budget below the floor (exit 3)
  | "IO" // a read failed or came back short (exit 1)
  | "VERIFY" // checksum mismatch (exit 1)
  | "TOKENIZER" // tokenizer missing or invalid (exit 2)
  | "SESSION" // saved session does not match / is corrupt (exit 1)
  | "INTERNAL";

export class K3Error extends Error {
  constructor(
    public readonly code: ErrorCode,
    message: string,
    public readonly problems: string[] = [],
  ) {
    super(problems.length ? `${message}\n  - ${problems.join("\n  - ")}` : message);
    this.name = "K3Error";
  }
}

export const EXIT_CODES: Record<ErrorCode, number> = {
  USAGE: 2,
  CONTEXT: 2,
  CONFIG: 2,
  TOKENIZER: 2,
  CHECKPOINT: 1,
  IO: 1,
  VERIFY: 1,
  SESSION: 1,
  BUDGET: 3,
  INTERNAL: 1,
};
