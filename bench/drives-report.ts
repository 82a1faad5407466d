// bench/drives.ts's numbers: what each arm read and how fast, ratios in the same round, each
// device's rate in the engine against a probe of it at the engine's request sizes and depth.
import type { ProbeResult } from "../src/memory/disk-probe.ts";

export interface ArmRun {
  arm: string;
  round: number;
  ok: boolean;
  error?: string;
  ids?: number[];
  stats?: any; // k3 run --json's stats (src/report.ts statsJson)
  loadavg: number[];
  wallMs: number;
}

export interface ProbeRun {
  drive: string;
  loop: string;
  capBytesPerSecond: number;
  round: number;
  expert: ProbeResult;
  trunk: ProbeResult[]; // [MIRRORED_READ_BYTES, TRUNK_READ_BYTES]
  lateness?: { reads: number; p50: number; p90: number; p99: number; max: number };
}

interface ArmSummary {
  arm: string;
  runs: number;
  decodeMBps: number; // median: bytes read per decoded token ÷ s/token
  msPerToken: number;
  bytesPerToken: number;
  readsPerToken: number;
  vsOneDrive: number | null; // median over rounds of (this ÷ the 1-drive arm in the same round)
  hedges: string; // "won/issued" summed over runs
  devices: { name: string; gbps: number; busy: number; vsProbe: number | null }[];
}

export interface DrivesSummary {
  arms: ArmSummary[];
  identical: boolean;
  lateness: { p50: number; p99: number; max: number } | null;
  targets: { name: string; value: number | null; target: number; ok: boolean }[];
}

export interface DrivesReport {
  when: string;
  how: Record<string, unknown>;
  arms: string[];
  runs: ArmRun[];
  probes: ProbeRun[];
  summary: DrivesSummary;
}

const median = (xs: number[]) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)]! : NaN;
};
const decodeBps = (s: any) => s.bytes_read_per_token / (s.ms_per_token / 1000);

/** The probe's rate for an arm's mix of reads: trunk bytes at the trunk read size, expert bytes at
 *  the expert size (the engine reads both; the probe times each alone). */
function probeRate(p: ProbeRun, stats: any, mirrored: boolean): number {
  const trunk = stats.trunk_bytes_read;
  const expert = stats.expert_bytes_read;
  const t = p.trunk[mirrored ? 0 : 1]!.bytesPerSecond;
  return (trunk + expert) / (trunk / t + expert / p.expert.bytesPerSecond);
}

function armSummary(arm: string, runs: ArmRun[], probes: ProbeRun[]): ArmSummary {
  const ok = runs.filter((r) => r.arm === arm && r.ok);
  const one = (round: number) => runs.find((r) => r.arm === "1 drive" && r.round === round && r.ok);
  const mirrored = arm.includes("mirror");
  const names = [...new Set(ok.flatMap((r) => r.stats.devices.map((d: any) => d.name as string)))].sort();
  const devices = names.map((name) => {
    const per = ok.map((r) => ({ r, d: r.stats.devices.find((x: any) => x.name === name) })).filter((x) => x.d);
    const vs = per.map(({ r, d }) => {
      // The probe of that drive in the same round, at the cap the arm gave it.
      const slow = arm === "fast + slow mirror" && name !== per[0]!.r.stats.devices[0].name;
      const p = probes.find((x) => x.round === r.round && x.loop.endsWith(`/${name}`) && (slow ? x.drive.endsWith("(slow)") : !x.drive.endsWith("(slow)")));
      return p && d.gb_per_s ? (d.gb_per_s * 1e9) / probeRate(p, r.stats, mirrored) : NaN;
    });
    return { name, gbps: median(per.map((x) => x.d.gb_per_s)), busy: median(per.map((x) => x.d.busy_fraction)), vsProbe: vs.some(Number.isFinite) ? median(vs) : null };
  });
  const ratios = ok.map((r) => (one(r.round) ? decodeBps(r.stats) / decodeBps(one(r.round)!.stats) : NaN));
  const sum = (f: (s: any) => number) => ok.reduce((a, r) => a + f(r.stats), 0);
  return {
    arm,
    runs: ok.length,
    decodeMBps: median(ok.map((r) => decodeBps(r.stats) / 1e6)),
    msPerToken: median(ok.map((r) => r.stats.ms_per_token)),
    bytesPerToken: median(ok.map((r) => r.stats.bytes_read_per_token)),
    readsPerToken: median(ok.map((r) => r.stats.reads_per_token)),
    vsOneDrive: ratios.some(Number.isFinite) ? median(ratios) : null,
    hedges: `${sum((s) => s.hedges_won)}/${sum((s) => s.hedges_issued)}`,
    devices,
  };
}

export function summarizeDrives(runs: ArmRun[], probes: ProbeRun[]): DrivesSummary {
  const names = [...new Set(runs.map((r) => r.arm))];
  const arms = names.map((a) => armSummary(a, runs, probes));
  const ids = runs.filter((r) => r.ok).map((r) => JSON.stringify(r.ids));
  const late = probes.filter((p) => p.lateness && p.lateness.reads > 0).map((p) => p.lateness!);
  const by = (n: string) => arms.find((a) => a.arm === n);
  const worstVsProbe = Math.min(...arms.filter((a) => a.arm.includes("mirror") || a.arm === "1 drive").flatMap((a) => a.devices.map((d) => d.vsProbe ?? NaN)).filter(Number.isFinite));
  const t = (name: string, value: number | null | undefined, target: number) => ({ name, value: value ?? null, target, ok: value !== null && value !== undefined && value >= target });
  return {
    arms,
    identical: new Set(ids).size === 1,
    lateness: late.length ? { p50: median(late.map((l) => l.p50)), p99: median(late.map((l) => l.p99)), max: Math.max(...late.map((l) => l.max)) } : null,
    targets: [
      t("2 equal drives (mirrored) ÷ 1 drive, decode bytes/s", by("2 drives, mirrored")?.vsOneDrive, 1.9),
      t("3 equal drives (mirrored) ÷ 1 drive", by("3 drives, mirrored")?.vsOneDrive, 2.7),
      t("fast + slow mirror ÷ the fast drive alone", by("fast + slow mirror")?.vsOneDrive, 1.0),
      t("engine ÷ probe, per device (worst)", Number.isFinite(worstVsProbe) ? worstVsProbe : null, 0.95),
    ],
  };
}

const f2 = (x: number | null) => (x === null || !Number.isFinite(x) ? "—" : x.toFixed(2));

export function renderDrives(r: DrivesReport): string {
  const s = r.summary;
  const h = r.how as any;
  const lines = [
    `**Several drives** (${r.when}; bench/drives.ts): ${h.drives.length} emulated drives (${h.image}), reads capped with ${h.throttle} at ${(h.rateBytesPerSecond / 1e6).toFixed(0)} MB/s each (the slow one ${(h.slowBytesPerSecond / 1e6).toFixed(0)} MB/s); model: ${h.model}; budget ${(h.budgetBytes / 2 ** 30).toFixed(2)} GiB (the streaming floor); ${h.tokens} tokens per run, ${h.rounds} rounds, arms interleaved; load 1m per run in the JSON.`,
    "",
    "| arm | runs | decode MB/s | × 1 drive | s/token | GB read/token | reads/token | hedges won/issued | per device: GB/s while busy, busy, ÷ probe |",
    "|---|---|---|---|---|---|---|---|---|",
    ...s.arms.map(
      (a) =>
        `| ${a.arm} | ${a.runs} | ${a.decodeMBps.toFixed(0)} | ${f2(a.vsOneDrive)} | ${(a.msPerToken / 1000).toFixed(2)} | ${(a.bytesPerToken / 1e9).toFixed(2)} | ${a.readsPerToken.toFixed(0)} | ${a.hedges} | ${a.devices.map((d) => `${d.name} ${f2(d.gbps)}, ${Math.round(d.busy * 100)}%, ${f2(d.vsProbe)}`).join("; ")} |`,
    ),
    "",
    `Identical ids in every run: ${s.identical ? "yes" : "**NO**"}.` +
      (s.lateness ? ` Router's prediction error on drive1 (a read's time ÷ its predicted time, 16 expert reads at a time): median ${f2(s.lateness.p50)}, p99 ${f2(s.lateness.p99)}, max ${f2(s.lateness.max)}.` : ""),
    "",
    "| target | value | needed | |",
    "|---|---|---|---|",
    ...s.targets.map((t) => `| ${t.name} | ${f2(t.value)} | ≥ ${t.target} | ${t.ok ? "met" : "**missed**"} |`),
    "",
  ];
  const failed = r.runs.filter((x) => !x.ok);
  if (failed.length) lines.push(`Failed runs: ${failed.map((x) => `${x.arm} (round ${x.round}): ${x.error}`).join("; ")}`, "");
  return lines.join("\n");
}
