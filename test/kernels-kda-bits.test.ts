// k3_kda_recurrent at the host's vector width (issue 23, item 3: kernels/k3_kda_body.h built per
// ISA, its four passes over each head's state fused into two) must give the bits of the kernel
// before that change; k3_kda_conv_silu (same file, one build) is pinned beside it. GOLDEN holds
// the bit hashes of main's library at 5c6f5d4 (one build, baseline x86-64; S then o, X then
// hist), so this fails if any path, thread count or T drifts,
// even if every path drifted together. D: the slice's 128 and sizes with tails of every 16-lane
// chunk; T in {1, 2, 5, 17, 64}; a state carried in (S ≠ 0); −0 inputs; gates from −8 to 0.
import { setDefaultTimeout } from "bun:test";
import { k, rng, randF32, bitsHash, describePinnedBits, type PinnedCase } from "./kernels.helpers.ts";

setDefaultTimeout(300_000);

const TS = [1, 2, 5, 17, 64];

function cases(): PinnedCase[] {
  const out: PinnedCase[] = [];
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
        hash: () => {
          const S = Float32Array.from(S0), o = new Float32Array(n);
          const st = k.k3_kda_recurrent(q, kk, v, g, beta, S, o, H, D, T);
          if (st !== 0) throw new Error(`k3_kda_recurrent status ${st}`);
          return `${bitsHash(S)} ${bitsHash(o)}`;
        },
      });
    }
  for (const C of [7, 100, 1000])
    for (const T of TS) {
      const X0 = randF32(r, T * C, -3, 3), w = randF32(r, C * 4, -1, 1), h0 = randF32(r, 3 * C, -3, 3);
      X0[0] = -0;
      out.push({
        name: `conv_silu C${C} T${T}`,
        hash: () => {
          const X = Float32Array.from(X0), hist = Float32Array.from(h0);
          k.k3_kda_conv_silu(X, w, hist, C, T);
          return `${bitsHash(X)} ${bitsHash(hist)}`;
        },
      });
    }
  return out;
}

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
  "conv_silu C7 T1": "f64f9fdce02a5298 a6479ebfd29d5e77",
  "conv_silu C7 T2": "f6addc6201dfbb78 72040aa2a11fef00",
  "conv_silu C7 T5": "3b7583447997f06e 9f1f6c9429c1fbd6",
  "conv_silu C7 T17": "64bf5aff29ba8ffb b48f9582602ffe07",
  "conv_silu C7 T64": "ae9e75ceee28831d 87e50b237c55a9a6",
  "conv_silu C100 T1": "4454085323e5afa7 87564feaa206c550",
  "conv_silu C100 T2": "ab3be23e586c8c91 e11d9bf86c0a7d04",
  "conv_silu C100 T5": "c5c13034d9325e2d 9fe47fb19dc61b60",
  "conv_silu C100 T17": "6ca5cdc9113b356a f8885e0a3e0d9eac",
  "conv_silu C100 T64": "a6ab346d4c1cb064 e8485092d38675dc",
  "conv_silu C1000 T1": "e183fab3a627bdde 805886a4a68a9476",
  "conv_silu C1000 T2": "286c0b985f0e1599 269309f333c3847",
  "conv_silu C1000 T5": "941196955e08b0d 7837381a7bb7dfb3",
  "conv_silu C1000 T17": "c3e2982b8cf3d0cd c4c0f446fad70340",
  "conv_silu C1000 T64": "be510911e59d784f 4e3c81e0a8bfeef6",
};

describePinnedBits("KDA recurrence and short conv: the bits of main's kernels on every path", cases(), GOLDEN);
