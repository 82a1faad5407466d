// The one bound on JSON nesting (src/text/json-depth.ts), where JSON reaches recursive code: the
// chat renderer's inputs, and JSON parsed out of strings (tool-call `arguments`). Deeper input is
// refused with the field named, never a stack overflow: in the library and through `k3 chat`
// (the server's side is in test/server-api.test.ts).
import { beforeAll, describe, expect, test } from "bun:test";
import { K3Error } from "../src/errors.ts";
import { renderChat } from "../src/text/chat.ts";
import { deeperThan, MAX_JSON_DEPTH } from "../src/text/json-depth.ts";
import { parsePy, PyJsonDepthError } from "../src/text/pyjson.ts";
import { tinyModel } from "./helpers/models.ts";

const nested = (n: number) => "[".repeat(n) + "]".repeat(n);

describe("deeperThan", () => {
  test("measures arrays and objects, names the first place past the limit", () => {
    expect(deeperThan([[[]]], 3, "x")).toBeUndefined();
    expect(deeperThan([[[]]], 2, "x")).toBe("x[0][0]");
    expect(deeperThan({ a: [1, { "b-c": {} }] }, 3, "")).toBe('a[1]["b-c"]');
    expect(deeperThan("[[[[", 1, "s")).toBeUndefined(); // a string is not parsed here
    expect(deeperThan(JSON.parse(nested(50_000)), MAX_JSON_DEPTH, "t")).toBe("t[0][0][0][0][0][0]…");
  });
});

describe("parsePy", () => {
  test(`parses ${MAX_JSON_DEPTH} levels and refuses one more with PyJsonDepthError, at any depth`, () => {
    expect(parsePy(nested(MAX_JSON_DEPTH)).t).toBe("list");
    expect(() => parsePy(nested(MAX_JSON_DEPTH + 1))).toThrow(PyJsonDepthError);
    expect(() => parsePy(`{"a":${nested(50_000)}}`)).toThrow(PyJsonDepthError);
  });
});

describe("renderChat", () => {
  const call = (args: unknown) => ({ role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: args } }] });
  const refusal = (input: any): K3Error => {
    try {
      renderChat(input);
    } catch (e) {
      return e as K3Error;
    }
    throw new Error("expected a refusal");
  };

  test("arguments as a JSON string nested too deep: USAGE naming the field", () => {
    const e = refusal({ messages: [{ role: "user", content: "hi" }, call(`{"a":${nested(50_000)}}`)] });
    expect(e).toBeInstanceOf(K3Error);
    expect(e.code).toBe("USAGE");
    expect(e.message).toBe(`messages[1].tool_calls[0].function.arguments: JSON nests deeper than ${MAX_JSON_DEPTH} levels (at offset 132)`);
  });

  test("objects nested too deep (arguments, tools): USAGE naming the field", () => {
    const args = refusal({ messages: [{ role: "user", content: "hi" }, call({ a: JSON.parse(nested(50_000)) })] });
    expect(args.message).toBe(`messages[1].tool_calls[0].function.arguments.a…: nested deeper than ${MAX_JSON_DEPTH} levels`);
    const tools = refusal({ messages: [{ role: "user", content: "hi" }], tools: JSON.parse(nested(200)) });
    expect(tools.message).toBe(`tools[0][0][0][0][0][0]…: nested deeper than ${MAX_JSON_DEPTH} levels`);
  });
});

describe("k3 chat", () => {
  let model: string;
  beforeAll(async () => {
    model = await tinyModel("tiny-a");
  });

  for (const [what, args] of [
    ["a JSON string", JSON.stringify(`{"a":${nested(50_000)}}`)],
    ["an object", `{"a":${nested(50_000)}}`],
  ] as const) {
    test(`tool-call arguments nested 50,000 deep as ${what}: exit 2 naming the field, no stack trace`, () => {
      const stdin = [
        '{"role":"user","content":"hi"}',
        `{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":${args}}}]}`,
        '{"role":"tool","tool_call_id":"c1","content":"ok"}',
      ].join("\n");
      const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1" };
      delete env.K3_MODEL;
      const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", "chat", model, "--gen", "2", "--threads", "1"], { stdin: Buffer.from(stdin), env });
      const err = p.stderr.toString();
      expect(p.exitCode).toBe(2);
      expect(err).toContain("messages[1].tool_calls[0].function.arguments");
      expect(err).toContain(`deeper than ${MAX_JSON_DEPTH} levels`);
      expect(err).not.toMatch(/\n\s+at /);
    });
  }
});
