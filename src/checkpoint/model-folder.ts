// Which folder holds the model, and what to call it. A plain folder (config.json + shards) is
// itself; a Hugging Face cache download is recognised in either of its two forms:
//
//   models--moonshotai--Kimi-K3/                 the repo folder (what `hf download` reports)
//     refs/main                                  the commit the default revision points to
//     snapshots/<commit>/config.json, *.safetensors, …   symlinks into ../../blobs/
//     blobs/<sha256>
//
// The repo folder resolves to one snapshot by the rule huggingface_hub uses for the default
// revision: the snapshot `refs/main` names; without refs/main, the only snapshot; with several
// and no refs/main, nothing is guessed (the error lists them, so the user names one). Either form
// is named after the repo ("moonshotai/Kimi-K3"), and is marked a download: k3 keeps its own
// files (catalogue cache, checksums) in its cache folder, never inside the download.
import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { K3Error } from "../errors.ts";
import { readRegularFile } from "../files.ts";

export interface ModelFolder {
  /** The folder with config.json and the shards (absolute; the snapshot for a download). */
  dir: string;
  /** What to call the model: the repo id for a Hugging Face download, else the folder's name. */
  name: string;
  /** Inside a Hugging Face cache: k3 writes nothing there. */
  download: boolean;
}

const REPO_PREFIX = "models--";

/** "models--moonshotai--Kimi-K3" → "moonshotai/Kimi-K3" (the hub forbids "--" inside names). */
function repoId(folderName: string): string {
  return folderName.slice(REPO_PREFIX.length).split("--").join("/");
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** Resolve a model path (plain folder, HF repo folder or HF snapshot) to the folder to read. */
export function resolveModelFolder(path: string): ModelFolder {
  const root = resolve(path);
  const name = basename(root);
  // A snapshot folder named directly: …/models--org--name/snapshots/<commit>
  const parent = dirname(root);
  if (basename(parent) === "snapshots" && basename(dirname(parent)).startsWith(REPO_PREFIX))
    return { dir: root, name: repoId(basename(dirname(parent))), download: true };
  if (!name.startsWith(REPO_PREFIX) || !isDir(join(root, "snapshots")) || existsSync(join(root, "config.json")))
    return { dir: root, name, download: false };

  // The repo folder: pick the snapshot.
  let snapshots: string[];
  try {
    snapshots = readdirSync(join(root, "snapshots")).filter((s) => isDir(join(root, "snapshots", s))).sort();
  } catch (e) {
    throw new K3Error("CHECKPOINT", `${join(root, "snapshots")}: cannot list the snapshots`, [(e as Error).message]);
  }
  const refPath = join(root, "refs", "main");
  if (existsSync(refPath)) {
    const commit = readRegularFile(refPath, "Hugging Face ref", "CHECKPOINT").toString("utf8").trim();
    if (!snapshots.includes(commit))
      throw new K3Error("CHECKPOINT", `${root}: refs/main names snapshot ${JSON.stringify(commit.slice(0, 64))}, which is not in snapshots/ (an incomplete download?)`, [
        snapshots.length ? `snapshots present: ${snapshots.join(", ")} — name one: k3 … ${join(root, "snapshots", snapshots[0]!)}` : "no snapshots present",
      ]);
    return { dir: join(root, "snapshots", commit), name: repoId(name), download: true };
  }
  if (snapshots.length === 1) return { dir: join(root, "snapshots", snapshots[0]!), name: repoId(name), download: true };
  if (snapshots.length === 0) throw new K3Error("CHECKPOINT", `${root}: a Hugging Face repo folder with no snapshot (snapshots/ is empty)`);
  throw new K3Error("CHECKPOINT", `${root}: ${snapshots.length} snapshots and no refs/main to choose between them`, [
    ...snapshots.map((s) => join(root, "snapshots", s)),
    "name the snapshot folder to use",
  ]);
}
