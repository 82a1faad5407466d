// The benches' flag reader (bench/common.ts arg): a repeated flag or a flag without a value is
// refused with its name and exit 2, never one occurrence silently winning (a second `--arms` used
// to be ignored, so a run measured other arms than the command line said).
import { expect, test } from "bun:test";

const read = (args: string[]) =>
  Bun.spawnSync([process.execPath, "-e", `import { arg } from "./bench/common.ts"; console.log(arg("--arms", "dflt"));`, "--", ...args], { cwd: `${import.meta.dir}/..` });

test("arg: the value, the default, and refusals of a repeated or valueless flag", () => {
  const once = read(["--arms", "planner,c128"]);
  expect(once.exitCode).toBe(0);
  expect(once.stdout.toString().trim()).toBe("planner,c128");
  expect(read([]).stdout.toString().trim()).toBe("dflt");
  const twice = read(["--arms", "planner", "--arms", "c128"]);
  expect(twice.exitCode).toBe(2);
  expect(twice.stderr.toString()).toContain("--arms: given 2 times");
  expect(twice.stdout.toString()).toBe("");
  const bare = read(["--arms"]);
  expect(bare.exitCode).toBe(2);
  expect(bare.stderr.toString()).toContain("--arms: needs a value");
});
