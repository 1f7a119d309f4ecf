// The "msprof-lsp: Show profile" webview panel: the HTML report's renderer (dist/webview.js, built
// from src/webview/) on the model of the server's `msprof-lsp.reportModel`, redrawn when the
// profile reloads; clicks on kernels and hotspots open the source line.

import * as vscode from "vscode";

import { CMD_REPORT_MODEL, CMD_SHOW_PROFILE, VIEW_PROFILE } from "./constants";
import { openSource } from "./open";
import { type ProfileState } from "./status";
import { makeNonce, pageHtml, parseFromPage, resolveSource } from "./webview/page";
import { type ToPage } from "./webview/protocol";
import { type ViewHost } from "./views/hotspotsView";

export class ProfilePanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private base = "";
  private state: ProfileState | "stopped" = "stopped";
  private generation = 0;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly host: ViewHost,
  ) {}

  /** Open the panel (or bring it forward) and draw the loaded profile. */
  show(): void {
    if (this.panel) {
      this.panel.reveal();
      return;
    }
    const dist = vscode.Uri.joinPath(this.extensionUri, "dist");
    const panel = vscode.window.createWebviewPanel(VIEW_PROFILE, "msprof-lsp: profile", vscode.ViewColumn.Beside, {
      enableScripts: true,
      localResourceRoots: [dist],
      retainContextWhenHidden: true,
    });
    const webview = panel.webview;
    webview.html = pageHtml({
      cspSource: webview.cspSource,
      nonce: makeNonce(),
      scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview.js")).toString(),
      styleUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview.css")).toString(),
    });
    this.panel = panel;
    panel.onDidDispose(() => {
      this.panel = undefined;
      this.generation++;
    }, undefined, this.disposables);
    webview.onDidReceiveMessage((raw) => this.onMessage(raw), undefined, this.disposables);
  }

  /** The profile changed state (undefined: the server stopped): redraw an open panel. */
  profileChanged(state: ProfileState | undefined): Promise<void> {
    this.state = state ?? "stopped";
    return this.panel ? this.refresh() : Promise.resolve();
  }

  private async refresh(): Promise<void> {
    const generation = ++this.generation;
    let message: ToPage;
    if (this.state !== "loaded") {
      message = { type: "model", model: null, note: this.state === "loading" ? "Loading the profile…" : this.state === "stopped" ? "The msprof-lsp server is not running." : "No profile loaded." };
    } else {
      const model = await this.host.request(CMD_REPORT_MODEL, []);
      if (generation !== this.generation) return; // a newer state or request overtook this one
      const base = typeof model === "object" && model !== null ? (model as { base?: unknown }).base : undefined;
      this.base = typeof base === "string" ? base : "";
      message = { type: "model", model: model ?? null, note: model ? "" : "The server has no report for this profile." };
    }
    await this.panel?.webview.postMessage(message);
  }

  private async onMessage(raw: unknown): Promise<void> {
    const message = parseFromPage(raw);
    if (message?.type === "ready") {
      await this.refresh();
    } else if (message?.type === "open") {
      const path = resolveSource(this.base, message.path);
      if (path) await openSource({ path, uri: "", line: message.line - 1 });
    }
  }

  dispose(): void {
    this.panel?.dispose();
    for (const d of this.disposables) d.dispose();
  }
}

export function registerProfilePanel(panel: ProfilePanel): vscode.Disposable[] {
  return [panel, vscode.commands.registerCommand(CMD_SHOW_PROFILE, () => panel.show())];
}
