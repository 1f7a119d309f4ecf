// Loads the real bundle (dist/extension.js) against the fake vscode module and drives activation
// with an interpreter, named by the setting, that lacks the package: the extension does not touch
// an environment the user chose, it tells the exact command (bootstrap.test.ts covers the path
// without the setting, where the extension installs its own environment).

import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { FakeVscode, installFakeVscode } from "./fakeVscode";

const ROOT = join(__dirname, "..", "..");
const POSIX = process.platform !== "win32";

interface Bundle {
  activate(context: unknown): void;
  deactivate(): Promise<void>;
}

async function until(what: string, condition: () => boolean, timeoutMs = 15000): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("activation with a Python that lacks msprof-lsp", { skip: POSIX ? false : "needs a POSIX shell wrapper" }, () => {
  const fake = new FakeVscode();
  let undo: () => void;
  let bundle: Bundle;
  let python: string;
  const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  const context = () => ({ subscriptions: [], extension: { packageJSON: manifest }, extensionUri: { fsPath: ROOT } });

  before(() => {
    // A real Python with site-packages switched off: `import msprof_lsp.server` fails for real.
    const dir = mkdtempSync(join(tmpdir(), "msprof-nopkg-"));
    python = join(dir, "python");
    writeFileSync(python, '#!/bin/sh\nexec python3 -I -S "$@"\n');
    chmodSync(python, 0o755);
    undo = installFakeVscode(fake);
    bundle = require(join(ROOT, "dist", "extension.js")) as Bundle;
  });

  after(() => undo());

  test("the bundle loads although vscode-languageclient subclasses vscode classes", () => {
    assert.equal(typeof bundle.activate, "function");
    assert.equal(typeof bundle.deactivate, "function");
  });

  test("shows the exact install command and copies it on request", async () => {
    fake.settings = { interpreter: python };
    fake.answer = (m) => (m.kind === "error" && m.actions.includes("Copy command") ? "Copy command" : undefined);
    bundle.activate(context());
    await until("the copied command", () => fake.clipboard.length > 0);

    // The wheel the build bundles (scripts/bundle_wheel.py), named by pyproject.toml's version.
    const version = /^version = "([^"]+)"/m.exec(readFileSync(join(ROOT, "..", "pyproject.toml"), "utf8"))![1];
    const wheel = join(ROOT, "bundled", `msprof_lsp-${version}-py3-none-any.whl`);
    assert.ok(existsSync(wheel), `${wheel} missing: npm run wheel builds it`);
    const expected = `${python} -m pip install ${wheel}`;
    const errors = fake.messages.filter((m) => m.kind === "error");
    assert.equal(errors.length, 1);
    assert.equal(
      errors[0].text,
      `msprof-lsp is not installed for ${python}. Install it with: ${expected} (into that environment itself: ` +
        'the server starts isolated, with -I, so user site-packages and PYTHONPATH are not searched), or clear "msprof-lsp.interpreter" to let the extension install its own environment',
    );
    assert.deepEqual(errors[0].actions, ["Copy command", "Choose interpreter", "Show logs"]);
    assert.deepEqual(fake.clipboard, [expected]);

    const [status] = fake.statusItems;
    assert.equal(status.text, "$(error) msprof: server unavailable");
    assert.ok(String(status.tooltip).includes("not installed"));
    assert.equal(status.visible, true);
    assert.equal(status.command, "msprof-lsp.statusMenu");

    for (const id of ["msprof-lsp.restart", "msprof-lsp.showLogs", "msprof-lsp.statusMenu"]) assert.ok(fake.commands.has(id), id);
    // Server commands are registered by the language client once the server announces them.
    assert.ok(!fake.commands.has("msprof-lsp.reloadProfile"));
    assert.ok(fake.executed.some((c) => c.command === "setContext" && c.args[0] === "msprof-lsp.serverRunning" && c.args[1] === false));
    assert.ok(fake.logLines.some((l) => l === `info Python interpreter (setting): ${python}`), fake.logLines.join("\n"));
    assert.ok(fake.logLines.some((l) => l.startsWith("error ") && l.includes("No module named 'msprof_lsp'")));
  });

  test("the status menu offers restart and logs; restart checks again", async () => {
    fake.messages = [];
    fake.answer = () => undefined;
    fake.pick = (items) => items.find((i) => i.label.includes("Restart server"));
    await fake.commands.get("msprof-lsp.statusMenu")!();
    const menu = fake.quickPicks.at(-1)!;
    assert.deepEqual(menu.items.map((i) => i.label), ["$(debug-restart) Restart server", "$(output) Show logs"]);
    await until("the second check", () => fake.messages.some((m) => m.kind === "error"));
    assert.ok(fake.messages[0].text.startsWith(`msprof-lsp is not installed for ${python}.`));
  });

  test("showNotifications=off keeps quiet but the status bar still tells", async () => {
    await bundle.deactivate();
    fake.messages = [];
    fake.statusItems = [];
    fake.commands.clear();
    fake.settings = { interpreter: python, showNotifications: "off" };
    bundle.activate(context());
    await until("the failed status", () => fake.statusItems[0]?.text === "$(error) msprof: server unavailable");
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(fake.messages, []);
    await bundle.deactivate();
  });
});
