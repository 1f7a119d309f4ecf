// "msprof-lsp: Record a profile": run the user's training command in a terminal with the variable
// the record action's profiling block reads, after telling the server that a recording starts
// (msprof-lsp.adoptNewProfile: the next new profile becomes current, the current one its baseline).
// It runs the workspace's code, so only on the user's request and only in a trusted workspace.
// Plain module: the extension passes in the editor calls it needs, so tests drive it without VS Code.

import { type Interpreter, commandLine, quoteArg } from "./interpreter";

export const CMD_RECORD_PROFILE = "msprof-lsp.recordProfile";
/** Server command, as in server/protocol.py. */
export const CMD_ADOPT_NEW_PROFILE = "msprof-lsp.adoptNewProfile";
/** What hints/fixes/profiling.py's block checks; set, it records into msprof_profiles/ beside the script. */
export const PROFILE_ENV = "MSPROF_LSP_PROFILE";
export const RECORD_SETTING = "recordCommand";
export const DEFAULT_RECORD_COMMAND = "${python} ${file}";
export const TERMINAL_NAME = "msprof-lsp: record";
/** VS Code's own command that opens the Workspace Trust editor. */
export const CMD_MANAGE_TRUST = "workbench.trust.manage";
export const MANAGE_TRUST = "Manage Workspace Trust";
export const UNTRUSTED_MESSAGE =
  "msprof-lsp: this workspace is not trusted, so Record a profile will not run its training script. Trust the workspace to record.";

export interface RecordVars {
  interpreter: Interpreter;
  /** The active editor's file (undefined: none, or not a file on disk). */
  file?: string;
  workspaceFolder?: string;
  platform: string;
}

/**
 * The command line to run: the setting with `${python}` (the interpreter the extension uses, as
 * the user would type it), `${file}`, `${fileDirname}` and `${workspaceFolder}` replaced, each
 * quoted for the shell. An error message instead when a variable has nothing to stand for.
 */
export function recordCommandLine(template: string | undefined, vars: RecordVars): { command: string } | { error: string } {
  const text = (template ?? "").trim() || DEFAULT_RECORD_COMMAND;
  const dir = vars.file ? vars.file.replace(/[\\/][^\\/]*$/, "") : undefined;
  const values: Record<string, string | undefined> = {
    python: commandLine([vars.interpreter.command, ...vars.interpreter.args], vars.platform),
    file: vars.file && quoteArg(vars.file, vars.platform),
    fileDirname: dir && quoteArg(dir, vars.platform),
    workspaceFolder: vars.workspaceFolder && quoteArg(vars.workspaceFolder, vars.platform),
  };
  let missing = "";
  const command = text.replace(/\$\{(python|file|fileDirname|workspaceFolder)\}/g, (_whole, name: string) => {
    const value = values[name];
    if (value === undefined) missing = missing || name;
    return value ?? "";
  });
  if (missing === "file" || missing === "fileDirname") {
    return { error: "msprof-lsp: open the training script first (the record command uses ${file})." };
  }
  if (missing) return { error: "msprof-lsp: the record command uses ${workspaceFolder}, but no folder is open." };
  return { command };
}

export interface TerminalLike {
  show(preserveFocus?: boolean): void;
  sendText(text: string, addNewLine?: boolean): void;
}

export interface RecordDeps {
  /** vscode.workspace.isTrusted: recording runs the workspace's own code, so only in a trusted one. */
  trusted: boolean;
  /** Show the refusal with a "Manage Workspace Trust" action (and open that editor if taken). */
  offerTrust(text: string): Promise<unknown>;
  template: string | undefined;
  vars: RecordVars;
  /** Save the active file (the script runs from disk). */
  save(): Promise<unknown>;
  /** Run msprof-lsp.adoptNewProfile on the server; undefined when the server is not running. */
  adopt(): Promise<unknown>;
  createTerminal(options: { name: string; cwd?: string; env: Record<string, string> }): TerminalLike;
  notify(kind: "error" | "info", text: string): void;
}

export type RecordOutcome = { ran: string; baseline: string | null } | { error: string };

/**
 * Save, tell the server, run the command in a fresh terminal with the variable set. In an
 * untrusted workspace nothing at all: no save, no server command, no terminal.
 */
export async function recordProfile(deps: RecordDeps): Promise<RecordOutcome> {
  if (!deps.trusted) {
    await deps.offerTrust(UNTRUSTED_MESSAGE);
    return { error: UNTRUSTED_MESSAGE };
  }
  const line = recordCommandLine(deps.template, deps.vars);
  if ("error" in line) {
    deps.notify("error", line.error);
    return line;
  }
  await deps.save();
  const adopted = await deps.adopt();
  if (adopted === undefined) {
    const error = "msprof-lsp: the server is not running, so the new profile would not be compared; not recording.";
    deps.notify("error", error);
    return { error };
  }
  const current = (adopted as { current?: unknown }).current;
  const baseline = typeof current === "string" ? current : null;
  const terminal = deps.createTerminal({ name: TERMINAL_NAME, cwd: deps.vars.workspaceFolder, env: { [PROFILE_ENV]: "1" } });
  terminal.show();
  terminal.sendText(line.command);
  deps.notify(
    "info",
    baseline
      ? `msprof-lsp: recording; the new profile will be compared with ${baseline}.`
      : "msprof-lsp: recording; the new profile loads when the run ends.",
  );
  return { ran: line.command, baseline };
}
