// Every size a kernel strides by is explicit and checked (issue 21, item 9, from the kernel review):
//  - k3_mla_attend is told the cache rows and scratch floats it may use, and refuses a pass that
//    would run past either (the scratch is strided by pos0 + T: a session longer than the scratch
//    was sized for wrote past its end); Model.check refuses such a session before any kernel runs;
//  - k3_kda_recurrent keeps two D-float arrays on each worker's stack: D is bounded by the
//    kernel's own K3_MAX_KDA_HEAD_DIM (read through k3_limit; checkKernelLimits refuses a config
//    past it), not only by what the config reader accepts;
//  - k3_mem_free refuses a pointer that is not a live allocation (a second free) without reading
//    freed or unmapped memory; k3_mem_alloc refuses a size whose bytes + align would overflow.
// Each call is made through the bindings with the sizes that used to overrun.
import { beforeAll, describe, expect, test } from "bun:test";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { K3Error } from "../src/errors.ts";
import { K3_STATUS, kernelLimits, loadKernels } from "../src/kernels.ts";
import { checkKernelLimits, Model } from "../src/model/forward.ts";
import { ResidentWeights } from "../src/model/resident.ts";
import { SessionState } from "../src/model/state.ts";
import { tinyModel } from "./helpers/models.ts";

const k = loadKernels();
const SENTINEL = -7.25;

describe("k3_mla_attend: the cache rows and scratch floats it may use", () => {
  const Hm = 2, dn = 4, dr = 2, dv = 4, R = 8, scale = 0.5;
  const kvb = new Uint16Array(Hm * (dn + dv) * R).fill(0x3f80);
  const setup = (pos0: number, T: number, rows: number, scratchFloats: number) => {
    const q = new Float32Array(T * Hm * (dn + dr)).fill(0.25);
    const cache = new Float32Array(rows * (R + dr)).fill(0.5);
    // The scratch the caller says it has, then a guard the kernel must never touch.
    const mem = new Float32Array(scratchFloats + 4096).fill(SENTINEL);
    const out = new Float32Array(T * Hm * dv).fill(SENTINEL);
    const status = k.k3_mla_attend(q, kvb, cache, out, mem, Hm, dn, dr, dv, R, pos0, T, scale, rows, scratchFloats);
    return { status, out, guardUntouched: mem.subarray(scratchFloats).every((x) => x === SENTINEL) };
  };

  test("a scratch sized for fewer positions than pos0 + T is refused, nothing written", () => {
    // Sized for 16 positions (what a 16-token model allocates), asked for positions 0..31.
    const small = Number(k.k3_mla_scratch_floats(R, 16));
    const r = setup(30, 2, 32, small);
    expect(r.status).toBe(K3_STATUS.arg);
    expect(r.guardUntouched).toBe(true);
    expect(r.out.every((x) => x === SENTINEL)).toBe(true);
    // The same pass with the scratch it needs runs and stays inside it.
    const ok = setup(30, 2, 32, Number(k.k3_mla_scratch_floats(R, 32)));
    expect(ok.status).toBe(K3_STATUS.ok);
    expect(ok.guardUntouched).toBe(true);
    expect(ok.out.every((x) => Number.isFinite(x) && x !== SENTINEL)).toBe(true);
  });

  test("a cache with fewer rows than pos0 + T, and bad sizes, are refused", () => {
    const need = Number(k.k3_mla_scratch_floats(R, 32));
    expect(setup(30, 2, 31, need).status).toBe(K3_STATUS.arg);
    expect(setup(-1, 2, 32, need).status).toBe(K3_STATUS.arg);
    expect(setup(0, 0, 32, need).status).toBe(K3_STATUS.arg);
    expect(Number(k.k3_mla_scratch_floats(-1, 4))).toBe(K3_STATUS.arg);
  });
});

describe("Model.check: the context the model's buffers were sized for", () => {
  let dir = "";
  beforeAll(async () => {
    dir = await tinyModel("tiny-a");
  });

  test("a session made with a longer context than the model's is refused past the model's, never run", () => {
    const ck = openCheckpoint(dir);
    const w = new ResidentWeights(k, ck.config, ck.tensors);
    const model = new Model(k, ck.config, w, 8, 16); // scratch for 16 positions
    const state = new SessionState(k, ck.config, 64); // the session allows 64
    try {
      const ids = Array.from({ length: 24 }, (_, i) => 5 + i);
      let err: unknown;
      try {
        model.forward(state, ids);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(K3Error);
      expect((err as K3Error).code).toBe("CONTEXT");
      expect((err as K3Error).message).toContain("24 tokens > 16, the context this model's buffers were sized for");
      expect(state.pos).toBe(0); // refused before any state moved
      expect(state.dirty).toBe(false);
      expect(model.forward(state, ids.slice(0, 16))).not.toBeNull(); // within it: runs
    } finally {
      state.free();
      model.free();
      w.close();
    }
  });
});

describe("k3_kda_recurrent: D bounded by the kernel's own limit", () => {
  const limit = kernelLimits(k).kdaHeadDim;
  const run = (D: number) => {
    const H = 1, T = 1;
    const v = new Float32Array(T * H * D).fill(0.5), q = new Float32Array(T * H * D).fill(0.1), g = new Float32Array(T * H * D);
    const beta = new Float32Array(T * H).fill(1), S = new Float32Array(H * D * D), o = new Float32Array(T * H * D).fill(SENTINEL);
    return { status: k.k3_kda_recurrent(q, q, v, g, beta, S, o, H, D, T), o };
  };

  test("D past K3_MAX_KDA_HEAD_DIM is refused with nothing written; D at the limit runs", () => {
    expect(limit).toBe(1024);
    const over = run(limit + 1);
    expect(over.status).toBe(K3_STATUS.arg);
    expect(over.o.every((x) => x === SENTINEL)).toBe(true);
    const at = run(limit);
    expect(at.status).toBe(K3_STATUS.ok);
    expect(at.o.every((x) => Number.isFinite(x) && x !== SENTINEL)).toBe(true);
  });

  test("checkKernelLimits refuses a config whose linear_attn_config.head_dim is past it", async () => {
    const cfg = openCheckpoint(await tinyModel("tiny-a")).config;
    expect(() => checkKernelLimits(k, cfg)).not.toThrow();
    expect(() => checkKernelLimits(k, { ...cfg, kdaHeadDim: limit + 1 })).toThrow(`linear_attn_config.head_dim ${limit + 1} > ${limit} (k3_kda_recurrent's limit)`);
  });
});

describe("k3_mem_free and k3_mem_alloc", () => {
  // In a child process: before the fix a second free of a large (mapped) buffer read its unmapped
  // header and killed the process.
  test("a second free (heap and mapped buffers) and a pointer never allocated are refused, touching nothing", () => {
    const script = `
      import { ptr } from "bun:ffi";
      import { loadKernels } from ${JSON.stringify(`${import.meta.dir}/../src/kernels.ts`)};
      const k = loadKernels();
      const out = [];
      for (const bytes of [100, 8 << 20]) {
        const p = k.k3_mem_alloc(bytes, 64);
        out.push(k.k3_mem_free(p), k.k3_mem_free(p));
      }
      const own = new Float32Array(64);
      out.push(k.k3_mem_free(ptr(own, 128)), k.k3_mem_free(null));
      // Many live at once (the table grows), freed in another order: each once.
      const ps = Array.from({ length: 3000 }, (_, i) => k.k3_mem_alloc(64 + i, 64));
      const order = ps.map((p, i) => [p, (i * 7919) % 3000]).sort((a, b) => a[1] - b[1]).map((x) => x[0]);
      out.push(order.map((p) => k.k3_mem_free(p)).every((s) => s === 0), ps.map((p) => k.k3_mem_free(p)).every((s) => s === -1));
      console.log(JSON.stringify(out));
    `;
    const p = Bun.spawnSync([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
    expect({ code: p.exitCode, signal: p.signalCode ?? null, err: p.stderr.toString().slice(0, 300) }).toEqual({ code: 0, signal: null, err: "" });
    expect(JSON.parse(p.stdout.toString())).toEqual([0, K3_STATUS.arg, 0, K3_STATUS.arg, K3_STATUS.arg, 0, true, true]);
  });

  test("a size whose bytes + align would pass INT64_MAX is refused (NULL), not wrapped", () => {
    const max = 2n ** 63n - 1n;
    for (const align of [64n, 4096n, 8192n]) expect(Number(k.k3_mem_alloc(max - 10n, align))).toBe(0);
    expect(Number(k.k3_mem_alloc(-1, 64))).toBe(0);
  });
});

