// Embedding rows, gathered from disk one token at a time: the table (2.35 GB on K3) is never
// resident (docs/PLAN.md: the same bytes buy ~130 expert slots), a token needs one E-wide bf16
// row (14 KB), read synchronously into one aligned buffer and widened to f32 for the model.
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import type { ModelConfig, TensorEntry } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import { allocationBytes, at, type Addr, type CBuf, type CBuffers } from "../model/cmem.ts";
import { ALIGN } from "./readplan.ts";
import type { ShardReader } from "./reader.ts";

/** The row buffer: one bf16 row at any offset, widened to 4096-byte bounds on both ends. */
export const embedRowBufferBytes = (cfg: ModelConfig): number => allocationBytes(Math.ceil((cfg.hidden * 2) / ALIGN) * ALIGN + ALIGN);

/**
 * Called after every row read, with the row's bf16 bytes (before widening): the place to check
 * a recorded checksum of embedding rows (`--verify`); throws to refuse the row.
 */
export type EmbedRowCheck = (id: number, row: Addr, bytes: number) => void;

export class EmbeddingRows {
  private table: TensorEntry;
  private buf: CBuf;
  /** Payload bytes read (counted with the trunk: every token reads its row). */
  bytesRead = 0;

  constructor(
    private k: Kernels,
    mem: CBuffers,
    private reader: ShardReader,
    ckpt: Checkpoint,
    private check?: EmbedRowCheck,
  ) {
    const table = ckpt.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`);
    if (!table) throw new K3Error("CHECKPOINT", "embed_tokens.weight is missing");
    this.table = table;
    this.buf = mem.alloc(embedRowBufferBytes(ckpt.config), "embedding row", ALIGN);
  }

  /** Row `id` as E f32 at `dst`. */
  read(id: number, dst: Addr): void {
    const E = this.table.shape[1]!;
    const rowBytes = E * 2;
    const start = this.table.offset + id * rowBytes;
    const off = Math.floor(start / ALIGN) * ALIGN;
    const need = start + rowBytes - off;
    const len = Math.ceil(need / ALIGN) * ALIGN;
    this.reader.readNow(this.table.file, this.buf.ptr, len, off, need, rowBytes, `embedding row ${id}`);
    this.bytesRead += rowBytes;
    const row = at(this.buf.ptr, start - off);
    this.check?.(id, row, rowBytes);
    this.k.k3_bf16_to_f32(row, dst, E);
  }
}
