// Trunk pieces (issue 16, src/memory/pieces.ts): the cut covers every trunk byte exactly once, a
// piece stays within its size unless one block alone is larger, the block grid (the checksum
// unit) does not depend on the piece size, and the forward pass asks for matrices in the walk
// order the ring reads ahead in (src/model/walk.ts).
import { beforeAll, describe, expect, test } from "bun:test";
import { catalogueFromMetadata } from "../src/checkpoint/catalogue.ts";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { LM_MODEL_PREFIX } from "../src/checkpoint/shapes.ts";
import type { ModelConfig } from "../src/checkpoint/types.ts";
import { loadKernels } from "../src/kernels.ts";
import { Model } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { SessionState } from "../src/model/state.ts";
import { layerMatrices, unitWalk } from "../src/model/walk.ts";
import type { LayerRef, WeightProvider } from "../src/model/weights.ts";
import { buildTrunkLayout, DEFAULT_PIECE_BYTES, exactTrunkTensors, WHOLE_UNITS, type TrunkLayout, type TrunkTensor } from "../src/memory/pieces.ts";
import { specTrunkTensors } from "../src/memory/slots.ts";
import { trunkUnitEntries } from "../src/memory/units.ts";
import { SPLIT_PIECES } from "./helpers/budgets.ts";
import { tinyModel } from "./helpers/models.ts";

const REF = `${import.meta.dir}/../reference/k3`;

/** Every tensor's bytes are covered by its blocks exactly once, rows in order without gaps. */
function checkCover(cfg: ModelConfig, units: TrunkTensor[][], layout: TrunkLayout): void {
  const N = cfg.numLayers;
  const rows = new Map<string, number>(); // tensor → next row expected
  let last = -1;
  for (const p of layout.pieces) {
    expect(p.id).toBe(last + 1); // ids are walk positions
    expect(p.unit).toBeGreaterThanOrEqual(layout.pieces[last]?.unit ?? 0); // unit by unit
    last = p.id;
    for (const b of p.blocks) {
      expect(b.r0).toBe(rows.get(b.tensor) ?? 0);
      rows.set(b.tensor, b.r1);
    }
    const size = p.blocks.reduce((a, b) => a + b.parts.reduce((x, q) => x + q.bytes, 0), 0);
    expect(size).toBe(p.bytes);
    if (p.kind === "matrix" && p.blocks.length > 1) expect(p.bytes).toBeLessThanOrEqual(layout.pieceBytes);
  }
  for (const [u, list] of units.entries())
    for (const t of list) {
      expect({ t: t.name, rows: rows.get(t.name) }).toEqual({ t: t.name, rows: t.shape[0] ?? 1 });
      expect(layout.pieces.some((p) => p.unit === u && p.blocks.some((b) => b.tensor === t.name))).toBe(true);
    }
  expect(layout.coreOf.length).toBe(N + 1);
  for (const [name, segs] of layout.matrices)
    segs.forEach((s, i) => {
      expect(s.r0).toBe(i === 0 ? 0 : segs[i - 1]!.r1);
      expect(layout.pieces[s.piece]!.blocks.some((b) => b.tensor === name)).toBe(true);
    });
}

let release: { cfg: ModelConfig; units: TrunkTensor[][] };
beforeAll(() => {
  const cat = catalogueFromMetadata(`${REF}/config.json`, `${REF}/model.safetensors.index.json.gz`);
  release = { cfg: cat.config, units: specTrunkTensors(cat.config) };
});

describe("the cut", () => {
  test("the release: every trunk byte once; pieces ≤ 256 MiB; lm_head and the dense FFN cut into row slices", () => {
    const layout = buildTrunkLayout(release.cfg, release.units);
    checkCover(release.cfg, release.units, layout);
    const biggest = Math.max(...layout.pieces.map((p) => p.bytes));
    expect(biggest).toBeLessThanOrEqual(DEFAULT_PIECE_BYTES);
    expect(layout.matrices.get("language_model.lm_head.weight")!.length).toBeGreaterThan(8); // 2.35 GB
    expect(layout.matrices.get(`${LM_MODEL_PREFIX}layers.0.mlp.gate_proj.weight`)!.length).toBe(2); // 484 MB
    expect(layout.matrices.get(`${LM_MODEL_PREFIX}layers.3.self_attn.kv_b_proj.weight`)!.length).toBe(1); // never cut
  });

  test("whole units: one matrix piece per unit, nothing cut (the layout before issue 16)", () => {
    const layout = buildTrunkLayout(release.cfg, release.units, { pieceBytes: WHOLE_UNITS });
    checkCover(release.cfg, release.units, layout);
    expect(layout.pieces.filter((p) => p.kind === "matrix").length).toBe(release.cfg.numLayers + 1);
    for (const segs of layout.matrices.values()) expect(segs.length).toBe(1);
  });

  test("the block grid (the checksum unit) is the same whatever the piece size", () => {
    const keys = (pieceBytes: number) => buildTrunkLayout(release.cfg, release.units, { pieceBytes }).pieces.flatMap((p) => p.blocks.map((b) => b.key)).sort();
    const a = keys(DEFAULT_PIECE_BYTES);
    expect(keys(64 * 2 ** 20)).toEqual(a);
    expect(keys(WHOLE_UNITS)).toEqual(a);
  });

  test("a tiny model with small pieces: matrices cut, an unsliceable one kept whole in a piece of its own", async () => {
    const ck = openCheckpoint(await tinyModel("tiny-a"));
    const units = exactTrunkTensors(trunkUnitEntries(ck));
    const layout = buildTrunkLayout(ck.config, units, SPLIT_PIECES);
    checkCover(ck.config, units, layout);
    expect([...layout.matrices.values()].filter((s) => s.length > 1).length).toBeGreaterThan(10);
    const mla = ck.config.layerKinds.indexOf("mla");
    expect(layout.matrices.get(`${LM_MODEL_PREFIX}layers.${mla}.self_attn.kv_b_proj.weight`)!.length).toBe(1);
  });
});

describe("the walk", () => {
  test("the forward pass asks for each layer's matrices in walk order, each once per chunk, and lm_head last", async () => {
    const dir = await tinyModel("tiny-a");
    const ck = openCheckpoint(dir);
    const cfg = ck.config;
    const k = loadKernels();
    const inner = new ResidentWeights(k, cfg, ck.tensors);
    const asked: string[] = [];
    const isMatrix = new Set([
      ...Array.from({ length: cfg.numLayers }, (_, L) => layerMatrices(cfg, L).map((m) => `${L}:${m.suffix}`)).flat(),
    ]);
    const record = (lw: LayerRef): LayerRef => ({
      layer: lw.layer,
      t: (suffix) => {
        if (isMatrix.has(`${lw.layer}:${suffix}`)) asked.push(`${lw.layer}:${suffix}`);
        return lw.t(suffix);
      },
    });
    const w: WeightProvider = Object.assign(Object.create(inner), {
      acquireLayer: (L: number) => record(inner.acquireLayer(L)),
      head: () => {
        asked.push("head");
        return inner.head();
      },
    });
    const model = new Model(k, cfg, w, 4, 64);
    const state = new SessionState(k, cfg, 64);
    try {
      model.forward(state, [5, 17, 300, 42, 7, 99]); // two chunks of 4 and 2 tokens
      const pass = [...Array.from({ length: cfg.numLayers }, (_, L) => layerMatrices(cfg, L).map((m) => `${L}:${m.suffix}`)).flat()];
      expect(asked).toEqual([...pass, ...pass, "head"]);
      expect(unitWalk(cfg, cfg.numLayers).map((m) => m.suffix)).toEqual(["language_model.lm_head.weight"]);
    } finally {
      state.free();
      model.free();
      inner.close();
    }
  });
});
