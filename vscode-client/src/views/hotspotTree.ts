// The rows of the Hotspots tree view: file -> hot line -> device operators, built from the
// `msprof-lsp.showHotspots` result. Plain module (no vscode import); hotspotsView.ts maps these
// nodes onto TreeItems.

import { type Hotspot, type Op } from "../hotspots";
import { formatDuration, formatShare } from "../status";

/** Where a click takes the editor: 0-based line and column, as the editor counts them. */
export interface Location {
  path: string;
  uri: string;
  line: number;
  endLine: number;
  character: number;
}

export type NodeKind = "file" | "line" | "op";

export interface TreeNode {
  kind: NodeKind;
  /** Stable within one result, so the view keeps what the user expanded across refreshes. */
  id: string;
  label: string;
  description: string;
  tooltip: string;
  location: Location;
  children: TreeNode[];
}

/** `516 µs/step · 15.4%`: the figures the server reports, with whatever part it left out dropped. */
function figures(perStepUs: number | null, share: number | null): string {
  return [perStepUs !== null ? `${formatDuration(perStepUs)}/step` : "", share !== null ? formatShare(share) : ""].filter(Boolean).join(" · ");
}

function sum(values: (number | null)[]): number | null {
  const known = values.filter((v): v is number => v !== null);
  return known.length > 0 ? known.reduce((a, b) => a + b, 0) : null;
}

function locationOf(h: Hotspot): Location {
  return { path: h.path, uri: h.uri, line: h.line - 1, endLine: h.endLine - 1, character: h.column - 1 };
}

function opNode(op: Op, parent: string, index: number, location: Location): TreeNode {
  const launches = op.count !== null ? `×${op.count}` : "";
  return {
    kind: "op",
    id: `${parent}#${index}:${op.name}`,
    label: op.name,
    description: [op.timeUs !== null ? `${formatDuration(op.timeUs)}/step` : "", launches].filter(Boolean).join(" · "),
    tooltip: [
      [op.type, op.core].filter(Boolean).join(" · "),
      op.timeUs !== null ? `${formatDuration(op.timeUs)} of device time per step` : "",
      op.count !== null ? `${op.count} launches in the capture` : "",
    ]
      .filter(Boolean)
      .join("\n"),
    location,
    children: [],
  };
}

function lineNode(h: Hotspot, file: string, id: string): TreeNode {
  const location = locationOf(h);
  const what = h.code ? ` ${h.code}` : "";
  const ops = [...h.ops].sort((a, b) => (b.timeUs ?? -1) - (a.timeUs ?? -1));
  return {
    kind: "line",
    id,
    label: `${h.line}:${h.column}${what}`,
    description: figures(h.deviceTimeUs, h.share),
    tooltip: [
      `${file}:${h.line}${h.endLine > h.line ? `-${h.endLine}` : ""}`,
      h.deviceTimeUs !== null ? `${formatDuration(h.deviceTimeUs)} of device time per step` : "",
      h.share !== null ? `${formatShare(h.share)} of step time` : "",
      h.calls !== null ? `${h.calls} calls` : "",
      h.confidence ? `located by ${h.confidence}` : "",
    ]
      .filter(Boolean)
      .join("\n"),
    location,
    children: ops.map((op, i) => opNode(op, id, i, location)),
  };
}

/** VS Code refuses two tree items with one id; two spans may share line, column and text. */
function uniqueId(id: string, seen: Set<string>): string {
  let out = id;
  for (let n = 2; seen.has(out); n++) out = `${id}#${n}`;
  seen.add(out);
  return out;
}

/**
 * Files ordered by the summed share of their hotspots (hotspot shares do not overlap, so the sum
 * is the file's share of the listed lines and stays in [0, 1]); lines in the server's order
 * (hottest first); operators hottest first. `relativize` shortens a path for the label.
 */
export function hotspotTree(hotspots: readonly Hotspot[], relativize: (path: string) => string): TreeNode[] {
  const ids = new Set<string>();
  const byFile = new Map<string, Hotspot[]>();
  for (const h of hotspots) {
    const key = h.path || h.uri;
    const list = byFile.get(key);
    if (list) list.push(h);
    else byFile.set(key, [h]);
  }
  const files: { node: TreeNode; share: number }[] = [];
  for (const [key, list] of byFile) {
    const name = relativize(key);
    const share = sum(list.map((h) => h.share));
    const perStep = sum(list.map((h) => h.deviceTimeUs));
    const lines = `${list.length} hot line${list.length === 1 ? "" : "s"}`;
    files.push({
      share: share ?? 0,
      node: {
        kind: "file",
        id: key,
        label: name,
        description: [lines, figures(perStep, share)].filter(Boolean).join(" · "),
        tooltip: `${key}\n${lines}: ${figures(perStep, share) || "no figures"} (summed over the listed lines)`,
        location: locationOf(list[0]),
        children: list.map((h) => lineNode(h, name, uniqueId(`${key}:${h.line}:${h.column}:${h.code}`, ids))),
      },
    });
  }
  // Stable sort: files with equal shares keep the order of their hottest line.
  return files.sort((a, b) => b.share - a.share).map((f) => f.node);
}

/** What the view says when there is nothing to list. */
export function emptyMessage(state: "none" | "loading" | "loaded" | "error" | "stopped", count: number): string | undefined {
  if (state === "stopped") return "The msprof-lsp server is not running.";
  if (state === "loading") return "Loading the profile…";
  if (state === "none") return "No profile loaded.";
  if (state === "error") return "The profile could not be read; see the status bar.";
  return count === 0 ? "The profile has no hotspots mapped to source." : undefined;
}
