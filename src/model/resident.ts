// A WeightProvider with every language-model tensor read into C memory up front: the simplest
// correct provider, used for small models and as the baseline the streaming provider
// (src/memory/) must match bit for bit.
import { closeSync, openSync, readSync } from "node:fs";
import { toArrayBuffer } from "bun:ffi";
import { K3Error } from "../errors.ts";
import { LM_HEAD_NAME, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import type { ModelConfig, TensorEntry } from "../checkpoint/types.ts";
import type { Kernels } from "../kernels.ts";
import { at, CBuffers, type Addr } from "./cmem.ts";
import { zeroStats, type ExpertRef, type LayerRef, type TensorRef, type WeightProvider, type WeightStats } from "./weights.ts";

const LM = LM_MODEL_PREFIX;

export class ResidentWeights implements WeightProvider {
  private mem: CBuffers;
  private refs = new Map<string, TensorRef>();
  private layers: LayerRef[] = [];
  private pending: number[] = [];
  private counters: WeightStats = zeroStats("buffered");

  constructor(
    private k: Kernels,
    private cfg: ModelConfig,
    tensors: Map<string, TensorEntry>,
  ) {
    this.mem = new CBuffers(k);
    const fds = new Map<string, number>();
    try {
      for (const [name, te] of tensors) {
        if (!name.startsWith("language_model.")) continue;
        const buf = this.mem.alloc(te.bytes, name);
        let fd = fds.get(te.file);
        if (fd === undefined) fds.set(te.file, (fd = openSync(te.file, "r")));
        const view = new Uint8Array(toArrayBuffer(buf.ptr, 0, te.bytes));
        let done = 0;
        while (done < te.bytes) {
          const n = readSync(fd, view, done, te.bytes - done, te.offset + done);
          if (n <= 0) throw new K3Error("IO", `${te.file}: short read of tensor ${name} at offset ${te.offset + done} (wanted ${te.bytes - done} more bytes)`);
          done += n;
        }
        this.counters.reads++;
        if (name.includes(".experts.")) this.counters.expertBytesRead += te.bytes;
        else this.counters.trunkBytesRead += te.bytes;
        this.refs.set(name, { name, ptr: buf.ptr, dtype: te.dtype, shape: te.shape, bytes: te.bytes });
      }
    } catch (err) {
      this.mem.free();
      throw err;
    } finally {
      for (const fd of fds.values()) closeSync(fd);
    }
    for (let L = 0; L < cfg.numLayers; L++) {
      const prefix = `${LM}layers.${L}.`;
      this.layers.push({ layer: L, t: (suffix: string) => this.ref(prefix + suffix) });
    }
  }

  private ref(name: string): TensorRef {
    const r = this.refs.get(name);
    if (!r) throw new K3Error("CHECKPOINT", `tensor ${name} is not loaded`);
    return r;
  }

  embedRow(id: number, dst: Addr): void {
    const emb = this.ref(`${LM}embed_tokens.weight`);
    const E = this.cfg.hidden;
    this.k.k3_bf16_to_f32(at(emb.ptr, id * E * 2), dst, E);
  }

  head() {
    return {
      lmHead: this.ref(LM_HEAD_NAME),
      norm: this.ref(`${LM}norm.weight`),
      outResProj: this.ref(`${LM}output_attn_res_proj.weight`),
      outResNorm: this.ref(`${LM}output_attn_res_norm.weight`),
    };
  }

  acquireLayer(L: number): LayerRef {
    return this.layers[L]!;
  }

  releaseLayer(_L: number): void {}

  requestExperts(_L: number, experts: number[]): void {
    this.pending = experts.slice().reverse();
    this.counters.expertRequests += experts.length;
    this.counters.expertHits += experts.length; // resident: no request ever reads the disk
  }

  nextExpert(L: number): { expert: number; ref: ExpertRef } {
    const e = this.pending.pop();
    if (e === undefined) throw new K3Error("INTERNAL", `layer ${L}: no expert pending`);
    const p = `${LM}layers.${L}.block_sparse_moe.experts.${e}.`;
    return {
      expert: e,
      ref: {
        w1p: this.ref(`${p}w1.weight_packed`).ptr,
        w1s: this.ref(`${p}w1.weight_scale`).ptr,
        w2p: this.ref(`${p}w2.weight_packed`).ptr,
        w2s: this.ref(`${p}w2.weight_scale`).ptr,
        w3p: this.ref(`${p}w3.weight_packed`).ptr,
        w3s: this.ref(`${p}w3.weight_scale`).ptr,
      },
    };
  }

  releaseExperts(_L: number): void {
    this.pending = [];
  }

  /** C memory this provider holds (every language-model tensor). */
  get allocatedBytes(): number {
    return this.mem.totalBytes;
  }

  stats(): WeightStats {
    return { ...this.counters };
  }

  close(): void {
    this.mem.free();
    this.refs.clear();
  }
}
