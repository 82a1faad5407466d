// `--mirror DIR`: folders holding copies of some or all of a model's shards, usually on other
// drives (docs/DRIVES.md). A read may be served by any copy (src/memory/reader.ts routes it), so a
// copy must hold the same bytes as the shard it stands for: same size, same header (its hash) and
// the same modification time in whole ms, the tie packs and checksum files use
// (src/checkpoint/stamps.ts, without the content sample of saved states). A copy
// that differs is refused, naming the shard; nothing is read from a mirror k3 has not checked.
// A mirror folder may be a Hugging Face download too (resolved as the model folder is).
import { existsSync, realpathSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { resolveModelFolder } from "../checkpoint/model-folder.ts";
import { readSafetensorsHeader } from "../checkpoint/safetensors.ts";
import { K3Error } from "../errors.ts";

/** Shard file (as the catalogue names it) → its checked copies in the mirrors, in --mirror order. */
export type MirrorCopies = Map<string, string[]>;

const real = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
};

/** Modification time in whole ms (stamps.ts's rule: copies with times kept do not all keep ns). */
const mtimeOf = (file: string) => Math.trunc(statSync(file).mtimeMs);

/** How a copy differs from the shard it stands for, or null when it is the same bytes by the tie. */
function difference(shard: { file: string; bytes: number; headerHash: string }, copy: string): string | null {
  const size = statSync(copy).size;
  if (size !== shard.bytes) return `it is ${size} bytes, the model's is ${shard.bytes}`;
  let hash: string;
  try {
    hash = readSafetensorsHeader(copy).headerHash;
  } catch (e) {
    return `its header cannot be read: ${(e as Error).message}`;
  }
  if (hash !== shard.headerHash) return "its header differs";
  const [mine, orig] = [mtimeOf(copy), mtimeOf(shard.file)];
  if (mine !== orig) return `it was modified at another time (${new Date(mine).toISOString()}, the model's ${new Date(orig).toISOString()})`;
  return null;
}

/**
 * Check every mirror folder and list the copies it holds. Refuses (USAGE) a folder that does not
 * exist, is the model folder itself or holds none of the shards, and (CHECKPOINT) a copy that is
 * not the same bytes as its shard, naming both files.
 */
export function findMirrorCopies(ckpt: Checkpoint, mirrors: readonly string[]): MirrorCopies {
  const copies: MirrorCopies = new Map(ckpt.shards.map((s) => [s.file, []]));
  const seen = new Set<string>([real(ckpt.dir)]);
  for (const m of mirrors) {
    if (m === "") throw new K3Error("USAGE", "--mirror needs a folder");
    if (!existsSync(m) || !statSync(m).isDirectory()) throw new K3Error("USAGE", `--mirror ${m}: not a folder`);
    const dir = resolveModelFolder(m).dir;
    if (real(dir) === real(ckpt.dir)) throw new K3Error("USAGE", `--mirror ${m} is the model folder itself; name a folder holding copies on another drive`);
    if (seen.has(real(dir))) throw new K3Error("USAGE", `--mirror ${m} is given twice`);
    seen.add(real(dir));
    let held = 0;
    for (const s of ckpt.shards) {
      const copy = join(dir, basename(s.file));
      if (!existsSync(copy)) continue;
      const a = statSync(s.file);
      const b = statSync(copy);
      if (a.dev === b.dev && a.ino === b.ino) continue; // a hard link of the shard itself: no second copy
      const why = difference(s, copy);
      if (why)
        throw new K3Error("CHECKPOINT", `--mirror ${m}: ${basename(s.file)} is not a copy of the model's shard (${why}): ${copy} vs ${s.file}`, [
          "a mirror must hold the same bytes: copy shards with their times kept (cp -p, rsync -a), or remove this one from the mirror folder",
        ]);
      copies.get(s.file)!.push(copy);
      held++;
    }
    if (held === 0)
      throw new K3Error("USAGE", `--mirror ${m} holds none of the model's ${ckpt.shards.length} shards (files named like ${basename(ckpt.shards[0]!.file)})`);
  }
  return copies;
}
