// `k3 completion bash|zsh|fish`: a shell completion script, generated from the same command
// tables the parser and --help use (so it knows every command, option, alias and fixed choice).
import type { ArgDef } from "citty";
import { K3Error } from "../../errors.ts";
import { argTable, type ArgTable, type OptionSpec } from "../args.ts";
import { defineCommand, type K3Command } from "../command.ts";
import { CHOICES } from "../common.ts";
import { allCommands } from "../registry.ts";

const SHELLS = ["bash", "zsh", "fish"] as const;
type Shell = (typeof SHELLS)[number];

export default defineCommand({
  meta: { name: "completion", description: "Print a shell completion script (bash, zsh or fish)" },
  args: {
    shell: { type: "positional", required: true, description: "bash | zsh | fish" },
  },
  help: {
    examples: [
      ["source <(k3 completion bash)", "bash, this shell (add the line to ~/.bashrc to keep it)"],
      ["k3 completion zsh > ~/.zfunc/_k3", "zsh (with ~/.zfunc in $fpath, before compinit)"],
      ["k3 completion fish > ~/.config/fish/completions/k3.fish", "fish"],
    ],
  },
  async run({ args }) {
    const shell = args.shell as Shell;
    if (!SHELLS.includes(shell)) throw new K3Error("USAGE", `k3 completion: unknown shell "${args.shell}"`, [`known: ${SHELLS.join(", ")}`]);
    const cmds = (await allCommands()).map(([name, c]) => ({ name, cmd: c, table: argTable((c.args ?? {}) as Record<string, ArgDef>) }));
    process.stdout.write(SCRIPTS[shell](cmds));
  },
});

interface Entry {
  name: string;
  cmd: K3Command<any>;
  table: ArgTable;
}

const describe = (c: K3Command<any>) => ((c.meta ?? {}) as { description?: string }).description ?? "";
const spellings = (o: OptionSpec) => [...o.short.map((s) => `-${s}`), ...o.long.map((l) => `--${l}`), ...(o.type === "boolean" ? [`--no-${o.name}`] : [])];
/** Operand completion: model folders, files for traces, nothing for free text. */
const operandKind = (p: { name: string }) => (["model", "dir"].includes(p.name) ? "dir" : p.name === "trace" ? "file" : p.name === "shell" ? "shell" : p.name === "command" ? "command" : "none");
const choicesOf = (o: OptionSpec) => CHOICES[o.name];
/** Options whose value is a path. */
const takesPath = (o: OptionSpec) => /file|session|trace|config|index|model/.test(o.name);

const SCRIPTS: Record<Shell, (cmds: Entry[]) => string> = {
  bash(cmds) {
    const cases = cmds.map(({ name, table }) => {
      const all = [...table.options.flatMap(spellings), "--help"].join(" ");
      const choiceCases = table.options
        .filter(choicesOf)
        .map((o) => `      ${o.long.map((l) => `--${l}`).join("|")}) COMPREPLY=($(compgen -W "${choicesOf(o)!.join(" ")}" -- "$cur")); return ;;`);
      const pathOpts = table.options.filter((o) => o.type === "string" && takesPath(o) && !choicesOf(o)).flatMap((o) => [...o.short.map((s) => `-${s}`), ...o.long.map((l) => `--${l}`)]);
      const valueOpts = table.options.filter((o) => o.type === "string" && !takesPath(o) && !choicesOf(o)).flatMap((o) => [...o.short.map((s) => `-${s}`), ...o.long.map((l) => `--${l}`)]);
      const first = table.positionals[0] ? operandKind(table.positionals[0]) : "none";
      const operand =
        first === "dir" ? `COMPREPLY=($(compgen -d -- "$cur"))` : first === "file" ? `COMPREPLY=($(compgen -f -- "$cur"))` : first === "shell" ? `COMPREPLY=($(compgen -W "${SHELLS.join(" ")}" -- "$cur"))` : first === "command" ? `COMPREPLY=($(compgen -W "${cmds.map((c) => c.name).join(" ")}" -- "$cur"))` : "COMPREPLY=()";
      return [
        `    ${name})`,
        `      case "$prev" in`,
        ...choiceCases.map((l) => `  ${l}`),
        ...(pathOpts.length ? [`        ${pathOpts.join("|")}) COMPREPLY=($(compgen -f -- "$cur")); return ;;`] : []),
        ...(valueOpts.length ? [`        ${valueOpts.join("|")}) COMPREPLY=(); return ;;`] : []),
        `      esac`,
        `      if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "${all}" -- "$cur")); else ${operand}; fi`,
        `      ;;`,
      ].join("\n");
    });
    return `# k3 completion for bash. Use: source <(k3 completion bash)
_k3() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" prev="\${COMP_WORDS[COMP_CWORD-1]}" cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "\${COMP_WORDS[i]}" in -*) ;; *) cmd="\${COMP_WORDS[i]}"; break ;; esac
  done
  if [[ -z "$cmd" ]]; then
    COMPREPLY=($(compgen -W "${cmds.map((c) => c.name).join(" ")} --help --version" -- "$cur"))
    return
  fi
  case "$cmd" in
${cases.join("\n")}
  esac
}
complete -o filenames -F _k3 k3
`;
  },

  zsh(cmds) {
    const q = (s: string) => s.replace(/\\/g, "\\\\").replace(/'/g, "'\\''").replace(/\[/g, "(").replace(/\]/g, ")").replace(/:/g, "\\:");
    const cases = cmds.map(({ name, table }) => {
      const specs = table.options.flatMap((o) => {
        const desc = q(o.def.description ?? "");
        const names = [...o.short.map((s) => `-${s}`), ...o.long.map((l) => `--${l}`)];
        const excl = names.length > 1 ? `(${names.join(" ")})` : "";
        const action = o.type === "boolean" ? "" : `:${q(((o.def as { valueHint?: string }).valueHint ?? o.name).toLowerCase())}:${choicesOf(o) ? `(${choicesOf(o)!.join(" ")})` : takesPath(o) ? "_files" : ""}`;
        const one = names.length > 1 ? `'${excl}'{${names.join(",")}}'[${desc}]${action}'` : `'${names[0]}[${desc}]${action}'`;
        return o.type === "boolean" ? [one, `'--no-${o.name}[${o.def.default === true ? "turn off: " : "not: "}${desc}]'`] : [one];
      });
      const operands = table.positionals.map((p, i) => {
        const k = operandKind(p);
        const act = k === "dir" ? "_files -/" : k === "file" ? "_files" : k === "shell" ? `(${SHELLS.join(" ")})` : k === "command" ? `(${cmds.map((c) => c.name).join(" ")})` : "";
        return `'${i + 1}:${q(p.name.toLowerCase())}:${act}'`;
      });
      return `    ${name})\n      _arguments -s \\\n        ${[...specs, "'(-h --help)'{-h,--help}'[show help]'", ...operands].join(" \\\n        ")}\n      ;;`;
    });
    return `#compdef k3
# k3 completion for zsh. Use: k3 completion zsh > ~/.zfunc/_k3 (with ~/.zfunc in $fpath before
# compinit), or in a running shell: source <(k3 completion zsh)
_k3() {
  local -a commands
  commands=(
${cmds.map((c) => `    '${c.name}:${q(describe(c.cmd))}'`).join("\n")}
  )
  if (( CURRENT == 2 )); then
    _describe 'command' commands
    return
  fi
  local cmd=$words[2]
  shift words
  (( CURRENT-- ))
  case $cmd in
${cases.join("\n")}
  esac
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then _k3 "$@"; else compdef _k3 k3; fi
`;
  },

  fish(cmds) {
    const q = (s: string) => `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
    const lines = ["# k3 completion for fish. Use: k3 completion fish > ~/.config/fish/completions/k3.fish", "complete -c k3 -f"];
    for (const c of cmds) lines.push(`complete -c k3 -n __fish_use_subcommand -a ${c.name} -d ${q(describe(c.cmd))}`);
    for (const { name, table } of cmds) {
      const when = `-n '__fish_seen_subcommand_from ${name}'`;
      for (const o of table.options) {
        const flags = [...o.short.map((s) => `-s ${s}`), ...o.long.map((l) => `-l ${l}`)].join(" ");
        const value = o.type === "boolean" ? "" : choicesOf(o) ? ` -x -a ${q(choicesOf(o)!.join(" "))}` : takesPath(o) ? " -r -F" : " -x";
        lines.push(`complete -c k3 ${when} ${flags}${value} -d ${q(o.def.description ?? "")}`);
        if (o.type === "boolean") lines.push(`complete -c k3 ${when} -l no-${o.name} -d ${q(`turn off --${o.name}`)}`);
      }
      const first = table.positionals[0] ? operandKind(table.positionals[0]) : "none";
      if (first === "dir") lines.push(`complete -c k3 ${when} -a '(__fish_complete_directories)'`);
      if (first === "file") lines.push(`complete -c k3 ${when} -F`);
      if (first === "shell") lines.push(`complete -c k3 ${when} -a ${q(SHELLS.join(" "))}`);
      if (first === "command") lines.push(`complete -c k3 ${when} -a ${q(cmds.map((x) => x.name).join(" "))}`);
    }
    return `${lines.join("\n")}\n`;
  },
};
