// How deep untrusted JSON may nest before code that walks it recursively (the chat renderer's
// fromJs / deepSort / dumpsPy, the Python-JSON parser) could overflow the stack.
//
// One limit for every way JSON reaches k3: HTTP request bodies (src/server), conversations given to
// `k3 chat`, tool schemas, and JSON parsed out of strings (tool-call `arguments`). Real requests
// nest a few levels (a tool schema rarely passes 10); Python's `json.loads`, whose output the
// renderer reproduces, gives up near 1000 levels with a RecursionError, so refusing past this limit
// never turns an input the release encoder renders into a different prompt: it refuses inputs far
// deeper than any real one, with the field named.
export const MAX_JSON_DEPTH = 128;

/** Where `value` nests deeper than `max` arrays/objects, or undefined when it fits (`value` itself
 *  is level 1 when it is an array or object). The answer names the field: the path of the first
 *  value past the limit (`root.messages[1].tool_calls[0].function.arguments…`), cut after
 *  PATH_KEYS keys. Iterative, so any depth is measured without recursion. */
export function deeperThan(value: unknown, max: number, root: string): string | undefined {
  interface Node {
    v: unknown;
    depth: number;
    parent: Node | undefined;
    key: string | number | undefined;
  }
  const stack: Node[] = [{ v: value, depth: 1, parent: undefined, key: undefined }];
  while (stack.length > 0) {
    const n = stack.pop()!;
    if (n.v === null || typeof n.v !== "object") continue;
    if (n.depth > max) return pathOf(n, root);
    if (Array.isArray(n.v)) n.v.forEach((child, i) => stack.push({ v: child, depth: n.depth + 1, parent: n, key: i }));
    else for (const [k, child] of Object.entries(n.v)) stack.push({ v: child, depth: n.depth + 1, parent: n, key: k });
  }
  return undefined;

  function pathOf(n: Node, name: string): string {
    const keys: (string | number)[] = [];
    for (let at: Node | undefined = n; at?.key !== undefined; at = at.parent) keys.push(at.key);
    keys.reverse();
    const shown = keys.slice(0, PATH_KEYS);
    const path = name + shown.map((k) => (typeof k === "number" ? `[${k}]` : /^[A-Za-z_]\w*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`)).join("");
    return (path.startsWith(".") ? path.slice(1) : path) + (keys.length > shown.length ? "…" : "");
  }
}

/** Keys of a too-deep path worth showing: enough to name the field, not the 128 levels below it. */
const PATH_KEYS = 6;
