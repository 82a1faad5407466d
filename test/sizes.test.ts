// Small files with one job, functions that fit on a screen (issue 17 item 6): every
// file in src/ stays under MAX_FILE_LINES lines and every function under MAX_FUNCTION_LINES, from
// its first line to its closing brace (nested functions count in their parent too). A file or
// function past a limit goes in ALLOWED with the reason it reads better whole.
//
// TypeScript 7's compiler has no JavaScript API, so functions are found by a small scanner:
// comments, strings, template literals and regex literals are blanked (newlines kept), then a
// line that opens a function (a declaration, a method, an arrow function bound to a name) is
// matched to its closing brace. The last tests show it sees what it must.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");
const MAX_FILE_LINES = 800;
const MAX_FUNCTION_LINES = 80;

/** "file" or "file:function" → why it may pass the limit. */
const ALLOWED: Record<string, string> = {};

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}

/** `src` with comments, strings, template literals (their `${…}` kept as code) and regex literals
 *  replaced by spaces; newlines stay, so line numbers do too. */
export function blank(src: string): string {
  const out = src.split("");
  const clear = (from: number, to: number) => {
    for (let j = from; j < to; j++) if (out[j] !== "\n") out[j] = " ";
  };
  const templateDepths: number[] = []; // brace depth at which each open `${` started
  let depth = 0;
  let prev = ""; // last significant character of code: tells a regex literal from a division
  let i = 0;
  const template = () => {
    // inside a template literal, just after its backtick or the `}` closing an interpolation
    const start = i;
    while (i < src.length && src[i] !== "`" && !(src[i] === "$" && src[i + 1] === "{")) i += src[i] === "\\" ? 2 : 1;
    clear(start, i);
    if (src[i] === "`") i++;
    else if (i < src.length) {
      templateDepths.push(depth++);
      i += 2;
    }
    prev = "a";
  };
  while (i < src.length) {
    const c = src[i]!;
    const start = i;
    if (c === "/" && src[i + 1] === "/") {
      while (i < src.length && src[i] !== "\n") i++;
      clear(start, i);
    } else if (c === "/" && src[i + 1] === "*") {
      i = src.indexOf("*/", i + 2) + 2;
      clear(start, i);
    } else if (c === '"' || c === "'") {
      for (i++; i < src.length && src[i] !== c; i += src[i] === "\\" ? 2 : 1);
      clear(start + 1, i++);
      prev = "a";
    } else if (c === "`") {
      i++;
      template();
    } else if (c === "/" && (prev === "" || "(,=:[&|?{};!+-*%<>~^".includes(prev) || /\b(return|typeof|case)\s*$/.test(src.slice(Math.max(0, i - 10), i)))) {
      let inClass = false;
      for (i++; i < src.length && src[i] !== "\n" && (src[i] !== "/" || inClass); i++) {
        if (src[i] === "\\") i++;
        else if (src[i] === "[") inClass = true;
        else if (src[i] === "]") inClass = false;
      }
      clear(start + 1, i++);
      prev = "a";
    } else {
      if (c === "{") depth++;
      else if (c === "}") {
        depth--;
        if (templateDepths.at(-1) === depth) {
          templateDepths.pop();
          i++;
          template();
          continue;
        }
      }
      // `x!` (non-null) then `/` is a division: only a `!` that starts an expression counts
      if (!/\s/.test(c)) prev = c === "!" && /[\w)\]]/.test(prev) ? "a" : c;
      i++;
    }
  }
  return out.join("");
}

const HEADER =
  /^\s*(?:export\s+)?(?:default\s+)?(?:(?:public|private|protected|static|readonly|async|override|get|set)\s+)*(?:function\s*\*?\s*([\w$]+)|(?:const|let)\s+([\w$]+)\s*(?::[^=]+)?=\s*(?:async\s+)?(?:\([^)]*\)|[\w$]+)\s*(?::[^=]+)?=>|\*?\s*(#?[\w$]+)\s*(?:<[^>]*>)?\()/;
const NOT_NAMES = new Set(["if", "for", "while", "switch", "catch", "return", "await", "new", "super", "typeof", "throw", "yield", "do", "else"]);

/** Every function of `src` that opens on a line of its own: name, first line (1-based), length. */
export function functionLengths(src: string): { name: string; line: number; lines: number }[] {
  const code = blank(src);
  const close = new Map<number, number>();
  const open: number[] = [];
  for (let i = 0; i < code.length; i++) {
    if (code[i] === "{") open.push(i);
    else if (code[i] === "}") close.set(open.pop()!, i);
  }
  const lineAt = (offset: number) => code.slice(0, offset).split("\n").length;
  const out: { name: string; line: number; lines: number }[] = [];
  const bodies = new Set<number>();
  let offset = 0;
  for (const [n, text] of code.split("\n").entries()) {
    const lineStart = offset;
    offset += text.length + 1;
    const m = HEADER.exec(text);
    const name = m && (m[1] ?? m[2] ?? m[3])!;
    if (!m || !name || NOT_NAMES.has(name)) continue;
    // The body: the first `{` past the parameter list that is not a type literal of the return
    // type (one in a type position: after `:`, `<`, `|`, `&` or `,`); a `;` or `}` first means no body.
    let parens = m[0].endsWith("(") ? 1 : 0;
    let p = lineStart + m.index + m[0].length;
    for (; p < code.length; p++) {
      const c = code[p];
      if (c === "(") parens++;
      else if (c === ")") parens--;
      else if (parens > 0) continue;
      else if (c === ";" || c === "}") break;
      else if (c === "{") {
        const end = close.get(p);
        if (end === undefined || !/[:<|&,]\s*$/.test(code.slice(Math.max(0, p - 40), p))) break;
        p = end;
      }
    }
    if (code[p] !== "{" || !close.has(p) || bodies.has(p)) continue;
    bodies.add(p);
    out.push({ name, line: n + 1, lines: lineAt(close.get(p)!) - n });
  }
  return out;
}

describe("sizes", () => {
  const sources = files(join(ROOT, "src")).map((f) => ({ file: relative(ROOT, f), src: readFileSync(f, "utf8") }));

  test(`every file in src/ has at most ${MAX_FILE_LINES} lines`, () => {
    const long = sources.map(({ file, src }) => ({ file, lines: src.split("\n").length - 1 })).filter((f) => f.lines > MAX_FILE_LINES && !ALLOWED[f.file]);
    expect(long).toEqual([]);
  });

  test(`every function in src/ has at most ${MAX_FUNCTION_LINES} lines`, () => {
    const long = sources.flatMap(({ file, src }) =>
      functionLengths(src)
        .filter((f) => f.lines > MAX_FUNCTION_LINES && !ALLOWED[`${file}:${f.name}`])
        .map((f) => `${file}:${f.line} ${f.name} (${f.lines} lines)`),
    );
    expect(long).toEqual([]);
  });

  test("every allowance names a file or function that is still over its limit", () => {
    const over = new Set(
      sources.flatMap(({ file, src }) => [
        ...(src.split("\n").length - 1 > MAX_FILE_LINES ? [file] : []),
        ...functionLengths(src)
          .filter((f) => f.lines > MAX_FUNCTION_LINES)
          .map((f) => `${file}:${f.name}`),
      ]),
    );
    expect(Object.keys(ALLOWED).filter((k) => !over.has(k))).toEqual([]);
  });

  test("the scanner measures each kind of function, braces in strings, templates, regexes and comments aside", () => {
    const body = (n: number) => Array.from({ length: n }, (_, i) => `  x += ${i}; // }`).join("\n");
    const src = [
      "export function plain(a: number): number {", // 1
      "  const s = '}' + \"{\" + `${a}}` + `a ${`b ${a}`} }`;", // 2
      "  const r = /[}{]/.test(s) ? a! / 2 : 0;", // 3
      body(5), // 4-8
      "  return r;", // 9
      "}", // 10
      "class C {", // 11
      "  private *gen(x: { a: number }): Generator<number> {", // 12
      body(3), // 13-15
      "  }", // 16
      "}", // 17
      "const arrow = async (x: number) => {", // 18
      "  /* } */ return x;", // 19
      "};", // 20
      "function declared(): void;", // 21: an overload signature has no body
      "function typed(): Promise<{ a: number; b: string }> | { c: 1 } {", // 22: type literals, then the body
      "  return { c: 1 };", // 23
      "}", // 24
      "describe(\"a call\", () => {", // 25: a call, not a function
      "});", // 26
      "const command = {", // 27
      "  async run({ args }: { args: string[] }) {", // 28: a method of an object literal
      "    return args;", // 29
      "  },", // 30
      "};", // 31
    ].join("\n");
    expect(functionLengths(src)).toEqual([
      { name: "plain", line: 1, lines: 10 },
      { name: "gen", line: 12, lines: 5 },
      { name: "arrow", line: 18, lines: 3 },
      { name: "typed", line: 22, lines: 3 },
      { name: "run", line: 28, lines: 3 },
    ]);
  });

  test(`a function of ${MAX_FUNCTION_LINES + 1} lines is over the limit`, () => {
    const src = `function long() {\n${"  step();\n".repeat(MAX_FUNCTION_LINES - 2)}}\n`;
    expect(functionLengths(src)).toEqual([{ name: "long", line: 1, lines: MAX_FUNCTION_LINES }]);
    const longer = `function long() {\n${"  step();\n".repeat(MAX_FUNCTION_LINES - 1)}}\n`;
    expect(functionLengths(longer)[0]!.lines).toBe(MAX_FUNCTION_LINES + 1);
  });
});
