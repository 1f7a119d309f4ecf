// First start without an installation: when the chosen Python lacks msprof-lsp, the extension
// makes its own virtual environment under its global storage and installs the wheel the .vsix
// carries. A platform .vsix also carries every dependency's wheels (bundled/wheels/, for CPython
// 3.10-3.12): pip then installs with --no-index from that folder and needs no network. The
// universal .vsix has no such folder: the dependencies come from the user's own pip configuration
// (pip.conf, PIP_INDEX_URL). Plain module (no vscode import): the extension passes in the storage
// folder, a log, a progress callback and a cancellation signal; a cancelled install removes the
// environment it was making, so no half environment is ever used.
//
// Never runs workspace code: every Python is started with the client's flags (-I) and with the
// storage folder as its working directory, and the location comes only from VS Code's global
// storage, never from a setting.

import { spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";

import { BUNDLED_DIR, BUNDLED_WHEELS_DIR, DISTRIBUTION, MIN_PYTHON, PYTHON_FLAGS, SERVER_MODULE } from "./constants";
import { commandLine, describeInterpreter, type Interpreter } from "./interpreter";

export interface BundledWheel {
  path: string;
  version: string;
  /** The platform package's folder of dependency wheels (installed with --no-index), if any. */
  wheelhouse?: string;
}

const WHEEL_NAME = /^msprof_lsp-([^-]+)-py3-none-any\.whl$/;

/** The one msprof-lsp wheel in the extension's bundled/ folder, if the build put it there. */
export function findBundledWheel(extensionDir: string): BundledWheel | undefined {
  let names: string[];
  try {
    names = readdirSync(join(extensionDir, BUNDLED_DIR));
  } catch {
    return undefined;
  }
  const wheels = names.filter((name) => WHEEL_NAME.test(name));
  if (wheels.length !== 1) return undefined;
  const wheelhouse = join(extensionDir, BUNDLED_DIR, BUNDLED_WHEELS_DIR);
  let offline = false;
  try {
    offline = readdirSync(wheelhouse).some((name) => name.endsWith(".whl"));
  } catch {
    // the universal package: no dependency wheels
  }
  return { path: join(extensionDir, BUNDLED_DIR, wheels[0]), version: WHEEL_NAME.exec(wheels[0])![1], ...(offline ? { wheelhouse } : {}) };
}

/** pip's arguments after `install`: offline from the bundled wheels when the package has them. */
export function pipInstallArgs(wheel: BundledWheel): string[] {
  return wheel.wheelhouse ? ["--no-index", "--find-links", wheel.wheelhouse, wheel.path] : [wheel.path];
}

/** What `pip install` is given for a Python that lacks msprof-lsp: the bundled wheel, else (the
 * extension run from a checkout's vscode-client/) the repository itself. */
export function installTarget(extensionDir: string): string | undefined {
  const wheel = findBundledWheel(extensionDir);
  if (wheel) return wheel.path;
  const repo = dirname(extensionDir);
  return existsSync(join(repo, "pyproject.toml")) && existsSync(join(repo, "server", "__main__.py")) ? repo : undefined;
}

export interface ManagedPaths {
  venv: string;
  python: string;
  lock: string;
}

export function managedPaths(storageDir: string, platform: string): ManagedPaths {
  const venv = join(storageDir, "venv");
  return {
    venv,
    python: platform === "win32" ? join(venv, "Scripts", "python.exe") : join(venv, "bin", "python"),
    lock: join(storageDir, "install.lock"),
  };
}

interface RunResult {
  code: number | null;
  stdout: string;
  /** stdout and stderr interleaved, last lines only. */
  output: string;
  spawnError?: string;
  timedOut: boolean;
  cancelled: boolean;
}

const KEEP_LINES = 200;

function run(
  command: string,
  args: readonly string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs: number; onLine?: (line: string) => void; signal?: AbortSignal },
): Promise<RunResult> {
  return new Promise((resolve) => {
    const lines: string[] = [];
    let stdout = "";
    let partial = "";
    const take = (chunk: Buffer, isStdout: boolean) => {
      const text = chunk.toString("utf8");
      if (isStdout) stdout += text;
      const parts = (partial + text).split(/\r?\n/);
      partial = parts.pop() ?? "";
      for (const line of parts) {
        lines.push(line);
        if (lines.length > KEEP_LINES) lines.shift();
        options.onLine?.(line);
      }
    };
    let child;
    try {
      child = spawn(command, [...args], { cwd: options.cwd, env: options.env, windowsHide: true, stdio: ["ignore", "pipe", "pipe"] });
    } catch (error) {
      resolve({ code: null, stdout: "", output: "", spawnError: String(error), timedOut: false, cancelled: false });
      return;
    }
    let timedOut = false;
    let cancelled = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill();
    }, options.timeoutMs);
    const onAbort = () => {
      cancelled = true;
      child.kill();
    };
    if (options.signal?.aborted) onAbort();
    else options.signal?.addEventListener("abort", onAbort, { once: true });
    const done = () => {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
    };
    child.stdout.on("data", (c: Buffer) => take(c, true));
    child.stderr.on("data", (c: Buffer) => take(c, false));
    child.on("error", (error) => {
      done();
      resolve({ code: null, stdout, output: lines.join("\n"), spawnError: error.message, timedOut, cancelled });
    });
    child.on("close", (code) => {
      done();
      if (partial) {
        lines.push(partial);
        options.onLine?.(partial);
      }
      resolve({ code, stdout, output: lines.join("\n"), timedOut, cancelled });
    });
  });
}

const VERSION_PROBE = `import importlib.metadata as m, ${SERVER_MODULE}; print(m.version(${JSON.stringify(DISTRIBUTION)}))`;

/** The msprof-lsp version the environment's Python imports, or undefined when it cannot. */
async function importedVersion(python: string, cwd: string, env?: NodeJS.ProcessEnv): Promise<string | undefined> {
  if (!existsSync(python)) return undefined;
  const result = await run(python, [...PYTHON_FLAGS, "-c", VERSION_PROBE], { cwd, env, timeoutMs: 60000 });
  return result.code === 0 ? result.stdout.trim() : undefined;
}

function managedInterpreter(paths: ManagedPaths): Interpreter {
  return { command: paths.python, args: [], source: "managed" };
}

/** The managed environment when it already holds the bundled version (the usual start). */
export async function readyEnvironment(storageDir: string, wheel: BundledWheel, options: { platform: string; env?: NodeJS.ProcessEnv }): Promise<Interpreter | undefined> {
  const paths = managedPaths(storageDir, options.platform);
  if (!existsSync(storageDir)) return undefined;
  return (await importedVersion(paths.python, storageDir, options.env)) === wheel.version ? managedInterpreter(paths) : undefined;
}

export type BootstrapStep = "python" | "venv" | "pip" | "check" | "lock" | "cancelled";

export type BootstrapResult =
  | { ok: true; interpreter: Interpreter; installed: boolean }
  | {
      ok: false;
      step: BootstrapStep;
      /** One paragraph for the notification: what failed, what to do. */
      message: string;
      /** The last lines of the failing command's output (the whole of it went to the log). */
      detail: string;
      /** What the user can run by hand. */
      manualCommand: string;
    };

export interface BootstrapOptions {
  /** The Python the environment is made from (the one that lacked msprof-lsp). */
  base: Interpreter;
  wheel: BundledWheel;
  /** The extension's global storage folder (context.globalStorageUri), nothing else. */
  storageDir: string;
  platform: string;
  env?: NodeJS.ProcessEnv;
  log(line: string): void;
  progress?(message: string): void;
  /** Aborted when the user cancels the progress notification: the running Python is killed. */
  signal?: AbortSignal;
  timeoutMs?: { venv?: number; pip?: number; lockWait?: number };
}

// pip's own wording when the index cannot be reached or has no matching distribution.
const OFFLINE =
  /Failed to establish a new connection|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused|Could not fetch URL|No matching distribution found|Could not find a version that satisfies|Max retries exceeded|timed out/i;

/** A lock older than this is left over from a window that died while installing. */
const STALE_LOCK_MS = 20 * 60 * 1000;

async function acquireLock(path: string, waitMs: number, log: (line: string) => void): Promise<(() => void) | undefined> {
  const start = Date.now();
  let told = false;
  for (;;) {
    try {
      closeSync(openSync(path, "wx"));
      return () => rmSync(path, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    let age = 0;
    try {
      age = Date.now() - statSync(path).mtimeMs;
    } catch {
      continue; // released meanwhile
    }
    if (age > STALE_LOCK_MS) {
      rmSync(path, { force: true });
      continue;
    }
    if (Date.now() - start > waitMs) return undefined;
    if (!told) {
      log(`Another window is installing the server's environment (${path}); waiting for it.`);
      told = true;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

function lastLine(text: string): string {
  return text.trim().split(/\r?\n/).filter((l) => l.trim()).slice(-1)[0]?.trim() ?? "";
}

function lastLines(text: string, count: number): string {
  return text.trim().split(/\r?\n/).slice(-count).join("\n");
}

/** Create (or repair, or upgrade) the managed environment and install the bundled wheel in it. */
export async function installManagedEnvironment(options: BootstrapOptions): Promise<BootstrapResult> {
  const { base, wheel, storageDir, platform, env, log } = options;
  const paths = managedPaths(storageDir, platform);
  const shown = describeInterpreter(base, platform);
  const manualCommand = `${commandLine([base.command, ...base.args, "-m", "venv", paths.venv], platform)} && ${commandLine([paths.python, "-m", "pip", "install", ...pipInstallArgs(wheel)], platform)}`;
  const tail = ` Run it by hand: ${manualCommand} — or set "msprof-lsp.interpreter" to a Python that has msprof-lsp installed. The full output is in the msprof-lsp log.`;
  const fail = (step: BootstrapStep, what: string, output = ""): BootstrapResult => ({
    ok: false,
    step,
    message: `msprof-lsp: could not install the server into its own environment: ${what}.${tail}`,
    detail: lastLines(output, 20),
    manualCommand,
  });
  const logLine = (line: string) => {
    if (line.trim()) log(line);
  };
  const signal = options.signal;
  // Whatever the cancelled step left (a half venv, a half upgrade) is removed, not reused.
  const cancelled = (): BootstrapResult => {
    rmSync(paths.venv, { recursive: true, force: true });
    log(`Install cancelled; removed ${paths.venv}.`);
    return { ok: false, step: "cancelled", message: "msprof-lsp: the server's install was cancelled. Run \"msprof-lsp: Restart server\" to install it.", detail: "", manualCommand };
  };

  mkdirSync(storageDir, { recursive: true });
  const release = await acquireLock(paths.lock, options.timeoutMs?.lockWait ?? STALE_LOCK_MS, log);
  if (!release) return fail("lock", `another window has been installing it for too long (${paths.lock})`);
  try {
    // Another window may have finished while this one waited for the lock.
    if ((await importedVersion(paths.python, storageDir, env)) === wheel.version) {
      return { ok: true, interpreter: managedInterpreter(paths), installed: false };
    }

    options.progress?.(`checking ${shown}`);
    const probe = await run(base.command, [...base.args, ...PYTHON_FLAGS, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], {
      cwd: storageDir,
      env,
      timeoutMs: 60000,
    });
    if (probe.code !== 0) return fail("python", `${shown} could not be run (${probe.spawnError ?? (lastLine(probe.output) || `exit status ${probe.code}`)})`, probe.output);
    const [major, minor] = probe.stdout.trim().split(".").map(Number);
    if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
      return fail("python", `msprof-lsp needs Python ${MIN_PYTHON.join(".")} or newer and ${shown} is Python ${probe.stdout.trim()}`);
    }

    // An environment whose Python still runs is kept (pip upgrades the package in it); anything
    // else left there (a half-made environment, one from a removed Python) is made anew.
    const usable = existsSync(paths.python) && (await run(paths.python, [...PYTHON_FLAGS, "-c", "import pip"], { cwd: storageDir, env, timeoutMs: 60000 })).code === 0;
    if (signal?.aborted) return cancelled();
    if (!usable) {
      rmSync(paths.venv, { recursive: true, force: true });
      options.progress?.("creating its environment");
      log(`Creating the server's environment: ${commandLine([base.command, ...base.args, ...PYTHON_FLAGS, "-m", "venv", paths.venv], platform)}`);
      const venv = await run(base.command, [...base.args, ...PYTHON_FLAGS, "-m", "venv", paths.venv], {
        cwd: storageDir,
        env,
        timeoutMs: options.timeoutMs?.venv ?? 5 * 60 * 1000,
        onLine: logLine,
        signal,
      });
      if (venv.cancelled || signal?.aborted) return cancelled();
      if (venv.code !== 0 || !existsSync(paths.python)) {
        const hint = /ensurepip|venv/.test(venv.output) && platform === "linux" ? "; on Debian and Ubuntu the python3-venv package provides it" : "";
        return fail("venv", `${shown} -m venv failed (${venv.spawnError ?? (lastLine(venv.output) || `exit status ${venv.code}`)}${hint})`, venv.output);
      }
    }

    options.progress?.(`installing msprof-lsp ${wheel.version} and its dependencies`);
    const pipArgs = [...PYTHON_FLAGS, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", ...pipInstallArgs(wheel)];
    log(`Installing: ${commandLine([paths.python, ...pipArgs], platform)}`);
    const pip = await run(paths.python, pipArgs, { cwd: storageDir, env, timeoutMs: options.timeoutMs?.pip ?? 10 * 60 * 1000, onLine: logLine, signal });
    if (pip.cancelled || signal?.aborted) return cancelled();
    if (pip.code !== 0) {
      const why = pip.timedOut
        ? "pip did not finish in time"
        : wheel.wheelhouse
          ? `pip could not install from the wheels this package carries (${lastLine(pip.output) || `exit status ${pip.code}`}); they are for CPython 3.10-3.12 on one platform: use the .vsix for this machine's platform, or one of those Pythons`
          : OFFLINE.test(pip.output)
            ? "pip could not get the dependencies from your package index (offline, or the index does not have them; pip reads pip.conf and PIP_INDEX_URL)"
            : `pip failed (${pip.spawnError ?? (lastLine(pip.output) || `exit status ${pip.code}`)})`;
      return fail("pip", why, pip.output);
    }

    const version = await importedVersion(paths.python, storageDir, env);
    if (version !== wheel.version) {
      return fail("check", `after the install the environment imports ${version ? `msprof-lsp ${version}` : "no msprof-lsp"}, not ${wheel.version}`);
    }
    log(`msprof-lsp ${version} is installed in ${paths.venv}.`);
    return { ok: true, interpreter: managedInterpreter(paths), installed: true };
  } finally {
    release();
  }
}

/** One glob for the profiles whose presence activates the extension (the manifest's
 * `workspaceContains:` events): finding one is what allows the first-start install. */
export function profileGlob(activationEvents: readonly string[]): string | undefined {
  const globs = activationEvents.filter((e) => e.startsWith("workspaceContains:")).map((e) => e.slice("workspaceContains:".length));
  return globs.length === 0 ? undefined : globs.length === 1 ? globs[0] : `{${globs.join(",")}}`;
}
