// Parsing the model's XTML output back into reasoning, content and tool calls.
//
// Generation starts right after the prompt's `<|open|>think<|sep|>` (thinking on) or
// `<|open|>response<|sep|>` (thinking off); the model then writes, as in a rendered assistant turn:
//   reasoning <|close|>think<|sep|> <|open|>response<|sep|> content <|close|>response<|sep|>
//   [<|open|>tools<|sep|>
//      <|open|>call tool="NAME" index="1"<|sep|>
//        <|open|>argument key="K" type="string|number|boolean|null|object|array"<|sep|>VALUE<|close|>argument<|sep|>…
//        | <|open|>json type="object"<|sep|>RAW<|close|>json<|sep|>
//      <|close|>call<|sep|> …
//    <|close|>tools<|sep|>]
//   <|close|>message<|sep|><|end_of_msg|>
// (without the spaces). The parser works on decoded text, so it is fed text that includes the
// control strings. It never throws: truncated output (max tokens, a stream cut mid-way) yields what
// was complete. Text is emitted as soon as it cannot be the start of a marker.

import { dumpsPy, parsePy } from "./pyjson.ts";

export interface ParsedToolCall {
  /** 1-based position the model gave the call (`index` attribute). */
  index: number;
  name: string;
  /** JSON object text, OpenAI `function.arguments` style; a `json` block's raw text verbatim. */
  arguments: string;
}

export interface AssistantOutput {
  reasoning: string;
  content: string;
  toolCalls: ParsedToolCall[];
  /** True once `<|close|>message<|sep|>` or `<|end_of_msg|>` was seen. */
  finished: boolean;
}

export interface StreamDelta {
  reasoningDelta: string;
  contentDelta: string;
}

type State = "think" | "between" | "response" | "tools" | "call" | "argument" | "json" | "done";

const OPEN = "<|open|>";
const CLOSE = "<|close|>";
const SEP = "<|sep|>";
const END_OF_MSG = "<|end_of_msg|>";
const MARKERS = [OPEN, CLOSE, SEP, END_OF_MSG];
/** A real tag (`call tool="…" index="…"`) is short; past this many characters without `<|sep|>`
 *  an `<|open|>` is treated as literal text so a stray marker cannot stall a stream forever. */
const MAX_TAG_CHARS = 512;

export class AssistantStreamParser {
  private buf = "";
  private state: State;
  private reasoning = "";
  private content = "";
  private calls: ParsedToolCall[] = [];
  private call: { name: string; index: number; args: [string, string][]; raw: string | null } | null = null;
  private arg: { key: string; type: string } | null = null;
  private valueText = "";

  constructor(thinking: boolean) {
    this.state = thinking ? "think" : "response";
  }

  get finished(): boolean {
    return this.state === "done";
  }

  /** In the think channel with no partial marker held back: the point where a reasoning budget
   *  may close the channel without cutting a marker in two. */
  get thinkingAtBoundary(): boolean {
    return this.state === "think" && this.buf === "";
  }

  /** Completed tool calls so far. */
  get toolCalls(): ParsedToolCall[] {
    return this.calls.slice();
  }

  push(textDelta: string): StreamDelta {
    this.buf += textDelta;
    return this.drain(false);
  }

  /** End of output: flush held text. A dangling `<|` that cannot start a marker is text; a cut-off
   *  marker or unfinished tag is dropped, as is an unfinished tool call. */
  finish(): StreamDelta {
    return this.drain(true);
  }

  result(): AssistantOutput {
    return { reasoning: this.reasoning, content: this.content, toolCalls: this.toolCalls, finished: this.finished };
  }

  private drain(final: boolean): StreamDelta {
    const d: StreamDelta = { reasoningDelta: "", contentDelta: "" };
    while (this.buf.length > 0 && this.state !== "done") {
      const lt = this.buf.indexOf("<|");
      if (lt < 0) {
        // Hold a trailing "<": it may begin a marker in the next delta.
        const keep = !final && this.buf.endsWith("<") ? 1 : 0;
        this.text(this.buf.slice(0, this.buf.length - keep), d);
        this.buf = this.buf.slice(this.buf.length - keep);
        break;
      }
      this.text(this.buf.slice(0, lt), d);
      this.buf = this.buf.slice(lt);
      if (this.buf.startsWith(END_OF_MSG)) {
        this.state = "done";
        break;
      }
      const opener = this.buf.startsWith(OPEN) ? OPEN : this.buf.startsWith(CLOSE) ? CLOSE : null;
      if (opener) {
        const sep = this.buf.indexOf(SEP, opener.length);
        const tooLong = (sep < 0 ? this.buf.length : sep) - opener.length > MAX_TAG_CHARS;
        if (sep >= 0 && !tooLong) {
          const body = this.buf.slice(opener.length, sep);
          const whole = this.buf.slice(0, sep + SEP.length);
          this.buf = this.buf.slice(sep + SEP.length);
          this.tag(opener === OPEN, body, whole, d);
          continue;
        }
        if (!tooLong) {
          if (final) this.buf = ""; // unfinished tag at the end of output: markup, not text
          break;
        }
        this.text(opener, d);
        this.buf = this.buf.slice(opener.length);
        continue;
      }
      if (MARKERS.some((m) => m.startsWith(this.buf))) {
        // A marker may still complete; at the end of output it is a cut-off marker (control
        // tokens decode whole, so only a character-level cut produces this): drop it.
        if (final) this.buf = "";
        break;
      }
      this.text("<|", d);
      this.buf = this.buf.slice(2);
    }
    if (this.state === "done") this.buf = "";
    return d;
  }

  private text(t: string, d: StreamDelta) {
    if (!t) return;
    switch (this.state) {
      case "think":
        this.reasoning += t;
        d.reasoningDelta += t;
        break;
      case "between":
        // Answer text after </think> without a response tag: still the answer. Whitespace alone
        // between tags is layout, not content.
        if (t.trim() === "") break;
        this.state = "response";
        this.text(t, d);
        break;
      case "response":
        this.content += t;
        d.contentDelta += t;
        break;
      case "argument":
      case "json":
        this.valueText += t;
        break;
      default:
        break; // between tool tags: layout only
    }
  }

  private tag(isOpen: boolean, body: string, whole: string, d: StreamDelta) {
    const space = body.indexOf(" ");
    const name = space < 0 ? body : body.slice(0, space);
    const attrs = parseAttrs(space < 0 ? "" : body.slice(space));
    const key = `${isOpen ? "open" : "close"} ${name}`;
    switch (key) {
      case "open think":
        this.state = "think";
        return;
      case "close think":
        if (this.state === "think") this.state = "between";
        return;
      case "open response":
        this.state = "response";
        return;
      case "close response":
        if (this.state === "response") this.state = "between";
        return;
      case "open tools":
        this.state = "tools";
        return;
      case "close tools":
        this.state = "between";
        return;
      case "open call":
        this.call = { name: attrs.get("tool") ?? "", index: Number(attrs.get("index") ?? this.calls.length + 1), args: [], raw: null };
        this.state = "call";
        return;
      case "open argument":
        this.arg = { key: attrs.get("key") ?? "", type: attrs.get("type") ?? "string" };
        this.valueText = "";
        this.state = "argument";
        return;
      case "close argument":
        if (this.call && this.arg) this.call.args.push([this.arg.key, argumentJson(this.arg.type, this.valueText)]);
        this.arg = null;
        this.state = "call";
        return;
      case "open json":
        this.valueText = "";
        this.state = "json";
        return;
      case "close json":
        if (this.call) this.call.raw = this.valueText;
        this.state = "call";
        return;
      case "close call":
        if (this.call) {
          const args =
            this.call.raw ?? `{${this.call.args.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`;
          this.calls.push({ index: this.call.index, name: this.call.name, arguments: args });
        }
        this.call = null;
        this.state = "tools";
        return;
      case "close message":
        this.state = "done";
        return;
      default:
        // Not a tag we know: in a text channel it is text the model wrote.
        this.text(whole, d);
    }
  }
}

/** Parse a whole (possibly truncated) generation. */
export function parseAssistantOutput(text: string, thinking: boolean): AssistantOutput {
  const p = new AssistantStreamParser(thinking);
  p.push(text);
  p.finish();
  return p.result();
}

const ENTITIES: Record<string, string> = { "&amp;": "&", "&quot;": '"', "&lt;": "<", "&gt;": ">", "&apos;": "'", "&#39;": "'" };

function parseAttrs(s: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const a of s.matchAll(/\s*([^\s=]+)="([^"]*)"/g)) {
    m.set(a[1]!, a[2]!.replace(/&(?:amp|quot|lt|gt|apos|#39);/g, (e) => ENTITIES[e]!));
  }
  return m;
}

/** One argument's JSON value text from its XTML type and body. A body that does not fit its
 *  declared type is kept as a JSON string rather than dropped. */
function argumentJson(type: string, body: string): string {
  if (type === "string") return JSON.stringify(body);
  try {
    const v = parsePy(body.trim());
    const ok =
      (type === "number" && (v.t === "int" || v.t === "float")) ||
      (type === "boolean" && v.t === "bool") ||
      (type === "null" && v.t === "null") ||
      (type === "object" && v.t === "dict") ||
      (type === "array" && v.t === "list");
    if (ok) return dumpsPy(v, true);
  } catch {
    // fall through: keep the text
  }
  return JSON.stringify(body);
}
