// The kernels that use exp / expf / tanhf give the same bits on every machine (docs/PORTS.md §1).
// They used libm until the linux-arm64 port showed that aarch64 glibc's tanhf differs from x86-64's
// (219 of 2M inputs); the library now carries its own (kernels/k3_math.c), written to give x86-64
// glibc 2.36's bits. GOLDEN holds the hashes the libm-based library (commit 4cb3cb6, built for
// x86-64 and run here) produced for these inputs, so this test fails if the new functions change
// one bit on x86-64 — and, run on linux-arm64 under qemu (test/arm64.test.ts), if they differ
// there. Inputs are finite or ±inf (NaN payloads are not part of the contract, NUMERICS.md §1).
import { describe, expect, test } from "bun:test";
import { k, rng, randF32, randBF16, bitsHash } from "./kernels.helpers.ts";

/** Every 65537th float bit pattern (all exponents, both signs, subnormals, ±inf), NaNs dropped. */
function sweep(scale = 1): Float32Array {
  const u = new Uint32Array(65536);
  for (let i = 0; i < u.length; i++) u[i] = Math.imul(i, 65537) >>> 0;
  return new Float32Array(u.buffer).filter((x) => x === x).map((x) => x * scale);
}

function cases(): Record<string, () => ArrayBufferView> {
  const r = rng(0x11b3);
  const dense = randF32(r, 1 << 16, -40, 40);
  return {
    "sigmoid sweep": () => { const x = sweep(); k.k3_sigmoid(x, x.length); return x; },
    "sigmoid dense": () => { const x = dense.slice(); k.k3_sigmoid(x, x.length); return x; },
    "situ_glu sweep": () => {
      const g = sweep(), u = sweep(0.5).reverse(), out = new Float32Array(g.length);
      k.k3_situ_glu(g, u, out, g.length, 3, 4);
      return out;
    },
    "situ_glu dense": () => {
      const g = dense, u = dense.slice().reverse(), out = new Float32Array(g.length);
      k.k3_situ_glu(g, u, out, g.length, 10, 7);
      return out;
    },
    "kda_gate": () => {
      const H = 8, D = 64, T = 16, f = randF32(r, T * H * D, -20, 20), dt = randF32(r, H * D, -2, 2), aLog = randF32(r, H, -3, 3);
      const g = new Float32Array(f.length);
      k.k3_kda_gate(f, dt, aLog, g, H, D, T, -5);
      return g;
    },
    "mla_attend": () => {
      const Hm = 4, dn = 16, dr = 8, dv = 16, R = 64, T = 24, scale = (dn + dr) ** -0.5;
      const kvb = randBF16(r, Hm * (dn + dv) * R), q = randF32(r, T * Hm * (dn + dr), -4, 4), cache = randF32(r, T * (R + dr), -4, 4);
      const out = new Float32Array(T * Hm * dv), scratch = new Float32Array(Number(k.k3_mla_scratch_floats(R, T)));
      expect(k.k3_mla_attend(q, kvb, cache, out, scratch, Hm, dn, dr, dv, R, 0, T, scale, T, scratch.length)).toBe(0);
      return out;
    },
    "attnres_mix": () => {
      const E = 256, T = 16, n = 8, bank = randF32(r, n * T * E, -30, 30), P = randF32(r, T * E, -30, 30);
      const proj = randBF16(r, E), norm = randBF16(r, E), out = new Float32Array(T * E);
      k.k3_attnres_mix(bank, n, P, proj, norm, out, E, T, 1e-5);
      return out;
    },
  };
}

const GOLDEN: Record<string, string> = {
  "sigmoid sweep": "59be7fd0b468af27",
  "sigmoid dense": "35535a93c23c626f",
  "situ_glu sweep": "cc4a29c7f3e6ff44",
  "situ_glu dense": "92df5385355edb53",
  "kda_gate": "2f056c566c18ab42",
  "mla_attend": "53e4cf2003fcae8",
  "attnres_mix": "5964e7c425061e4c",
};

describe("exp / expf / tanhf kernels: the bits of x86-64 glibc, on every machine", () => {
  test("every case hashes to the bits of the libm-based library", () => {
    const got: Record<string, string> = {};
    for (const [name, run] of Object.entries(cases())) got[name] = bitsHash(run());
    expect(got).toEqual(GOLDEN);
  });
});
