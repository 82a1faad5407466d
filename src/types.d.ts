// Lets TypeScript accept `import path from "x.so" with { type: "file" }` (bun embeds the file).
declare module "*.so" {
  const path: string;
  export default path;
}
// The embedded demo model (assets/demo/, written by tools/train/pack.ts).
declare module "*.zst" {
  const path: string;
  export default path;
}
