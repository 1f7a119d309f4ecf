import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, test } from "node:test";

import {
  chooseInterpreter,
  classifyImportCheck,
  expandVariables,
  importCheckLaunch,
  installCommand,
  type Interpreter,
  quoteArg,
  runImportCheck,
  serverLaunch,
} from "../src/interpreter";

const POSIX = process.platform !== "win32";

describe("chooseInterpreter: setting > Python extension > python3", () => {
  test("the setting wins over the Python extension", () => {
    const chosen = chooseInterpreter({ setting: "/opt/py/bin/python", pythonExtension: ["/venv/bin/python"], platform: "linux" });
    assert.deepEqual(chosen, { command: "/opt/py/bin/python", args: [], source: "setting" });
  });

  test("a blank setting falls through to the Python extension, keeping its prefix arguments", () => {
    const chosen = chooseInterpreter({ setting: "  ", pythonExtension: ["conda", "run", "-n", "npu", "python"], platform: "linux" });
    assert.deepEqual(chosen, { command: "conda", args: ["run", "-n", "npu", "python"], source: "python-extension" });
  });

  test("no setting and no Python extension: python3, or python on Windows", () => {
    assert.deepEqual(chooseInterpreter({ platform: "linux" }), { command: "python3", args: [], source: "default" });
    assert.deepEqual(chooseInterpreter({ pythonExtension: [], platform: "darwin" }).command, "python3");
    assert.deepEqual(chooseInterpreter({ platform: "win32" }), { command: "python", args: [], source: "default" });
  });

  test("variables in the setting are expanded", () => {
    const chosen = chooseInterpreter({
      setting: "${workspaceFolder}/.venv/bin/python",
      platform: "linux",
      workspaceFolder: "/work/proj",
    });
    assert.equal(chosen.command, "/work/proj/.venv/bin/python");
    assert.equal(expandVariables("~/envs/a/bin/python", { home: "/home/u" }), "/home/u/envs/a/bin/python");
    assert.equal(expandVariables("${env:CONDA_PREFIX}/bin/python", { env: { CONDA_PREFIX: "/c/npu" } }), "/c/npu/bin/python");
    assert.equal(expandVariables("${userHome}/py", { home: "/h" }), "/h/py");
    // unknown folder: left as written, so the error message shows what the user typed
    assert.equal(expandVariables("${workspaceFolder}/py", {}), "${workspaceFolder}/py");
  });

  test("the server is started as <python> -I -m msprof_lsp.server (cwd never on sys.path)", () => {
    assert.deepEqual(serverLaunch({ command: "conda", args: ["run", "-n", "x", "python"], source: "python-extension" }), {
      command: "conda",
      args: ["run", "-n", "x", "python", "-I", "-m", "msprof_lsp.server"],
    });
  });

  test("the import check runs isolated too", () => {
    assert.deepEqual(importCheckLaunch({ command: "/venv/bin/python", args: [], source: "setting" }), {
      command: "/venv/bin/python",
      args: ["-I", "-c", "import msprof_lsp.server"],
    });
  });
});

describe("install command text", () => {
  test("plain paths stay unquoted", () => {
    const interp: Interpreter = { command: "/usr/bin/python3", args: [], source: "default" };
    assert.equal(installCommand(interp, "linux", "/ext/bundled/msprof_lsp-0.1.0-py3-none-any.whl"), "/usr/bin/python3 -m pip install /ext/bundled/msprof_lsp-0.1.0-py3-none-any.whl");
  });

  test("paths with spaces are quoted for the platform's shell", () => {
    const linux: Interpreter = { command: "/home/a b/venv/bin/python", args: [], source: "setting" };
    assert.equal(installCommand(linux, "linux", "/src/msprof lsp"), "'/home/a b/venv/bin/python' -m pip install '/src/msprof lsp'");
    const win: Interpreter = { command: "C:\\Program Files\\Python311\\python.exe", args: [], source: "setting" };
    assert.equal(installCommand(win, "win32", "C:\\src\\msprof-lsp"), '"C:\\Program Files\\Python311\\python.exe" -m pip install C:\\src\\msprof-lsp');
    assert.equal(quoteArg("it's", "linux"), `'it'\\''s'`);
  });

  test("prefix arguments of the Python extension are part of the command", () => {
    const conda: Interpreter = { command: "conda", args: ["run", "-n", "npu env", "python"], source: "python-extension" };
    assert.equal(installCommand(conda, "linux", "/ext/bundled/msprof_lsp-0.1.0-py3-none-any.whl"), "conda run -n 'npu env' python -m pip install /ext/bundled/msprof_lsp-0.1.0-py3-none-any.whl");
  });
});

describe("classifyImportCheck", () => {
  const interp: Interpreter = { command: "/venv/bin/python", args: [], source: "setting" };

  test("exit 0 is ok", () => {
    assert.deepEqual(classifyImportCheck(interp, { exitCode: 0, stderr: "" }, "linux"), { ok: true });
  });

  test("a missing package gives the exact install command for the bundled wheel", () => {
    const stderr = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nModuleNotFoundError: No module named 'msprof_lsp'\n";
    const result = classifyImportCheck(interp, { exitCode: 1, stderr }, "linux", "/ext/bundled/msprof_lsp-0.1.0-py3-none-any.whl");
    assert.equal(result.ok, false);
    if (result.ok) return;
    assert.equal(result.reason, "missing-package");
    assert.equal(result.installCommand, "/venv/bin/python -m pip install /ext/bundled/msprof_lsp-0.1.0-py3-none-any.whl");
    assert.equal(
      result.message,
      "msprof-lsp is not installed for /venv/bin/python. Install it with: /venv/bin/python -m pip install /ext/bundled/msprof_lsp-0.1.0-py3-none-any.whl " +
        "(into that environment itself: the server starts isolated, with -I, so user site-packages and PYTHONPATH are not searched), " +
        'or clear "msprof-lsp.interpreter" to let the extension install its own environment',
    );
  });

  test("without a wheel or a checkout there is no command to copy, only where to get one", () => {
    const stderr = "ModuleNotFoundError: No module named 'msprof_lsp'\n";
    const result = classifyImportCheck({ ...interp, source: "default" }, { exitCode: 1, stderr }, "linux");
    assert.ok(!result.ok && result.reason === "missing-package" && result.installCommand === undefined);
    assert.ok(!result.ok && result.message.includes("from a clone of the msprof-lsp repository"), !result.ok ? result.message : "");
    assert.ok(!result.ok && !result.message.includes("msprof-lsp.interpreter"));
  });

  test("a broken dependency is not reported as a missing package", () => {
    const stderr = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'libcst'\n";
    const result = classifyImportCheck(interp, { exitCode: 1, stderr }, "linux");
    assert.ok(!result.ok && result.reason === "broken");
    assert.ok(!result.ok && result.message.includes("No module named 'libcst'"));
  });

  test("an interpreter that does not exist says so, with the setting to change", () => {
    const result = classifyImportCheck(interp, { spawnError: { code: "ENOENT", message: "spawn /venv/bin/python ENOENT" }, exitCode: null, stderr: "" }, "linux");
    assert.ok(!result.ok && result.reason === "not-found");
    assert.ok(!result.ok && result.message.includes("/venv/bin/python was not found"));
    assert.ok(!result.ok && result.message.includes("msprof-lsp.interpreter"));
    assert.ok(!result.ok && result.installCommand === undefined);
  });
});

describe("runImportCheck with real interpreters", { skip: POSIX ? false : "POSIX shell needed" }, () => {
  test("a Python without the package -> missing-package", async () => {
    // -S: no site-packages, -I: no user site or cwd, so msprof_lsp cannot be found.
    const interp: Interpreter = { command: "python3", args: ["-I", "-S"], source: "setting" };
    const result = await runImportCheck(interp, { platform: process.platform, installTarget: "/src/msprof-lsp" });
    assert.ok(!result.ok, "expected the import to fail");
    assert.equal(result.reason, "missing-package");
    assert.equal(result.installCommand, "python3 -I -S -m pip install /src/msprof-lsp");
  });

  test("a package whose own import fails -> broken, not missing", async () => {
    const root = mkdtempSync(join(tmpdir(), "msprof-broken-"));
    mkdirSync(join(root, "msprof_lsp", "server"), { recursive: true });
    writeFileSync(join(root, "msprof_lsp", "__init__.py"), "");
    writeFileSync(join(root, "msprof_lsp", "server", "__init__.py"), "import a_dependency_that_is_not_installed_xyz\n");
    // -I ignores PYTHONPATH, so a wrapper plays the interpreter that has the broken package installed.
    const wrapper = join(root, "python");
    writeFileSync(wrapper, `#!/bin/sh\nexec python3 -I -S -c "import sys; sys.path.insert(0, '${root}'); import msprof_lsp.server"\n`);
    chmodSync(wrapper, 0o755);
    const interp: Interpreter = { command: wrapper, args: [], source: "setting" };
    const result = await runImportCheck(interp, { platform: process.platform });
    assert.ok(!result.ok && result.reason === "broken", JSON.stringify(result));
    assert.ok(!result.ok && result.message.includes("a_dependency_that_is_not_installed_xyz"));
  });

  test("a workspace msprof_lsp/ folder in the cwd is never imported by the check", async () => {
    const ws = mkdtempSync(join(tmpdir(), "msprof-ws-"));
    const marker = join(ws, "MARKER");
    mkdirSync(join(ws, "msprof_lsp", "server"), { recursive: true });
    writeFileSync(join(ws, "msprof_lsp", "__init__.py"), `open(${JSON.stringify(marker)}, "w").close()\n`);
    writeFileSync(join(ws, "msprof_lsp", "server", "__init__.py"), "");
    // -S: no site-packages, so the only msprof_lsp the check could find is the workspace's.
    const interp: Interpreter = { command: "python3", args: ["-S"], source: "setting" };
    const result = await runImportCheck(interp, { platform: process.platform, cwd: ws });
    assert.ok(!result.ok && result.reason === "missing-package", JSON.stringify(result));
    assert.ok(!existsSync(marker), "the workspace's msprof_lsp ran");
  });

  test("a missing executable -> not-found", async () => {
    const interp: Interpreter = { command: join(tmpdir(), "no-such-dir-msprof", "python3"), args: [], source: "setting" };
    const result = await runImportCheck(interp, { platform: process.platform });
    assert.ok(!result.ok && result.reason === "not-found", JSON.stringify(result));
  });

  test("an interpreter that hangs is stopped after the timeout", async () => {
    const dir = mkdtempSync(join(tmpdir(), "msprof-hang-"));
    const script = join(dir, "python");
    writeFileSync(script, "#!/bin/sh\nexec sleep 30\n");
    chmodSync(script, 0o755);
    const result = await runImportCheck({ command: script, args: [], source: "setting" }, { platform: process.platform, timeoutMs: 300 });
    assert.ok(!result.ok && result.reason === "broken" && result.message.includes("did not finish"), JSON.stringify(result));
  });

  const venvPython = resolve(__dirname, "..", "..", "..", ".venv", "bin", "python");
  test("the project's own venv has the package -> ok", { skip: existsSync(venvPython) ? false : `no venv at ${venvPython}` }, async () => {
    // Independent confirmation that the package really imports there.
    execFileSync(venvPython, ["-c", "import msprof_lsp.server"]);
    const result = await runImportCheck({ command: venvPython, args: [], source: "setting" }, { platform: process.platform });
    assert.deepEqual(result, { ok: true });
    execFileSync(venvPython, ["-I", "-c", "import msprof_lsp.server"]); // and isolated, as the server starts
  });
});
