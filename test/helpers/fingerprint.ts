// Greedy ids and a hash of every logits vector for some models: the fingerprint test/arm64.test.ts
// compares between x86-64 (this machine) and linux-arm64 (the same script run by the arm64 runtime
// under qemu). A script, not a test file:
//   bun test/helpers/fingerprint.ts <isa> <model dir>...   → one JSON object on stdout
// The ids are greedy (argmax, ties → lowest id, as the default sampler); the hash covers the logits
// of the prompt's last position and of every decode step, bit for bit (SHA-256 of the f32 bytes).
import { createHash } from "node:crypto";
import { basename } from "node:path";
import { Engine, type EngineOptions } from "../../src/engine.ts";

export const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
export const GEN = 12;

export function fingerprint(dir: string, isa: NonNullable<EngineOptions["isa"]>, threads = 2): { ids: number[]; logits: string } {
  const engine = Engine.open(dir, { isa, threads });
  try {
    const h = createHash("sha256");
    const session = engine.createSession();
    const ids: number[] = [];
    const it = engine.generate(session, PROMPT, {
      maxTokens: GEN,
      speculate: "off", // the sampler hashes what it is given: plain decoding's logits only
      sampler: {
        sample(l: Float32Array) {
          h.update(new Uint8Array(l.buffer, l.byteOffset, l.byteLength));
          let best = 0; // ties → lowest id, as the default greedy sampler (k3_argmax)
          for (let i = 1; i < l.length; i++) if (l[i]! > l[best]!) best = i;
          return best;
        },
      },
    });
    for (let r = it.next(); !r.done; r = it.next()) ids.push(r.value.id);
    session.close();
    return { ids, logits: h.digest("hex") };
  } finally {
    engine.close();
  }
}

if (import.meta.main) {
  const [isa, ...dirs] = process.argv.slice(2);
  const out: Record<string, { ids: number[]; logits: string }> = {};
  for (const d of dirs) out[basename(d)] = fingerprint(d, isa as NonNullable<EngineOptions["isa"]>);
  process.stdout.write(`${JSON.stringify(out)}\n`);
}
