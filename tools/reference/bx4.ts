// The exact compact trunk's matrix format, BX4 (issue 25, `k3 pack --trunk exact`), written from
// its definition (kernels/k3.h, kernels/k3_bx4_internal.h, docs/TRUNK.md) and nothing else: an
// independent encoder and decoder for the tests and tools/reference/exact-pack.ts.
// Imports nothing from src/ or kernels/.
//
// A bf16 word w = hb << 8 | lb (hb: sign and exponent bits 7..1; lb: exponent bit 0, mantissa).
// Row record, 16 + 8·⌈cols/16⌉ + cols bytes:
//   table[16]   the row's most frequent hb values, by count (desc) then value (asc); 0 after them
//   codes       per 16-column chunk a little-endian u64; its nibble p holds the table index of
//               column 16q + 2p (p < 8) or 16q + 2(p − 8) + 1 (p ≥ 8); 0 for padding columns
//   low[cols]   lb of every column
// An hb not in the table is an escape: code 0, and an entry (column << 8 | hb) in the matrix's
// escape table: idx[rows + 1] u32 (row r's entries are [idx[r], idx[r+1])), then the entries.

export const BX4_TABLE = 16;
export const bx4CodeBytes = (cols: number) => 8 * Math.ceil(cols / 16);
export const bx4RowBytes = (cols: number) => BX4_TABLE + bx4CodeBytes(cols) + cols;

/** Byte and shift of column c's 4-bit code inside a row's code section. */
function codeSlot(c: number): { byte: number; shift: number } {
  const j = c % 16;
  const p = j % 2 === 1 ? 8 + (j >> 1) : j >> 1;
  return { byte: Math.floor(c / 16) * 8 + (p >> 1), shift: (p & 1) * 4 };
}

export interface Bx4Matrix {
  records: Uint8Array; // rows × bx4RowBytes(cols)
  index: Uint32Array; // rows + 1
  entries: Uint32Array;
}

/** bf16 words [rows][cols] → BX4. */
export function encodeBx4(w: Uint16Array, rows: number, cols: number): Bx4Matrix {
  const rb = bx4RowBytes(cols);
  const records = new Uint8Array(rows * rb);
  const index = new Uint32Array(rows + 1);
  const entries: number[] = [];
  for (let r = 0; r < rows; r++) {
    const row = w.subarray(r * cols, (r + 1) * cols);
    const count = new Array<number>(256).fill(0);
    for (const x of row) count[x >> 8]!++;
    const table = [...count.keys()].filter((v) => count[v]! > 0).sort((a, b) => count[b]! - count[a]! || a - b).slice(0, BX4_TABLE);
    const rec = records.subarray(r * rb, (r + 1) * rb);
    table.forEach((v, i) => (rec[i] = v));
    index[r] = entries.length;
    for (let c = 0; c < cols; c++) {
      const hb = row[c]! >> 8;
      let code = table.indexOf(hb);
      if (code < 0) {
        entries.push(((c << 8) | hb) >>> 0);
        code = 0;
      }
      const { byte, shift } = codeSlot(c);
      rec[BX4_TABLE + byte]! |= code << shift;
      rec[BX4_TABLE + bx4CodeBytes(cols) + c] = row[c]! & 255;
    }
  }
  index[rows] = entries.length;
  return { records, index, entries: Uint32Array.from(entries) };
}

/** BX4 → bf16 words [rows][cols]; throws naming what is out of range in a damaged escape table. */
export function decodeBx4(m: Bx4Matrix, rows: number, cols: number): Uint16Array {
  const rb = bx4RowBytes(cols);
  if (m.records.length !== rows * rb) throw new Error(`BX4: ${m.records.length} bytes of rows, want ${rows} × ${rb}`);
  if (m.index.length !== rows + 1) throw new Error(`BX4: escape index of ${m.index.length} entries, want ${rows + 1}`);
  const out = new Uint16Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const rec = m.records.subarray(r * rb, (r + 1) * rb);
    const hb = new Uint8Array(cols);
    for (let c = 0; c < cols; c++) {
      const { byte, shift } = codeSlot(c);
      hb[c] = rec[(rec[BX4_TABLE + byte]! >> shift) & 15]!;
    }
    const [s, e] = [m.index[r]!, m.index[r + 1]!];
    if (s > e || e > m.entries.length) throw new Error(`BX4: row ${r}'s escapes [${s}, ${e}) leave the ${m.entries.length} entries`);
    for (let k = s; k < e; k++) {
      const col = m.entries[k]! >>> 8;
      if (col >= cols || (k > s && col <= m.entries[k - 1]! >>> 8)) throw new Error(`BX4: row ${r}'s escape ${k - s} has column ${col} (out of order or ≥ ${cols})`);
      hb[col] = m.entries[k]! & 255;
    }
    for (let c = 0; c < cols; c++) out[r * cols + c] = (hb[c]! << 8) | rec[BX4_TABLE + bx4CodeBytes(cols) + c]!;
  }
  return out;
}
