// K3 chat rendering (XTML): a conversation → segments, each plain text or control.
//
// Reproduces the release encoder `encoding_k3.build_chat_segments` byte for byte on the 38 recorded
// cases in reference/k3/chat-template-cases.json (test/chat.test.ts checks every one).
// Invariants the tokenizer relies on:
//   - control segments hold ONLY renderer-made markers (<|open|>, <|close|>, <|sep|>, <|end_of_msg|>)
//     and caller-supplied image prompts; every byte of user/assistant/tool text is a plain segment,
//     so a user typing "<|open|>" gets plain-text tokens, never the control id;
//   - no segment is empty (the encoder skips empty pieces; an empty one would still be harmless
//     to the tokenizer but would break byte equality with the cases);
//   - attribute pieces (" role", '="', value, '"') are separate plain segments: BPE never merges
//     across them, and the model was trained on exactly that split.
// The format itself is described in docs/CHAT.md.

import { K3Error } from "../errors.ts";
import { deeperThan, MAX_JSON_DEPTH } from "./json-depth.ts";
import { deepSort, dumpsPy, fromJs, parsePy, PyJsonDepthError, PyJsonSyntaxError, xtmlTypeName, type PyJson } from "./pyjson.ts";

export type Segment = [text: string, isControl: boolean];

export type ContentPart =
  | { type: "text"; text: string }
  | { type: "image_url"; image_url?: unknown }
  | { type: "image"; image?: unknown }
  | { type: string; [k: string]: unknown };

export interface ToolCallInput {
  id?: string | number | null;
  type?: string;
  function?: { name: string; arguments?: string | Record<string, unknown> | null };
  /** Flat shape (`tool_call.get("function", tool_call)`): name/arguments on the call itself. */
  name?: string;
  arguments?: string | Record<string, unknown> | null;
}

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | (string & {});
  content?: string | ContentPart[] | null;
  name?: string | null;
  reasoning_content?: string | null;
  /** Alias of reasoning_content (used when reasoning_content is empty/absent). */
  reasoning?: string | null;
  tool_calls?: ToolCallInput[] | null;
  tool_call_id?: string | number | null;
  /** Tool-result message: the tool's name when it cannot be matched to a call. */
  tool?: string | null;
  /** System message that declares extra tools mid-conversation ("dynamic tools"). */
  tools?: unknown[] | null;
}

/** The release encoder's keyword arguments. */
export interface ChatInput {
  messages: ChatMessage[];
  tools?: unknown[] | null;
  /** "required" and "none" add a system message; "auto" and object forms add nothing. */
  tool_choice?: unknown;
  response_format?: unknown;
  /** Overrides response_format.json_schema.schema when given. */
  response_schema?: unknown;
  thinking?: boolean;
  /** "low" | "high" | "max"; only used when thinking is on. */
  thinking_effort?: string | null;
  add_generation_prompt?: boolean;
  /** One control string per image, in order (image parts and <|kimi_image_placeholder|> in text). */
  image_prompts?: string[] | null;
}

export const OPEN = "<|open|>";
export const CLOSE = "<|close|>";
export const SEP = "<|sep|>";
export const END_OF_MSG = "<|end_of_msg|>";
export const IMAGE_PLACEHOLDER = "<|kimi_image_placeholder|>";
export const VALID_THINKING_EFFORTS = ["low", "high", "max"] as const;
/** The markup that ends the think channel and opens the answer, exactly as a rendered assistant
 *  turn has it (renderAssistant: close think, open response). A reasoning budget feeds it to the
 *  model when the model has thought long enough (src/conversation.ts). */
export const CLOSE_THINK_OPEN_RESPONSE: readonly Segment[] = [
  [CLOSE, true],
  ["think", false],
  [SEP, true],
  [OPEN, true],
  ["response", false],
  [SEP, true],
];
/** The release's *served* entry point (tokenization_kimi.apply_chat_template) defaults
 *  thinking_effort to "max" before calling build_chat_segments; renderChat itself adds no default
 *  (the recorded cases without an effort have no thinking-effort message). Servers that want to
 *  behave like Moonshot's endpoint pass this explicitly. */
export const SERVED_DEFAULT_THINKING_EFFORT = "max";

const TOOL_DECLARE_HEAD = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
const DYNAMIC_TOOL_DECLARE_HEAD =
  "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n" +
  "You have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n```json\n";
const JSON_ONLY =
  "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";

/** Segment builder: drops empty pieces, as the encoder does. */
class SegmentWriter {
  readonly out: Segment[] = [];
  constructor(private readonly images: ImageSplicer) {}
  control(text: string) {
    if (text) this.out.push([text, true]);
  }
  text(text: string) {
    if (text) this.out.push([text, false]);
  }
  /** Message text: plain, except image placeholders resolved to the caller's image prompts. */
  messageText(text: string) {
    this.images.splice(text, this);
  }
  open(tag: string, attrs: [string, string][] = []) {
    this.control(OPEN);
    this.text(tag);
    for (const [k, v] of attrs) {
      this.text(` ${k}`);
      this.text('="');
      this.text(escapeAttr(v));
      this.text('"');
    }
    this.control(SEP);
  }
  close(tag: string) {
    this.control(CLOSE);
    this.text(tag);
    this.control(SEP);
  }
  message(attrs: [string, string][], body: () => void) {
    this.open("message", attrs);
    body();
    this.close("message");
    this.control(END_OF_MSG);
  }
  internalSystem(type: string, body: string) {
    this.message(
      [
        ["role", "system"],
        ["type", type],
      ],
      () => this.text(body.trim()),
    );
  }
}

/** The encoder escapes exactly these two characters in attribute values (`<` and `>` stay). */
export function escapeAttr(v: string): string {
  return v.replaceAll("&", "&amp;").replaceAll('"', "&quot;");
}

/** Resolves image placeholders in message text, in order, to `image_prompts` (control segments).
 *  Without image_prompts the placeholder stays plain text (case image_placeholder_unresolved). */
class ImageSplicer {
  private next = 0;
  constructor(private readonly prompts: string[] | null) {}
  splice(text: string, w: SegmentWriter) {
    if (!this.prompts) return w.text(text);
    const pieces = text.split(IMAGE_PLACEHOLDER);
    for (let k = 0; k < pieces.length; k++) {
      if (k > 0) {
        const prompt = this.prompts[this.next++];
        if (prompt === undefined) {
          throw new K3Error("USAGE", `chat has more images than image_prompts (${this.prompts.length})`);
        }
        w.control(prompt);
      }
      w.text(pieces[k]!);
    }
  }
  checkAllUsed() {
    if (this.prompts && this.next !== this.prompts.length) {
      throw new K3Error("USAGE", `image_prompts has ${this.prompts.length} entries but the chat has ${this.next} images`);
    }
  }
}

/** Shapes the renderer relies on, checked up front: a malformed conversation is the caller's
 *  error (USAGE: exit 2 in the CLI, 400 from the server), never a TypeError deep inside. */
function checkInput(input: ChatInput): void {
  const problems: string[] = [];
  const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
  const str = (v: unknown) => v === undefined || v === null || typeof v === "string";
  const strOrNum = (v: unknown) => str(v) || typeof v === "number";
  if (!isObj(input) || !Array.isArray(input.messages)) throw new K3Error("USAGE", "invalid conversation", ["messages must be an array of message objects"]);
  // The renderer walks tools, schemas and argument objects recursively: bound their depth first.
  for (const field of ["messages", "tools", "tool_choice", "response_format", "response_schema"] as const) {
    const at = deeperThan(input[field], MAX_JSON_DEPTH, field);
    if (at) throw new K3Error("USAGE", `${at}: nested deeper than ${MAX_JSON_DEPTH} levels`);
  }
  input.messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (!isObj(m)) return void problems.push(`${at}: expected an object`);
    if (typeof m.role !== "string") problems.push(`${at}.role: expected a string`);
    for (const k of ["name", "reasoning_content", "reasoning", "tool"] as const) if (!str(m[k])) problems.push(`${at}.${k}: expected a string`);
    if (!strOrNum(m.tool_call_id)) problems.push(`${at}.tool_call_id: expected a string`);
    const c = m.content;
    if (Array.isArray(c)) {
      c.forEach((part, j) => {
        if (!isObj(part) || typeof part.type !== "string") problems.push(`${at}.content[${j}]: expected an object with a string "type"`);
        else if (part.type === "text" && typeof part.text !== "string") problems.push(`${at}.content[${j}].text: expected a string`);
      });
    } else if (!str(c)) problems.push(`${at}.content: expected a string, an array of parts, or null`);
    if (m.tool_calls !== undefined && m.tool_calls !== null) {
      if (!Array.isArray(m.tool_calls)) problems.push(`${at}.tool_calls: expected an array`);
      else
        m.tool_calls.forEach((call, j) => {
          const ct = `${at}.tool_calls[${j}]`;
          if (!isObj(call)) return void problems.push(`${ct}: expected an object`);
          if (!strOrNum(call.id)) problems.push(`${ct}.id: expected a string`);
          const fn = call.function ?? call;
          if (!isObj(fn) || typeof fn.name !== "string") problems.push(`${ct}.function.name: expected a string`);
          else if (!(fn.arguments === undefined || fn.arguments === null || typeof fn.arguments === "string" || isObj(fn.arguments)))
            problems.push(`${ct}.function.arguments: expected a JSON string or an object`);
        });
    }
    if (m.tools !== undefined && m.tools !== null && !Array.isArray(m.tools)) problems.push(`${at}.tools: expected an array`);
  });
  if (input.tools !== undefined && input.tools !== null && !Array.isArray(input.tools)) problems.push("tools: expected an array");
  if (problems.length) throw new K3Error("USAGE", "invalid conversation", problems);
}

export function renderChat(input: ChatInput): Segment[] {
  checkInput(input);
  const thinking = input.thinking ?? true;
  const images = new ImageSplicer(input.image_prompts ?? null);
  const w = new SegmentWriter(images);

  if (input.tools && input.tools.length > 0) {
    w.internalSystem("tool-declare", toolDeclareBody(input.tools, false));
  }
  // Effort is validated and emitted only while thinking is on (case thinking_effort_without_thinking).
  if (thinking && input.thinking_effort != null) renderThinkingEffort(w, input.thinking_effort);
  renderMessages(w, input.messages, thinking);
  renderToolChoice(w, input.tool_choice);
  renderResponseFormat(w, input.response_format, input.response_schema);

  if (input.add_generation_prompt ?? true) {
    w.open("message", [["role", "assistant"]]);
    w.open(thinking ? "think" : "response");
  }
  images.checkAllUsed();
  return w.out;
}

function renderThinkingEffort(w: SegmentWriter, effort: string): void {
  if (!(VALID_THINKING_EFFORTS as readonly string[]).includes(effort)) {
    throw new K3Error("USAGE", `unsupported thinking_effort=${JSON.stringify(effort)}`, [
      `supported values are ${VALID_THINKING_EFFORTS.join(", ")}`,
    ]);
  }
  w.internalSystem(
    "thinking-effort",
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), " +
      "supported values include `low`, `medium`, `high`, and `max`.\n" +
      `Now the system is invoked with \`thinking_effort=${effort}\`.`,
  );
}

function renderMessages(w: SegmentWriter, messages: ChatMessage[], thinking: boolean): void {
  // Tool messages are numbered 1.. after each assistant turn; a tool message without a name takes
  // the name of the call at its position (case tool_result_unmatched).
  let currentCalls: ToolCallInput[] = [];
  let toolIndex = 0;
  for (const [pos, msg] of reorderToolResults(messages).entries()) {
    switch (msg.role) {
      case "user":
      case "system": {
        if (msg.role === "system" && Array.isArray(msg.tools) && msg.tools.length > 0) {
          w.internalSystem("tool-declare", toolDeclareBody(msg.tools, true));
          break;
        }
        w.message(roleAttrs(msg), () => renderContent(w, msg.content));
        break;
      }
      case "tool": {
        toolIndex++;
        let name = msg.tool ?? msg.name ?? undefined;
        if (name == null && toolIndex <= currentCalls.length) name = functionOf(currentCalls[toolIndex - 1]!).name;
        if (name == null) {
          throw new K3Error("USAGE", `messages[${pos}]: tool message needs a resolvable tool name`, [
            "give it `tool` or `name`, or a `tool_call_id` / position matching a preceding assistant tool call",
          ]);
        }
        const attrs: [string, string][] = [
          ["role", "tool"],
          ["tool", name],
          ["index", String(toolIndex)],
        ];
        w.message(attrs, () => renderContent(w, msg.content));
        break;
      }
      case "assistant": {
        currentCalls = msg.tool_calls ?? [];
        toolIndex = 0;
        w.message(roleAttrs(msg), () => renderAssistant(w, msg, thinking, pos));
        break;
      }
      default:
        // The encoder silently drops unknown roles; we refuse, because a message that vanishes
        // from the prompt is a bug nobody would find.
        throw new K3Error("USAGE", `messages[${pos}]: unknown role ${JSON.stringify(msg.role)}`, [
          "roles are system, user, assistant, tool",
        ]);
    }
  }
}

function renderToolChoice(w: SegmentWriter, choice: ChatInput["tool_choice"]): void {
  if (choice === "required") {
    w.internalSystem(
      "tool-choice",
      "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.",
    );
  } else if (choice === "none") {
    w.internalSystem(
      "tool-choice",
      "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.",
    );
  }
}

function roleAttrs(msg: ChatMessage): [string, string][] {
  const attrs: [string, string][] = [["role", msg.role]];
  if (typeof msg.name === "string" && msg.name !== "") attrs.push(["name", msg.name]);
  return attrs;
}

function toolDeclareBody(tools: unknown[], dynamic: boolean): string {
  const json = dumpsPy(deepSort(fromJs(tools)), true);
  return `${dynamic ? DYNAMIC_TOOL_DECLARE_HEAD : TOOL_DECLARE_HEAD}${json}\n\`\`\``;
}

/** String content, or parts rendered back to back with no separator; an image part stands for the
 *  placeholder, which the image splicer turns into that image's prompt. */
function renderContent(w: SegmentWriter, content: ChatMessage["content"]) {
  if (typeof content === "string") return w.messageText(content);
  if (!Array.isArray(content)) return;
  for (const part of content) {
    if (part.type === "image" || part.type === "image_url") w.messageText(IMAGE_PLACEHOLDER);
    else if (typeof (part as { text?: unknown }).text === "string") w.messageText((part as { text: string }).text);
  }
}

function renderAssistant(w: SegmentWriter, msg: ChatMessage, thinking: boolean, pos: number) {
  // With thinking off, past turns carry no think channel at all.
  if (thinking) {
    const reasoning = msg.reasoning_content || msg.reasoning; // Python `a or b`
    w.open("think");
    if (typeof reasoning === "string" && reasoning.trim() !== "") w.messageText(reasoning);
    w.close("think");
  }
  w.open("response");
  renderContent(w, msg.content);
  w.close("response");

  const calls = msg.tool_calls ?? [];
  if (calls.length === 0) return;
  w.open("tools");
  calls.forEach((call, k) => {
    const fn = functionOf(call);
    if (typeof fn.name !== "string") {
      throw new K3Error("USAGE", `messages[${pos}].tool_calls[${k}]: missing function name`);
    }
    w.open("call", [
      ["tool", fn.name],
      ["index", String(k + 1)],
    ]);
    const args = normalizeArguments(fn.arguments, `messages[${pos}].tool_calls[${k}]`);
    if (args.kind === "raw") {
      // Unparseable JSON is passed through verbatim (case tool_call_broken_json).
      w.open("json", [["type", "object"]]);
      w.messageText(args.text);
      w.close("json");
    } else {
      for (const [key, value] of args.entries) {
        w.open("argument", [
          ["key", key],
          ["type", xtmlTypeName(value)],
        ]);
        w.messageText(value.t === "str" ? value.v : dumpsPy(value));
        w.close("argument");
      }
    }
    w.close("call");
  });
  w.close("tools");
}

function functionOf(call: ToolCallInput): { name?: string; arguments?: ToolCallInput["arguments"] } {
  return call.function && typeof call.function === "object" ? call.function : call;
}

type NormalizedArgs = { kind: "entries"; entries: [string, PyJson][] } | { kind: "raw"; text: string };

/** The encoder's normalize_tool_arguments: a dict is used as is; a string is json.loads'ed, and
 *  kept raw when it does not parse; empty/None means no arguments. Valid JSON that is not an
 *  object is an error in the encoder too. */
function normalizeArguments(args: ToolCallInput["arguments"], where: string): NormalizedArgs {
  if (args == null) return { kind: "entries", entries: [] };
  if (typeof args === "string") {
    if (args.trim() === "") return { kind: "entries", entries: [] };
    let parsed: PyJson;
    try {
      parsed = parsePy(args);
    } catch (e) {
      if (e instanceof PyJsonSyntaxError) return { kind: "raw", text: args };
      if (e instanceof PyJsonDepthError) throw new K3Error("USAGE", `${where}.function.arguments: ${e.message}`);
      throw e;
    }
    if (parsed.t !== "dict") throw new K3Error("USAGE", `${where}: arguments must be a JSON object`);
    return { kind: "entries", entries: [...parsed.v] };
  }
  if (typeof args === "object" && !Array.isArray(args)) {
    const v = fromJs(args);
    return { kind: "entries", entries: v.t === "dict" ? [...v.v] : [] };
  }
  throw new K3Error("USAGE", `${where}: arguments must be a JSON object or a string`);
}

function renderResponseFormat(w: SegmentWriter, format: unknown, schemaOverride: unknown) {
  if (format == null) return;
  const type =
    typeof format === "string" ? format : typeof format === "object" ? (format as { type?: unknown }).type : undefined;
  if (type === "json_object") {
    w.internalSystem("response-format", `The system is invoked with \`response_format=json_object\`.\n${JSON_ONLY}`);
  } else if (type === "json_schema") {
    // The schema sits in json_schema.schema (OpenAI shape) or is json_schema itself
    // (case response_format_schema_inline).
    const js = (format as { json_schema?: unknown }).json_schema;
    let schema: unknown = schemaOverride;
    if (schema === undefined) {
      schema = js && typeof js === "object" && "schema" in js ? (js as { schema: unknown }).schema : (js ?? null);
    }
    const json = dumpsPy(deepSort(fromJs(schema)), true);
    w.internalSystem(
      "response-format",
      `The system is invoked with \`response_format=json_schema\`.\n${JSON_ONLY}\n` +
        `The JSON data must match the following schema:\n\`\`\`json\n${json}\n\`\`\``,
    );
  }
}

/** Re-sort each run of consecutive tool results into the order of the preceding assistant's calls,
 *  matching tool_call_id to the call id (case tool_results_out_of_order). A run with any unmatched
 *  result is left as written. Matched results take the call's function name. */
function reorderToolResults(messages: ChatMessage[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  let idIndex = new Map<string, { position: number; name?: string }>();
  for (let i = 0; i < messages.length; ) {
    const msg = messages[i]!;
    if (msg.role === "assistant") {
      idIndex = new Map();
      (msg.tool_calls ?? []).forEach((call, k) => {
        if (call.id == null) return;
        const key = pyStrScalar(call.id);
        if (!idIndex.has(key)) idIndex.set(key, { position: k + 1, name: functionOf(call).name });
      });
    }
    if (msg.role !== "tool") {
      out.push(msg);
      i++;
      continue;
    }
    const run: { msg: ChatMessage; position?: number; name?: string; offset: number }[] = [];
    for (; i < messages.length && messages[i]!.role === "tool"; i++) {
      const m = messages[i]!;
      const id = m.tool_call_id ?? (m as { id?: string | number | null }).id;
      const hit = id == null ? undefined : idIndex.get(pyStrScalar(id));
      run.push({ msg: m, position: hit?.position, name: hit?.name, offset: run.length });
    }
    if (run.some((r) => r.position === undefined)) {
      for (const r of run) out.push(r.msg);
      continue;
    }
    run.sort((a, b) => a.position! - b.position! || a.offset - b.offset);
    for (const r of run) out.push(r.name === undefined ? r.msg : { ...r.msg, tool: r.name });
  }
  return out;
}

/** Python str() of a scalar id (ids are compared as strings). */
function pyStrScalar(v: unknown): string {
  if (v === true) return "True";
  if (v === false) return "False";
  return String(v);
}

/** Token ids of rendered segments: plain text with specials disabled, control with specials on. */
export function segmentsToIds(
  segments: Segment[],
  tok: { encode(text: string): number[]; encodeWithSpecials(text: string): number[] },
): number[] {
  const ids: number[] = [];
  for (const [text, isControl] of segments) {
    for (const id of isControl ? tok.encodeWithSpecials(text) : tok.encode(text)) ids.push(id);
  }
  return ids;
}
