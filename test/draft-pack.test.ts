// Packed drafts (`k3 pack DRAFT --draft int8|int4`, src/memory/draft-pack.ts): the draft's
// matrices in the compact trunk's groups, the rest exact; the engine holds whichever format's plan
// reads the fewest bytes, and output never changes with it. A pack made from other draft bytes, or
// damaged, is refused by name; one that is absent is a usage error naming the command that makes it.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { openDraftCheckpoint } from "../src/checkpoint/draft.ts";
import { Engine, packDraft, type EngineOptions } from "../src/engine.ts";
import { draftPackLayout, loadDraftPack } from "../src/memory/draft-pack.ts";
import { flipByte, scratchDir, tinyDraft, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);

const PROMPT = [5, 17, 300, 42, 7, 99];
let target = "";
let draft = "";
beforeAll(async () => {
  target = await tinyModel("tiny-a");
  // A copy the tests may pack and damage.
  draft = join(scratchDir("draft-pack"), "d");
  cpSync(await tinyDraft("tiny-a", { variant: "eagle3.1", rope: "yarn" }), draft, { recursive: true });
  for (const f of ["int8", "int4"] as const) packDraft(draft, f);
});

function ids(open: EngineOptions): { ids: number[]; format: string | undefined; drafted: number } {
  const e = Engine.open(target, { threads: 1, context: 256, chunk: 16, ...open });
  try {
    const out: number[] = [];
    const it = e.generate(e.createSession(), PROMPT, { maxTokens: 12 });
    let r = it.next();
    for (; !r.done; r = it.next()) out.push(r.value.id);
    return { ids: out, format: e.draft?.format, drafted: r.value.speculation.draftedTokens };
  } finally {
    e.close();
  }
}

describe("packed drafts", () => {
  test("the pack quantises every matrix but kv_b_proj; norms and kv_b stay bf16", () => {
    const ck = openDraftCheckpoint(draft);
    const { tensors } = draftPackLayout(ck, "int4");
    const dtypes = Object.fromEntries(tensors.map((t) => [t.name, t.dtype]));
    expect(dtypes["lm_head.weight"]).toBe("Q4");
    expect(dtypes["fc.weight"]).toBe("Q4");
    expect(dtypes["layers.0.self_attn.kv_b_proj.weight"]).toBe("BF16");
    expect(dtypes["norm.weight"]).toBe("BF16");
  });

  test("int8 and int4 drafts: the same ids as no draft; the engine says which format it holds", () => {
    const plain = ids({ speculate: "off" }).ids;
    for (const f of ["int8", "int4", "bf16"] as const) {
      const r = ids({ speculate: 3, draft, draftFormat: f });
      expect({ f, ids: r.ids, format: r.format }).toEqual({ f, ids: plain, format: f });
      expect(r.drafted).toBeGreaterThan(0);
    }
  });

  test("auto: resident budgets keep bf16 (no bytes to save); at a tight budget the smallest pack reads fewer bytes and is held", () => {
    expect(ids({ speculate: 3, draft, resident: true }).format).toBe("bf16");
    expect(ids({ speculate: 3, draft, ram: "1G" }).format).toBe("bf16"); // everything fits: a tie, the exact one
    // Just above the floor with the bf16 draft, a smaller draft leaves room for trunk pieces or expert slots.
    const e = Engine.open(target, { threads: 1, context: 256, chunk: 16, speculate: 3, draft, draftFormat: "bf16", ram: "1G" });
    const need = e.plan!.totalBytes - e.plan!.items.find((i) => i.name === "expert slots")!.bytes;
    e.close();
    const tight = ids({ speculate: 3, draft, ram: String(need + 16 * openCheckpoint(target).layout.census.expertBytes) });
    expect(tight.format).toBe("int4");
  });

  test("refused: a pack of other draft bytes (the draft changed), a damaged pack; none made: the command that makes it", async () => {
    const d = join(scratchDir("draft-stale"), "d");
    cpSync(draft, d, { recursive: true, preserveTimestamps: true });
    const ck = () => openDraftCheckpoint(d);
    utimesSync(join(d, "model.safetensors"), new Date(), new Date(Date.now() + 5000));
    expect(() => loadDraftPack(ck(), "int4")).toThrow(/packed from other draft bytes/);
    const e = join(scratchDir("draft-damaged"), "d");
    cpSync(draft, e, { recursive: true, preserveTimestamps: true });
    const pack = loadDraftPack(openDraftCheckpoint(e), "int4");
    flipByte(pack.path, pack.tensors.find((t) => t.name === "lm_head.weight")!.offset + 100);
    expect(() => ids({ speculate: 3, draft: e, draftFormat: "int4" })).toThrow(/lm_head\.weight fails its checksum/);
    const none = join(scratchDir("draft-nopack"), "d");
    cpSync(await tinyDraft("tiny-a", { variant: "eagle3.1", rope: "yarn" }), none, { recursive: true });
    expect(() => ids({ speculate: 3, draft: none, draftFormat: "int8" })).toThrow(/k3 pack .* --draft int8/);
  });
});
