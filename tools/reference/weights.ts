// Decoded-weight cache of the reference: each tensor is read, shape-checked against what MODEL.md §3
// says it must be, decoded to float64 once, and kept (tiny test models only — a real release would
// need ~1 TB of doubles; the reference is not meant for it).
import { decodeBF16, decodeF32, decodeMXFP4, type MXFP4Wrong } from "./ops.ts";
import { SafetensorsDir } from "./safetensors.ts";

export const PREFIX = "language_model.model.";
export const LM_HEAD = "language_model.lm_head.weight";

export class WeightCache {
  private readonly cache = new Map<string, Float64Array>();

  constructor(
    readonly st: SafetensorsDir,
    private readonly mxfp4Wrong: MXFP4Wrong | undefined,
  ) {}

  /**
   * Use `values` for tensor `name` instead of what the checkpoint stores (row-major, its shape):
   * the reference then runs the model those weights define — e.g. a compact trunk's matrices
   * decoded exactly (quant.ts), to check an engine that reads them.
   */
  override(name: string, values: Float64Array): void {
    this.cache.set(name, values);
  }

  /**
   * A BF16 or F32 tensor as float64, row-major in its stored shape.
   * `shape` is what MODEL.md §3 says; a numel-only check is used where the release's own
   * shape is not pinned (A_log: numel ≥ minNumel).
   */
  dense(name: string, dtype: "BF16" | "F32", shape: number[]): Float64Array {
    const hit = this.cache.get(name);
    if (hit) return hit;
    const e = this.st.entry(name);
    if (e.dtype !== dtype) throw new Error(`${name}: dtype ${e.dtype}, want ${dtype}`);
    if (e.shape.join() !== shape.join()) throw new Error(`${name}: shape [${e.shape}], want [${shape}]`);
    const bytes = this.st.read(name);
    const v = dtype === "BF16" ? decodeBF16(bytes) : decodeF32(bytes);
    this.cache.set(name, v);
    return v;
  }

  /** A 1-D-ish F32 tensor whose numel must be at least `minNumel` (A_log: [D] in the release, H used). */
  f32Loose(name: string, minNumel: number): Float64Array {
    const hit = this.cache.get(name);
    if (hit) return hit;
    const e = this.st.entry(name);
    if (e.dtype !== "F32") throw new Error(`${name}: dtype ${e.dtype}, want F32`);
    const v = decodeF32(this.st.read(name));
    if (v.length < minNumel) throw new Error(`${name}: ${v.length} values, need at least ${minNumel}`);
    this.cache.set(name, v);
    return v;
  }

  /** MXFP4 weight `<base>.weight_packed` U8 [rows][cols/2] + `.weight_scale` U8 [rows][cols/32] → [rows][cols]. */
  mxfp4(base: string, rows: number, cols: number): Float64Array {
    const hit = this.cache.get(base);
    if (hit) return hit;
    const pk = this.st.entry(`${base}.weight_packed`);
    const sc = this.st.entry(`${base}.weight_scale`);
    if (pk.dtype !== "U8" || pk.shape.join() !== [rows, cols / 2].join())
      throw new Error(`${pk.name}: ${pk.dtype} [${pk.shape}], want U8 [${rows},${cols / 2}]`);
    if (sc.dtype !== "U8" || sc.shape.join() !== [rows, cols / 32].join())
      throw new Error(`${sc.name}: ${sc.dtype} [${sc.shape}], want U8 [${rows},${cols / 32}]`);
    const W = decodeMXFP4(this.st.read(pk.name), this.st.read(sc.name), rows, cols, this.mxfp4Wrong);
    this.cache.set(base, W);
    return W;
  }
}
