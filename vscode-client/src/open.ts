// Opening a source location from a view: the Hotspots tree, the quick pick and the profile webview
// all land here, so they reveal a line the same way.

import * as vscode from "vscode";

export interface SourceTarget {
  /** Absolute path; used when `uri` is empty. */
  path: string;
  uri: string;
  /** 0-based. */
  line: number;
  endLine?: number;
  character?: number;
}

export function targetUri(target: SourceTarget): vscode.Uri {
  return target.uri ? vscode.Uri.parse(target.uri) : vscode.Uri.file(target.path);
}

/** Show the file with the cursor at line/character and the span in view. */
export async function openSource(target: SourceTarget): Promise<void> {
  const position = new vscode.Position(target.line, target.character ?? 0);
  const editor = await vscode.window.showTextDocument(targetUri(target), { selection: new vscode.Range(position, position) });
  const end = new vscode.Position(Math.max(target.endLine ?? target.line, target.line), 0);
  editor.revealRange(new vscode.Range(position, end), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
}
