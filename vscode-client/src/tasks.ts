// The `msprof-lsp` task provider: a "check" task per workspace folder that runs `--check` with the
// interpreter the server uses, its output read by the `$msprof-lsp` problem matcher.

import * as vscode from "vscode";

import { type CheckTaskDefinition, checkProcess, PROBLEM_MATCHER, TASK_TYPE, taskName } from "./checkTask";
import { type Interpreter } from "./interpreter";

export class CheckTaskProvider implements vscode.TaskProvider {
  constructor(private readonly interpreter: () => Promise<Interpreter>) {}

  async provideTasks(): Promise<vscode.Task[]> {
    const folders = vscode.workspace.workspaceFolders ?? [];
    const tasks: vscode.Task[] = [];
    for (const folder of folders) tasks.push(await this.build({ type: TASK_TYPE }, folder));
    return tasks;
  }

  /** A task from tasks.json: same definition object (VS Code matches them by identity). */
  async resolveTask(task: vscode.Task): Promise<vscode.Task | undefined> {
    const def = task.definition as CheckTaskDefinition;
    if (def.type !== TASK_TYPE) return undefined;
    const scope = typeof task.scope === "object" ? task.scope : vscode.workspace.workspaceFolders?.[0];
    return scope ? this.build(def, scope, task) : undefined;
  }

  private async build(def: CheckTaskDefinition, folder: vscode.WorkspaceFolder, from?: vscode.Task): Promise<vscode.Task> {
    const run = checkProcess(await this.interpreter(), def);
    const execution = new vscode.ProcessExecution(run.command, run.args, { cwd: folder.uri.fsPath });
    const task = new vscode.Task(from?.definition ?? def, folder, from?.name ?? taskName(def), TASK_TYPE, execution, [PROBLEM_MATCHER]);
    task.group = vscode.TaskGroup.Test;
    task.presentationOptions = { reveal: vscode.TaskRevealKind.Silent, clear: true };
    return task;
  }
}

export function registerCheckTasks(interpreter: () => Promise<Interpreter>): vscode.Disposable[] {
  return [vscode.tasks.registerTaskProvider(TASK_TYPE, new CheckTaskProvider(interpreter))];
}
