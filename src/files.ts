// Opening a model's files (config, index, shards, tokenizer) and session files the way every
// reader of them must: only a regular file (or a symlink to one, as in a Hugging Face download)
// is read. Below every layer, so the checkpoint, text and model layers share it. (Prompt files
// are not read through here: `--prompt-file <(cmd)` is a pipe on purpose.) A FIFO would block the open or the read
// forever, a directory fails with EISDIR deep inside a read, a device could stream without end:
// each is refused up front with a K3Error naming the path and what it is.
//
// The open uses O_NONBLOCK so that opening a FIFO returns at once instead of waiting for a
// writer; on a regular file the flag changes nothing.
import { accessSync, closeSync, constants, fstatSync, openSync, readSync, type Stats } from "node:fs";
import { K3Error, type ErrorCode } from "./errors.ts";

function kind(st: Stats): string {
  if (st.isDirectory()) return "a directory";
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
