// The `msprof-lsp` task type: what a task definition in tasks.json means as a `--check` command
// line. Plain module (no vscode import); tasks.ts turns it into a vscode.Task.

import { PYTHON_FLAGS, SERVER_MODULE } from "./constants";
import { type Interpreter } from "./interpreter";

export const TASK_TYPE = "msprof-lsp";
/** The problem matcher contributed in package.json (`contributes.problemMatchers`), by reference. */
export const PROBLEM_MATCHER = "$msprof-lsp";
export const FAIL_ON = ["error", "warning", "info", "hint", "never"] as const;

/** The task definition's fields (`contributes.taskDefinitions` declares the same properties). */
export interface CheckTaskDefinition {
  type: string;
  /** Source folders or files to check, relative to the workspace folder (default: the folder). */
  paths?: string[];
  profile?: string;
  baseline?: string;
  rank?: number;
  select?: string[];
  ignore?: string[];
  failOn?: (typeof FAIL_ON)[number];
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string" && v.length > 0) : [];
}

/**
 * `--check` arguments for a definition. The concise format: one line per finding, which is what
 * a problem matcher can read (it sees one line at a time; text's wrapped messages would end its
 * loop). Unknown or mistyped fields are left out, so the CLI's defaults apply.
 */
export function checkArgs(def: CheckTaskDefinition): string[] {
  const args = ["--check", "--format", "concise", "--quiet"];
  if (typeof def.profile === "string" && def.profile) args.push("--profile", def.profile);
  if (typeof def.baseline === "string" && def.baseline) args.push("--baseline", def.baseline);
  if (typeof def.rank === "number" && Number.isInteger(def.rank) && def.rank >= 0) args.push("--rank", String(def.rank));
  const select = strings(def.select);
  if (select.length) args.push("--select", select.join(","));
  const ignore = strings(def.ignore);
  if (ignore.length) args.push("--ignore", ignore.join(","));
  if (typeof def.failOn === "string" && (FAIL_ON as readonly string[]).includes(def.failOn)) args.push("--fail-on", def.failOn);
  // "--" keeps a path that starts with "-" a path.
  const paths = strings(def.paths);
  return paths.length ? [...args, "--", ...paths] : args;
}

/** The process to run: the configured interpreter, isolated like the server, on the CLI entry. */
export function checkProcess(interp: Interpreter, def: CheckTaskDefinition): { command: string; args: string[] } {
  return { command: interp.command, args: [...interp.args, ...PYTHON_FLAGS, "-m", SERVER_MODULE, ...checkArgs(def)] };
}

/** The task's name in the Run Task list. */
export function taskName(def: CheckTaskDefinition): string {
  const paths = strings(def.paths);
  return paths.length ? `check ${paths.join(" ")}` : "check";
}
