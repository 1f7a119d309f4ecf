// Line heat in the gutter: `msprof-lsp.lineHeat` results -> one range list per colour bucket.
// Plain module: no vscode import; the extension turns these into TextEditorDecorationTypes.

import { formatDuration, formatShare } from "./status";

/** One entry of the `msprof-lsp.lineHeat` [uri] result (server/protocol.py CMD_LINE_HEAT). */
export interface LineHeat {
  /** 0-based line. */
  line: number;
  /** Share of step time, 0..1. */
  share: number;
  perStepUs: number | null;
  label: string;
}

/** Keep the well-formed entries (0-based integer line, finite share > 0); ignore the rest. */
export function parseLineHeat(result: unknown): LineHeat[] {
  if (!Array.isArray(result)) return [];
  const out: LineHeat[] = [];
  for (const raw of result) {
    if (typeof raw !== "object" || raw === null) continue;
    const e = raw as Record<string, unknown>;
    const line = e.line;
    const share = e.share;
    if (typeof line !== "number" || !Number.isInteger(line) || line < 0) continue;
    if (typeof share !== "number" || !Number.isFinite(share) || share <= 0) continue;
    const perStepUs = typeof e.perStepUs === "number" && Number.isFinite(e.perStepUs) ? e.perStepUs : null;
    out.push({ line, share, perStepUs, label: typeof e.label === "string" ? e.label : "" });
  }
  return out;
}

export interface HeatBucket {
  /** Lowest share (inclusive) that falls in this bucket. */
  minShare: number;
  color: string;
  /** Width of the gutter bar in px (of 16): hotter is wider, so the scale does not rely on colour alone. */
  barWidth: number;
}

/** Four buckets, coolest first: > 0, >= 2 %, >= 5 %, >= 10 % of step time. */
export const HEAT_BUCKETS: readonly HeatBucket[] = [
  { minShare: 0, color: "#e3b341", barWidth: 3 },
  { minShare: 0.02, color: "#f0883e", barWidth: 5 },
  { minShare: 0.05, color: "#e5534b", barWidth: 7 },
  { minShare: 0.1, color: "#b62324", barWidth: 9 },
];

export function bucketOf(share: number): number {
  for (let i = HEAT_BUCKETS.length - 1; i >= 0; i--) {
    if (share >= HEAT_BUCKETS[i].minShare) return i;
  }
  return 0;
}

export interface HeatMark {
  line: number;
  hover: string;
}

export function heatHover(entry: LineHeat): string {
  const parts = [`${formatShare(entry.share)} of step time`];
  if (entry.perStepUs !== null) parts.push(`${formatDuration(entry.perStepUs)}/step`);
  const head = `msprof: ${parts.join(" · ")}`;
  return entry.label && !head.includes(entry.label) ? `${head} — ${entry.label}` : head;
}

/**
 * Marks per bucket (index = bucket) for a document of `lineCount` lines. Lines past the end (a file
 * edited since the profile) are dropped; a line listed twice keeps its hottest entry.
 */
export function heatMarks(entries: readonly LineHeat[], lineCount: number): HeatMark[][] {
  const hottest = new Map<number, LineHeat>();
  for (const entry of entries) {
    if (entry.line >= lineCount) continue;
    const seen = hottest.get(entry.line);
    if (!seen || entry.share > seen.share) hottest.set(entry.line, entry);
  }
  const buckets: HeatMark[][] = HEAT_BUCKETS.map(() => []);
  for (const entry of [...hottest.values()].sort((a, b) => a.line - b.line)) {
    buckets[bucketOf(entry.share)].push({ line: entry.line, hover: heatHover(entry) });
  }
  return buckets;
}

/** The gutter icon of a bucket: an SVG bar as a data URI (no image files to ship). */
export function gutterIconDataUri(bucket: HeatBucket): string {
  const svg =
    `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">` +
    `<rect x="2" y="0" width="${bucket.barWidth}" height="16" fill="${bucket.color}"/></svg>`;
  return `data:image/svg+xml;base64,${Buffer.from(svg, "utf8").toString("base64")}`;
}
