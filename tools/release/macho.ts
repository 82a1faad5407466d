// Mach-O code signatures, checked and written offline (docs/PORTS.md §3): Apple Silicon runs no
// code without a valid signature (an ad-hoc one is enough), so a darwin artifact whose page hashes
// do not match its bytes is killed at launch (SIGKILL, exit 137). We cannot run macOS here, so the
// release verifies what the kernel verifies: every 2^pageSize-byte page of the file below the
// signature hashes (SHA-256) to its CodeDirectory slot, the signature covers the whole file up to
// itself, and the special slots match the blobs they name.
//
// `adhocSign` writes the signature `bun build --compile` writes for darwin-arm64 (one SHA-256
// CodeDirectory, version 0x20400, flags adhoc | linker-signed, identifier "a.out", 4 KiB pages,
// no requirements): `npm run release` (tools/release/build.ts) re-signs Bun's own darwin-arm64
// output and refuses to go on unless it gets the same bytes; test/ports.test.ts checks a signature
// written here verifies and that a changed byte is caught. Bun 1.4.5 leaves its darwin-x64 output
// with the runtime's original (now invalid) signature, so the release re-signs that one.
//
// Layout facts used (Apple's cs_blobs.h): the SuperBlob and its blobs are big-endian; the Mach-O
// header and load commands are little-endian (both darwin targets are little-endian).
import { createHash } from "node:crypto";

const MH_MAGIC_64 = 0xfeedfacf;
const LC_SEGMENT_64 = 0x19;
const LC_CODE_SIGNATURE = 0x1d;
const CSMAGIC_EMBEDDED_SIGNATURE = 0xfade0cc0;
const CSMAGIC_CODEDIRECTORY = 0xfade0c02;
const CS_HASHTYPE_SHA256 = 2;
const CS_ADHOC = 0x2;
const CS_LINKER_SIGNED = 0x20000;
const CS_EXECSEG_MAIN_BINARY = 0x1;
const MH_EXECUTE = 0x2;
const CD_HEADER_BYTES = 88; // CodeDirectory up to and including execSegFlags (version 0x20400)

export interface Segment {
  name: string;
  cmdOffset: number; // offset of its load command in the file
  fileoff: number;
  filesize: number;
  vmsize: number;
}

export interface MachO {
  cpu: "arm64" | "x64" | "other";
  filetype: number;
  segments: Segment[];
  signature?: { cmdOffset: number; dataoff: number; datasize: number };
}

export function parseMachO(buf: Uint8Array): MachO {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  if (buf.byteLength < 32 || v.getUint32(0, true) !== MH_MAGIC_64) throw new Error("not a 64-bit little-endian Mach-O file");
  const cputype = v.getUint32(4, true);
  const cpu = cputype === 0x0100000c ? "arm64" : cputype === 0x01000007 ? "x64" : "other";
  const filetype = v.getUint32(12, true);
  const ncmds = v.getUint32(16, true);
  const segments: Segment[] = [];
  let signature: MachO["signature"];
  let off = 32;
  for (let i = 0; i < ncmds; i++) {
    const cmd = v.getUint32(off, true), size = v.getUint32(off + 4, true);
    if (cmd === LC_SEGMENT_64) {
      const name = new TextDecoder().decode(buf.subarray(off + 8, off + 24)).replace(/\0+$/, "");
      segments.push({ name, cmdOffset: off, vmsize: Number(v.getBigUint64(off + 32, true)), fileoff: Number(v.getBigUint64(off + 40, true)), filesize: Number(v.getBigUint64(off + 48, true)) });
    } else if (cmd === LC_CODE_SIGNATURE) {
      signature = { cmdOffset: off, dataoff: v.getUint32(off + 8, true), datasize: v.getUint32(off + 12, true) };
    }
    off += size;
  }
  return { cpu, filetype, segments, signature };
}

const sha256 = (b: Uint8Array) => new Uint8Array(createHash("sha256").update(b).digest());
const equal = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

export interface SignatureCheck {
  ok: boolean;
  problems: string[];
  identifier?: string;
  flags?: number;
  pages?: number;
}

/** Checks the embedded signature the way the kernel does (page hashes), plus coverage and special slots. */
export function verifySignature(buf: Uint8Array): SignatureCheck {
  const m = parseMachO(buf);
  if (!m.signature) return { ok: false, problems: ["no LC_CODE_SIGNATURE: unsigned"] };
  const { dataoff, datasize } = m.signature;
  const problems: string[] = [];
  if (dataoff + datasize > buf.byteLength) return { ok: false, problems: [`signature [${dataoff}, +${datasize}) runs past the end of the file (${buf.byteLength})`] };
  if (dataoff + datasize !== buf.byteLength) problems.push(`${buf.byteLength - dataoff - datasize} bytes after the signature (codesign --strict rejects a stale tail)`);
  const sb = new DataView(buf.buffer, buf.byteOffset + dataoff, datasize);
  if (sb.getUint32(0) !== CSMAGIC_EMBEDDED_SIGNATURE) return { ok: false, problems: ["signature is not an embedded-signature SuperBlob"] };
  const blobs = new Map<number, Uint8Array>();
  for (let i = 0, count = sb.getUint32(8); i < count; i++) {
    const type = sb.getUint32(12 + 8 * i), o = sb.getUint32(16 + 8 * i);
    blobs.set(type, buf.subarray(dataoff + o, dataoff + o + sb.getUint32(o + 4)));
  }
  const cd = blobs.get(0);
  if (!cd) return { ok: false, problems: ["no CodeDirectory"] };
  const c = new DataView(cd.buffer, cd.byteOffset, cd.byteLength);
  if (c.getUint32(0) !== CSMAGIC_CODEDIRECTORY) return { ok: false, problems: ["slot 0 is not a CodeDirectory"] };
  const flags = c.getUint32(12), hashOffset = c.getUint32(16), identOffset = c.getUint32(20);
  const nSpecial = c.getUint32(24), nCode = c.getUint32(28), codeLimit = c.getUint32(32);
  const hashSize = c.getUint8(36), hashType = c.getUint8(37), pageSize = 2 ** c.getUint8(39);
  const identifier = new TextDecoder().decode(cd.subarray(identOffset, cd.indexOf(0, identOffset)));
  if (hashType !== CS_HASHTYPE_SHA256 || hashSize !== 32) problems.push(`hash type ${hashType} size ${hashSize} (expected SHA-256)`);
  if (codeLimit !== dataoff) problems.push(`the signature covers ${codeLimit} bytes but starts at ${dataoff}: ${dataoff - codeLimit} bytes unsigned`);
  if (nCode !== Math.ceil(codeLimit / pageSize)) problems.push(`${nCode} page hashes for ${codeLimit} bytes of ${pageSize}-byte pages`);
  let bad = 0;
  for (let i = 0; i < nCode; i++) {
    const page = buf.subarray(i * pageSize, Math.min((i + 1) * pageSize, codeLimit)); // the last page is hashed truncated
    if (!equal(sha256(page), cd.subarray(hashOffset + i * hashSize, hashOffset + (i + 1) * hashSize))) bad++;
  }
  if (bad) problems.push(`${bad} of ${nCode} page hashes do not match the file`);
  for (let k = 1; k <= nSpecial; k++) {
    const want = cd.subarray(hashOffset - k * hashSize, hashOffset - (k - 1) * hashSize);
    const blob = blobs.get(k);
    if (blob ? !equal(sha256(blob), want) : want.some((x) => x !== 0)) problems.push(`special slot ${k} does not match`);
  }
  return { ok: problems.length === 0, problems, identifier, flags, pages: nCode };
}

/**
 * A copy of `buf` with a fresh ad-hoc signature replacing the old one (which must be the last
 * thing in the file, inside __LINKEDIT, as the linker and Bun leave it). __LINKEDIT and the load
 * command grow or shrink to the new size; every page hash is computed over the final bytes.
 */
export function adhocSign(buf: Uint8Array, identifier = "a.out"): Uint8Array {
  const m = parseMachO(buf);
  if (!m.signature) throw new Error("no LC_CODE_SIGNATURE to replace (the linker reserves one; adding one needs header space)");
  const link = m.segments.find((s) => s.name === "__LINKEDIT");
  const text = m.segments.find((s) => s.name === "__TEXT");
  if (!link || !text) throw new Error("no __LINKEDIT or __TEXT segment");
  const codeLimit = m.signature.dataoff; // everything before the signature is signed
  if (codeLimit > 0xffffffff) throw new Error("file too large for a 32-bit codeLimit");
  if (link.fileoff + link.filesize < codeLimit) throw new Error("the signature is not inside __LINKEDIT");
  const pageSize = 4096;
  const nCode = Math.ceil(codeLimit / pageSize);
  const ident = new TextEncoder().encode(`${identifier}\0`);
  const hashOffset = CD_HEADER_BYTES + ident.length;
  const cdLength = hashOffset + nCode * 32;
  const sbLength = 20 + cdLength;

  const out = new Uint8Array(codeLimit + sbLength);
  out.set(buf.subarray(0, codeLimit));
  const v = new DataView(out.buffer);
  // Load commands first (they are inside the hashed pages): the signature's size, __LINKEDIT's extent.
  v.setUint32(m.signature.cmdOffset + 12, sbLength, true);
  const linkFilesize = codeLimit + sbLength - link.fileoff;
  v.setBigUint64(link.cmdOffset + 48, BigInt(linkFilesize), true);
  // vmsize rounded to 4 KiB, as Bun's signer does (the kernel rounds the last segment up to its page).
  v.setBigUint64(link.cmdOffset + 32, BigInt(Math.ceil(linkFilesize / 4096) * 4096), true);

  // SuperBlob: one blob, the CodeDirectory at offset 20.
  const s = codeLimit;
  v.setUint32(s, CSMAGIC_EMBEDDED_SIGNATURE);
  v.setUint32(s + 4, sbLength);
  v.setUint32(s + 8, 1);
  v.setUint32(s + 12, 0); // CSSLOT_CODEDIRECTORY
  v.setUint32(s + 16, 20);
  const d = s + 20;
  v.setUint32(d, CSMAGIC_CODEDIRECTORY);
  v.setUint32(d + 4, cdLength);
  v.setUint32(d + 8, 0x20400); // version: adds the exec segment fields
  v.setUint32(d + 12, CS_ADHOC | CS_LINKER_SIGNED);
  v.setUint32(d + 16, hashOffset);
  v.setUint32(d + 20, CD_HEADER_BYTES); // identOffset
  v.setUint32(d + 24, 0); // nSpecialSlots
  v.setUint32(d + 28, nCode);
  v.setUint32(d + 32, codeLimit);
  v.setUint8(d + 36, 32); // hashSize
  v.setUint8(d + 37, CS_HASHTYPE_SHA256);
  v.setUint8(d + 38, 0); // platform
  v.setUint8(d + 39, 12); // log2(pageSize)
  // spare2, scatterOffset, teamOffset, spare3 stay 0; codeLimit64 0 (codeLimit fits in 32 bits)
  v.setBigUint64(d + 64, BigInt(text.fileoff)); // execSegBase
  v.setBigUint64(d + 72, BigInt(text.filesize)); // execSegLimit
  v.setBigUint64(d + 80, BigInt(m.filetype === MH_EXECUTE ? CS_EXECSEG_MAIN_BINARY : 0));
  out.set(ident, d + CD_HEADER_BYTES);
  for (let i = 0; i < nCode; i++) out.set(sha256(out.subarray(i * pageSize, Math.min((i + 1) * pageSize, codeLimit))), d + hashOffset + i * 32);
  return out;
}
