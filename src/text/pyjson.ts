// Python-`json`-compatible values, parser and serializer.
//
// WHY: K3's release encoder is Python. It calls `json.loads` on tool-call argument strings and
// `json.dumps(..., ensure_ascii=False)` on tool schemas and argument values. To reproduce its bytes
// we must keep what JavaScript's JSON loses:
//   - key order of objects exactly as inserted (JS objects move integer-like keys first);
//   - int vs float (`1.0` stays `1.0`, big ints keep every digit);
//   - Python's float repr (`1e-05`, `1e+16`, `1.0`) and `NaN` / `Infinity` literals;
//   - Python's string escaping (lowercase `\u00xx`, lone surrogates left as they are).
// Invariant: dumpsPy(parsePy(s)) === Python's json.dumps(json.loads(s)) for every s Python accepts
// that nests at most MAX_JSON_DEPTH levels (deeper text is refused with PyJsonDepthError).

import { MAX_JSON_DEPTH } from "./json-depth.ts";

export type PyJson =
  | { t: "null" }
  | { t: "bool"; v: boolean }
  | { t: "int"; v: bigint }
  | { t: "float"; v: number }
  | { t: "str"; v: string }
  | { t: "list"; v: PyJson[] }
  | { t: "dict"; v: Map<string, PyJson> };

export class PyJsonSyntaxError extends Error {}
/** The text nests deeper than MAX_JSON_DEPTH: not a syntax error (Python would parse it, or give
 *  up with a RecursionError), but more than k3 will walk. */
export class PyJsonDepthError extends Error {}

/** Convert a plain JS value (e.g. from JSON.parse of a request) to PyJson.
 *  A JS number that is a safe integer becomes a Python int, any other number a float: the int/float
 *  distinction of `2.0` is already lost by JSON.parse, so integral values read as ints. */
export function fromJs(value: unknown): PyJson {
  if (value === null || value === undefined) return { t: "null" };
  if (typeof value === "boolean") return { t: "bool", v: value };
  if (typeof value === "string") return { t: "str", v: value };
  if (typeof value === "bigint") return { t: "int", v: value };
  if (typeof value === "number") {
    return Number.isSafeInteger(value) ? { t: "int", v: BigInt(value) } : { t: "float", v: value };
  }
  if (Array.isArray(value)) return { t: "list", v: value.map(fromJs) };
  if (value instanceof Map) {
    const m = new Map<string, PyJson>();
    for (const [k, v] of value) m.set(String(k), fromJs(v));
    return { t: "dict", v: m };
  }
  if (typeof value === "object") {
    const m = new Map<string, PyJson>();
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) m.set(k, fromJs(v));
    return { t: "dict", v: m };
  }
  throw new PyJsonSyntaxError(`cannot represent a ${typeof value} as JSON`);
}

/** Python's `sorted()` on str compares code points; JS `<` compares UTF-16 units (differs for
 *  astral characters), so compare code point by code point. */
export function comparePyStr(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done) return y.done ? 0 : -1;
    if (y.done) return 1;
    const cx = x.value.codePointAt(0)!;
    const cy = y.value.codePointAt(0)!;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

/** Recursively sort dict keys (lists keep their order): the encoder's `deep_sort_dict`. */
export function deepSort(v: PyJson): PyJson {
  if (v.t === "list") return { t: "list", v: v.v.map(deepSort) };
  if (v.t === "dict") {
    const keys = [...v.v.keys()].sort(comparePyStr);
    return { t: "dict", v: new Map(keys.map((k) => [k, deepSort(v.v.get(k)!)])) };
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Serializer: json.dumps(v, ensure_ascii=False[, separators=(",", ":")])

export function dumpsPy(v: PyJson, compact = false): string {
  const itemSep = compact ? "," : ", ";
  const keySep = compact ? ":" : ": ";
  const out = (x: PyJson): string => {
    switch (x.t) {
      case "null":
        return "null";
      case "bool":
        return x.v ? "true" : "false";
      case "int":
        return x.v.toString();
      case "float":
        return pyFloatRepr(x.v);
      case "str":
        return pyStr(x.v);
      case "list":
        return `[${x.v.map(out).join(itemSep)}]`;
      case "dict":
        return `{${[...x.v].map(([k, val]) => pyStr(k) + keySep + out(val)).join(itemSep)}}`;
    }
  };
  return out(v);
}

const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
  "\b": "\\b",
  "\f": "\\f",
};

/** Python's py_encode_basestring: escapes only `"`, `\` and U+0000..U+001F (lowercase hex). */
function pyStr(s: string): string {
  return (
    '"' +
    s.replace(/[\u0000-\u001f"\\]/g, (c) => SHORT_ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`) +
    '"'
  );
}

/** Python's float.__repr__ (as json.dumps uses it): shortest round-trip digits; fixed notation when
 *  the decimal exponent is in [-4, 16), else `d.ddde+XX`; integral values keep a `.0`. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "Infinity";
  if (x === -Infinity) return "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  // toExponential() with no argument yields the shortest digits that round-trip (ECMA-262).
  const [mant, expStr] = Math.abs(x).toExponential().split("e");
  const digits = mant!.replace(".", "");
  const exp = Number(expStr); // value = d.ddd × 10^exp
  const decpt = exp + 1; // value = 0.ddd × 10^decpt
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return `${sign}0.${"0".repeat(-decpt)}${digits}`;
    if (decpt >= digits.length) return `${sign}${digits}${"0".repeat(decpt - digits.length)}.0`;
    return `${sign}${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
  }
  const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const e = Math.abs(exp).toString().padStart(2, "0");
  return `${sign}${m}e${exp < 0 ? "-" : "+"}${e}`;
}

// ---------------------------------------------------------------------------------------------
// Parser: json.loads(s) (strict=True: raw control characters inside strings are errors)

export function parsePy(text: string): PyJson {
  const p = new PyJsonParser(text);
  const v = p.value();
  p.ws();
  if (!p.atEnd()) p.fail("extra data");
  return v;
}

const ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/** A recursive-descent reader over one text; each method starts at `i` and leaves it after what it read. */
class PyJsonParser {
  private i = 0;
  private depth = 0; // arrays/objects open around position i: bounded, so the recursion below is too
  constructor(private readonly text: string) {}

  atEnd(): boolean {
    return this.i === this.text.length;
  }

  fail(what: string): never {
    throw new PyJsonSyntaxError(`${what} at offset ${this.i}`);
  }

  ws(): void {
    const text = this.text;
    while (this.i < text.length && (text[this.i] === " " || text[this.i] === "\t" || text[this.i] === "\n" || text[this.i] === "\r")) this.i++;
  }

  value(): PyJson {
    this.ws();
    const c = this.text[this.i];
    if (c === "{") return this.dict();
    if (c === "[") return this.list();
    if (c === '"') return { t: "str", v: this.str() };
    if (this.lit("null")) return { t: "null" };
    if (this.lit("true")) return { t: "bool", v: true };
    if (this.lit("false")) return { t: "bool", v: false };
    if (this.lit("NaN")) return { t: "float", v: NaN };
    if (this.lit("Infinity")) return { t: "float", v: Infinity };
    if (this.lit("-Infinity")) return { t: "float", v: -Infinity };
    return this.num();
  }

  private lit(word: string): boolean {
    if (!this.text.startsWith(word, this.i)) return false;
    this.i += word.length;
    return true;
  }

  private num(): PyJson {
    const m = /^(-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?/.exec(this.text.slice(this.i, this.i + 4096));
    if (!m) return this.fail("unexpected character");
    this.i += m[0].length;
    if (m[2] === undefined && m[3] === undefined) return { t: "int", v: BigInt(m[1]!) };
    return { t: "float", v: Number(m[0]) };
  }

  private enter(): void {
    if (++this.depth > MAX_JSON_DEPTH) throw new PyJsonDepthError(`JSON nests deeper than ${MAX_JSON_DEPTH} levels (at offset ${this.i})`);
  }

  /** After an item: true at `,` (another follows), false at `close` (the container ended). */
  private next(close: "}" | "]"): boolean {
    this.ws();
    const c = this.text[this.i];
    if (c === ",") {
      this.i++;
      return true;
    }
    if (c === close) {
      this.i++;
      this.depth--;
      return false;
    }
    return this.fail(`expected ',' or '${close}'`);
  }

  private dict(): PyJson {
    this.enter();
    this.i++;
    const m = new Map<string, PyJson>();
    this.ws();
    if (this.text[this.i] === "}") {
      this.i++;
      this.depth--;
      return { t: "dict", v: m };
    }
    do {
      this.ws();
      if (this.text[this.i] !== '"') this.fail("expected key");
      const k = this.str();
      this.ws();
      if (this.text[this.i] !== ":") this.fail("expected ':'");
      this.i++;
      m.set(k, this.value()); // a repeated key keeps its first position and takes the last value, as in Python
    } while (this.next("}"));
    return { t: "dict", v: m };
  }

  private list(): PyJson {
    this.enter();
    this.i++;
    const a: PyJson[] = [];
    this.ws();
    if (this.text[this.i] === "]") {
      this.i++;
      this.depth--;
      return { t: "list", v: a };
    }
    do a.push(this.value());
    while (this.next("]"));
    return { t: "list", v: a };
  }

  private str(): string {
    const text = this.text;
    this.i++; // opening quote
    let s = "";
    for (;;) {
      if (this.i >= text.length) this.fail("unterminated string");
      const c = text[this.i]!;
      if (c === '"') {
        this.i++;
        return s;
      }
      if (c.charCodeAt(0) < 0x20) this.fail("control character in string");
      if (c !== "\\") {
        s += c;
        this.i++;
        continue;
      }
      const e = text[this.i + 1];
      this.i += 2;
      if (e === "u") {
        const hex = text.slice(this.i, this.i + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("bad \\u escape");
        s += String.fromCharCode(parseInt(hex, 16));
        this.i += 4;
      } else {
        if (e === undefined || !(e in ESCAPES)) this.fail("bad escape");
        s += ESCAPES[e!];
      }
    }
  }
}

/** JSON type name used by the XTML `type` attribute (Python type → name). */
export function xtmlTypeName(v: PyJson): string {
  switch (v.t) {
    case "null":
      return "null";
    case "bool":
      return "boolean";
    case "int":
    case "float":
      return "number";
    case "str":
      return "string";
    case "list":
      return "array";
    case "dict":
      return "object";
  }
}
