// k3_mla_attend at the host's vector width (issue 23, item 3: k3_mla_avx2.c / k3_mla_avx512.c
// compile the one body of kernels/k3_mla_body.h per ISA, blocked over tokens) must give the bits
// of the kernel before that change. GOLDEN holds the bit hashes of the outputs of the scalar
// kernel of main at 5c6f5d4 (one head-token at a time, baseline x86-64), so this test fails if
// any path, thread count, T or pos0 drifts from the old bits, even if every path drifted together.
// Shapes: the slice's own (R = 512, dn = dv = 128, dr = 64: whole 16-lane chunks) and odd ones
// (tails of every dot16, R below 16, dr = 0); T in {1, 2, 5, 17, 64} hits every remainder of the
// token blocks, pos0 in {0, 3, 40} the causal tail of a block at every offset. Inputs carry
// −0 (q, cache, kv_b) and scores spread wide enough that some softmax weights underflow to 0.
import { setDefaultTimeout } from "bun:test";
import { k, rng, randF32, randBF16, bitsHash, describePinnedBits, type PinnedCase } from "./kernels.helpers.ts";

// Every path × 2 thread counts × every case: about a second natively, ~10× that under qemu.
setDefaultTimeout(300_000);

type Shape = { Hm: number; dn: number; dr: number; dv: number; R: number };
const SHAPES: Shape[] = [
  { Hm: 2, dn: 128, dr: 64, dv: 128, R: 512 },
  { Hm: 3, dn: 5, dr: 3, dv: 7, R: 37 },
  { Hm: 1, dn: 17, dr: 0, dv: 16, R: 48 },
  { Hm: 5, dn: 4, dr: 20, dv: 3, R: 9 },
];
const TS = [1, 2, 5, 17, 64];
const POS0 = [0, 3, 40];

function cases(): PinnedCase[] {
  const out: PinnedCase[] = [];
  const r = rng(0x6d1a);
  for (const s of SHAPES)
    for (const T of TS)
      for (const pos0 of POS0) {
        const { Hm, dn, dr, dv, R } = s;
        const npos = pos0 + T;
        const kvb = randBF16(r, Hm * (dn + dv) * R);
        kvb[1] = 0x8000; // a −0 weight
        const q = randF32(r, T * Hm * (dn + dr), -2, 2);
        q[0] = -0;
        const cache = randF32(r, npos * (R + dr), -3, 3);
        for (let i = 0; i < cache.length; i += 7) cache[i] *= 8; // wide scores: some weights underflow
        cache[2] = -0;
        const scale = (dn + dr) ** -0.5;
        out.push({
          name: `Hm${Hm} dn${dn} dr${dr} dv${dv} R${R} T${T} pos0 ${pos0}`,
          hash: () => {
            const o = new Float32Array(T * Hm * dv);
            const scratch = new Float32Array(Number(k.k3_mla_scratch_floats(R, npos)));
            const st = k.k3_mla_attend(q, kvb, cache, o, scratch, Hm, dn, dr, dv, R, pos0, T, scale, npos, scratch.length);
            if (st !== 0) throw new Error(`k3_mla_attend status ${st}`);
            return bitsHash(o);
          },
        });
      }
  return out;
}

// Computed with main's library at 5c6f5d4 (scalar path; every path equalled it then).
const GOLDEN: Record<string, string> = {
  "Hm2 dn128 dr64 dv128 R512 T1 pos0 0": "b0d1dcad0cb65f90",
  "Hm2 dn128 dr64 dv128 R512 T1 pos0 3": "e97fdda23c51100e",
  "Hm2 dn128 dr64 dv128 R512 T1 pos0 40": "59e5bdcc8af92c36",
  "Hm2 dn128 dr64 dv128 R512 T2 pos0 0": "18544a712e99e1bb",
  "Hm2 dn128 dr64 dv128 R512 T2 pos0 3": "ecd55b13f0a1f572",
  "Hm2 dn128 dr64 dv128 R512 T2 pos0 40": "5539f9b14cc34356",
  "Hm2 dn128 dr64 dv128 R512 T5 pos0 0": "32d90fbba53dcdf2",
  "Hm2 dn128 dr64 dv128 R512 T5 pos0 3": "ada4cf619a65dbd",
  "Hm2 dn128 dr64 dv128 R512 T5 pos0 40": "bb213f657ffc93b3",
  "Hm2 dn128 dr64 dv128 R512 T17 pos0 0": "b3d5bb4d452a3bf5",
  "Hm2 dn128 dr64 dv128 R512 T17 pos0 3": "864a4f62c285fa56",
  "Hm2 dn128 dr64 dv128 R512 T17 pos0 40": "9ba500ce141bbe3a",
  "Hm2 dn128 dr64 dv128 R512 T64 pos0 0": "86172e177d6e5cc5",
  "Hm2 dn128 dr64 dv128 R512 T64 pos0 3": "7d5d4dff7e4db421",
  "Hm2 dn128 dr64 dv128 R512 T64 pos0 40": "a7700f8265bb980d",
  "Hm3 dn5 dr3 dv7 R37 T1 pos0 0": "32d122f1d7c3cfee",
  "Hm3 dn5 dr3 dv7 R37 T1 pos0 3": "ae309402e1edbc39",
  "Hm3 dn5 dr3 dv7 R37 T1 pos0 40": "6b5661d421b138a8",
  "Hm3 dn5 dr3 dv7 R37 T2 pos0 0": "bba0c22b392f619",
  "Hm3 dn5 dr3 dv7 R37 T2 pos0 3": "4e7774ebd8158795",
  "Hm3 dn5 dr3 dv7 R37 T2 pos0 40": "7735776d123ae5f2",
  "Hm3 dn5 dr3 dv7 R37 T5 pos0 0": "9e281e031ae34295",
  "Hm3 dn5 dr3 dv7 R37 T5 pos0 3": "c3010ba04ad3b040",
  "Hm3 dn5 dr3 dv7 R37 T5 pos0 40": "569d8f3359cfd53",
  "Hm3 dn5 dr3 dv7 R37 T17 pos0 0": "8d3c27ae4012005",
  "Hm3 dn5 dr3 dv7 R37 T17 pos0 3": "a5633fe9c1a47168",
  "Hm3 dn5 dr3 dv7 R37 T17 pos0 40": "e97db6709bb5160b",
  "Hm3 dn5 dr3 dv7 R37 T64 pos0 0": "635f094269689c7e",
  "Hm3 dn5 dr3 dv7 R37 T64 pos0 3": "513116d6fa54d9fc",
  "Hm3 dn5 dr3 dv7 R37 T64 pos0 40": "14805abe5df31aa2",
  "Hm1 dn17 dr0 dv16 R48 T1 pos0 0": "adcdbb9914063ba1",
  "Hm1 dn17 dr0 dv16 R48 T1 pos0 3": "e67a84bad444c3f4",
  "Hm1 dn17 dr0 dv16 R48 T1 pos0 40": "c4952cee12ff9d45",
  "Hm1 dn17 dr0 dv16 R48 T2 pos0 0": "b56c62730ab765d6",
  "Hm1 dn17 dr0 dv16 R48 T2 pos0 3": "53d2ebf861d9d4af",
  "Hm1 dn17 dr0 dv16 R48 T2 pos0 40": "2b1f0b5159161571",
  "Hm1 dn17 dr0 dv16 R48 T5 pos0 0": "9fb7229155ce044",
  "Hm1 dn17 dr0 dv16 R48 T5 pos0 3": "7756d7c1eda83d36",
  "Hm1 dn17 dr0 dv16 R48 T5 pos0 40": "2349d2794d211582",
  "Hm1 dn17 dr0 dv16 R48 T17 pos0 0": "768988db95beff07",
  "Hm1 dn17 dr0 dv16 R48 T17 pos0 3": "5fd41d33af0d0397",
  "Hm1 dn17 dr0 dv16 R48 T17 pos0 40": "e4eb5a4fc1c52633",
  "Hm1 dn17 dr0 dv16 R48 T64 pos0 0": "a2098143fa7e7c2f",
  "Hm1 dn17 dr0 dv16 R48 T64 pos0 3": "daab0dfced4f456b",
  "Hm1 dn17 dr0 dv16 R48 T64 pos0 40": "ada747fc10104977",
  "Hm5 dn4 dr20 dv3 R9 T1 pos0 0": "be9439bf56ce6b7d",
  "Hm5 dn4 dr20 dv3 R9 T1 pos0 3": "a8f9736b8c9e7421",
  "Hm5 dn4 dr20 dv3 R9 T1 pos0 40": "d49bc51583f9c70b",
  "Hm5 dn4 dr20 dv3 R9 T2 pos0 0": "c6a1af2058aeb629",
  "Hm5 dn4 dr20 dv3 R9 T2 pos0 3": "9c8eab343097ad0b",
  "Hm5 dn4 dr20 dv3 R9 T2 pos0 40": "81d7db29dadc843a",
  "Hm5 dn4 dr20 dv3 R9 T5 pos0 0": "79b181b390561490",
  "Hm5 dn4 dr20 dv3 R9 T5 pos0 3": "588ae93c6b669b12",
  "Hm5 dn4 dr20 dv3 R9 T5 pos0 40": "b5ca441a8ae02ac1",
  "Hm5 dn4 dr20 dv3 R9 T17 pos0 0": "687fc32a53fd07ad",
  "Hm5 dn4 dr20 dv3 R9 T17 pos0 3": "c0a4d1face049f4b",
  "Hm5 dn4 dr20 dv3 R9 T17 pos0 40": "505875e06744ee2c",
  "Hm5 dn4 dr20 dv3 R9 T64 pos0 0": "a079fa8949cce5ae",
  "Hm5 dn4 dr20 dv3 R9 T64 pos0 3": "cb72e234cf033fba",
  "Hm5 dn4 dr20 dv3 R9 T64 pos0 40": "5e6a8747f6b2e00e",
};

describePinnedBits("k3_mla_attend: the bits of the one-head-token kernel on every path", cases(), GOLDEN);
