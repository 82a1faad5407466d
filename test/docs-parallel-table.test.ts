// docs/SERVER.md's --parallel table is what `k3 plan` says today: the block between its markers
// must equal what tools/docs/parallel-table.ts produces from the compiled binary (rerun it with
// --write after a planner change).
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { currentBlock, DOC, parallelTable } from "../tools/docs/parallel-table.ts";
import { compiledK3 } from "./helpers/k3-binary.ts";

test("docs/SERVER.md's --parallel table is k3 plan's (bun tools/docs/parallel-table.ts --write)", () => {
  const made = parallelTable(compiledK3());
  expect(made).toContain("| laptop 8 GiB | 4 |");
  expect(currentBlock(readFileSync(DOC, "utf8"))).toBe(made);
}, 60_000);
