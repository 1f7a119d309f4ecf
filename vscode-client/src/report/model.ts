// The report model the server builds (server/analysis/views/model.py): the interfaces are generated
// from its structs (python -m msprof_lsp.server.lsp.payload_schema), re-exported here so the
// renderer and its hosts import one module.

export type * from "../generated/report";

/** What the page hosting the renderer provides. */
export interface ReportHost {
  /** Open (or point at) a source line: the HTML report scrolls to its hotspot row, the VS Code
   * webview posts a message so the extension opens the editor there. `line` is 1-based. */
  openSource(path: string, line: number): void;
}
