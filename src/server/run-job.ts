// Running one generation for one HTTP request: wait for the engine, step the (synchronous)
// generator one token at a time while letting the event loop breathe, and answer either one JSON
// body or an SSE stream.
//
// Invariants:
//   - the engine is held from the first step to the last; `release()` runs exactly once, on every
//     path (success, error, client gone);
//   - errors from the first step (bad options, a prompt over the context limit) happen before any
//     header is sent, so they become a proper 4xx; later errors end the stream with an error event;
//   - a client that goes away (request.signal, or the SSE stream cancelled) sets `cancelled`,
//     which the engine polls before every token, so the generation ends within one token; the
//     generator is still driven to its end so its stats (stop_reason "cancelled") are recorded.
import { log } from "../log.ts";
import { toApiError } from "./errors.ts";
import type { GenerationQueue } from "./queue.ts";

export interface Job<D, R> {
  /** Creates the generator; `shouldStop` must be handed to the engine. */
  start(shouldStop: () => boolean): Generator<D, R>;
  /** SSE payloads for one delta (may be none). */
  chunks(d: D): unknown[];
  /** SSE payloads after the last delta (finish chunk, usage chunk). */
  finalChunks(r: R): unknown[];
  /** The non-streaming body. */
  body(r: R): unknown;
  /** Called once with the result (cancelled generations included). */
  done(r: R, ms: number): void;
  /** Parameter name blamed for a prompt that does not fit ("messages" / "prompt"). */
  promptParam: string;
}

/** Between tokens the engine computes synchronously; this turn of the event loop is when a
 *  client's disconnect, and new requests joining the queue, are noticed. */
const breathe = () => new Promise<void>((resolve) => setImmediate(resolve));

const encoder = new TextEncoder();
const sse = (payload: unknown) => encoder.encode(`data: ${JSON.stringify(payload)}\n\n`);

export async function runJob<D, R>(queue: GenerationQueue, req: Request, job: Job<D, R>, stream: boolean): Promise<Response> {
  let cancelled = false;
  const onAbort = () => (cancelled = true);
  req.signal.addEventListener("abort", onAbort, { once: true });
  let release: () => void;
  try {
    release = await queue.acquire(req.signal);
  } catch (err) {
    req.signal.removeEventListener("abort", onAbort);
    throw err;
  }
  const t0 = performance.now();
  let gen: Generator<D, R>;
  let first: IteratorResult<D, R>;
  try {
    gen = job.start(() => cancelled);
    first = gen.next();
  } catch (err) {
    release();
    req.signal.removeEventListener("abort", onAbort);
    throw toApiError(err, job.promptParam);
  }
  const finish = (r: R) => {
    queue.recordDuration(performance.now() - t0);
    req.signal.removeEventListener("abort", onAbort);
    release();
    job.done(r, performance.now() - t0);
  };

  if (!stream) {
    try {
      let step = first;
      while (!step.done) {
        await breathe();
        step = gen.next();
      }
      finish(step.value);
      return Response.json(job.body(step.value));
    } catch (err) {
      release();
      throw toApiError(err, job.promptParam);
    }
  }

  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      const send = (payload: unknown) => {
        if (!cancelled) controller.enqueue(sse(payload));
      };
      try {
        let step = first;
        while (!step.done) {
          for (const c of job.chunks(step.value)) send(c);
          await breathe();
          step = gen.next();
        }
        finish(step.value);
        for (const c of job.finalChunks(step.value)) send(c);
        if (!cancelled) controller.enqueue(encoder.encode("data: [DONE]\n\n"));
      } catch (err) {
        release();
        const e = toApiError(err, job.promptParam);
        log.error(`generation failed mid-stream: ${e.message}`);
        send(e.body());
      }
      if (!cancelled) controller.close();
    },
    cancel() {
      cancelled = true;
    },
  });
  return new Response(body, {
    headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", Connection: "keep-alive" },
  });
}
