// Opening a model's files (config, index, shards, tokenizer) and session files the way every
// reader of them must: only a regular file (or a symlink to one, as in a Hugging Face download)
// is read. And the write side, for every file k3 writes (session files, prefix-cache entries,
// packs, traces, checksum and index caches, benchmark outputs): only a regular file or a new path
// is written; a device node, FIFO, socket or directory at that path is refused, naming it (a temp
// file renamed over `/dev/null` would replace the device, as root). Below every layer, so the
// checkpoint, text, model, memory, engine and CLI layers share it. (Prompt files
// are not read through here: `--prompt-file <(cmd)` is a pipe on purpose.) A FIFO would block the open or the read
// forever, a directory fails with EISDIR deep inside a read, a device could stream without end:
// each is refused up front with a K3Error naming the path and what it is.
//
// The open uses O_NONBLOCK so that opening a FIFO returns at once instead of waiting for a
// writer; on a regular file the flag changes nothing.
import { accessSync, closeSync, constants, fstatSync, ftruncateSync, lstatSync, openSync, readSync, realpathSync, renameSync, statSync, unlinkSync, writeSync, type Stats } from "node:fs";
import { K3Error, type ErrorCode } from "./errors.ts";

function kind(st: Stats): string {
  if (st.isDirectory()) return "a directory";
  if (st.isSymbolicLink()) return "a symlink";
  if (st.isFIFO()) return "a FIFO (named pipe)";
  if (st.isSocket()) return "a socket";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "a device";
  return "not a regular file";
}

/**
 * Open `path` for reading, refusing anything that is not a regular file. `what` names the file
 * in errors ("shard", "session file"); `code` is the K3Error code for the caller's domain.
 * Returns the fd and its size; the caller closes the fd.
 */
export function openRegularFile(path: string, what: string, code: ErrorCode): { fd: number; bytes: number } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (e) {
    throw new K3Error(code, `${path}: cannot open ${what}`, [(e as Error).message]);
  }
  let st: Stats;
  try {
    st = fstatSync(fd);
  } catch (e) {
    closeSync(fd);
    throw new K3Error(code, `${path}: cannot open ${what}`, [(e as Error).message]);
  }
  if (!st.isFile()) {
    closeSync(fd);
    throw new K3Error(code, `${path}: ${what} is ${kind(st)}, expected a regular file`);
  }
  return { fd, bytes: st.size };
}

/** Read exactly `bytes` at `position` (fewer only at end of file). */
export function readAt(fd: number, bytes: number, position: number): Buffer<ArrayBuffer> {
  const buf = Buffer.alloc(bytes);
  let got = 0;
  while (got < bytes) {
    const n = readSync(fd, buf, got, bytes - got, position + got);
    if (n === 0) break;
    got += n;
  }
  return got === bytes ? buf : buf.subarray(0, got);
}

/** The whole of a regular file (refusing FIFOs, directories, devices); read errors are K3Errors. */
export function readRegularFile(path: string, what: string, code: ErrorCode): Buffer<ArrayBuffer> {
  const { fd, bytes } = openRegularFile(path, what, code);
  try {
    return readAt(fd, bytes, 0);
  } catch (e) {
    throw new K3Error(code, `${path}: cannot read ${what}`, [(e as Error).message]);
  } finally {
    closeSync(fd);
  }
}

/** Whether this process may create files in `dir` (a model folder k3 might write its own files
 *  into; a read-only one sends them to k3's cache folder instead). */
export function writableDir(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

// ---- writing ----

/** A K3Error from a failed write that keeps the system's error code (ENOSPC, EROFS, …), so a
 *  caller can tell a full disk from a bad path. */
export class FileWriteError extends K3Error {
  constructor(code: ErrorCode, message: string, readonly systemCode: string | undefined) {
    super(code, message);
  }
}

/** The disk (or the user's quota) is full: what a writer may make room for and retry. */
export const isDiskFull = (e: unknown): boolean => e instanceof FileWriteError && (e.systemCode === "ENOSPC" || e.systemCode === "EDQUOT");

const systemCode = (e: unknown): string | undefined => (e as { code?: unknown })?.code as string | undefined;

/**
 * Where a writer of `path` writes: a new path (its folder must exist), or an existing regular file
 * (through symlinks: the link's target is written and the link stays a link). Anything else is
 * refused with a K3Error naming the path and what it is. Returns the path to replace.
 */
export function writeTarget(path: string, what: string, code: ErrorCode): string {
  let st: Stats;
  try {
    st = statSync(path);
  } catch (e) {
    if (systemCode(e) !== "ENOENT") throw new K3Error(code, `${path}: cannot write ${what} there`, [(e as Error).message]);
    try {
      lstatSync(path);
    } catch {
      return path; // a new path
    }
    throw new K3Error(code, `${path}: cannot write ${what} there: it is a symlink to nothing`);
  }
  if (!st.isFile()) throw new K3Error(code, `${path}: cannot write ${what} there: it is ${kind(st)}; k3 writes only regular files (or a new path)`);
  return realpathSync(path);
}

/** writeSync may write less than asked: loop (at `position` when given), fail on no progress. */
export function writeAll(fd: number, bytes: Uint8Array, position?: number): void {
  for (let off = 0; off < bytes.byteLength; ) {
    const n = writeSync(fd, bytes, off, bytes.byteLength - off, position === undefined ? null : position + off);
    if (n <= 0) throw new Error(`short write (${off} of ${bytes.byteLength} bytes)`);
    off += n;
  }
}

/**
 * Write a whole file, atomically: `write` fills a temp file created next to it (`PATH.PID.tmp`,
 * exclusively: never someone else's file), which is then renamed over the target. A failure (a
 * full disk part-way) leaves no partial file behind and is a FileWriteError naming `path` (not the
 * temp file) and the system's reason. `data` is the file's bytes, or a function writing to the fd.
 */
export function writeFileAtomic(path: string, what: string, code: ErrorCode, data: string | Uint8Array | ((fd: number) => void), mode = 0o644): string {
  const target = writeTarget(path, what, code);
  const tmp = `${target}.${process.pid}.tmp`;
  let fd = -1;
  try {
    fd = createExclusive(tmp, mode);
    if (typeof data === "function") data(fd);
    else writeAll(fd, typeof data === "string" ? Buffer.from(data) : data);
    closeSync(fd);
    fd = -1;
    renameSync(tmp, target);
  } catch (e) {
    if (fd >= 0) closeSync(fd);
    if (fd >= 0 || systemCode(e) !== "EEXIST") removeFile(tmp);
    if (e instanceof K3Error) throw e;
    throw new FileWriteError(code, `cannot write ${what} ${path}: ${reason(e)}`, systemCode(e));
  }
  return target;
}

/** Create `tmp` for writing, failing if it exists; a regular file there (left by a process of the
 *  same pid that died) is removed first, anything else is in the way and named. */
function createExclusive(tmp: string, mode: number): number {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  try {
    return openSync(tmp, flags, mode);
  } catch (e) {
    if (systemCode(e) !== "EEXIST") throw e;
    const st = lstatSync(tmp);
    if (!st.isFile()) throw Object.assign(new Error(`${tmp} is in the way (${kind(st)})`), { code: "EEXIST" });
    unlinkSync(tmp);
    return openSync(tmp, flags, mode);
  }
}

/**
 * Open `path` for a stream of writes (a trace): created, or an existing regular file truncated.
 * The open does not block on a FIFO (O_NONBLOCK) and the fd is checked before anything is
 * truncated, so nothing but a regular file is ever written.
 */
export function openWriteStream(path: string, what: string, code: ErrorCode): number {
  writeTarget(path, what, code); // the clear refusal, before the open
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_NONBLOCK, 0o644);
  } catch (e) {
    throw new FileWriteError(code, `cannot write ${what} ${path}: ${reason(e)}`, systemCode(e));
  }
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw new K3Error(code, `${path}: cannot write ${what} there: it is ${kind(st)}; k3 writes only regular files (or a new path)`);
  }
  ftruncateSync(fd, 0);
  return fd;
}

/** Remove a file k3 wrote (a temp file, an evicted or bad cache entry), best effort: only a
 *  regular file or a symlink is unlinked, never a directory or a device; errors are ignored. */
export function removeFile(path: string): boolean {
  try {
    const st = lstatSync(path);
    if (!st.isFile() && !st.isSymbolicLink()) return false;
    unlinkSync(path);
    return true;
  } catch {
    return false;
  }
}

/** What a path is, for messages ("a directory", "a FIFO (named pipe)"); undefined when it is a
 *  regular file or does not exist. */
export function notRegular(path: string): string | undefined {
  try {
    const st = lstatSync(path);
    return st.isFile() ? undefined : kind(st);
  } catch {
    return undefined;
  }
}

/** "no space left on the device (ENOSPC)" rather than node's "ENOSPC: no space left on device, write". */
function reason(e: unknown): string {
  const m = (e as Error).message ?? String(e);
  const c = systemCode(e);
  return c && m.startsWith(`${c}: `) ? `${m.slice(c.length + 2).replace(/, \w+( '.*')?$/, "")} (${c})` : m;
}
