// The Hotspots tree view (Explorer side bar): file -> hot line -> operators, from the server's
// `msprof-lsp.showHotspots` result. Refetched when the profile (re)loads and after a save (the
// server reports current lines); a click opens the line.

import * as vscode from "vscode";

import { CMD_OPEN_SOURCE, CMD_REFRESH_HOTSPOTS, CMD_SHOW_HOTSPOTS, VIEW_HOTSPOTS } from "../constants";
import { parseHotspots } from "../hotspots";
import { type SourceTarget } from "../open";
import { type ProfileState } from "../status";
import { emptyMessage, hotspotTree, type TreeNode } from "./hotspotTree";

/** What the view needs from the extension: a server request that never pops up an error. */
export interface ViewHost {
  /** The server command's result; undefined when the server is not running or the request failed. */
  request(command: string, args: unknown[]): Promise<unknown>;
}

export class HotspotsProvider implements vscode.TreeDataProvider<TreeNode>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<TreeNode | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private roots: TreeNode[] = [];
  private state: ProfileState | "stopped" = "stopped";
  private generation = 0;
  /** Set by the view after creation: where the empty-state message goes. */
  view: vscode.TreeView<TreeNode> | undefined;

  constructor(private readonly host: ViewHost) {}

  /** The profile changed state (undefined: the server stopped); a loaded profile is fetched. */
  profileChanged(state: ProfileState | undefined): Promise<void> {
    this.state = state ?? "stopped";
    if (this.state !== "loaded") {
      this.generation++;
      this.show([]);
      return Promise.resolve();
    }
    return this.refresh();
  }

  /** Fetch again; a result that arrives after a newer request or a state change is dropped. */
  async refresh(): Promise<void> {
    if (this.state !== "loaded") return;
    const generation = ++this.generation;
    const result = await this.host.request(CMD_SHOW_HOTSPOTS, []);
    if (generation !== this.generation) return;
    this.show(hotspotTree(parseHotspots(result), (path) => vscode.workspace.asRelativePath(path, false)));
  }

  private show(roots: TreeNode[]): void {
    this.roots = roots;
    if (this.view) this.view.message = emptyMessage(this.state, roots.length);
    this.changed.fire(undefined);
  }

  getChildren(node?: TreeNode): TreeNode[] {
    return node ? node.children : this.roots;
  }

  getTreeItem(node: TreeNode): vscode.TreeItem {
    const collapsed = vscode.TreeItemCollapsibleState;
    const state = node.children.length === 0 ? collapsed.None : node.kind === "file" ? collapsed.Expanded : collapsed.Collapsed;
    const item = new vscode.TreeItem(node.label, state);
    item.id = node.id;
    item.description = node.description;
    item.tooltip = node.tooltip;
    item.contextValue = node.kind;
    if (node.kind === "file") {
      item.resourceUri = node.location.uri ? vscode.Uri.parse(node.location.uri) : vscode.Uri.file(node.location.path);
    } else {
      item.iconPath = new vscode.ThemeIcon(node.kind === "line" ? "flame" : "chip");
    }
    const target: SourceTarget = node.location;
    item.command = { command: CMD_OPEN_SOURCE, title: "Open the line", arguments: [target] };
    return item;
  }

  dispose(): void {
    this.changed.dispose();
  }
}

/** The view, its refresh command and a refetch after saves (lines move when code is edited). */
export function registerHotspotsView(provider: HotspotsProvider): vscode.Disposable[] {
  const view = vscode.window.createTreeView(VIEW_HOTSPOTS, { treeDataProvider: provider, showCollapseAll: true });
  provider.view = view;
  view.message = emptyMessage("stopped", 0);
  return [
    view,
    provider,
    vscode.commands.registerCommand(CMD_REFRESH_HOTSPOTS, () => provider.refresh()),
    vscode.workspace.onDidSaveTextDocument((doc) => {
      if (doc.languageId === "python") void provider.refresh();
    }),
  ];
}
