// k3 spawned from source (`bun src/cli/main.ts …`) as a user reaches it: stdout, stderr, exit code;
// $K3_MODEL dropped so a test names its model, NO_COLOR set.
export const CLI = [process.execPath, "src/cli/main.ts"];

export function k3Source(args: string[]) {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && k !== "K3_MODEL") env[k] = v;
  const p = Bun.spawnSync([...CLI, ...args], { stdin: "ignore", env: { ...env, NO_COLOR: "1" } });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}
