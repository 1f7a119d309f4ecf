// Which Python runs the server, how to check that it can, and what to tell the user when it cannot.
// Plain module (no vscode import): the extension passes in what it read from the editor.

import { execFile } from "node:child_process";

import { PYTHON_FLAGS, SERVER_MODULE } from "./constants";

/** `managed`: the extension's own environment under its global storage (bootstrap.ts). */
export type InterpreterSource = "setting" | "python-extension" | "default" | "managed";

export interface Interpreter {
  /** Executable to spawn. */
  command: string;
  /** Arguments that come before ours (e.g. `conda run -n env python`). */
  args: string[];
  source: InterpreterSource;
}

export interface InterpreterInputs {
  /** Raw value of `msprof-lsp.interpreter` (may hold `${workspaceFolder}`, `~`, `${env:NAME}`). */
  setting?: string;
  /** The Python extension's command for the active environment, if that extension is installed. */
  pythonExtension?: readonly string[];
  platform: string;
  workspaceFolder?: string;
  home?: string;
  env?: Readonly<Record<string, string | undefined>>;
}

/** Expand the variables VS Code users expect in path settings. */
export function expandVariables(
  value: string,
  vars: { workspaceFolder?: string; home?: string; env?: Readonly<Record<string, string | undefined>> },
): string {
  let out = value.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (whole, name: string, envName?: string) => {
    if (name === "workspaceFolder") return vars.workspaceFolder ?? whole;
    if (name === "userHome") return vars.home ?? whole;
    return vars.env?.[envName ?? ""] ?? "";
  });
  if (vars.home && (out === "~" || out.startsWith("~/") || out.startsWith("~\\"))) {
    out = vars.home + out.slice(1);
  }
  return out;
}

/** Setting > the Python extension's active environment > `python3` (`python` on Windows). */
export function chooseInterpreter(inputs: InterpreterInputs): Interpreter {
  const setting = (inputs.setting ?? "").trim();
  if (setting) {
    return { command: expandVariables(setting, inputs), args: [], source: "setting" };
  }
  const fromExtension = (inputs.pythonExtension ?? []).filter((part) => part.length > 0);
  if (fromExtension.length > 0) {
    return { command: fromExtension[0], args: fromExtension.slice(1), source: "python-extension" };
  }
  return { command: inputs.platform === "win32" ? "python" : "python3", args: [], source: "default" };
}

/** Quote one argument for the user's shell so a copied command runs as shown. */
export function quoteArg(arg: string, platform: string): string {
  if (arg !== "" && /^[A-Za-z0-9_\-+=.,/:@%\\]+$/.test(arg) && !(platform !== "win32" && arg.includes("\\"))) {
    return arg;
  }
  if (platform === "win32") {
    return `"${arg.replace(/"/g, '\\"')}"`;
  }
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

export function commandLine(parts: readonly string[], platform: string): string {
  return parts.map((part) => quoteArg(part, platform)).join(" ");
}

/** The interpreter as the user would type it. */
export function describeInterpreter(interp: Interpreter, platform: string): string {
  return commandLine([interp.command, ...interp.args], platform);
}

/** The exact command that installs the server for this interpreter from `target`: the wheel the
 * .vsix carries, or a clone of the repository (no package index has msprof-lsp). */
export function installCommand(interp: Interpreter, platform: string, target: string): string {
  return commandLine([interp.command, ...interp.args, "-m", "pip", "install", target], platform);
}

export interface Launch {
  command: string;
  args: string[];
}

/** How the server is started: `<python> -I -m msprof_lsp.server` over stdio (cwd never on sys.path). */
export function serverLaunch(interp: Interpreter): Launch {
  return { command: interp.command, args: [...interp.args, ...PYTHON_FLAGS, "-m", SERVER_MODULE] };
}

/** The import check runs with the server's flags: it must find what the server will find, and
 * nothing from the workspace. */
export function importCheckLaunch(interp: Interpreter): Launch {
  return { command: interp.command, args: [...interp.args, ...PYTHON_FLAGS, "-c", `import ${SERVER_MODULE}`] };
}

export interface CheckOutcome {
  /** Set when the process could not be started at all (ENOENT, EACCES, ...). */
  spawnError?: { code?: string; message: string };
  exitCode: number | null;
  stderr: string;
  timedOut?: boolean;
}

export type CheckResult =
  | { ok: true }
  | {
      ok: false;
      reason: "not-found" | "missing-package" | "broken";
      /** One sentence for the notification. */
      message: string;
      /** The command that fixes it, offered with a "Copy command" action. */
      installCommand?: string;
      /** The last lines of stderr, for the log. */
      detail: string;
    };

const MISSING_PACKAGE = /No module named '?msprof_lsp(\.[\w.]+)?'?/;

function lastLines(text: string, count: number): string {
  return text.trim().split(/\r?\n/).slice(-count).join("\n");
}

/** Turn the result of `<python> -c "import msprof_lsp.server"` into what the user sees;
 * `target` is what pip should install (installTarget in bootstrap.ts), if there is one. */
export function classifyImportCheck(interp: Interpreter, outcome: CheckOutcome, platform: string, target?: string): CheckResult {
  const shown = describeInterpreter(interp, platform);
  const install = target ? installCommand(interp, platform, target) : undefined;
  const howTo = install ? `Install it with: ${install}` : "Install it from a clone of the msprof-lsp repository: <python> -m pip install <clone>";
  if (outcome.spawnError) {
    const why = outcome.spawnError.code === "ENOENT" ? "was not found" : `could not be started (${outcome.spawnError.message})`;
    return {
      ok: false,
      reason: "not-found",
      message: `msprof-lsp: the Python interpreter ${shown} ${why}. Set "msprof-lsp.interpreter" to a Python 3.10+ that has msprof-lsp installed.`,
      detail: outcome.spawnError.message,
    };
  }
  if (outcome.timedOut) {
    return {
      ok: false,
      reason: "broken",
      message: `msprof-lsp: ${shown} did not finish importing ${SERVER_MODULE}; see the msprof-lsp log.`,
      detail: lastLines(outcome.stderr, 20),
    };
  }
  if (outcome.exitCode === 0) {
    return { ok: true };
  }
  const detail = lastLines(outcome.stderr, 20);
  if (MISSING_PACKAGE.test(outcome.stderr)) {
    return {
      ok: false,
      reason: "missing-package",
      message:
        `msprof-lsp is not installed for ${shown}. ${howTo} (into that environment itself: the server starts isolated, with -I, so user site-packages and PYTHONPATH are not searched)` +
        (interp.source === "setting" ? `, or clear "msprof-lsp.interpreter" to let the extension install its own environment` : ""),
      installCommand: install,
      detail,
    };
  }
  const cause = lastLines(outcome.stderr, 1) || `exit status ${outcome.exitCode}`;
  return {
    ok: false,
    reason: "broken",
    message: `msprof-lsp is installed for ${shown} but fails to import (${cause}). Re${howTo.charAt(0).toLowerCase()}${howTo.slice(1)}`,
    installCommand: install,
    detail,
  };
}

/** Run the import check; never rejects. */
export function runImportCheck(
  interp: Interpreter,
  options: { platform: string; cwd?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv; installTarget?: string },
): Promise<CheckResult> {
  const launch = importCheckLaunch(interp);
  return new Promise((resolve) => {
    execFile(
      launch.command,
      launch.args,
      { cwd: options.cwd, env: options.env, timeout: options.timeoutMs ?? 30000, windowsHide: true, encoding: "utf8" },
      (error, _stdout, stderr) => {
        const err = error as (NodeJS.ErrnoException & { killed?: boolean; code?: string | number }) | null;
        let outcome: CheckOutcome;
        if (err && typeof err.code === "string") {
          outcome = { spawnError: { code: err.code, message: err.message }, exitCode: null, stderr: String(stderr ?? "") };
        } else {
          outcome = {
            exitCode: err ? (typeof err.code === "number" ? err.code : null) : 0,
            stderr: String(stderr ?? ""),
            timedOut: Boolean(err?.killed),
          };
        }
        resolve(classifyImportCheck(interp, outcome, options.platform, options.installTarget));
      },
    );
  });
}
