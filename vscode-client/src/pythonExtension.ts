// The Python extension's active interpreter, when `ms-python.python` is installed. Every call is
// guarded: its API changes between releases and it may fail to activate; we then fall back.

import * as vscode from "vscode";

const PYTHON_EXTENSION_ID = "ms-python.python";

/** The parts of the Python extension API we use (typed here: no dependency on its npm package). */
interface PythonApi {
  ready?: Promise<void>;
  environments?: {
    getActiveEnvironmentPath?(resource?: vscode.Uri): { id?: string; path?: string } | undefined;
    resolveEnvironment?(env: unknown): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand?: string[] } | undefined;
    onDidChangeExecutionDetails?: vscode.Event<unknown>;
  };
}

async function pythonApi(log: vscode.LogOutputChannel): Promise<PythonApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonApi>(PYTHON_EXTENSION_ID);
  if (!extension) return undefined;
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    if (api?.ready) await api.ready;
    return api;
  } catch (error) {
    log.warn(`Python extension API unavailable: ${String(error)}`);
    return undefined;
  }
}

/** The command the Python extension would run Python with, or undefined. */
export async function pythonExtensionCommand(resource: vscode.Uri | undefined, log: vscode.LogOutputChannel): Promise<string[] | undefined> {
  const api = await pythonApi(log);
  if (!api) return undefined;
  try {
    const active = api.environments?.getActiveEnvironmentPath?.(resource);
    if (active && api.environments?.resolveEnvironment) {
      const env = await api.environments.resolveEnvironment(active);
      const executable = env?.executable?.uri?.fsPath;
      if (executable) return [executable];
    }
  } catch (error) {
    log.warn(`Python extension: cannot resolve the active environment: ${String(error)}`);
  }
  try {
    const command = api.settings?.getExecutionDetails?.(resource)?.execCommand;
    if (Array.isArray(command) && command.length > 0 && command.every((part) => typeof part === "string")) return command;
  } catch (error) {
    log.warn(`Python extension: cannot read execution details: ${String(error)}`);
  }
  return undefined;
}

/** Subscribe to interpreter changes in the Python extension (if any). */
export async function onPythonInterpreterChange(listener: () => void, log: vscode.LogOutputChannel): Promise<vscode.Disposable[]> {
  const api = await pythonApi(log);
  const subscriptions: vscode.Disposable[] = [];
  try {
    const event = api?.environments?.onDidChangeActiveEnvironmentPath ?? api?.settings?.onDidChangeExecutionDetails;
    if (event) subscriptions.push(event(() => listener()));
  } catch (error) {
    log.warn(`Python extension: cannot watch interpreter changes: ${String(error)}`);
  }
  return subscriptions;
}
