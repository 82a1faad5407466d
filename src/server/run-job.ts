// Running one generation for one HTTP request: wait for a place (queue.ts) and a session
// (sessions.ts), step the (synchronous) batched generator, and answer either one JSON body or an
// SSE stream.
//
// Pacing: the generator runs batched (src/batch/scheduler.ts). When it yields a `waiting` delta
// its next pass is queued for the engine's next step: the job awaits engine.turn() (the event loop
// runs meanwhile: disconnects, new requests). Any other delta is sent and the generator is stepped
// again at once, so every running generation has its next pass queued before the next step runs.
//
// Invariants:
//   - the place and the session are held from the first step to the last; `release()` (which
//     gives both back) runs exactly once, on every path (success, error, client gone);
//   - errors from the first step (bad options, a prompt over the context limit) happen before any
//     header is sent, so they become a proper 4xx; later errors end the stream with an error event;
//   - a client that goes away (request.signal, or the SSE stream cancelled) sets `cancelled`,
//     which the engine polls before every token, so the generation ends within one token; the
//     generator is still driven to its end so its stats (stop_reason "cancelled") are recorded;
//     a server that stops (queue closed) ends it the same way.
import type { Engine, Session } from "../engine.ts";
import { log } from "../log.ts";
import { toApiError } from "./errors.ts";
import type { GenerationQueue } from "./queue.ts";
import type { SessionPool } from "./sessions.ts";

export interface Job<D, R> {
  /** The prompt's ids (the session pool lends the session that holds most of them). */
  ids: number[];
  /** Creates the (batched) generator on `session`; `shouldStop` must be handed to the engine. */
  start(shouldStop: () => boolean, session: Session): Generator<D, R>;
  /** SSE payloads for one delta (may be none). */
  chunks(d: D): unknown[];
  /** SSE payloads after the last delta (finish chunk, usage chunk). */
  finalChunks(r: R): unknown[];
  /** The non-streaming body. */
  body(r: R): unknown;
  /** Called once with the result (cancelled generations included). */
  done(r: R, ms: number): void;
  /** Called once when a streamed answer has sent its last event (or failed): the access log. */
  ended(): void;
  /** Parameter name blamed for a prompt that does not fit ("messages" / "prompt"). */
  promptParam: string;
}

/** Where a job runs: the engine (its steps), the admission queue, the sessions. */
export interface JobPlace {
  engine: Engine;
  queue: GenerationQueue;
  sessions: SessionPool;
}

/** A delta that says the generation waits for the engine's next step. */
const waits = (d: unknown) => (d as { waiting?: true }).waiting === true;

const encoder = new TextEncoder();
const sse = (payload: unknown) => encoder.encode(`data: ${JSON.stringify(payload)}\n\n`);

export async function runJob<D, R>(place: JobPlace, req: Request, job: Job<D, R>, stream: boolean): Promise<Response> {
  const { engine, queue } = place;
  let cancelled = false;
  const onAbort = () => (cancelled = true);
  req.signal.addEventListener("abort", onAbort, { once: true });
  let releasePlace: () => void;
  try {
    releasePlace = await queue.acquire(req.signal);
  } catch (err) {
    req.signal.removeEventListener("abort", onAbort);
    throw err;
  }
  const session = place.sessions.take(job.ids);
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    place.sessions.give(session);
    releasePlace();
  };
  const pace = (d: D) => (waits(d) ? engine.turn() : undefined);
  const t0 = performance.now();
  let gen: Generator<D, R>;
  let first: IteratorResult<D, R>;
  try {
    gen = job.start(() => cancelled || queue.closed, session);
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
  const started: Started<D, R> = { job, gen, first, pace, finish, release, cancelled: () => cancelled, cancel: () => (cancelled = true) };
  return stream ? sseResponse(started) : await jsonResponse(started);
}

/** A job holding its place and session, its generator stepped once: what answering it needs. */
interface Started<D, R> {
  job: Job<D, R>;
  gen: Generator<D, R>;
  first: IteratorResult<D, R>;
  /** Before stepping the generator again: wait for the engine's step if it is waiting for one. */
  pace(d: D): Promise<void> | undefined;
  /** After the last step: record the time, give the place and session back, report the result. */
  finish(r: R): void;
  /** Give the place and session back (once; later calls do nothing). */
  release(): void;
  cancelled(): boolean;
  cancel(): void;
}

/** Drive the generator to its end and answer with one JSON body. */
async function jsonResponse<D, R>({ job, gen, first, pace, finish, release }: Started<D, R>): Promise<Response> {
  try {
    let step = first;
    while (!step.done) {
      await pace(step.value);
      step = gen.next();
    }
    finish(step.value);
    return Response.json(job.body(step.value));
  } catch (err) {
    release();
    throw toApiError(err, job.promptParam);
  }
}

/** Answer with an SSE stream, one event per chunk, driving the generator as the stream runs. */
function sseResponse<D, R>({ job, gen, first, pace, finish, release, cancelled, cancel }: Started<D, R>): Response {
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      const send = (payload: unknown) => {
        if (!cancelled()) controller.enqueue(sse(payload));
      };
      try {
        let step = first;
        while (!step.done) {
          for (const c of job.chunks(step.value)) send(c);
          await pace(step.value);
          step = gen.next();
        }
        finish(step.value);
        for (const c of job.finalChunks(step.value)) send(c);
        if (!cancelled()) controller.enqueue(encoder.encode("data: [DONE]\n\n"));
      } catch (err) {
        release();
        const e = toApiError(err, job.promptParam);
        log.error(`generation failed mid-stream: ${e.message}`);
        send(e.body());
      }
      job.ended();
      if (!cancelled()) controller.close();
    },
    cancel() {
      cancel();
    },
  });
  return new Response(body, {
    headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", Connection: "keep-alive" },
  });
}
