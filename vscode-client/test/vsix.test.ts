// Packages the extension with vsce (offline) and checks what the .vsix holds.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  CLIENT_ONLY_SETTINGS,
  CMD_REFRESH_HOTSPOTS,
  CMD_RELOAD,
  CMD_RESTART,
  CMD_SELECT_PROFILE,
  CMD_SET_BASELINE,
  CMD_SHOW_HOTSPOTS,
  CMD_SHOW_LOGS,
  CMD_SHOW_PROFILE,
  MIN_PYTHON,
} from "../src/constants";
import { CMD_RECORD_PROFILE } from "../src/record";
import { FakeVscode, installFakeVscode } from "./fakeVscode";
import { readZip } from "./zip";

const ROOT = join(__dirname, "..", "..");

describe("the packaged .vsix", () => {
  let files: Map<string, Buffer>;
  let packaged: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  const source = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));

  before(() => {
    const out = join(mkdtempSync(join(tmpdir(), "msprof-vsix-")), `${source.name}-${source.version}.vsix`);
    const vscePkg = require.resolve("@vscode/vsce/package.json", { paths: [ROOT] });
    const vsce = join(dirname(vscePkg), JSON.parse(readFileSync(vscePkg, "utf8")).bin.vsce);
    execFileSync(process.execPath, [vsce, "package", "--no-dependencies", "--allow-missing-repository", "--out", out], { cwd: ROOT, stdio: "pipe" });
    files = readZip(readFileSync(out));
    packaged = JSON.parse(files.get("extension/package.json")!.toString("utf8"));
  });

  test("holds the bundle, the manifest, README and LICENSE — not sources or node_modules", () => {
    const names = [...files.keys()];
    for (const required of ["extension/dist/extension.js", "extension/dist/webview.js", "extension/dist/webview.css", "extension/package.json", "extension.vsixmanifest"]) {
      assert.ok(names.includes(required), `${required} missing from ${names.join(", ")}`);
    }
    assert.ok(names.some((n) => /^extension\/readme\.md$/i.test(n)));
    assert.ok(names.some((n) => /^extension\/license(\.txt)?$/i.test(n)));
    const stray = names.filter((n) => /^extension\/(src|test|out|node_modules|scripts)\//.test(n) || n.endsWith(".ts") || n.endsWith(".map"));
    assert.deepEqual(stray, []);
  });

  test("carries the product's wheel, of pyproject.toml's version, with the server inside", () => {
    const pyproject = readFileSync(join(ROOT, "..", "pyproject.toml"), "utf8");
    const version = /^version = "([^"]+)"/m.exec(pyproject)![1];
    const bundled = [...files.keys()].filter((n) => n.startsWith("extension/bundled/"));
    assert.deepEqual(bundled, [`extension/bundled/msprof_lsp-${version}-py3-none-any.whl`]);
    const wheel = readZip(files.get(bundled[0])!);
    const metadata = wheel.get(`msprof_lsp-${version}.dist-info/METADATA`)!.toString("utf8");
    assert.ok(metadata.split(/\r?\n/).includes(`Version: ${version}`), metadata.slice(0, 300));
    for (const module of ["msprof_lsp/server/__main__.py", "msprof_lsp/mapping/__init__.py", "msprof_lsp/hints/__init__.py"]) {
      assert.ok(wheel.has(module), `${module} missing from the wheel`);
    }
    assert.deepEqual([...wheel.keys()].filter((n) => !n.startsWith("msprof_lsp/") && !n.startsWith(`msprof_lsp-${version}.dist-info/`)), []);
    // The first-start install refuses older Pythons with the same floor as the wheel.
    const floor = /^requires-python = ">=(\d+)\.(\d+)"/m.exec(pyproject)!;
    assert.deepEqual([Number(floor[1]), Number(floor[2])], [...MIN_PYTHON]);
  });

  test("manifest: main, engines.vscode, no activation on Python files", () => {
    assert.equal(packaged.main, "./dist/extension.js");
    assert.ok(files.has(`extension/${packaged.main.replace(/^\.\//, "")}`));
    assert.equal(packaged.engines.vscode, "^1.82.0");
    // vsce rejects @types/vscode newer than the engines floor: keep them equal.
    assert.equal(source.devDependencies["@types/vscode"], packaged.engines.vscode.replace(/^\^/, ""));
    // Not on any Python file: the first start (an install) waits for a profile or a command.
    assert.ok(!packaged.activationEvents.some((e: string) => e.startsWith("onLanguage:")), packaged.activationEvents.join(" "));
    // A workspace must not pick the program we run unless it is trusted.
    assert.deepEqual(packaged.capabilities.untrustedWorkspaces.restrictedConfigurations, ["msprof-lsp.interpreter", "msprof-lsp.recordCommand", "msprof-lsp.profile", "msprof-lsp.baseline", "msprof-lsp.pathMappings"]);
  });

  test("every command and every setting is contributed", () => {
    const commands = packaged.contributes.commands.map((c: { command: string }) => c.command).sort();
    assert.deepEqual(commands, [CMD_RELOAD, CMD_SELECT_PROFILE, CMD_SHOW_HOTSPOTS, CMD_SET_BASELINE, CMD_RESTART, CMD_SHOW_LOGS, CMD_REFRESH_HOTSPOTS, CMD_SHOW_PROFILE, CMD_RECORD_PROFILE].sort());
    const props = packaged.contributes.configuration.properties;
    assert.deepEqual(Object.keys(props), Object.keys(source.contributes.configuration.properties));
    for (const key of CLIENT_ONLY_SETTINGS) assert.ok(`msprof-lsp.${key}` in props, key);
    assert.deepEqual(props["msprof-lsp.trace.server"].enum, ["off", "messages", "verbose"]);
    assert.equal(props["msprof-lsp.gutterHeat"].default, true);
    assert.equal(props["msprof-lsp.interpreter"].scope, "machine-overridable");
  });

  test("the walkthrough's pages, the view, the task type and activation on profile folders", () => {
    for (const step of packaged.contributes.walkthroughs[0].steps) {
      assert.ok(files.has(`extension/${step.media.markdown}`), `${step.media.markdown} missing from the .vsix`);
    }
    assert.equal(packaged.contributes.views.explorer[0].id, "msprof-lsp.hotspots");
    assert.equal(packaged.contributes.taskDefinitions[0].type, "msprof-lsp");
    assert.ok(packaged.activationEvents.includes("workspaceContains:**/*_ascend_pt/profiler_info*.json"));
  });

  describe("the bundle on its own", () => {
    let undo: () => void;
    before(() => {
      undo = installFakeVscode(new FakeVscode());
    });
    after(() => undo());

    test("loads from a folder without node_modules (vscode-languageclient is bundled)", () => {
      const dir = mkdtempSync(join(tmpdir(), "msprof-bundle-"));
      const file = join(dir, "extension.js");
      writeFileSync(file, files.get("extension/dist/extension.js")!);
      const mod = require(file);
      assert.equal(typeof mod.activate, "function");
      assert.equal(typeof mod.deactivate, "function");
    });
  });
});
