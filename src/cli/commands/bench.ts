// `k3 bench [DIR]`: decode speed of this model on this machine under a budget, with the
// deterministic counters first (bytes read per token, reads, hits) and time second (STREAMING.md
// §5). Each run opens a fresh engine so no run inherits another's cache. The full benchmark
// suite (slice model, disk floor, budgets) is `npm run bench` (bench/run.ts).
import { Engine, type GenerationStats } from "../../engine.ts";
import { formatBytes } from "../../format.ts";
import { statsJson } from "../../report.ts";
import { defineCommand } from "../command.ts";
import { engineArgs, engineOptions, modelOption, positiveInt, resolveModelDir } from "../common.ts";

export default defineCommand({
  meta: { name: "bench", description: "Measure decode speed and bytes read per token on a model (≥ 3 runs)" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (default: $K3_MODEL)" },
    ...modelOption,
    tokens: { type: "string", valueHint: "N", description: "decode tokens per run (default 8)" },
    runs: { type: "string", valueHint: "N", description: "runs (default 3)" },
    json: { type: "boolean", description: "print all runs as JSON ({model, tokens, runs: [{run, ids, stats}], identical_ids})" },
    ...engineArgs,
  },
  help: {
    examples: [["k3 bench /models/Kimi-K3 --preset desktop", "s/token and bytes read per token at a 32 GiB budget, 3 runs"]],
    env: ["K3_MODEL", "K3_KERNELS"],
  },
  run({ args, rawArgs }) {
    const tokens = positiveInt(args.tokens, "--tokens") ?? 8;
    const runs = positiveInt(args.runs, "--runs") ?? 3;
    const opts = engineOptions(args, rawArgs);
    const dir = resolveModelDir(args.dir, args.model);
    const results: { run: number; stats: GenerationStats; ids: number[]; directIo: boolean }[] = [];
    for (let r = 0; r < runs; r++) {
      const engine = Engine.open(dir, opts);
      try {
        const prompt = [1, 2, 3, 4].map((x) => x % engine.config.vocab);
        const session = engine.createSession();
        const it = engine.generate(session, prompt, { maxTokens: tokens + 1 });
        const ids: number[] = [];
        let res = it.next();
        for (; !res.done; res = it.next()) ids.push(res.value.id);
        results.push({ run: r + 1, stats: res.value, ids, directIo: res.value.io.directIo });
        session.close();
      } finally {
        engine.close();
      }
    }
    const sameIds = results.every((x) => JSON.stringify(x.ids) === JSON.stringify(results[0]!.ids));
    if (args.json) {
      process.stdout.write(`${JSON.stringify({ model: dir, tokens, runs: results.map((x) => ({ run: x.run, ids: x.ids, stats: statsJson(x.stats) })), identical_ids: sameIds })}\n`);
      return;
    }
    const lines = ["run | s/token (decode) | prefill s | bytes/token | trunk/token | experts/token | reads/token | hits/requests (all) | direct I/O", "(per-token columns: decode steps only)"];
    for (const x of results) {
      const s = x.stats;
      const steps = Math.max(1, s.decodedTokens); // per generated token (a verify pass decides several)
      lines.push(
        [
          x.run,
          (s.decodeMs / steps / 1000).toFixed(3),
          (s.prefillMs / 1000).toFixed(3),
          formatBytes(s.ioPerToken.bytesRead),
          formatBytes(s.ioPerToken.trunkBytes),
          formatBytes(s.ioPerToken.expertBytes),
          s.ioPerToken.reads.toFixed(1),
          `${s.io.expertHits}/${s.io.expertRequests}`,
          x.directIo ? "on" : "off",
        ].join(" | "),
      );
    }
    lines.push(`ids identical across runs: ${sameIds ? "yes" : "NO"}`);
    process.stdout.write(`${lines.join("\n")}\n`);
  },
});
