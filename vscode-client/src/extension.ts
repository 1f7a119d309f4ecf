// The thin layer over the vscode API: starts the server, wires the status bar, commands and gutter
// heat. Decisions (interpreter, settings, texts, buckets, quick-pick rows) live in plain modules.

import * as os from "node:os";

import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  type LanguageClientOptions,
  ResponseError,
  RevealOutputChannelOn,
  type ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";

import {
  CLIENT_ID,
  CLIENT_NAME,
  CMD_LINE_HEAT,
  CMD_OPEN_SOURCE,
  CMD_RELOAD,
  CMD_RESTART,
  CMD_SELECT_PROFILE,
  CMD_SET_BASELINE,
  CMD_SHOW_HOTSPOTS,
  CMD_SHOW_LOGS,
  CMD_SHOW_OPERATORS,
  CMD_STATUS_MENU,
  CONTEXT_SERVER_RUNNING,
  NOTIFY_PROFILE_STATUS,
  SECTION,
} from "./constants";
import { debounce, type Debounced } from "./debounce";
import { gutterIconDataUri, HEAT_BUCKETS, heatMarks, type LineHeat, parseLineHeat } from "./heat";
import { hotspotItems, operatorItems, parseHotspots } from "./hotspots";
import { type BundledWheel, findBundledWheel, installManagedEnvironment, installTarget, profileGlob, readyEnvironment } from "./bootstrap";
import { chooseInterpreter, describeInterpreter, type Interpreter, runImportCheck, serverLaunch } from "./interpreter";
import { openSource } from "./open";
import { ProfilePanel, registerProfilePanel } from "./profilePanel";
import { onPythonInterpreterChange, pythonExtensionCommand } from "./pythonExtension";
import { CMD_ADOPT_NEW_PROFILE, CMD_MANAGE_TRUST, CMD_RECORD_PROFILE, MANAGE_TRUST, RECORD_SETTING, recordProfile } from "./record";
import { answerConfiguration, type ConfigurationItem, classifyChange, type ManifestLike, serverSettingKeys, serverSettings, shouldNotify } from "./settings";
import {
  type MenuAction,
  parseProfileStatus,
  type ProfileStatus,
  profileStatusView,
  serverStatusView,
  type StatusView,
  statusMenuItems,
} from "./status";
import { registerCheckTasks } from "./tasks";
import { HotspotsProvider, registerHotspotsView } from "./views/hotspotsView";

const RESTART_DELAY_MS = 1000;
const HEAT_DELAY_MS = 150;

class Extension implements vscode.Disposable {
  private readonly log: vscode.LogOutputChannel;
  private readonly statusItem: vscode.StatusBarItem;
  private readonly heatTypes: vscode.TextEditorDecorationType[];
  private readonly keys: string[];
  private readonly disposables: vscode.Disposable[] = [];
  private client: LanguageClient | undefined;
  private profile: ProfileStatus | undefined;
  private lastProfileError = "";
  private queue: Promise<void> = Promise.resolve();
  private readonly heatCache = new Map<string, LineHeat[]>();
  private heatGeneration = 0;
  readonly restartSoon: Debounced;
  private readonly refreshHeat: Debounced;
  private readonly hotspots = new HotspotsProvider({ request: (command, args) => this.quietRequest(command, args) });
  private readonly profilePanel: ProfilePanel;
  private readonly extensionDir: string;
  /** Where the extension's own environment lives; VS Code's global storage only. */
  private readonly storageDir: string | undefined;
  /** The Python the running server was started with (the extension's own environment after a first-start install). */
  private serverInterpreter: Interpreter | undefined;
  /** The manifest's profile globs (workspaceContains); a match allows the first-start install. */
  private readonly profiles: string | undefined;
  /** Set once the user runs Restart server (the palette or the status menu): installing is asked for. */
  private userAsked = false;
  /** Set when the watcher sees a profile appear. */
  private profileFound = false;
  /** Set when the user cancels the install: only Restart server installs after that. */
  private declined = false;
  /** Watches for a profile while the first-start install waits for one. */
  private profileWatcher: vscode.FileSystemWatcher | undefined;

  constructor(context: vscode.ExtensionContext) {
    this.extensionDir = context.extensionUri.fsPath;
    this.storageDir = context.globalStorageUri?.fsPath;
    this.log = vscode.window.createOutputChannel(CLIENT_NAME, { log: true });
    this.statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
    this.statusItem.name = "msprof-lsp profile";
    this.statusItem.command = CMD_STATUS_MENU;
    this.heatTypes = HEAT_BUCKETS.map((bucket) =>
      vscode.window.createTextEditorDecorationType({
        gutterIconPath: vscode.Uri.parse(gutterIconDataUri(bucket)),
        gutterIconSize: "contain",
        overviewRulerColor: bucket.color,
        overviewRulerLane: vscode.OverviewRulerLane.Right,
      }),
    );
    this.keys = serverSettingKeys(context.extension.packageJSON as ManifestLike);
    this.profiles = profileGlob((context.extension.packageJSON as { activationEvents?: string[] }).activationEvents ?? []);
    this.restartSoon = debounce(() => void this.restart(), RESTART_DELAY_MS);
    this.refreshHeat = debounce(() => void this.drawHeat(), HEAT_DELAY_MS);
    this.disposables.push(this.log, this.statusItem, ...this.heatTypes);
    this.profilePanel = new ProfilePanel(context.extensionUri, { request: (command, args) => this.quietRequest(command, args) });
  }

  activate(): void {
    const { commands, window, workspace } = vscode;
    this.disposables.push(
      commands.registerCommand(CMD_RESTART, () => this.userRestart()),
      commands.registerCommand(CMD_SHOW_LOGS, () => this.log.show()),
      commands.registerCommand(CMD_STATUS_MENU, () => this.statusMenu()),
      commands.registerCommand(CMD_RECORD_PROFILE, () => this.record()),
      workspace.onDidChangeConfiguration((event) => this.onConfigurationChange(event)),
      window.onDidChangeVisibleTextEditors(() => this.refreshHeat()),
      workspace.onDidSaveTextDocument((doc) => {
        this.heatCache.delete(doc.uri.toString());
        this.refreshHeat();
      }),
      workspace.onDidCloseTextDocument((doc) => this.heatCache.delete(doc.uri.toString())),
      commands.registerCommand(CMD_OPEN_SOURCE, openSource),
      ...registerHotspotsView(this.hotspots),
      ...registerProfilePanel(this.profilePanel),
      ...registerCheckTasks(async () => this.serverInterpreter ?? this.interpreter()),
    );
    void onPythonInterpreterChange(() => {
      if (!this.config().get<string>("interpreter")) this.restartSoon();
    }, this.log).then((subs) => this.disposables.push(...subs));
    this.showStatus(serverStatusView("starting"));
    this.statusItem.show();
    void this.restart();
  }

  private config(scope?: vscode.Uri): vscode.WorkspaceConfiguration {
    return vscode.workspace.getConfiguration(SECTION, scope ?? this.folder()?.uri);
  }

  private folder(): vscode.WorkspaceFolder | undefined {
    return vscode.workspace.workspaceFolders?.[0];
  }

  /** The flat camelCase object the server gets as initializationOptions and configuration. */
  private flatSettings(scope?: vscode.Uri): Record<string, unknown> {
    const config = this.config(scope);
    return serverSettings(this.keys, (key) => config.inspect(key));
  }

  private showStatus(view: StatusView): void {
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor = view.warning ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
  }

  private notify(kind: "error" | "warning" | "info", message: string, ...actions: string[]): Thenable<string | undefined> {
    if (!shouldNotify(this.config().get("showNotifications"), kind)) return Promise.resolve(undefined);
    const show = kind === "error" ? vscode.window.showErrorMessage : kind === "warning" ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
    return show(message, ...actions);
  }

  // ---- server lifecycle ----------------------------------------------------------------------

  /** A restart the user asked for: it may install the server's environment. */
  private userRestart(): Promise<void> {
    this.userAsked = true;
    return this.restart();
  }

  /** Stop any running server and start a fresh one; calls are serialised. */
  restart(): Promise<void> {
    this.restartSoon.cancel();
    this.queue = this.queue
      .then(async () => {
        await this.stopClient();
        await this.startClient();
      })
      .catch((error) => {
        this.log.error(`msprof-lsp server failed to start: ${String(error)}`);
        this.showStatus(serverStatusView("failed", String(error)));
      });
    return this.queue;
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.profile = undefined;
    this.clearHeat();
    void this.hotspots.profileChanged(undefined);
    void this.profilePanel.profileChanged(undefined);
    await vscode.commands.executeCommand("setContext", CONTEXT_SERVER_RUNNING, false);
    if (client) {
      try {
        await client.dispose(2000);
      } catch (error) {
        this.log.warn(`Stopping the server: ${String(error)}`);
      }
    }
  }

  /** The Python that runs the server (and the --check task). */
  private async interpreter(): Promise<Interpreter> {
    const folder = this.folder();
    return chooseInterpreter({
      setting: this.config().get<string>("interpreter"),
      pythonExtension: await pythonExtensionCommand(folder?.uri, this.log),
      platform: process.platform,
      workspaceFolder: folder?.uri.fsPath,
      home: os.homedir(),
      env: process.env,
    });
  }

  private async startClient(): Promise<void> {
    const folder = this.folder();
    this.showStatus(serverStatusView("starting"));
    const platform = process.platform;
    let interpreter = await this.interpreter();
    this.log.info(`Python interpreter (${interpreter.source}): ${describeInterpreter(interpreter, platform)}`);
    const check = await runImportCheck(interpreter, { platform, cwd: folder?.uri.fsPath, installTarget: installTarget(this.extensionDir) });
    const wheel = findBundledWheel(this.extensionDir);
    if (!check.ok && check.reason === "missing-package" && interpreter.source !== "setting" && wheel && this.storageDir) {
      // No installation and no setting naming one: the extension's own environment.
      const managed = await this.managedEnvironment(interpreter, wheel, this.storageDir);
      if (!managed) return;
      interpreter = managed;
    } else if (!check.ok) {
      this.log.error(check.message + (check.detail ? `\n${check.detail}` : ""));
      this.showStatus(serverStatusView("failed", check.message));
      void this.offerFix(check.message, check.installCommand);
      return;
    }
    this.serverInterpreter = interpreter;
    const launch = serverLaunch(interpreter);
    const serverOptions: ServerOptions = {
      command: launch.command,
      args: launch.args,
      transport: TransportKind.stdio,
      options: { cwd: folder?.uri.fsPath, env: { ...process.env, PYTHONUNBUFFERED: "1" } },
    };
    const client: LanguageClient = new LanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, this.clientOptions((): LanguageClient => client));
    client.onNotification(NOTIFY_PROFILE_STATUS, (payload: unknown) => this.onProfileStatus(payload));
    client.onDidChangeState((event) => {
      const running = event.newState === State.Running;
      void vscode.commands.executeCommand("setContext", CONTEXT_SERVER_RUNNING, running);
      if (event.newState === State.Stopped && this.client === client) {
        this.profile = undefined;
        this.clearHeat();
        void this.hotspots.profileChanged(undefined);
        void this.profilePanel.profileChanged(undefined);
        this.showStatus(serverStatusView("stopped"));
      }
    });
    this.client = client;
    await client.start();
  }

  private async record(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const doc = editor?.document;
    const outcome = await recordProfile({
      trusted: vscode.workspace.isTrusted,
      offerTrust: async (text) => {
        if ((await this.notify("error", text, MANAGE_TRUST)) === MANAGE_TRUST) await vscode.commands.executeCommand(CMD_MANAGE_TRUST);
      },
      template: this.config(doc?.uri).get<string>(RECORD_SETTING),
      vars: {
        interpreter: await this.interpreter(),
        file: doc?.uri.scheme === "file" ? doc.uri.fsPath : undefined,
        workspaceFolder: this.folder()?.uri.fsPath,
        platform: process.platform,
      },
      save: async () => doc?.save(),
      adopt: () => this.serverCommand(CMD_ADOPT_NEW_PROFILE, []),
      createTerminal: (options) => vscode.window.createTerminal(options),
      notify: (kind, text) => void this.notify(kind, text),
    });
    if ("ran" in outcome) this.log.info(`Recording: ${outcome.ran} (${outcome.baseline ? `baseline ${outcome.baseline}` : "no baseline"})`);
  }

  /** Whether the first-start install may run now: the user asked, a profile is set, or the
   * workspace holds one. Opening a Python file alone never installs anything. */
  private async installWanted(): Promise<boolean> {
    if (this.userAsked) return true;
    if (this.declined) return false;
    if (this.profileFound || this.config().get<string>("profile")) return true;
    if (!this.profiles || !this.folder()) return false;
    const found = await vscode.workspace.findFiles(this.profiles, "**/node_modules/**", 1);
    return found.length > 0;
  }

  /** Until a profile appears: the status says how the install starts, a watcher starts it. */
  private waitForProfile(): void {
    this.showStatus(serverStatusView("notInstalled"));
    this.log.info('msprof-lsp is not installed yet: it installs when a profile appears in the workspace or you run "msprof-lsp: Restart server".');
    if (this.profileWatcher || !this.profiles) return;
    this.profileWatcher = vscode.workspace.createFileSystemWatcher(this.profiles, false, true, true);
    this.disposables.push(
      this.profileWatcher,
      this.profileWatcher.onDidCreate((uri) => {
        this.log.info(`Profile found: ${uri.fsPath}`);
        this.profileFound = true;
        this.restartSoon();
      }),
    );
  }

  /** The managed environment, installed first (with a cancellable progress notification) when needed. */
  private async managedEnvironment(base: Interpreter, wheel: BundledWheel, storageDir: string): Promise<Interpreter | undefined> {
    const platform = process.platform;
    const ready = await readyEnvironment(storageDir, wheel, { platform });
    if (ready) {
      this.log.info(`Using the extension's own environment: ${ready.command}`);
      return ready;
    }
    if (!(await this.installWanted())) {
      this.waitForProfile();
      return undefined;
    }
    this.profileWatcher?.dispose();
    this.profileWatcher = undefined;
    const from = wheel.wheelhouse ? `, offline from ${wheel.wheelhouse}` : "";
    this.log.info(`${describeInterpreter(base, platform)} lacks msprof-lsp: installing ${wheel.path} into the extension's own environment under ${storageDir}${from}`);
    this.showStatus(serverStatusView("starting"));
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "msprof-lsp: installing the server", cancellable: true },
      (progress, token) => {
        const abort = new AbortController();
        const sub = token.onCancellationRequested(() => abort.abort());
        return installManagedEnvironment({
          base,
          wheel,
          storageDir,
          platform,
          env: process.env,
          log: (line) => this.log.info(line),
          progress: (message) => progress.report({ message }),
          signal: abort.signal,
        }).finally(() => sub.dispose());
      },
    );
    if (result.ok) return result.interpreter;
    if (result.step === "cancelled") {
      this.log.info(result.message);
      this.userAsked = false;
      this.declined = true;
      this.showStatus(serverStatusView("notInstalled", result.message));
      return undefined;
    }
    this.log.error(result.message + (result.detail ? `\n${result.detail}` : ""));
    this.showStatus(serverStatusView("failed", result.message));
    void this.offerFix(result.message, result.manualCommand);
    return undefined;
  }

  private async offerFix(message: string, install: string | undefined): Promise<void> {
    const COPY = "Copy command";
    const SETTINGS = "Choose interpreter";
    const LOGS = "Show logs";
    const actions = install ? [COPY, SETTINGS, LOGS] : [SETTINGS, LOGS];
    const choice = await this.notify("error", message, ...actions);
    if (choice === COPY && install) {
      await vscode.env.clipboard.writeText(install);
      void vscode.window.showInformationMessage(`Copied: ${install}. Run it in a terminal, then run "msprof-lsp: Restart server".`);
    } else if (choice === SETTINGS) {
      await vscode.commands.executeCommand("workbench.action.openSettings", `${SECTION}.interpreter`);
    } else if (choice === LOGS) {
      this.log.show();
    }
  }

  private clientOptions(client: () => LanguageClient): LanguageClientOptions {
    return {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
      ],
      outputChannel: this.log,
      traceOutputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: () => this.flatSettings(),
      // Registers workspace/didChangeConfiguration for our section; the middleware below sends
      // the same flat object the server gets everywhere else.
      synchronize: { configurationSection: SECTION },
      middleware: {
        workspace: {
          configuration: async (params, token, next) => {
            const answers = await next(params, token);
            if (answers instanceof ResponseError) return answers;
            const items = params.items as ConfigurationItem[];
            return answerConfiguration(items, Array.isArray(answers) ? answers : [], this.keys, (scope) =>
              this.flatSettings(scope ? vscode.Uri.parse(scope) : undefined),
            );
          },
          didChangeConfiguration: async () => {
            await client().sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: this.flatSettings() } });
          },
        },
        executeCommand: (command, args, next) => this.executeCommand(command, args, next),
      },
    };
  }

  private onConfigurationChange(event: vscode.ConfigurationChangeEvent): void {
    const change = classifyChange((section) => event.affectsConfiguration(section), this.keys);
    if (change.restart) this.restartSoon();
    if (change.gutterHeat) this.refreshHeat();
  }

  // ---- profile status ------------------------------------------------------------------------

  private onProfileStatus(payload: unknown): void {
    const status = parseProfileStatus(payload);
    this.profile = status;
    this.showStatus(profileStatusView(status));
    this.heatCache.clear();
    this.heatGeneration++; // results of lineHeat requests still in flight belong to the old profile
    void this.hotspots.profileChanged(status.state);
    void this.profilePanel.profileChanged(status.state);
    this.log.info(`Profile ${status.state}${status.path ? `: ${status.path}` : ""}${status.message ? ` — ${status.message}` : ""}`);
    if (status.state === "loaded") {
      this.lastProfileError = "";
      this.refreshHeat();
    } else {
      this.clearHeat();
    }
    if (status.state === "error" && status.message !== this.lastProfileError) {
      this.lastProfileError = status.message;
      void this.notify("warning", `msprof-lsp: ${status.message || "the profile could not be read"}`, "Show logs").then((choice) => {
        if (choice) this.log.show();
      });
    }
  }

  private async statusMenu(): Promise<void> {
    const running = this.client?.state === State.Running;
    const rows = statusMenuItems(this.profile, running).map((item) => ({
      label: item.label,
      description: item.description,
      kind: item.separator ? vscode.QuickPickItemKind.Separator : vscode.QuickPickItemKind.Default,
      action: item.action,
    }));
    const pick = await vscode.window.showQuickPick(rows, { title: "msprof-lsp" });
    if (pick?.action) await this.runMenuAction(pick.action);
  }

  private async runMenuAction(action: MenuAction): Promise<void> {
    switch (action.kind) {
      case "selectFolder":
      case "selectFile": {
        const path = await this.pickPath(action.kind === "selectFolder", "Load profile");
        if (path) await this.serverCommand(CMD_SELECT_PROFILE, [path]);
        return;
      }
      case "rank":
        if (this.profile?.path) await this.serverCommand(CMD_SELECT_PROFILE, [this.profile.path, action.rank]);
        return;
      case "reload":
        await this.serverCommand(CMD_RELOAD, []);
        return;
      case "baseline":
        await vscode.commands.executeCommand(CMD_SET_BASELINE);
        return;
      case "hotspots":
        await vscode.commands.executeCommand(CMD_SHOW_HOTSPOTS);
        return;
      case "logs":
        this.log.show();
        return;
      case "restart":
        await this.userRestart();
        return;
    }
  }

  // ---- server commands -----------------------------------------------------------------------

  private async serverCommand(command: string, args: unknown[]): Promise<unknown> {
    const client = this.client;
    if (!client || client.state !== State.Running) {
      void this.notify("error", "msprof-lsp: the server is not running. Run \"msprof-lsp: Restart server\" or see the logs.");
      return undefined;
    }
    try {
      return await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
    } catch (error) {
      this.log.error(`${command} failed: ${String(error)}`);
      void this.notify("error", `msprof-lsp: ${command} failed: ${error instanceof Error ? error.message : String(error)}`);
      return undefined;
    }
  }

  /** For views that refresh on their own: no pop-up when the server is away or the request fails. */
  private async quietRequest(command: string, args: unknown[]): Promise<unknown> {
    const client = this.client;
    if (!client || client.state !== State.Running) return undefined;
    try {
      return await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
    } catch (error) {
      this.log.warn(`${command}: ${String(error)}`);
      return undefined;
    }
  }

  /** Palette and code-lens invocations: ask for what is missing, show what comes back. */
  private async executeCommand(command: string, args: unknown[], next: (command: string, args: unknown[]) => unknown): Promise<unknown> {
    switch (command) {
      case CMD_SELECT_PROFILE:
        if (args.length === 0) {
          const choice = await this.pickKind("Load profile", false);
          if (!choice) return undefined;
          return next(command, [choice.path]);
        }
        break;
      case CMD_SET_BASELINE:
        if (args.length === 0) {
          const choice = await this.pickKind("Set baseline profile", true);
          if (!choice) return undefined;
          return next(command, [choice.path]);
        }
        break;
      case CMD_SHOW_HOTSPOTS: {
        const result = await next(command, args);
        await this.showHotspots(result);
        return result;
      }
      case CMD_SHOW_OPERATORS: {
        const result = await next(command, args);
        const rows = operatorItems(result);
        if (rows.length > 0) {
          const line = typeof args[1] === "number" ? ` at line ${args[1] + 1}` : "";
          await vscode.window.showQuickPick(rows, { title: `msprof-lsp: device operators${line}`, matchOnDescription: true, matchOnDetail: true });
        }
        return result;
      }
    }
    return next(command, args);
  }

  /** Folder, file, or (for the baseline) clearing it; `path: null` clears. */
  private async pickKind(title: string, allowClear: boolean): Promise<{ path: string | null } | undefined> {
    const rows: (vscode.QuickPickItem & { pick: "folder" | "file" | "clear" })[] = [
      { label: "$(folder-opened) Profile folder…", pick: "folder" },
      { label: "$(file) Profile file…", description: "trace_view.json, *.pt.trace.json, *.db", pick: "file" },
    ];
    if (allowClear) rows.push({ label: "$(close) Clear baseline", pick: "clear" });
    const pick = await vscode.window.showQuickPick(rows, { title: `msprof-lsp: ${title}` });
    if (!pick) return undefined;
    if (pick.pick === "clear") return { path: null };
    const path = await this.pickPath(pick.pick === "folder", title);
    return path ? { path } : undefined;
  }

  private async pickPath(folders: boolean, title: string): Promise<string | undefined> {
    const uris = await vscode.window.showOpenDialog({
      canSelectFolders: folders,
      canSelectFiles: !folders,
      canSelectMany: false,
      defaultUri: this.folder()?.uri,
      openLabel: title,
      title: `msprof-lsp: ${title}`,
    });
    return uris?.[0]?.fsPath;
  }

  private async showHotspots(result: unknown): Promise<void> {
    const items = hotspotItems(parseHotspots(result), (path) => vscode.workspace.asRelativePath(path, false));
    if (items.length === 0) {
      void vscode.window.showInformationMessage("msprof-lsp: the profile has no hotspots mapped to source.");
      return;
    }
    const pick = await vscode.window.showQuickPick(
      items.map((item) => ({ label: item.label, detail: item.detail, item })),
      { title: "msprof-lsp: hotspots (share of step time)", matchOnDetail: true },
    );
    if (pick) await openSource(pick.item);
  }

  // ---- gutter heat ---------------------------------------------------------------------------

  private clearHeat(): void {
    this.heatGeneration++;
    this.refreshHeat.cancel();
    for (const editor of vscode.window.visibleTextEditors) {
      for (const type of this.heatTypes) editor.setDecorations(type, []);
    }
  }

  private async drawHeat(): Promise<void> {
    const client = this.client;
    const enabled = this.config().get<boolean>("gutterHeat", true);
    if (!enabled || !client || client.state !== State.Running || this.profile?.state !== "loaded") {
      this.clearHeat();
      return;
    }
    const generation = this.heatGeneration;
    for (const editor of vscode.window.visibleTextEditors) {
      const doc = editor.document;
      if (doc.languageId !== "python" || doc.uri.scheme !== "file") continue;
      const key = doc.uri.toString();
      let entries = this.heatCache.get(key);
      if (!entries) {
        try {
          entries = parseLineHeat(await client.sendRequest(ExecuteCommandRequest.type, { command: CMD_LINE_HEAT, arguments: [key] }));
        } catch (error) {
          this.log.warn(`${CMD_LINE_HEAT} ${key}: ${String(error)}`);
          entries = [];
        }
        if (generation !== this.heatGeneration) return; // the profile changed meanwhile
        this.heatCache.set(key, entries);
      }
      const marks = heatMarks(entries, doc.lineCount);
      marks.forEach((list, bucket) => {
        editor.setDecorations(
          this.heatTypes[bucket],
          list.map((mark) => ({ range: new vscode.Range(mark.line, 0, mark.line, 0), hoverMessage: mark.hover })),
        );
      });
    }
  }

  async dispose(): Promise<void> {
    this.restartSoon.cancel();
    this.refreshHeat.cancel();
    await this.queue;
    await this.stopClient();
    for (const d of this.disposables) d.dispose();
  }
}

let current: Extension | undefined;

export function activate(context: vscode.ExtensionContext): void {
  current = new Extension(context);
  current.activate();
}

export async function deactivate(): Promise<void> {
  const extension = current;
  current = undefined;
  await extension?.dispose();
}
