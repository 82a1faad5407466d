// One matrix product of a model's weights, whatever their format (bf16 as released, or the compact
// int8/int4 groups of a pack), with the kernels' status turned into an error that names the matrix:
// the target's forward pass (forward.ts, whole matrices or row slices) and the draft model share it.
import { K3Error } from "../errors.ts";
import { K3_STATUS, type Kernels } from "../kernels.ts";
import { at, type Addr } from "./cmem.ts";
import type { TensorRef } from "./weights.ts";

/** `n` rows of W (all of them, or one slice at `ptr`/`S`) times T tokens of X: Y row t at Y + t·ldy. */
export function matmulRows(k: Kernels, W: TensorRef, ptr: Addr, S: Addr | undefined, X: Addr, Y: Addr, ldy: number, n: number, T: number): void {
  const cols = W.shape[1]!;
  let status: number;
  if (W.dtype === "BF16") status = k.k3_matmul_bf16(ptr, X, cols, Y, ldy, n, cols, T);
  else if (W.dtype === "Q8") status = k.k3_matmul_q8(ptr, S!, X, cols, Y, ldy, n, cols, T);
  else if (W.dtype === "Q4") status = k.k3_matmul_q4(ptr, S!, X, cols, Y, ldy, n, cols, T);
  else throw new K3Error("INTERNAL", `${W.name}: no matmul for ${W.dtype} weights`);
  matmulStatus(status, `${W.name} (${W.dtype} [${W.shape.join(", ")}]${n < W.shape[0]! ? `, a slice of ${n} rows` : ""})`, T);
}

/** The exact trunk's BX4 matrix (kernels/k3_bx4.c: k3_matmul_bf16's bits): whole, or one call
 *  per row slice writing its rows of all T tokens (the output row stride). A damaged escape
 *  table is refused by the kernel and named here. */
export function matmulBx4(k: Kernels, W: TensorRef, X: Addr, Y: Addr, rows: number, cols: number, T: number): void {
  const n = W.rowSlices?.length ?? 1;
  for (let i = 0; i < n; i++) {
    const s = W.rowSlices ? W.slice!(i) : { r0: 0, r1: rows, ptr: W.ptr, escapes: W.escapes };
    const e = s.escapes;
    if (!e) throw new K3Error("INTERNAL", `${W.name} came without its escape table`);
    const st = k.k3_matmul_bx4(s.ptr, at(e.ptr, s.r0 * 4), at(e.ptr, (e.rows + 1) * 4), e.count, X, cols, at(Y, s.r0 * 4), rows, s.r1 - s.r0, cols, T);
    if (st === K3_STATUS.data)
      throw new K3Error("CHECKPOINT", `${W.name}: its escape table in the exact trunk pack is damaged (an index or column out of range)`, ["check the pack: k3 verify (or make it again: k3 pack --trunk exact)"]);
    matmulStatus(st, `${W.name} (BX4 [${W.shape.join(", ")}]${W.rowSlices ? `, rows ${s.r0}..${s.r1 - 1}` : ""})`, T);
  }
}

/** A matmul's status: a refusal names the matrix and its shape (a format or size the kernels do
 *  not handle: every K3 matrix is one they do, so the file holds something else). */
export function matmulStatus(status: number, what: string, T: number): void {
  if (status === K3_STATUS.ok) return;
  throw new K3Error("CHECKPOINT", `${what}: the matmul kernel refused it for ${T} token${T === 1 ? "" : "s"} (status ${status})`, [
    "its columns must be a multiple of 32 for MXFP4 and int8/int4 weights (kernels/k3.h); check the checkpoint or re-pack the trunk",
  ]);
}

/** The shape a caller multiplies by must be the tensor's (a mismatch is a bug, named). */
export function checkShape(W: TensorRef, rows: number, cols: number, who: string): void {
  if (W.shape.length !== 2 || W.shape[0] !== rows || W.shape[1] !== cols)
    throw new K3Error("INTERNAL", `${W.name} is [${W.shape.join(", ")}], ${who} multiplies it as [${rows}, ${cols}]`);
}
