// generation_config.json → the sampling defaults a model folder asks for (Hugging Face's file:
// transformers and vLLM read it the same way). Optional: a folder without one has no defaults.
// Only `temperature` is used (k3 serve's default for a request that sends none); a file that is
// there but not JSON, or a temperature that is not a number in [0, 2], is refused naming the file
// and the field, never ignored.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { K3Error } from "../errors.ts";
import { readRegularFile } from "../files.ts";

export const GENERATION_CONFIG = "generation_config.json";

export interface GenerationDefaults {
  /** The folder's `temperature`, if its generation_config.json sets one. */
  temperature?: number;
  /** The file read, when there is one. */
  file?: string;
}

export function readGenerationDefaults(dir: string): GenerationDefaults {
  const file = join(dir, GENERATION_CONFIG);
  if (!existsSync(file)) return {};
  let json: unknown;
  try {
    json = JSON.parse(readRegularFile(file, GENERATION_CONFIG, "CONFIG").toString("utf8"));
  } catch (e) {
    if (e instanceof K3Error) throw e;
    throw new K3Error("CONFIG", `${file}: not valid JSON (${(e as Error).message})`);
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) throw new K3Error("CONFIG", `${file}: expected a JSON object`);
  const t = (json as Record<string, unknown>).temperature;
  if (t === undefined || t === null) return { file };
  if (typeof t !== "number" || !Number.isFinite(t) || t < 0 || t > 2)
    throw new K3Error("CONFIG", `${file}: temperature must be a number between 0 and 2, got ${JSON.stringify(t)}`);
  return { temperature: t, file };
}
