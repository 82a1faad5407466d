// What the trained demo learned, measured through k3 itself (dev-only; the numbers in
// docs/TEST-MODELS.md "The trained demo" come from here), next to the random-weight `demo` preset:
//   - copying: prompts "S S[first 3 words]" from held-out Brown sentences S; greedy continuation vs
//     the rest of S (tokens copied in order) and the acceptance a prompt-lookup (n-gram, n = 2)
//     speculator would get: of the steps where the last 2 tokens occur in the prompt, how often
//     the token that followed them there is the model's greedy token;
//   - routing: `k3 run --trace` on a held-out passage, per MoE layer the entropy (bits) of the
//     share of routed slots per expert (max log2 N), then `k3 simulate-cache` on the trace;
//   - `k3 run --speculate off|4|auto` on the same copy prompts at a streaming RAM budget: drafts
//     made / kept, verify and decode passes, bytes read per generated token; ids identical;
//   - sample continuations (greedy).
//
//   bun tools/train/measure.ts [OUT=tools/train/out]   → OUT/measure.json + markdown on stdout
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Engine, Tokenizer } from "../../src/engine.ts";
import { generateModel } from "../gen/generate.ts";
import { engineGreedy } from "./check.ts";
import { brownSamples } from "./corpus.ts";
import { HELD_OUT_EVERY } from "./shared.ts";

const ROOT = resolve(import.meta.dir, "../..");

/** Held-out sentences of 8..20 words (the samples train.py never saw). */
function heldOutSentences(count: number): string[] {
  const out: string[] = [];
  brownSamples().forEach((s, i) => {
    if (i % HELD_OUT_EVERY !== 0) return;
    for (const sent of s.text.split(/(?<=[.!?]) /)) {
      const words = sent.split(" ");
      if (words.length >= 8 && words.length <= 20 && /^[A-Z]/.test(sent) && !sent.includes('"')) out.push(sent);
    }
  });
  // every k-th, so the prompts come from all held-out samples, not the first one
  const step = Math.max(1, Math.floor(out.length / count));
  return out.filter((_, i) => i % step === 0).slice(0, count);
}

/** Prompt-lookup proposal: the token after the latest occurrence, inside the prompt (its first
 *  `limit` tokens), of the context's last n tokens. Restricted to the prompt so a model that
 *  merely repeats itself ("the the the") earns no acceptance. */
function lookup(ctx: number[], n: number, limit: number): number | undefined {
  const tail = ctx.slice(-n);
  for (let i = Math.min(ctx.length - n - 1, limit - n - 1); i >= 0; i--) {
    let ok = true;
    for (let j = 0; j < n && ok; j++) ok = ctx[i + j] === tail[j];
    if (ok) return ctx[i + n];
  }
  return undefined;
}

function copying(engine: Engine, tok: Tokenizer, sentences: string[]) {
  let copied = 0, total = 0, proposals = 0, accepted = 0, fullCopies = 0;
  for (const s of sentences) {
    const words = s.split(" ");
    const head = words.slice(0, 3).join(" ");
    const prompt = tok.encode(`${s} ${head}`);
    const want = tok.encode(`${s} ${s}`).slice(prompt.length); // the rest of the repeated sentence
    if (want.length === 0) continue;
    const got = engineGreedy(engine, prompt, want.length);
    let run = 0;
    while (run < want.length && got[run] === want[run]) run++;
    copied += run;
    total += want.length;
    if (run === want.length) fullCopies++;
    const ctx = [...prompt];
    for (const id of got) {
      const p = lookup(ctx, 2, prompt.length);
      if (p !== undefined) (proposals++, p === id && accepted++);
      ctx.push(id);
    }
  }
  return { sentences: sentences.length, copiedPrefixShare: copied / total, fullCopies, ngramProposals: proposals, ngramAccepted: accepted, ngramAcceptance: accepted / Math.max(1, proposals) };
}

function routing(dir: string, promptFile: string, trace: string, gen: number) {
  const run = Bun.spawnSync([process.execPath, join(ROOT, "src/cli/main.ts"), "run", dir, "--prompt-file", promptFile, "--gen", String(gen), "--trace", trace, "--threads", "1"], { stderr: "pipe" });
  if (run.exitCode !== 0) throw new Error(`k3 run --trace failed: ${run.stderr.toString()}`);
  const lines = readFileSync(trace, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { layers: number[][] });
  const L = lines[0]!.layers.length;
  const perLayer = [];
  for (let l = 0; l < L; l++) {
    const counts = new Map<number, number>();
    let n = 0;
    for (const t of lines) for (const e of t.layers[l]!) (counts.set(e, (counts.get(e) ?? 0) + 1), n++);
    let h = 0;
    for (const c of counts.values()) h -= (c / n) * Math.log2(c / n);
    // temporal locality: share of a token's experts that the previous token also used (what an
    // expert cache can reuse); independent uniform choices would give k/N
    let again = 0;
    for (let t = 1; t < lines.length; t++) again += lines[t]!.layers[l]!.filter((e) => lines[t - 1]!.layers[l]!.includes(e)).length;
    const k = lines[0]!.layers[l]!.length;
    perLayer.push({ entropyBits: h, expertsUsed: counts.size, topShare: Math.max(...counts.values()) / n, reuseFromPrevious: again / ((lines.length - 1) * k) });
  }
  const sim = Bun.spawnSync([process.execPath, join(ROOT, "src/cli/main.ts"), "simulate-cache", trace, "--slots", "0.5x,1x,2x,4x", "--json"], { stderr: "pipe" });
  if (sim.exitCode !== 0) throw new Error(`k3 simulate-cache failed: ${sim.stderr.toString()}`);
  const j = JSON.parse(sim.stdout.toString()) as { results: Array<{ slots: number; policy: string; hitRate: number }> };
  return { tokens: lines.length, perLayer, cache: j.results.map((r) => ({ slots: r.slots, policy: r.policy, hitRate: r.hitRate })) };
}

/** Just above the demos' RAM floor (409 MB at the default 4096-token context, nearly all of it
 *  the runtime reserve: bun, catalogue, tokenizer, GC headroom): the trunk streams through a 2-slot ring and the trained demo caches
 *  18 of its 48 experts (k3 plan DIR --ram 411MB), so every decode pass reads the trunk again and
 *  bytes per generated token count passes over the weights, as on the real model. 420 MB would
 *  hold every weight and read nothing per token. */
const STREAMING_RAM = "411MB";

/** `k3 run --speculate MODE --json` on the copy prompts: drafts made and kept by the engine's
 *  n-gram drafter (docs/SPECULATION.md), verify passes, decode passes and bytes read per generated
 *  token (decode only), summed over the prompts; and the generated ids, which must not depend on
 *  the mode. */
function speculation(dir: string, sentences: string[], gen: number, mode: string) {
  const sum = { mode, runs: 0, generated: 0, decodeSteps: 0, drafted: 0, accepted: 0, verifyPasses: 0, decodeBytes: 0, bytesPerToken: 0 };
  const ids: number[][] = [];
  for (const s of sentences) {
    const prompt = `${s} ${s.split(" ").slice(0, 3).join(" ")}`;
    const r = Bun.spawnSync([process.execPath, join(ROOT, "src/cli/main.ts"), "run", dir, "--prompt", prompt, "--gen", String(gen), "--speculate", mode, "--ram", STREAMING_RAM, "--json", "--threads", "1"], { stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`k3 run --speculate ${mode} failed: ${r.stderr.toString()}`);
    const j = JSON.parse(r.stdout.toString()) as { generated_ids: number[]; stats: Record<string, number> };
    const st = j.stats;
    ids.push(j.generated_ids);
    sum.runs++;
    sum.generated += st.generated_tokens!;
    sum.decodeSteps += st.decode_steps!;
    sum.drafted += st.drafted_tokens!;
    sum.accepted += st.accepted_tokens!;
    sum.verifyPasses += st.verify_passes!;
    sum.decodeBytes += st.bytes_read_per_token! * st.generated_tokens!;
  }
  sum.bytesPerToken = Math.round(sum.decodeBytes / sum.generated);
  return { ...sum, ids };
}

/** The same prompts with speculation off, at 4 drafts and auto; ids must be identical. */
function speculationArms(dir: string, sentences: string[], gen: number) {
  const arms = ["off", "4", "auto"].map((m) => speculation(dir, sentences, gen, m));
  const same = arms.every((a) => JSON.stringify(a.ids) === JSON.stringify(arms[0]!.ids));
  if (!same) throw new Error(`${dir}: generated ids differ between --speculate ${arms.map((a) => a.mode).join(" / ")}`);
  return { sameIds: same, arms: arms.map(({ ids: _ids, ...a }) => a) };
}

const SAMPLE_PROMPTS = ["The", "She opened the door and", "The President said", "It was a dark and stormy night", "The results of the experiment"];

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
  const trained = join(out, "model");
  const random = join(out, "random-demo");
  if (!existsSync(join(random, "config.json"))) await generateModel(random, { preset: "demo", seed: 1 });
  mkdirSync(join(out, "measure"), { recursive: true });
  const passage = brownSamples()[HELD_OUT_EVERY]!.text.split(" ").slice(0, 120).join(" "); // held-out sample 20
  const promptFile = join(out, "measure", "passage.txt");
  writeFileSync(promptFile, passage);
  const sentences = heldOutSentences(24);
  const result: Record<string, unknown> = { passage: passage.slice(0, 200) };
  for (const [name, dir] of [["trained", trained], ["random", random]] as const) {
    const engine = Engine.open(dir, { threads: 1 });
    const tok = Tokenizer.load(dir);
    const samples = SAMPLE_PROMPTS.map((p) => ({ prompt: p, continuation: tok.decode(engineGreedy(engine, tok.encode(p), 32)) }));
    const copy = copying(engine, tok, sentences);
    engine.close();
    const route = routing(dir, promptFile, join(out, "measure", `${name}.routing.jsonl`), 64);
    const spec = speculationArms(dir, sentences, 32);
    result[name] = { copy, speculation: spec, routing: route, samples };
    process.stderr.write(`${name}: speculation ${JSON.stringify(spec)}\n`);
    process.stderr.write(`${name}: copy ${JSON.stringify(copy)}\n  routing ${JSON.stringify(route.perLayer)}\n  cache ${JSON.stringify(route.cache)}\n`);
    for (const s of samples) process.stderr.write(`  ${JSON.stringify(s.prompt)} → ${JSON.stringify(s.continuation)}\n`);
  }
  writeFileSync(join(out, "measure.json"), JSON.stringify(result, null, 1) + "\n");
}
