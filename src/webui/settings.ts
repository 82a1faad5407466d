// The settings dialog: each field a request can carry, kept in this browser. The speculation
// choices come from what the server reports (/v1/models `k3.speculation`), never from a list
// written here: which drafters exist, how many drafts a pass has room for, and whether a request
// may choose at all (a server batching several streams does not speculate).
import type { ModelInfo } from "./api.ts";
import type { Settings } from "./store.ts";

const FIELDS: [keyof Settings, string][] = [
  ["temperature", "set-temperature"],
  ["thinking", "set-thinking"],
  ["effort", "set-effort"],
  ["maxTokens", "set-max-tokens"],
  ["reasoningBudget", "set-reasoning-budget"],
  ["seed", "set-seed"],
  ["speculate", "set-speculate"],
];

function speculationChoices(model: ModelInfo | undefined): void {
  const sel = document.getElementById("set-speculate") as HTMLSelectElement;
  const spec = model?.k3?.speculation;
  const opts: [string, string][] = [["", `server default (${spec?.setting ?? "auto"})`]];
  if (spec && spec.max_drafts > 0) {
    opts.push(["auto", "auto"], ["off", "off"]);
    for (let n = 1; n <= spec.max_drafts; n++) opts.push([String(n), `${n} draft${n > 1 ? "s" : ""} per pass`]);
  }
  sel.replaceChildren(
    ...opts.map(([v, label]) => {
      const o = document.createElement("option");
      o.value = v;
      o.textContent = label;
      return o;
    }),
  );
  sel.disabled = !spec || spec.max_drafts === 0 || !spec.per_request;
  const note = document.getElementById("speculate-note")!;
  note.textContent = !spec
    ? ""
    : spec.max_drafts === 0
      ? "This server does not speculate (--speculate off)."
      : `Drafters: ${spec.drafters.join(", ") || "none"}.${spec.per_request ? "" : " Requests cannot choose here."} The output is the same either way.`;
}

export function initSettings(s: Settings, model: ModelInfo | undefined, save: () => void): void {
  speculationChoices(model);
  const t = document.getElementById("set-temperature") as HTMLInputElement;
  if (model?.k3?.defaults) t.placeholder = `server default (${model.k3.defaults.temperature})`;
  for (const [key, id] of FIELDS) {
    const input = document.getElementById(id) as HTMLInputElement | HTMLSelectElement;
    input.value = s[key];
    input.onchange = () => {
      (s as unknown as Record<string, string>)[key] = input.value;
      save();
    };
  }
}
