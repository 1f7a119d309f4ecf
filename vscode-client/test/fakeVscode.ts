// A stand-in for the `vscode` module so the bundled extension loads under plain Node.
// `require("vscode")` is answered by a hook on Module._load. vscode-languageclient subclasses
// vscode classes when it is imported, so every property we do not model is a dummy class
// (a plain function that also works when called, returning a disposable).

import Module = require("node:module");
import { after, before } from "node:test";

type AnyRecord = Record<string | symbol, unknown>;

function makeDummy(name: string): unknown {
  // Called: returns a lenient object (a disposable whose other members are dummies too).
  const dummy = function (this: unknown) {
    if (new.target) return;
    return lenient({ dispose() {} }, `${name}()`);
  };
  Object.defineProperty(dummy, "name", { value: name });
  return dummy;
}

/**
 * Wrap `target` so unknown properties are dummies: lower-case names (namespaces such as
 * `languages`) become lenient objects, capitalised ones (classes, enums) dummy classes.
 */
function lenient<T extends object>(target: T, path: string): T {
  return new Proxy(target, {
    get(obj, prop) {
      if (prop in obj) return (obj as AnyRecord)[prop];
      if (typeof prop === "symbol" || prop === "then" || prop === "toJSON") return undefined;
      const name = `${path}.${prop}`;
      const value = path === "vscode" && /^[a-z]/.test(prop) ? lenient({}, name) : makeDummy(name);
      (obj as AnyRecord)[prop] = value;
      return value;
    },
  });
}

const disposable = () => ({ dispose() {} });
const event = () => () => disposable();

export interface Message {
  kind: "error" | "warning" | "info";
  text: string;
  actions: string[];
}

export interface FakeStatusItem {
  text: string;
  tooltip: unknown;
  command: unknown;
  backgroundColor: unknown;
  visible: boolean;
}

export interface FakeDocument {
  uri: { fsPath: string; scheme: string; toString(): string };
  languageId: string;
  lineCount: number;
  save?(): Promise<boolean>;
}

export interface FakeEditor {
  document: FakeDocument;
  /** Ranges last set per decoration type (by creation index). */
  decorations: Map<number, { range: { start: { line: number } }; hoverMessage?: unknown }[]>;
  setDecorations(type: { index: number }, ranges: never[]): void;
}

export interface FakeTreeView {
  provider: { getChildren(node?: unknown): unknown; getTreeItem(node: unknown): unknown; onDidChangeTreeData?: (l: () => void) => unknown };
  message: string | undefined;
  /** onDidChangeTreeData events seen. */
  changes: number;
}

export interface FakeWebviewPanel {
  viewType: string;
  title: string;
  options: { enableScripts?: boolean; localResourceRoots?: { fsPath: string }[] };
  html: string;
  /** What the extension posted to the page. */
  posted: unknown[];
  revealed: number;
  disposed: boolean;
  /** Deliver a message from the page to the extension; resolves when its handler has. */
  fromPage(message: unknown): Promise<void>;
  dispose(): void;
}

export class FakeVscode {
  panels: FakeWebviewPanel[] = [];
  treeViews = new Map<string, FakeTreeView>();
  taskProviders = new Map<string, { provideTasks(): unknown; resolveTask(task: unknown): unknown }>();
  /** Settings of section "msprof-lsp" by key (what the user set). */
  settings: Record<string, unknown> = {};
  workspaceFolders: { uri: unknown; name: string; index: number }[] | undefined = undefined;
  editors: FakeEditor[] = [];
  shown: { uri: unknown; options: unknown }[] = [];
  configListeners: ((event: { affectsConfiguration(section: string): boolean }) => void)[] = [];
  private decorationTypes = 0;
  commands = new Map<string, (...args: unknown[]) => unknown>();
  executed: { command: string; args: unknown[] }[] = [];
  messages: Message[] = [];
  clipboard: string[] = [];
  statusItems: FakeStatusItem[] = [];
  logLines: string[] = [];
  quickPicks: { items: { label: string }[]; title?: string }[] = [];
  /** Terminals created (record.ts), with what was sent to each. */
  terminals: { options: { name?: string; cwd?: string; env?: Record<string, string> }; sent: string[] }[] = [];
  /** The row a quick pick "picks"; undefined = dismissed. */
  pick: (items: { label: string }[]) => { label: string } | undefined = () => undefined;
  /** Progress notifications: title, every message reported, and the user's Cancel button. */
  progress: { title?: string; messages: string[]; cancellable: boolean; cancel(): void }[] = [];
  /** What workspace.findFiles finds (paths), whatever the glob. */
  foundFiles: string[] = [];
  /** workspace.createFileSystemWatcher calls: the glob, and a way to report a created file. */
  watchers: { glob: string; create(path: string): void; disposed: boolean }[] = [];
  /** What the language client's diagnostic collections hold, by URI string. */
  diagnostics = new Map<string, { message: string; code?: unknown; range: { start: { line: number } } }[]>();
  /** vscode.workspace.isTrusted. */
  trusted = true;
  /** The action a notification "clicks"; undefined = dismissed. */
  answer: (message: Message) => string | undefined = () => undefined;

  module(): unknown {
    const self = this;
    class Uri {
      constructor(
        readonly scheme: string,
        readonly fsPath: string,
      ) {}
      static file(path: string) {
        return new Uri("file", path);
      }
      static parse(value: string) {
        return new Uri(value.split(":")[0], value.replace(/^file:\/\//, ""));
      }
      static joinPath(base: Uri, ...parts: string[]) {
        return new Uri(base.scheme, [base.fsPath, ...parts].join("/"));
      }
      get path() {
        return this.fsPath;
      }
      toString() {
        return this.scheme === "file" ? `file://${this.fsPath}` : this.fsPath;
      }
    }
    class Position {
      constructor(
        readonly line: number,
        readonly character: number,
      ) {}
    }
    class Range {
      readonly start: Position;
      readonly end: Position;
      constructor(a: number | Position, b: number | Position, c?: number, d?: number) {
        this.start = typeof a === "number" ? new Position(a, b as number) : a;
        this.end = typeof a === "number" ? new Position(c as number, d as number) : (b as Position);
      }
    }
    class Disposable {
      constructor(private readonly callOnDispose: () => void = () => {}) {}
      static from(...items: { dispose(): unknown }[]) {
        return new Disposable(() => items.forEach((i) => i.dispose()));
      }
      dispose() {
        this.callOnDispose();
      }
    }
    class EventEmitter<T> {
      private listeners: ((e: T) => void)[] = [];
      readonly event = (listener: (e: T) => void) => {
        this.listeners.push(listener);
        return new Disposable(() => (this.listeners = this.listeners.filter((l) => l !== listener)));
      };
      fire(e: T) {
        for (const l of [...this.listeners]) l(e);
      }
      dispose() {
        this.listeners = [];
      }
    }
    class CancellationTokenSource {
      private readonly emitter = new EventEmitter<void>();
      readonly token = { isCancellationRequested: false, onCancellationRequested: this.emitter.event };
      cancel() {
        if (this.token.isCancellationRequested) return;
        this.token.isCancellationRequested = true;
        this.emitter.fire();
      }
      dispose() {
        this.emitter.dispose();
      }
    }
    class CodeActionKind {
      static readonly Empty = new CodeActionKind("");
      static readonly QuickFix = new CodeActionKind("quickfix");
      static readonly Refactor = new CodeActionKind("refactor");
      static readonly RefactorExtract = new CodeActionKind("refactor.extract");
      static readonly RefactorInline = new CodeActionKind("refactor.inline");
      static readonly RefactorRewrite = new CodeActionKind("refactor.rewrite");
      static readonly Source = new CodeActionKind("source");
      static readonly SourceOrganizeImports = new CodeActionKind("source.organizeImports");
      static readonly SourceFixAll = new CodeActionKind("source.fixAll");
      constructor(readonly value: string) {}
      append(part: string) {
        return new CodeActionKind(this.value ? `${this.value}.${part}` : part);
      }
      contains(other: CodeActionKind) {
        return this.value === "" || other.value === this.value || other.value.startsWith(`${this.value}.`);
      }
      intersects(other: CodeActionKind) {
        return this.contains(other) || other.contains(this);
      }
    }
    class Diagnostic {
      code: unknown;
      source: unknown;
      constructor(
        readonly range: Range,
        readonly message: string,
        readonly severity: number = 0,
      ) {}
    }
    class ThemeColor {
      constructor(readonly id: string) {}
    }
    class ThemeIcon {
      constructor(readonly id: string) {}
    }
    class TreeItem {
      id?: string;
      description?: string;
      tooltip?: unknown;
      contextValue?: string;
      resourceUri?: unknown;
      iconPath?: unknown;
      command?: { command: string; title: string; arguments?: unknown[] };
      constructor(
        readonly label: string,
        readonly collapsibleState: number = 0,
      ) {}
    }
    class ProcessExecution {
      constructor(
        readonly process: string,
        readonly args: string[],
        readonly options?: { cwd?: string },
      ) {}
    }
    class Task {
      group?: unknown;
      presentationOptions?: unknown;
      constructor(
        readonly definition: { type: string },
        readonly scope: unknown,
        readonly name: string,
        readonly source: string,
        readonly execution: unknown,
        readonly problemMatchers: string[],
      ) {}
    }
    const log = (level: string) => (text: string) => {
      self.logLines.push(`${level} ${text}`);
    };
    const message = (kind: Message["kind"]) => (text: string, ...actions: string[]) => {
      const m = { kind, text, actions };
      self.messages.push(m);
      return Promise.resolve(self.answer(m));
    };
    const configuration = () => ({
      get: (key: string, fallback?: unknown) => (key in self.settings ? self.settings[key] : fallback),
      inspect: (key: string) => (key in self.settings ? { key, globalValue: self.settings[key] } : { key }),
      has: (key: string) => key in self.settings,
      update: () => Promise.resolve(),
    });
    return lenient(
      {
        // esbuild's __toESM then hands the module through as is, keeping the Proxy in charge.
        __esModule: true,
        version: "1.82.0",
        Uri,
        Disposable,
        EventEmitter,
        Position,
        Range,
        ThemeColor,
        ThemeIcon,
        TreeItem,
        ViewColumn: { Active: -1, Beside: -2, One: 1 },
        TreeItemCollapsibleState: { None: 0, Collapsed: 1, Expanded: 2 },
        ProcessExecution,
        Task,
        TaskGroup: { Build: { id: "build" }, Test: { id: "test" } },
        TaskRevealKind: { Always: 1, Silent: 2, Never: 3 },
        tasks: lenient(
          {
            registerTaskProvider: (type: string, provider: { provideTasks(): unknown; resolveTask(task: unknown): unknown }) => {
              self.taskProviders.set(type, provider);
              return { dispose: () => self.taskProviders.delete(type) };
            },
          },
          "tasks",
        ),
        CancellationTokenSource,
        CodeActionKind,
        Diagnostic,
        DiagnosticSeverity: { Error: 0, Warning: 1, Information: 2, Hint: 3 },
        StatusBarAlignment: { Left: 1, Right: 2 },
        OverviewRulerLane: { Left: 1, Center: 2, Right: 4, Full: 7 },
        QuickPickItemKind: { Separator: -1, Default: 0 },
        TextEditorRevealType: { Default: 0, InCenter: 1, InCenterIfOutsideViewport: 2, AtTop: 3 },
        ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
        languages: lenient(
          {
            createDiagnosticCollection: (name: string) =>
              lenient(
                {
                  name,
                  set: (uri: { toString(): string }, diags: never[] | undefined) => {
                    if (diags) self.diagnostics.set(uri.toString(), diags);
                    else self.diagnostics.delete(uri.toString());
                  },
                  delete: (uri: { toString(): string }) => self.diagnostics.delete(uri.toString()),
                  get: (uri: { toString(): string }) => self.diagnostics.get(uri.toString()),
                  has: (uri: { toString(): string }) => self.diagnostics.has(uri.toString()),
                  clear: () => self.diagnostics.clear(),
                  forEach() {},
                  dispose() {},
                },
                "DiagnosticCollection",
              ),
          },
          "languages",
        ),
        window: lenient(
          {
            createOutputChannel: () =>
              lenient({ info: log("info"), warn: log("warn"), error: log("error"), debug: log("debug"), trace: log("trace"), appendLine: log(""), show() {}, dispose() {} }, "LogOutputChannel"),
            createStatusBarItem: () => {
              const item: FakeStatusItem & { show(): void; hide(): void; dispose(): void } = {
                text: "",
                tooltip: undefined,
                command: undefined,
                backgroundColor: undefined,
                visible: false,
                show() {
                  this.visible = true;
                },
                hide() {
                  this.visible = false;
                },
                dispose() {},
              };
              self.statusItems.push(item);
              return item;
            },
            createTextEditorDecorationType: (options: unknown) => ({ index: self.decorationTypes++, options, dispose() {} }),
            showTextDocument: (uri: unknown, options: unknown) => {
              self.shown.push({ uri, options });
              return Promise.resolve({ revealRange() {} });
            },
            showErrorMessage: message("error"),
            showWarningMessage: message("warning"),
            showInformationMessage: message("info"),
            showQuickPick: (items: { label: string }[], options?: { title?: string }) => {
              self.quickPicks.push({ items, title: options?.title });
              return Promise.resolve(self.pick(items));
            },
            showOpenDialog: () => Promise.resolve(undefined),
            withProgress: <R>(options: { title?: string; cancellable?: boolean }, task: (progress: { report(value: { message?: string }): void }, token: unknown) => Promise<R>) => {
              const source = new CancellationTokenSource();
              const entry = { title: options.title, messages: [] as string[], cancellable: options.cancellable === true, cancel: () => source.cancel() };
              self.progress.push(entry);
              return task({ report: (value) => void (value.message && entry.messages.push(value.message)) }, source.token);
            },
            tabGroups: { all: [], onDidChangeTabs: event() },
            get visibleTextEditors() {
              return self.editors;
            },
            createTreeView: (id: string, options: { treeDataProvider: FakeTreeView["provider"] }) => {
              const view: FakeTreeView = { provider: options.treeDataProvider, message: undefined, changes: 0 };
              options.treeDataProvider.onDidChangeTreeData?.(() => view.changes++);
              self.treeViews.set(id, view);
              return Object.assign(view, { dispose: () => self.treeViews.delete(id) });
            },
            createWebviewPanel: (viewType: string, title: string, _column: unknown, options: FakeWebviewPanel["options"]) => {
              const receivers: ((m: unknown) => unknown)[] = [];
              const disposers: (() => void)[] = [];
              const panel: FakeWebviewPanel & { webview: unknown; reveal(): void; onDidDispose(l: () => void): unknown } = {
                viewType,
                title,
                options,
                html: "",
                posted: [],
                revealed: 0,
                disposed: false,
                webview: {
                  cspSource: "https://fake.vscode-cdn.net",
                  asWebviewUri: (uri: { fsPath: string }) => ({ toString: () => `https://fake.vscode-cdn.net${uri.fsPath}` }),
                  postMessage: (m: unknown) => (panel.posted.push(m), Promise.resolve(true)),
                  onDidReceiveMessage: (l: (m: unknown) => unknown) => (receivers.push(l), disposable()),
                  set html(value: string) {
                    panel.html = value;
                  },
                  get html() {
                    return panel.html;
                  },
                },
                reveal() {
                  panel.revealed++;
                },
                onDidDispose(l: () => void) {
                  disposers.push(l);
                  return disposable();
                },
                async fromPage(message: unknown) {
                  for (const l of receivers) await l(message);
                },
                dispose() {
                  panel.disposed = true;
                  for (const l of disposers) l();
                },
              };
              self.panels.push(panel);
              return panel;
            },
            get activeTextEditor() {
              return self.editors[0];
            },
            createTerminal: (options: { name?: string; cwd?: string; env?: Record<string, string> }) => {
              const terminal = { options, sent: [] as string[] };
              self.terminals.push(terminal);
              return { show() {}, sendText: (text: string) => terminal.sent.push(text), dispose() {} };
            },
            onDidChangeVisibleTextEditors: event(),
            onDidChangeActiveTextEditor: event(),
          },
          "window",
        ),
        workspace: lenient(
          {
            get workspaceFolders() {
              return self.workspaceFolders;
            },
            get isTrusted() {
              return self.trusted;
            },
            get textDocuments() {
              return self.editors.map((e) => e.document);
            },
            getConfiguration: configuration,
            onDidChangeConfiguration: (listener: (event: { affectsConfiguration(section: string): boolean }) => void) => {
              self.configListeners.push(listener);
              return { dispose: () => (self.configListeners = self.configListeners.filter((l) => l !== listener)) };
            },
            onDidSaveTextDocument: event(),
            onDidCloseTextDocument: event(),
            asRelativePath: (path: string) => path,
            findFiles: () => Promise.resolve(self.foundFiles.map((path) => Uri.file(path))),
            createFileSystemWatcher: (glob: string) => {
              const created = new EventEmitter<Uri>();
              const watcher = { glob, create: (path: string) => created.fire(Uri.file(path)), disposed: false };
              self.watchers.push(watcher);
              return { onDidCreate: created.event, onDidChange: event(), onDidDelete: event(), dispose: () => void (watcher.disposed = true) };
            },
          },
          "workspace",
        ),
        commands: lenient(
          {
            registerCommand: (id: string, fn: (...args: unknown[]) => unknown) => {
              if (self.commands.has(id)) throw new Error(`command '${id}' already exists`);
              self.commands.set(id, fn);
              return { dispose: () => self.commands.delete(id) };
            },
            executeCommand: (command: string, ...args: unknown[]) => {
              self.executed.push({ command, args });
              const fn = self.commands.get(command);
              return Promise.resolve(fn ? fn(...args) : undefined);
            },
          },
          "commands",
        ),
        extensions: lenient({ getExtension: () => undefined }, "extensions"),
        env: lenient({ appName: "Visual Studio Code", language: "en", clipboard: { writeText: (text: string) => (self.clipboard.push(text), Promise.resolve()) } }, "env"),
      },
      "vscode",
    );
  }
}

/** An editor showing `document`; records the decorations set on it. */
export function fakeEditor(document: FakeDocument): FakeEditor {
  const decorations: FakeEditor["decorations"] = new Map();
  return {
    document,
    decorations,
    setDecorations(type, ranges) {
      decorations.set(type.index, ranges);
    },
  };
}

type Loader = (request: string, parent: unknown, isMain: boolean) => unknown;

/** Answer `require("vscode")` with `fake` from now on; returns the undo. */
export function installFakeVscode(fake: FakeVscode): () => void {
  const mod = Module as unknown as { _load: Loader };
  const original = mod._load;
  const vscode = fake.module();
  mod._load = function (this: unknown, request: string, parent: unknown, isMain: boolean) {
    if (request === "vscode") return vscode;
    return original.call(this, request, parent, isMain);
  };
  return () => {
    mod._load = original;
  };
}

/**
 * For a describe block: a fake installed before its tests and removed after, and the source
 * modules `load` requires once `require("vscode")` answers with it (they import vscode at load).
 */
export function withFakeVscode<T>(load: () => T): { fake: FakeVscode; modules(): T } {
  const fake = new FakeVscode();
  let undo: () => void = () => {};
  let loaded: T | undefined;
  before(() => {
    undo = installFakeVscode(fake);
    loaded = load();
  });
  after(() => undo());
  return {
    fake,
    modules() {
      if (loaded === undefined) throw new Error("modules() is for the tests, after before() ran");
      return loaded;
    },
  };
}
