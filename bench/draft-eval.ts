// "Implemented as trained": the demo draft's acceptance measured by k3 on the held-out text that
// tools/train/drafteval.py (PyTorch) measured, with the same definitions (docs/DRAFT.md "The demo
// draft"), compared with the PyTorch numbers within the noise of the sample.
//
//   bun run bench/draft-eval.ts [--windows N] [--json OUT]     (default: every window of both sets)
//
// Greedy set (heldout-greedy.json): row t of a window x — the target has processed x_0..x_t, x_{t+1}
// is the pending (emitted) token; the draft proposes a chain of 5 greedy drafts from its pending row;
// one target verify pass over [x_{t+1}, d_1..d_5] gives the labels (its argmax after each prefix)
// and commits x_{t+1}, so the next row is teacher-forced on the text. First-draft agreement =
// P(d_1 = label_1); tokens per verify pass at budget j = mean of 1 + min(accepted, j).
// Sampled set (heldout-sampled.json, the target's own T 0.8 text under the sampling contract):
// exact match (greedy drafts against the text), coupled (each draft the seeded sampler's draw on the
// draft's logits at its position: what k3 proposes under sampling), and min(1, p/q) (drafts drawn
// from q, accepted with that probability: k3's own random numbers, so only within noise of
// PyTorch's) with Σ min(p, q) at the first step (deterministic: equal up to f32 rounding).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { openDraftCheckpoint } from "../src/checkpoint/draft.ts";
import { createSampler } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { releasedDraftSources } from "../src/memory/draft-plan.ts";
import { DraftModel } from "../src/model/draft.ts";
import { DraftWeights } from "../src/model/draft-weights.ts";
import { Model } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { SessionState } from "../src/model/state.ts";
import { drawDraft, STREAM } from "../src/speculate/reject.ts";

const K = 5;
const k = loadKernels();

/** The demo target and its draft, resident, at the model level (the engine's order of calls). */
export function openEval(targetDir: string, draftDir: string) {
  const ck = openCheckpoint(targetDir);
  const cfg = ck.config;
  const weights = new ResidentWeights(k, cfg, ck.tensors);
  const dck = openDraftCheckpoint(draftDir, cfg);
  const draft = new DraftModel(k, cfg, dck, new DraftWeights(k, releasedDraftSources(dck)), (id, dst) => weights.embedRow(id, dst), 256, K);
  const model = new Model(k, cfg, weights, 16, 256, K, 1, dck.config.captureLayers);
  model.tapSink = draft;
  const session = () => {
    const s = new SessionState(k, cfg, 256);
    s.draft = draft.newState();
    return s;
  };
  return { cfg, model, draft, session, close: () => (model.free(), draft.free(), weights.close()) };
}

type Eval = ReturnType<typeof openEval>;
const argmax = (l: Float32Array) => k.k3_argmax(l, l.length);
const lead = (a: number[], b: number[]) => {
  let n = 0;
  while (n < a.length && a[n] === b[n]) n++;
  return n;
};

/** Accepted counts of the greedy chain at every row of every window (window-major, rows 0..T−2). */
export function greedyAccepted(e: Eval, texts: number[][]): { accepted: number[]; first: boolean[] } {
  const accepted: number[] = [];
  const first: boolean[] = [];
  for (const x of texts) {
    const s = e.session();
    try {
      e.model.forward(s, [x[0]!], { logits: false });
      for (let t = 0; t + 1 < x.length; t++) {
        const d = e.draft.propose(s, x[t + 1]!, K).tokens;
        const rows = e.model.verify(s, [x[t + 1]!, ...d]); // commits x_{t+1}: the next row is teacher-forced
        const labels = rows.slice(0, d.length).map(argmax);
        first.push(d[0] === labels[0]);
        accepted.push(lead(d, labels));
      }
    } finally {
      s.free();
    }
  }
  return { accepted, first };
}

/** The sampled set's three rules at rows t = prompt − 1 .. T − 2 − K of each window (seed = window + 1). */
export function sampledAccepted(e: Eval, texts: number[][], prompt: number, temperature: number) {
  const exact: number[] = [];
  const coupled: number[] = [];
  const pq: number[] = [];
  const beta: number[] = [];
  texts.forEach((x, w) => {
    const sampler = createSampler({ temperature, seed: w + 1 }) as Required<ReturnType<typeof createSampler>>;
    const s = e.session();
    try {
      e.model.forward(s, x.slice(0, prompt - 1 + 1), { logits: false }); // history x_0..x_{prompt−1}
      for (let t = prompt - 1; t <= x.length - 2 - K; t++) {
        const next = x.slice(t + 2, t + 2 + K);
        exact.push(lead(e.draft.propose(s, x[t + 1]!, K).tokens, next));
        coupled.push(lead(e.draft.propose(s, x[t + 1]!, K, { pick: (l, pos) => sampler.sample(l, pos) }).tokens, next));
        const q: Float64Array[] = [];
        const qd = e.draft.propose(s, x[t + 1]!, K, {
          pick: (l, pos) => {
            const r = drawDraft(sampler, l, pos);
            q.push(r.q);
            return r.token;
          },
        }).tokens;
        const rows = e.model.verify(s, [x[t + 1]!, ...qd]); // commits x_{t+1}
        let a = 0;
        for (; a < qd.length; a++) {
          const p = sampler.weights(rows[a]!);
          const tot = p.reduce((u, v) => u + v, 0);
          if (a === 0) beta.push(p.reduce((u, v, i) => u + Math.min(v / tot, q[0]![i]!), 0));
          if (!(sampler.uniform(t + 2 + a, STREAM.accept) * q[a]![qd[a]!]! < p[qd[a]!]! / tot)) break;
        }
        pq.push(a);
      }
    } finally {
      s.free();
    }
  });
  return { exact, coupled, pq, beta };
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
/** Tokens per verify pass at budgets 1..K: mean of 1 + min(accepted, j). */
export const tokensPerPass = (acc: number[]) => Object.fromEntries(Array.from({ length: K }, (_, i) => [String(i + 1), mean(acc.map((a) => 1 + Math.min(a, i + 1)))]));
/** Standard error of the mean of 1 + min(accepted, j) (the sample's noise). */
const stderr = (acc: number[], j: number) => {
  const v = acc.map((a) => 1 + Math.min(a, j));
  const m = mean(v);
  return Math.sqrt(v.reduce((u, x) => u + (x - m) ** 2, 0) / (v.length - 1) / v.length);
};

interface PyGreedy {
  positions: number;
  first_draft_agreement: number;
  tokens_per_pass: Record<string, number>;
  accepted_per_position: number[];
  texts: number[][];
}

/** The comparison, statistic by statistic: k3, PyTorch, their difference in standard errors. */
export function compareGreedy(py: PyGreedy, windows: number, k3: { accepted: number[]; first: boolean[] }) {
  const n = k3.accepted.length;
  const pyAcc = py.accepted_per_position.slice(0, n);
  const pyFirst = mean(pyAcc.map((a) => (a > 0 ? 1 : 0)));
  const agree = mean(k3.first.map((b) => (b ? 1 : 0)));
  const se = Math.sqrt((agree * (1 - agree)) / n);
  return {
    windows,
    positions: n,
    samePositions: k3.accepted.filter((a, i) => a === pyAcc[i]).length / n,
    firstDraftAgreement: { k3: agree, pytorch: windows * 127 === py.positions ? py.first_draft_agreement : pyFirst, stderr: se },
    tokensPerPass: Object.fromEntries(Array.from({ length: K }, (_, i) => [String(i + 1), { k3: tokensPerPass(k3.accepted)[String(i + 1)]!, pytorch: tokensPerPass(pyAcc)[String(i + 1)]!, stderr: stderr(k3.accepted, i + 1) }])),
  };
}

if (import.meta.main) {
  const arg = (f: string) => {
    const i = process.argv.indexOf(f);
    return i >= 0 ? process.argv[i + 1] : undefined;
  };
  const root = join(import.meta.dir, "..");
  const { ensureDemoDraft, ensureDemoModel } = await import("../src/cli/demo.ts");
  const e = openEval(ensureDemoModel(), ensureDemoDraft());
  const g = JSON.parse(readFileSync(join(root, "assets/demo/draft-eval/heldout-greedy.json"), "utf8")) as PyGreedy;
  const sm = JSON.parse(readFileSync(join(root, "assets/demo/draft-eval/heldout-sampled.json"), "utf8"));
  const windows = Number(arg("--windows") ?? g.texts.length);
  const t0 = performance.now();
  const greedy = compareGreedy(g, windows, greedyAccepted(e, g.texts.slice(0, windows)));
  const sw = Math.min(windows, sm.texts.length);
  const sampled = sampledAccepted(e, sm.texts.slice(0, sw), sm.settings.prompt, sm.settings.temperature);
  const rows = sampled.exact.length;
  const pySlice = (key: string) => (sm.accepted_per_position[key] as number[]).slice(0, rows);
  const report = {
    greedy,
    sampled: {
      windows: sw,
      positions: rows,
      exact_match: { k3: tokensPerPass(sampled.exact), pytorch: tokensPerPass(pySlice("exact_match")), samePositions: sampled.exact.filter((a, i) => a === pySlice("exact_match")[i]).length / rows, stderr3: stderr(sampled.exact, 3) },
      exact_match_coupled: { k3: tokensPerPass(sampled.coupled), pytorch: tokensPerPass(pySlice("exact_match_coupled")), samePositions: sampled.coupled.filter((a, i) => a === pySlice("exact_match_coupled")[i]).length / rows, stderr3: stderr(sampled.coupled, 3) },
      min_p_over_q: { k3: tokensPerPass(sampled.pq), pytorch: tokensPerPass(pySlice("min_p_over_q")), stderr3: stderr(sampled.pq, 3), firstStepExpected: { k3: mean(sampled.beta), pytorch: sw === sm.texts.length ? sm.min_p_over_q.first_step_expected : undefined } },
    },
    seconds: (performance.now() - t0) / 1000,
  };
  e.close();
  const out = arg("--json");
  if (out) writeFileSync(out, JSON.stringify(report, null, 2) + "\n");
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
}
