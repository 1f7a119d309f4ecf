// The "Show profile" webview's page script: the report renderer (src/report/) hosted in a VS Code
// webview. The model arrives as a message from the extension (never inline in the page); a click
// on a kernel or a hotspot posts `{type: "open", path, line}` back, and the extension opens it.

import { renderReport, selfTest } from "../report/index";
import type { ReportModel } from "../report/model";
import { type FromPage, type ToPage } from "./protocol";

interface VsCodeApi {
  postMessage(message: FromPage): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const root = document.getElementById("root") as HTMLElement;

function show(model: ReportModel | null, note: string): void {
  if (!model) {
    root.replaceChildren();
    const p = document.createElement("p");
    p.className = "msprof-note";
    p.textContent = note || "No profile loaded.";
    root.append(p);
    return;
  }
  const views = renderReport(root, model, { openSource: (path, line) => vscode.postMessage({ type: "open", path, line }) });
  root.dataset.rendered = "true";
  // The rendering test's hook, as in the HTML report: click the hot kernel through the hit test.
  if (location.hash === "#selftest=click") selfTest(root, views);
}

window.addEventListener("message", (event: MessageEvent<ToPage>) => {
  const message = event.data;
  if (message && message.type === "model") show(message.model as ReportModel | null, message.note);
});
vscode.postMessage({ type: "ready" });
