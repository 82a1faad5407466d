import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { renderChat, segmentsToIds, type ChatInput, type Segment } from "../src/text/chat.ts";
import { K3Error } from "../src/errors.ts";

const CASES_PATH = join(import.meta.dir, "../../shared/reference/k3/chat-template-cases.json");
const cases = JSON.parse(readFileSync(CASES_PATH, "utf8")).cases as Record<string, { input: ChatInput; segments: Segment[] }>;

describe("renderChat reproduces the release encoder", () => {
  test("the case file holds 38 cases", () => {
    expect(Object.keys(cases).length).toBe(38);
  });
  for (const [name, c] of Object.entries(cases)) {
    test(name, () => {
      expect(renderChat(c.input)).toEqual(c.segments);
    });
  }
});
