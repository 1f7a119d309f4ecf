// The status bar: the `msprof-lsp/profileStatus` payload -> text, tooltip and the click menu.
// Plain module: no vscode import; the extension maps StatusView/MenuItem onto vscode objects.

import { ProfileStateValues, type ProfileState, type ProfileStatus } from "./generated/payloads";

// The payload's shape is generated from the server's struct (server/lsp/status_payload.py).
export type { ProfileState, ProfileStatus };

const STATES: readonly string[] = ProfileStateValues;

function str(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function num(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

function int(value: unknown): number | null {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : null;
}

/** Accept whatever arrives; a payload we cannot read becomes an error state that says so. */
export function parseProfileStatus(payload: unknown): ProfileStatus {
  const p = (typeof payload === "object" && payload !== null && !Array.isArray(payload) ? payload : {}) as Record<string, unknown>;
  const rawState = p.state;
  const known = typeof rawState === "string" && STATES.includes(rawState);
  const ranks = Array.isArray(p.ranks) ? p.ranks.map(int).filter((r): r is number => r !== null) : [];
  return {
    state: known ? (rawState as ProfileState) : "error",
    kind: str(p.kind),
    path: str(p.path),
    rank: int(p.rank),
    ranks: [...new Set(ranks)].sort((a, b) => a - b),
    steps: int(p.steps),
    stepTimeUs: num(p.stepTimeUs),
    mappedShare: num(p.mappedShare),
    message: known ? str(p.message) : `unreadable profile status from the server: ${JSON.stringify(rawState ?? payload)}`,
    topCode: str(p.topCode),
    topSavingUs: num(p.topSavingUs),
    headline: str(p.headline),
  };
}

/** Microseconds as the status bar shows them: 850 µs, 12.3 ms, 1.23 s. */
export function formatDuration(us: number): string {
  const abs = Math.abs(us);
  if (abs < 1000) return `${Number(us.toFixed(abs < 10 ? 1 : 0))} µs`;
  if (abs < 1_000_000) return `${Number((us / 1000).toFixed(abs < 100_000 ? 1 : 0))} ms`;
  return `${Number((us / 1_000_000).toFixed(2))} s`;
}

/** A share (0..1) as a percentage with one decimal. */
export function formatShare(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}

export interface StatusView {
  text: string;
  tooltip: string;
  /** Draw with the warning background (something needs the user's attention). */
  warning: boolean;
}

const CLICK = "Click to choose another profile or rank.";

export function profileStatusView(status: ProfileStatus): StatusView {
  switch (status.state) {
    case "loading":
      return {
        text: "$(sync~spin) msprof: loading",
        tooltip: [status.path ? `Loading profile ${status.path}` : "Loading profile", status.message].filter(Boolean).join("\n"),
        warning: false,
      };
    case "loaded": {
      const parts = [status.kind || "profile"];
      if (status.rank !== null) parts.push(`rank ${status.rank}`);
      if (status.stepTimeUs !== null) parts.push(`${formatDuration(status.stepTimeUs)}/step`);
      // the headline: the biggest saving (the first "Start here" finding)
      if (status.topCode) {
        parts.push(status.topSavingUs !== null ? `saves ${formatDuration(status.topSavingUs)}: ${status.topCode}` : `start: ${status.topCode}`);
      }
      const lines = [`Profile: ${status.path || "(unknown path)"}`];
      if (status.headline) lines.push(status.headline);
      if (status.kind) lines.push(`Kind: ${status.kind}`);
      if (status.rank !== null) {
        lines.push(status.ranks.length > 1 ? `Rank: ${status.rank} (ranks ${status.ranks.join(", ")})` : `Rank: ${status.rank}`);
      }
      if (status.steps !== null) lines.push(`Steps: ${status.steps}`);
      if (status.stepTimeUs !== null) lines.push(`Step time: ${formatDuration(status.stepTimeUs)}`);
      if (status.mappedShare !== null) lines.push(`Mapped to source: ${formatShare(status.mappedShare)} of device time`);
      if (status.message) lines.push(status.message);
      lines.push(CLICK);
      return { text: `$(flame) ${parts.join(" · ")}`, tooltip: lines.join("\n"), warning: false };
    }
    case "error":
      return {
        text: "$(warning) msprof: profile error",
        tooltip: [status.message || "The profile could not be read.", status.path ? `Profile: ${status.path}` : "", CLICK]
          .filter(Boolean)
          .join("\n"),
        warning: true,
      };
    case "none":
      return {
        text: "$(circle-slash) msprof: no profile",
        tooltip: [status.message || "No profile found under the workspace.", "Click to select a profile folder or file."].join("\n"),
        warning: false,
      };
  }
}

export type ServerPhase = "starting" | "stopped" | "failed" | "notInstalled";

/** The status bar before any profileStatus, or when the server is not running. */
export function serverStatusView(phase: ServerPhase, message = ""): StatusView {
  switch (phase) {
    case "starting":
      return { text: "$(sync~spin) msprof: starting", tooltip: "Starting the msprof-lsp server…", warning: false };
    case "stopped":
      return { text: "$(debug-disconnect) msprof: stopped", tooltip: [message || "The msprof-lsp server is not running.", "Click for options."].join("\n"), warning: true };
    case "failed":
      return { text: "$(error) msprof: server unavailable", tooltip: [message, "Click for options."].filter(Boolean).join("\n"), warning: true };
    case "notInstalled":
      return {
        text: "$(cloud-download) msprof: not installed",
        tooltip: [message || "The server installs when a profile appears in the workspace or you run \"msprof-lsp: Restart server\".", "Click for options."].join("\n"),
        warning: false,
      };
  }
}

export type MenuAction =
  | { kind: "selectFolder" }
  | { kind: "selectFile" }
  | { kind: "rank"; rank: number }
  | { kind: "reload" }
  | { kind: "baseline" }
  | { kind: "hotspots" }
  | { kind: "logs" }
  | { kind: "restart" };

export interface MenuItem {
  label: string;
  description?: string;
  /** A separator row with `label` as its title; no action. */
  separator?: boolean;
  action?: MenuAction;
}

/** The quick pick behind the status bar item. `serverRunning` hides what needs the server. */
export function statusMenuItems(status: ProfileStatus | undefined, serverRunning: boolean): MenuItem[] {
  const items: MenuItem[] = [];
  if (serverRunning) {
    items.push(
      { label: "$(folder-opened) Select profile folder…", action: { kind: "selectFolder" } },
      { label: "$(file) Select profile file…", description: "trace_view.json, *.pt.trace.json, *.db", action: { kind: "selectFile" } },
    );
    if (status && status.path && status.ranks.length > 1 && (status.state === "loaded" || status.state === "error")) {
      items.push({ label: "Ranks", separator: true });
      for (const rank of status.ranks) {
        items.push({
          label: `${rank === status.rank ? "$(check)" : "$(blank)"} Rank ${rank}`,
          description: rank === status.rank ? "current" : undefined,
          action: { kind: "rank", rank },
        });
      }
    }
    items.push({ label: "", separator: true });
    if (status?.state === "loaded") items.push({ label: "$(list-ordered) Show hotspots", action: { kind: "hotspots" } });
    items.push(
      { label: "$(refresh) Reload profile", action: { kind: "reload" } },
      { label: "$(diff) Set baseline…", action: { kind: "baseline" } },
    );
  }
  items.push({ label: "$(debug-restart) Restart server", action: { kind: "restart" } }, { label: "$(output) Show logs", action: { kind: "logs" } });
  return items;
}
