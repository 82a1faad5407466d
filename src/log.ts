// The one logger. consola writes info to stdout by default; k3's stdout carries only generated
// text or JSON, so every level goes to stderr.
import { createConsola } from "consola";

export const log = createConsola({
  stdout: process.stderr,
  stderr: process.stderr,
  level: process.env.K3_LOG_LEVEL ? Number(process.env.K3_LOG_LEVEL) : 3,
}).withTag("k3");
