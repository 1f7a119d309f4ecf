// Quick-pick rows for `msprof-lsp.showHotspots` and the `msprof-lsp.showOperators` code-lens target.
// Plain module: no vscode import.

import { formatDuration, formatShare } from "./status";

export interface Op {
  name: string;
  type: string;
  core: string;
  timeUs: number | null;
  count: number | null;
}

/** One hotspot in the JSON output shape (1-based lines), with absolute path and uri. */
export interface Hotspot {
  path: string;
  uri: string;
  line: number;
  endLine: number;
  /** 1-based; 1 when the payload has none. */
  column: number;
  /** The call's text on the line (`self.conv(x)`), or `in f()`; may be empty. */
  code: string;
  /** How the line was found: stack, module or inferred. */
  confidence: string;
  deviceTimeUs: number | null;
  share: number | null;
  calls: number | null;
  ops: Op[];
}

function rec(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

function finite(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

function parseOp(raw: unknown): Op | undefined {
  const o = rec(raw);
  if (!o || typeof o.name !== "string") return undefined;
  return {
    name: o.name,
    type: typeof o.type === "string" ? o.type : "",
    core: typeof o.core === "string" ? o.core : "",
    timeUs: finite(o.time_us),
    count: finite(o.count),
  };
}

function parseOps(raw: unknown): Op[] {
  return Array.isArray(raw) ? raw.map(parseOp).filter((op): op is Op => op !== undefined) : [];
}

/** `{"hotspots": [...]}` -> hotspots; entries without a path or a positive line are skipped. */
export function parseHotspots(result: unknown): Hotspot[] {
  const list = rec(result)?.hotspots;
  if (!Array.isArray(list)) return [];
  const out: Hotspot[] = [];
  for (const raw of list) {
    const h = rec(raw);
    if (!h) continue;
    const path = typeof h.path === "string" ? h.path : "";
    const uri = typeof h.uri === "string" ? h.uri : "";
    const line = h.line;
    if ((!path && !uri) || typeof line !== "number" || !Number.isInteger(line) || line < 1) continue;
    const end = typeof h.end_line === "number" && Number.isInteger(h.end_line) && h.end_line >= line ? h.end_line : line;
    const column = typeof h.column === "number" && Number.isInteger(h.column) && h.column >= 1 ? h.column : 1;
    out.push({
      path,
      uri,
      line,
      endLine: end,
      column,
      code: typeof h.code === "string" ? h.code : "",
      confidence: typeof h.confidence === "string" ? h.confidence : "",
      deviceTimeUs: finite(h.device_time_us),
      share: finite(h.share),
      calls: finite(h.calls),
      ops: parseOps(h.ops),
    });
  }
  return out;
}

/** The op with the most device time (the first one when no times are given). */
export function topOp(ops: readonly Op[]): Op | undefined {
  let best: Op | undefined;
  for (const op of ops) {
    if (!best || (op.timeUs ?? -1) > (best.timeUs ?? -1)) best = op;
  }
  return best;
}

export interface HotspotItem {
  label: string;
  detail: string;
  path: string;
  uri: string;
  /** 0-based, for the editor selection. */
  line: number;
  endLine: number;
}

/** Rows `path:line — share — top op`, in the server's order; `relativize` shortens the path. */
export function hotspotItems(hotspots: readonly Hotspot[], relativize: (path: string) => string): HotspotItem[] {
  return hotspots.map((h) => {
    const top = topOp(h.ops);
    const where = `${relativize(h.path || h.uri)}:${h.line}`;
    const label = [where, h.share !== null ? formatShare(h.share) : "—", top ? top.name : "no ops"].join(" — ");
    const detail = [
      h.deviceTimeUs !== null ? `${formatDuration(h.deviceTimeUs)} device time` : "",
      h.calls !== null ? `${h.calls} calls` : "",
      h.ops.length > 1 ? `${h.ops.length} ops` : "",
    ]
      .filter(Boolean)
      .join(" · ");
    return { label, detail, path: h.path, uri: h.uri, line: h.line - 1, endLine: h.endLine - 1 };
  });
}

/** `{"ops": [...]}` of `msprof-lsp.showOperators` -> rows, hottest first. */
export function operatorItems(result: unknown): { label: string; description: string; detail: string }[] {
  const ops = parseOps(rec(result)?.ops);
  return [...ops]
    .sort((a, b) => (b.timeUs ?? -1) - (a.timeUs ?? -1))
    .map((op) => ({
      label: op.name,
      description: [op.type, op.core].filter(Boolean).join(" · "),
      detail: [op.timeUs !== null ? `${formatDuration(op.timeUs)} device time` : "", op.count !== null ? `${op.count} launches` : ""]
        .filter(Boolean)
        .join(" · "),
    }));
}
