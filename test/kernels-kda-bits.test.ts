// k3_kda_recurrent at the host's vector width (issue 23, item 3: kernels/k3_kda_body.h built per
// ISA, its four passes over each head's state fused into two) must give the bits of the kernel
// before that change. GOLDEN holds the bit hashes of main's library at 5c6f5d4 (one build,
// baseline x86-64; hashes of S then o), so this fails if any path, thread count or T drifts,
// even if every path drifted together. D: the slice's 128 and sizes with tails of every 16-lane
// chunk; T in {1, 2, 5, 17, 64}; a state carried in (S ≠ 0); −0 inputs; gates from −8 to 0.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { k, rng, randF32, withIsaThreads, bitsHash, allIsas } from "./kernels.helpers.ts";

setDefaultTimeout(300_000);

const TS = [1, 2, 5, 17, 64];
type Case = { name: string; run: () => Float32Array[] };

function cases(): Case[] {
  const out: Case[] = [];
  const r = rng(0x6bda);
  for (const [H, D] of [[2, 128], [3, 37], [1, 16], [4, 5]])
    for (const T of TS) {
      const n = T * H * D;
      const q = randF32(r, n, -0.3, 0.3), kk = randF32(r, n, -0.3, 0.3), v = randF32(r, n, -1, 1);
      const g = randF32(r, n, -8, 0), beta = randF32(r, T * H, 0, 1), S0 = randF32(r, H * D * D, -0.5, 0.5);
      q[0] = -0;
      v[1] = -0;
      out.push({
        name: `recurrent H${H} D${D} T${T}`,
        run: () => {
          const S = Float32Array.from(S0), o = new Float32Array(n);
          const st = k.k3_kda_recurrent(q, kk, v, g, beta, S, o, H, D, T);
          if (st !== 0) throw new Error(`k3_kda_recurrent status ${st}`);
          return [S, o];
        },
      });
    }
  return out;
}

const hashOf = (c: Case) => c.run().map(bitsHash).join(" ");

// Computed with main's library at 5c6f5d4.
const GOLDEN: Record<string, string> = {
  "recurrent H2 D128 T1": "c09afcf81e58c740 a81e6558d4b77301",
  "recurrent H2 D128 T2": "d8a339a54a784be5 ba851c6a7013d38c",
  "recurrent H2 D128 T5": "abccda657cda315e 90449afa4758b094",
  "recurrent H2 D128 T17": "67d9be6fa9c7eed2 b56edf6c52b9a3dd",
  "recurrent H2 D128 T64": "494ce4888f120ed6 4ce009bd20a57e11",
  "recurrent H3 D37 T1": "93d9debc7b36badd b01b8dda4aa1059c",
  "recurrent H3 D37 T2": "98e266ebf5ea4f44 695d9be92314e9c5",
  "recurrent H3 D37 T5": "9b48bba044f6ee12 6dcfe910f63ed8",
  "recurrent H3 D37 T17": "fc6c1220b3bffd3f b8b9de546774a8d8",
  "recurrent H3 D37 T64": "c68f17a2151c6700 9191b659bfb229f4",
  "recurrent H1 D16 T1": "311fdb0ed933a347 3203715c50be4cbb",
  "recurrent H1 D16 T2": "4c77120be465f2db a8e710c46e51b51a",
  "recurrent H1 D16 T5": "fa6fc76230f54212 c89e2ea15e73dd2d",
  "recurrent H1 D16 T17": "11e98f386084680 c568aa4cda559fdf",
  "recurrent H1 D16 T64": "372034196ed21aa0 1c5f1132c5df7bd3",
  "recurrent H4 D5 T1": "f8d1c88c476e8147 34e1855c055346e7",
  "recurrent H4 D5 T2": "ff652709736c4acf f037ebcce408e426",
  "recurrent H4 D5 T5": "7e14f2fc569728e8 ce823506529a5264",
  "recurrent H4 D5 T17": "ae0a01a5a9976021 d19c06e140836e6c",
  "recurrent H4 D5 T64": "f0d1853e13f1b2f2 d5a97f5e4301cca8",
};

describe("KDA recurrence: the bits of main's kernels on every path", () => {
  const all = cases();
  if (process.env.K3_PRINT_GOLDEN) {
    test("print", () => {
      const g: Record<string, string> = {};
      for (const c of all) g[c.name] = withIsaThreads(allIsas[0], 1, () => hashOf(c));
      console.log(JSON.stringify(g, null, 2));
    });
    return;
  }
  for (const isa of allIsas)
    for (const threads of [1, 2])
      test(`ISA ${isa}, ${threads} thread(s): ${all.length} cases equal the pinned bits`, () => {
        const bad: string[] = [];
        withIsaThreads(isa, threads, () => {
          for (const c of all) if (hashOf(c) !== GOLDEN[c.name]) bad.push(c.name);
        });
        expect(bad).toEqual([]);
      });
  test("every case has a pinned hash", () => {
    expect(all.map((c) => c.name).filter((n) => !(n in GOLDEN))).toEqual([]);
  });
});
