// POST /tokenize and POST /detokenize, in llama-server's shapes, so clients that count tokens
// with them work unchanged:
//   /tokenize   {content, with_pieces?, add_special?} → {tokens: [id…]}
//               or, with_pieces, {tokens: [{id, piece}…]}: piece is the token's text when its bytes
//               are valid UTF-8 on their own, else the list of its bytes;
//   /detokenize {tokens: [id…]} → {content}.
// Text is encoded as a completion prompt is (special tokens disabled: "<|open|>" is characters).
import { readJson, type ServerContext } from "./context.ts";
import { badRequest } from "./errors.ts";
import { parseDetokenizeRequest, parseTokenizeRequest } from "./validate.ts";

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

function tokenizer(ctx: ServerContext) {
  if (!ctx.engine.tokenizerDir) throw badRequest("the served model has no tokenizer (no tiktoken.model in its folder)", null, "no_tokenizer");
  return ctx.engine.tokenizer();
}

export async function tokenize(ctx: ServerContext, req: Request): Promise<Response> {
  const r = parseTokenizeRequest(await readJson(ctx, req));
  const tok = tokenizer(ctx);
  // Encoding runs on the event loop: accept as much text as the longest prompt that could fit the
  // context (a prompt of more bytes cannot fit, see checkPromptBytes), not the whole body limit.
  const most = ctx.engine.context * tok.maxTokenBytes;
  const bytes = Buffer.byteLength(r.content, "utf8");
  if (bytes > most)
    throw badRequest(`'content' is ${bytes} bytes; /tokenize takes at most ${most} (the context, ${ctx.engine.context} tokens, times the longest token, ${tok.maxTokenBytes} bytes)`, "content", "invalid_value");
  const ids = tok.encode(r.content);
  if (!r.withPieces) return Response.json({ tokens: ids });
  return Response.json({
    tokens: ids.map((id) => {
      const bytes = tok.tokenBytes(id);
      let piece: string | number[];
      try {
        piece = strictUtf8.decode(bytes);
      } catch {
        piece = [...bytes];
      }
      return { id, piece };
    }),
  });
}

export async function detokenize(ctx: ServerContext, req: Request): Promise<Response> {
  const ids = parseDetokenizeRequest(await readJson(ctx, req));
  const tok = tokenizer(ctx);
  ids.forEach((id, i) => {
    if (!tok.hasToken(id)) throw badRequest(`tokens[${i}]: ${id} is not a token id of this model (vocabulary 0..${tok.vocabSize - 1})`, `tokens[${i}]`, "invalid_value");
  });
  return Response.json({ content: tok.decode(ids) });
}
