// `k3 run`: continue a prompt with the base model, streaming tokens to stdout as they come.
import { defineCommand } from "citty";
import { readFileSync } from "node:fs";
import { Engine, type GenerationStats } from "../../engine.ts";
import { K3Error } from "../../errors.ts";
import { log } from "../../log.ts";
import { engineArgs, engineOptions, formatBytes, parseIds, positiveInt, readStdin, resolveModelDir } from "../common.ts";

export default defineCommand({
  meta: { name: "run", description: "Generate a continuation of a prompt (greedy by default), streamed to stdout" },
  args: {
    model: { type: "positional", required: false, description: "model directory (default: $K3_MODEL)" },
    prompt: { type: "string", description: "prompt text" },
    "prompt-file": { type: "string", description: "read the prompt from a file" },
    ids: { type: "string", description: "prompt as token ids, e.g. 1,2,3 (prints ids)" },
    gen: { type: "string", description: "tokens to generate (default 32)" },
    json: { type: "boolean", description: "print one JSON object instead of streaming text" },
    ...engineArgs,
  },
  async run({ args }) {
    const dir = resolveModelDir(args.model);
    const gen = positiveInt(args.gen, "--gen") ?? 32;
    const sources = [args.prompt !== undefined, args["prompt-file"] !== undefined, args.ids !== undefined].filter(Boolean).length;
    if (sources > 1) throw new K3Error("USAGE", "give only one of --prompt, --prompt-file, --ids");
    let text: string | undefined;
    let ids: number[] | undefined;
    if (args.ids !== undefined) ids = parseIds(args.ids);
    else if (args.prompt !== undefined) text = args.prompt;
    else if (args["prompt-file"] !== undefined) text = readFileSync(args["prompt-file"], "utf8");
    else if (!process.stdin.isTTY) text = await readStdin();
    else throw new K3Error("USAGE", "no prompt: use --prompt, --prompt-file, --ids, or pipe text on stdin");

    const engine = Engine.open(dir, engineOptions(args));
    try {
      let tok: import("../../text/tokenizer.ts").Tokenizer | undefined;
      if (engine.tokenizerDir) {
        const { Tokenizer } = await import("../../text/tokenizer.ts");
        tok = Tokenizer.load(engine.tokenizerDir);
      }
      if (ids === undefined) {
        if (!tok) throw new K3Error("TOKENIZER", `${dir} has no tokenizer (tiktoken.model); use --ids`);
        ids = tok.encode(text!);
        if (ids.length === 0) throw new K3Error("USAGE", "the prompt is empty");
      }
      const textOut = args.ids === undefined && tok !== undefined;
      const decoder = tok?.decoder();
      const session = engine.createSession();
      let cancelled = false;
      const onSigint = () => (cancelled = true);
      process.on("SIGINT", onSigint);
      const generated: number[] = [];
      let text_ = "";
      const it = engine.generate(session, ids, { maxTokens: gen, shouldStop: () => cancelled });
      let stats: GenerationStats | undefined;
      for (;;) {
        const r = it.next();
        if (r.done) {
          stats = r.value;
          break;
        }
        generated.push(r.value.id);
        const piece = decoder ? decoder.push(r.value.id) : "";
        text_ += piece;
        if (!args.json) process.stdout.write(textOut ? piece : `${generated.length > 1 ? " " : ""}${r.value.id}`);
        // Let the event loop run between tokens so Ctrl-C is noticed within one token.
        await Bun.sleep(0);
      }
      process.off("SIGINT", onSigint);
      if (decoder) {
        const rest = decoder.flush();
        text_ += rest;
        if (!args.json && textOut) process.stdout.write(rest);
      }
      if (args.json) {
        const out: Record<string, unknown> = { prompt_ids: ids, generated_ids: generated, stats: statsJson(stats!, engine) };
        if (tok) out.generated_text = text_;
        process.stdout.write(`${JSON.stringify(out)}\n`);
      } else {
        process.stdout.write("\n");
        log.info(statsLine(stats!, engine));
      }
      if (cancelled) process.exitCode = 130;
    } finally {
      engine.close();
    }
  },
});

export function statsJson(s: GenerationStats, engine: Engine) {
  return {
    prompt_tokens: s.promptTokens,
    generated_tokens: s.generatedTokens,
    stop_reason: s.stopReason,
    prefill_ms: round(s.prefillMs),
    decode_ms: round(s.decodeMs),
    ms_per_token: round(s.msPerToken),
    bytes_read: s.io.trunkBytesRead + s.io.expertBytesRead,
    trunk_bytes_read: s.io.trunkBytesRead,
    expert_bytes_read: s.io.expertBytesRead,
    reads: s.io.reads,
    expert_requests: s.io.expertRequests,
    expert_hits: s.io.expertHits,
    lookahead_issued: s.io.lookaheadIssued,
    lookahead_used: s.io.lookaheadUsed,
    io_wait_ms: round(s.io.ioWaitMs),
    direct_io: s.io.directIo,
    bytes_read_per_token: Math.round(s.ioPerToken.bytesRead),
    peak_rss_bytes: s.peakRssBytes,
    threads: engine.threads,
  };
}

export function statsLine(s: GenerationStats, engine: Engine): string {
  return [
    `${s.generatedTokens} tokens (prompt ${s.promptTokens})`,
    `prefill ${(s.prefillMs / 1000).toFixed(2)} s`,
    `${(s.msPerToken / 1000).toFixed(3)} s/token`,
    `read ${formatBytes(s.ioPerToken.bytesRead)}/token`,
    `hits ${s.io.expertHits}/${s.io.expertRequests}`,
    `direct I/O ${s.io.directIo ? "on" : "off"}`,
    `peak RSS ${formatBytes(s.peakRssBytes)}`,
    `${engine.threads} threads`,
    s.stopReason === "length" ? "" : `stop: ${s.stopReason}`,
  ]
    .filter(Boolean)
    .join(" · ");
}

const round = (x: number) => Math.round(x * 100) / 100;
