// The "Show profile" page as the extension writes it, and what it accepts back from it. Plain
// module (no vscode import): the panel (profilePanel.ts) passes in the webview's URIs.

import { randomBytes } from "node:crypto";
import { isAbsolute, relative, resolve } from "node:path";

import { type FromPage } from "./protocol";

/** A fresh script nonce per page: 128 random bits. */
export function makeNonce(): string {
  return randomBytes(16).toString("base64");
}

/**
 * Nothing but our own files: the one script carries the nonce, styles come from the extension's
 * dist/ (the renderer sets element styles through the CSSOM, which style-src does not govern),
 * no inline code, no eval, no network.
 */
export function contentSecurityPolicy(cspSource: string, nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src ${cspSource}`,
    `img-src ${cspSource} data:`,
    `font-src ${cspSource}`,
  ].join("; ");
}

function escapeAttr(value: string): string {
  return value.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function pageHtml(page: { cspSource: string; nonce: string; scriptUri: string; styleUri: string }): string {
  const csp = contentSecurityPolicy(page.cspSource, page.nonce);
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${escapeAttr(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="${escapeAttr(page.styleUri)}">
<title>msprof-lsp: profile</title>
</head>
<body>
<div id="root" class="msprof-report"><p class="msprof-note">Loading the profile…</p></div>
<script nonce="${escapeAttr(page.nonce)}" src="${escapeAttr(page.scriptUri)}"></script>
</body>
</html>
`;
}

/** A message from the page, checked: anything else is ignored. */
export function parseFromPage(raw: unknown): FromPage | undefined {
  if (typeof raw !== "object" || raw === null) return undefined;
  const m = raw as Record<string, unknown>;
  if (m.type === "ready") return { type: "ready" };
  if (m.type === "open" && typeof m.path === "string" && m.path && typeof m.line === "number" && Number.isInteger(m.line) && m.line >= 1) {
    return { type: "open", path: m.path, line: m.line };
  }
  return undefined;
}

/**
 * The file a click names: the model's paths are relative to its `base` (the workspace root). A
 * path that leaves the base is refused (undefined): the page never chooses what gets opened.
 */
export function resolveSource(base: string, path: string): string | undefined {
  if (!base || !isAbsolute(base)) return undefined;
  const full = resolve(base, path);
  const rel = relative(base, full);
  if (rel === "" || rel.startsWith("..") || isAbsolute(rel)) return undefined;
  return full;
}
