// Typed errors: library code throws these (never exits); only src/cli/main.ts maps `code` to an
// exit status. `detail` names the file / tensor / field that failed.
export type ErrorCode =
  | "USAGE" // bad command-line input (exit 2)
  | "CONTEXT" // the prompt does not fit the context limit (exit 2; the server's context_length_exceeded)
  | "CONFIG" // config.json missing/invalid fields (exit 2)
  | "CHECKPOINT" // shard/tensor/layout problems (exit 4)
  | "BUDGET" // RAM budget below the floor (exit 3)
  | "IO" // a read or write failed or came back short (exit 4)
  | "VERIFY" // checksum mismatch (exit 4)
  | "TOKENIZER" // tokenizer missing or invalid (exit 2)
  | "SESSION" // saved session does not match / is corrupt (exit 4)
  | "CANCELLED" // the user interrupted a long step (Ctrl-C while loading: exit 130, as for a signal)
  | "INTERNAL"; // a bug in k3 (exit 1)

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
  // Bad model or data (a file k3 was given is wrong or unreadable): 4, so that 1 means a k3 bug.
  CHECKPOINT: 4,
  IO: 4,
  VERIFY: 4,
  SESSION: 4,
  BUDGET: 3,
  INTERNAL: 1,
  CANCELLED: 130,
};
