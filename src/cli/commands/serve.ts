// `k3 serve`: an OpenAI-compatible HTTP server (docs/SERVER.md). Runs until SIGINT / SIGTERM.
import { K3Error } from "../../errors.ts";
import { log } from "../../log.ts";
import { checkApiKey } from "../../server/auth.ts";
import { LOG_FORMATS, type LogFormat } from "../../server/access-log.ts";
import { checkOrigins } from "../../server/cors.ts";
import { startServer } from "../../server/server.ts";
import { parseSize } from "../../inspect.ts";
import { repeatedValues } from "../args.ts";
import { defineCommand } from "../command.ts";
import { reasoningBudgetFlag } from "../chat-options.ts";
import { engineArgs, engineOptions, modelOption, openEngine, pickModel, positiveInt } from "../common.ts";
import { DEMO_MODEL_NAME, modelDirOrDemo, usesDemo } from "../demo.ts";
import { temperatureFlag } from "../sampling-args.ts";

export default defineCommand({
  meta: { name: "serve", description: "Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, …) with a chat page at /; no model = the built-in demo" },
  args: {
    dir: { type: "positional", required: false, valueHint: "DIR", description: "model folder (default: $K3_MODEL, else the demo model)" },
    ...modelOption,
    host: { type: "string", valueHint: "ADDR", description: "address to bind (default 127.0.0.1: this machine only)" },
    port: { type: "string", valueHint: "N", description: "port (default 8080; 0 picks a free one)" },
    "api-key": { type: "string", valueHint: "KEY", description: "require Authorization: Bearer KEY (default: $K3_API_KEY, else no key)" },
    queue: { type: "string", valueHint: "N", description: "requests that may wait while one generates (default 16); more get 503" },
    "model-name": { type: "string", valueHint: "ID", description: "model id for clients (default: the model folder's name; a Hugging Face download's repo id)" },
    alias: { type: "string", alias: ["a"], valueHint: "NAME", description: "another name clients may use for the model (repeatable; names match in any case)" },
    cors: { type: "string", valueHint: "ORIGIN", description: "allow browser pages from this origin (repeatable), or '*' for any (default: none)" },
    parallel: { type: "string", valueHint: "N", description: "generations batched together, each with its own session (default: what the budget allows, at most 4)" },
    "prefix-cache-ram": { type: "string", valueHint: "SIZE", description: "RAM for prefix-cache snapshots, inside the budget (default: a share of it; 0: none)" },
    "prefix-cache-dir": { type: "string", valueHint: "DIR", description: "folder for the prefix cache's disk tier (default: none)" },
    "prefix-cache-disk": { type: "string", valueHint: "SIZE", description: "size cap of the prefix cache's disk tier (default 16G)" },
    temperature: { type: "string", alias: ["temp"], valueHint: "T", description: "temperature of a request that sends none (default: the model's generation_config.json, else 1.0; 0 = greedy)" },
    "reasoning-budget": { type: "string", valueHint: "N", description: "reasoning tokens of a chat reply that sets none (default: half of its max_tokens; none = no limit)" },
    webui: { type: "boolean", default: true, description: "the chat page at / (--no-webui: off)" },
    "log-format": { type: "string", valueHint: "FORMAT", description: "access log, one line per request on stderr: text (default) | json" },
    ...engineArgs,
  },
  help: {
    examples: [
      ["k3 serve", "the demo model: a chat page at http://127.0.0.1:8080/ and the API at /v1"],
      ["k3 serve /models/Kimi-K3 --port 8080", "OpenAI-compatible API at http://127.0.0.1:8080/v1 (docs/SERVER.md)"],
      ["K3_API_KEY=secret k3 serve /models/Kimi-K3 --host 0.0.0.0", "reachable from other machines, with a key"],
      ["k3 serve /models/Kimi-K3 -a kimi-k3 --cors http://localhost:3000", "answer to another model name; allow one browser origin"],
    ],
    env: ["K3_MODEL", "K3_API_KEY", "XDG_CACHE_HOME", "K3_KERNELS"],
  },
  async run({ args, rawArgs }) {
    const engineOpts = engineOptions(args, rawArgs);
    const temperature = temperatureFlag(args.temperature, "--temperature");
    const reasoningBudget = args["reasoning-budget"] === undefined ? undefined : (reasoningBudgetFlag(args["reasoning-budget"]) ?? null);
    const logFormat = (args["log-format"] ?? "text") as LogFormat;
    if (!(LOG_FORMATS as readonly string[]).includes(logFormat)) throw new K3Error("USAGE", `--log-format must be ${LOG_FORMATS.join(" or ")}, got "${logFormat}"`);
    const port = args.port === undefined ? 8080 : args.port === "0" ? 0 : positiveInt(args.port, "--port")!;
    if (port > 65535) throw new K3Error("USAGE", `--port must be at most 65535, got ${port}`);
    const queue = args.queue === "0" ? 0 : (positiveInt(args.queue, "--queue") ?? 16);
    const host = args.host ?? "127.0.0.1";
    // A key on the command line is visible in `ps`; the environment variable is the quieter way.
    const apiKey = args["api-key"] ?? process.env.K3_API_KEY;
    if (apiKey !== undefined) checkApiKey(apiKey, args["api-key"] !== undefined ? "--api-key" : "K3_API_KEY");
    const aliases = repeatedValues(rawArgs, "--alias");
    const cors = repeatedValues(rawArgs, "--cors");
    checkOrigins(cors); // before the (long) model open
    const given = pickModel(args.dir, args.model);
    const demo = usesDemo(given);
    const dir = await modelDirOrDemo(given);

    const parallel = args.parallel === undefined ? "auto" : positiveInt(args.parallel, "--parallel")!;
    const prefixCache = {
      ramBytes: args["prefix-cache-ram"] === undefined ? ("auto" as const) : parseSize(args["prefix-cache-ram"], "--prefix-cache-ram"),
      dir: args["prefix-cache-dir"],
      diskBytes: parseSize(args["prefix-cache-disk"] ?? "16G", "--prefix-cache-disk"),
    };
    const engine = await openEngine(dir, { ...engineOpts, parallel, prefixCache });
    // The folder's name, or a Hugging Face download's repo id ("moonshotai/Kimi-K3").
    const modelName = args["model-name"] ?? (demo ? DEMO_MODEL_NAME : engine.name);
    if (!engine.tokenizerDir) log.warn(`${dir} has no tokenizer: only /v1/completions with token-id prompts will work`);
    let server;
    try {
      server = startServer(engine, { modelName, aliases, host, port, apiKey, queue, cors, temperature, reasoningBudget, webui: args.webui, demo, accessLog: logFormat });
    } catch (err) {
      engine.close();
      if (err instanceof K3Error) throw err;
      throw new K3Error("USAGE", `cannot listen on ${host}:${port}: ${(err as Error).message}`);
    }
    if (!["127.0.0.1", "localhost", "::1"].includes(host) && !apiKey)
      log.warn(`listening on ${host} without --api-key: anyone who can reach this port can use the model`);
    log.info(`serving ${modelName}${demo ? " (the built-in demo model)" : ""} at ${server.url}/v1 (context ${engine.context} tokens, ${engine.parallel} parallel, queue ${queue})`);
    if (args.webui) log.info(`chat page: ${server.url}/${apiKey ? " (it asks for the API key)" : ""}`);

    await new Promise<void>((done) => {
      const stop = () => done();
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
    });
    log.info("shutting down");
    await server.stop();
    engine.close();
  },
});
