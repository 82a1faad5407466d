// The one version string (kept equal to package.json's by test/cli.test.ts).
export const VERSION = "0.1.0";
