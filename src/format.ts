// How k3 writes numbers for people, in one place: every byte count a user reads (plans, stats
// lines, progress bars, `k3 info`) and every list of layer numbers. Binary units throughout
// (KiB = 1024 B, GiB = 2^30 B): the unit `--ram 12G` and the presets use, so what a plan prints
// compares directly with what a user typed.

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"] as const;
export type ByteUnit = (typeof UNITS)[number];

/** "118.00 KiB", "1.42 TiB"; bytes without decimals. `unit` fixes the unit (aligned tables). */
export function formatBytes(bytes: number, unit?: ByteUnit): string {
  let i = unit ? UNITS.indexOf(unit) : 0;
  if (!unit) while (Math.abs(bytes) >= 1024 ** (i + 1) && i < UNITS.length - 1) i++;
  const v = bytes / 1024 ** i;
  return `${i === 0 ? Math.round(v) : v.toFixed(2)} ${UNITS[i]}`;
}

/**
 * Two byte counts that a message compares ("budget X is below the floor Y"), in `unit` with the
 * fewest decimals (2 to 6) that make different counts read differently: never "0.38 GiB is below
 * the floor 0.38 GiB". Counts closer than that are given in bytes.
 */
export function formatBytesApart(a: number, b: number, unit: ByteUnit = "GiB"): [string, string] {
  const scale = 1024 ** UNITS.indexOf(unit);
  for (let d = 2; d <= 6; d++) {
    const [x, y] = [(a / scale).toFixed(d), (b / scale).toFixed(d)];
    if (x !== y || a === b) return [`${x} ${unit}`, `${y} ${unit}`];
  }
  return [`${a} bytes`, `${b} bytes`];
}

/** "0-3,5,7-9" from ascending integers; "none" for an empty list. */
export function formatRanges(xs: readonly number[]): string {
  const out: string[] = [];
  for (let i = 0; i < xs.length; ) {
    let j = i;
    while (j + 1 < xs.length && xs[j + 1] === xs[j]! + 1) j++;
    out.push(i === j ? `${xs[i]}` : `${xs[i]}-${xs[j]}`);
    i = j + 1;
  }
  return out.join(",") || "none";
}

/** Seconds for people: "0.42 s", "12.3 s", "4 min 05 s", "1 h 02 min". */
export function formatSeconds(s: number): string {
  if (!Number.isFinite(s) || s < 0) return "?";
  if (s < 10) return `${s.toFixed(2)} s`;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}
