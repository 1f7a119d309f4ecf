// End to end through the real bundle and vscode-languageclient: a stand-in pygls server
// (lsp_test_server.py) is started the way the product is (`<python> -I -m msprof_lsp.server` over
// stdio) and the test checks what crosses the wire and what the user sees.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";

import { FakeVscode, fakeEditor, installFakeVscode } from "./fakeVscode";

const ROOT = resolve(__dirname, "..", "..");
const VENV_PYTHON = resolve(ROOT, "..", ".venv", "bin", "python");

function pythonWithPygls(): string | undefined {
  for (const candidate of [process.env.MSPROF_TEST_PYTHON, VENV_PYTHON]) {
    if (!candidate || !existsSync(candidate)) continue;
    try {
      execFileSync(candidate, ["-c", "import pygls.lsp.server, lsprotocol.types"], { stdio: "ignore" });
      return candidate;
    } catch {
      // try the next one
    }
  }
  return undefined;
}

const PYTHON = process.platform === "win32" ? undefined : pythonWithPygls();

async function until<T>(what: string, probe: () => T | undefined, timeoutMs = 20000): Promise<T> {
  const start = Date.now();
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe("client <-> server over stdio", { skip: PYTHON ? false : "needs a POSIX Python with pygls (the project's .venv or $MSPROF_TEST_PYTHON)" }, () => {
  const fake = new FakeVscode();
  let undo: () => void;
  let bundle: { activate(context: unknown): void; deactivate(): Promise<void> };
  let record: string;
  let model: string;
  let launches: string;
  const readRecord = () => (existsSync(record) ? JSON.parse(readFileSync(record, "utf8")) : undefined);

  before(() => {
    const dir = mkdtempSync(join(tmpdir(), "msprof-e2e-"));
    // `-m msprof_lsp.server` resolves to the stand-in through PYTHONPATH (see the wrapper below).
    const pkg = join(dir, "pkgs", "msprof_lsp", "server");
    mkdirSync(pkg, { recursive: true });
    writeFileSync(join(dir, "pkgs", "msprof_lsp", "__init__.py"), "");
    writeFileSync(join(pkg, "__init__.py"), "");
    writeFileSync(join(pkg, "__main__.py"), `import runpy\nrunpy.run_path(${JSON.stringify(join(__dirname, "..", "..", "test", "lsp_test_server.py"))}, run_name="__main__")\n`);
    // The wrapper records each command line it gets, checks the client asked for an isolated
    // interpreter (-I first), and drops -I only so that PYTHONPATH can reach the stand-in.
    launches = join(dir, "launches.txt");
    const python = join(dir, "python");
    writeFileSync(
      python,
      `#!/bin/sh\nprintf '%s\\n' "$*" >> ${JSON.stringify(launches)}\n[ "$1" = "-I" ] || exit 3\nshift\n` +
        `PYTHONPATH=${JSON.stringify(join(dir, "pkgs"))} exec ${JSON.stringify(PYTHON)} "$@"\n`,
    );
    chmodSync(python, 0o755);
    const ws = join(dir, "ws");
    mkdirSync(ws);
    model = join(ws, "model.py");
    writeFileSync(model, "y = x @ w\nz = y + 1\nloss = z.sum()\n");
    record = join(dir, "record.json");
    process.env.MSPROF_TEST_RECORD = record;
    process.env.MSPROF_TEST_MODEL = model;

    undo = installFakeVscode(fake);
    const vscode = require("vscode");
    fake.workspaceFolders = [{ uri: vscode.Uri.file(ws), name: "ws", index: 0 }];
    fake.editors = [fakeEditor({ uri: vscode.Uri.file(model), languageId: "python", lineCount: 3 })];
    fake.settings = { interpreter: python, minShare: 0.05, select: ["NPU1"], gutterHeat: true, ...(process.env.MSPROF_TEST_TRACE ? { "trace.server": "verbose" } : {}) };
    bundle = require(join(ROOT, "dist", "extension.js"));
    const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
    bundle.activate({ subscriptions: [], extension: { packageJSON: manifest }, extensionUri: vscode.Uri.file(ROOT) });
  });

  after(async () => {
    await bundle.deactivate();
    undo();
  });

  test("initializationOptions and workspace/configuration carry the flat settings the user set", async () => {
    const seen = await until("the server's record", () => readRecord()?.configuration && readRecord()).catch((e) => {
      throw new Error(`${e.message}\nstatus: ${fake.statusItems[0]?.text}\nlog:\n${fake.logLines.join("\n")}`);
    });
    assert.deepEqual(seen.initializationOptions, { minShare: 0.05, select: ["NPU1"] });
    // section "msprof-lsp" -> the same object; a dotted key -> its value; unset -> null.
    assert.deepEqual(seen.configuration, [{ minShare: 0.05, select: ["NPU1"] }, 0.05, null]);
  });

  test("every Python the client starts is isolated: -I before -c / -m", async () => {
    await until("the server's record", () => readRecord());
    const lines = readFileSync(launches, "utf8").trim().split("\n");
    // vscode-languageclient appends --stdio (the server accepts it).
    assert.deepEqual(lines, ["-I -c import msprof_lsp.server", "-I -m msprof_lsp.server --stdio"]);
  });

  test("profileStatus reaches the status bar", async () => {
    const item = fake.statusItems[0];
    await until("the loaded status", () => item.text.startsWith("$(flame)"));
    assert.equal(item.text, "$(flame) torch_npu · rank 1 · 50 ms/step");
    assert.ok(String(item.tooltip).includes("Profile: /prof/run_ascend_pt"));
  });

  test("the Hotspots view fills when the profile has loaded; a row opens its line", async () => {
    const view = fake.treeViews.get("msprof-lsp.hotspots")!;
    const files = await until("the Hotspots rows", () => {
      const rows = view.provider.getChildren() as { label: string; children: unknown[] }[];
      return rows.length > 0 ? rows : undefined;
    });
    assert.deepEqual(files.map((f) => f.label), [model]);
    const item = view.provider.getTreeItem(files[0].children[0]) as { label: string; description: string; command: { command: string; arguments: unknown[] } };
    assert.equal(item.label, "1:1");
    assert.equal(item.description, "50 ms/step · 20.0%");
    assert.equal(view.message, undefined);
    const before = fake.shown.length;
    await fake.commands.get(item.command.command)!(...item.command.arguments);
    assert.equal(String((fake.shown[before] as { uri: unknown }).uri), `file://${model}`);
  });

  test("line heat is requested for the visible file and drawn per bucket", async () => {
    const editor = fake.editors[0];
    await until("gutter decorations", () => (editor.decorations.get(3) ?? []).length > 0);
    const seen = readRecord();
    assert.deepEqual(seen.lineHeat, [[`file://${model}`]]);
    const lines = [0, 1, 2, 3].map((i) => (editor.decorations.get(i) ?? []).map((d) => d.range.start.line));
    assert.deepEqual(lines, [[], [2], [], [0]]); // 3 % -> bucket 1, 20 % -> bucket 3
    assert.equal(editor.decorations.get(3)![0].hoverMessage, "msprof: 20.0% of step time · 10 ms/step — MatMulV2");
  });

  test("the palette's Show hotspots lists path:line — share — top op and opens the pick", async () => {
    const show = await until("the server's commands", () => fake.commands.get("msprof-lsp.showHotspots"));
    fake.pick = (items) => items[0];
    const opened = fake.shown.length;
    await show();
    const pick = fake.quickPicks.at(-1)!;
    assert.deepEqual(pick.items.map((i) => i.label), [`${model}:1 — 20.0% — MatMulV2`]);
    assert.equal(fake.shown.length, opened + 1);
    assert.equal(String(fake.shown[opened].uri), `file://${model}`);
  });

  test("the status menu switches rank: selectProfile [path, rank]", async () => {
    fake.pick = (items) => items.find((i) => i.label.endsWith("Rank 0"));
    await fake.commands.get("msprof-lsp.statusMenu")!();
    const labels = fake.quickPicks.at(-1)!.items.map((i) => i.label);
    assert.ok(labels.includes("$(check) Rank 1") && labels.includes("$(blank) Rank 0"), labels.join(" | "));
    const seen = await until("selectProfile", () => readRecord()?.selectProfile);
    assert.deepEqual(seen, [["/prof/run_ascend_pt", 0]]);
  });

  test("Set baseline from the palette asks first; clearing sends [null]", async () => {
    fake.pick = (items) => items.find((i) => i.label.includes("Clear baseline"));
    await fake.commands.get("msprof-lsp.setBaseline")!();
    const seen = await until("setBaseline", () => readRecord()?.setBaseline);
    assert.deepEqual(seen, [[null]]);
  });

  test("Record a profile: adoptNewProfile first, then the command in a terminal with MSPROF_LSP_PROFILE=1", async () => {
    let saved = 0;
    fake.editors[0].document.save = async () => (saved++, true);
    await fake.commands.get("msprof-lsp.recordProfile")!();
    assert.deepEqual(await until("adoptNewProfile", () => readRecord()?.adoptNewProfile), [[]]);
    assert.equal(saved, 1);
    const terminal = fake.terminals.at(-1)!;
    assert.equal(terminal.options.name, "msprof-lsp: record");
    assert.deepEqual(terminal.options.env, { MSPROF_LSP_PROFILE: "1" });
    // the default `${python} ${file}`: the interpreter that runs the server, and the active file
    assert.deepEqual(terminal.sent, [`${join(dirname(launches), "python")} ${model}`]);
  });

  test("Record a profile in an untrusted workspace: refused, offers Manage Workspace Trust, runs nothing", async () => {
    const terminals = fake.terminals.length;
    const asked = (readRecord()?.adoptNewProfile ?? []).length;
    let saved = 0;
    fake.editors[0].document.save = async () => (saved++, true);
    fake.trusted = false;
    fake.answer = (m) => m.actions.find((a) => a === "Manage Workspace Trust");
    try {
      await fake.commands.get("msprof-lsp.recordProfile")!();
    } finally {
      fake.trusted = true;
      fake.answer = () => undefined;
    }
    const refusal = fake.messages.at(-1)!;
    assert.equal(refusal.kind, "error");
    assert.match(refusal.text, /not trusted/);
    assert.deepEqual(refusal.actions, ["Manage Workspace Trust"]);
    assert.ok(fake.executed.some((e) => e.command === "workbench.trust.manage"));
    assert.equal(fake.terminals.length, terminals);
    assert.equal(saved, 0);
    assert.equal((readRecord()?.adoptNewProfile ?? []).length, asked);
  });

  test("a settings change is re-sent as didChangeConfiguration with the flat object", async () => {
    fake.settings.minShare = 0.1;
    // What VS Code does on a settings edit: fire onDidChangeConfiguration for our section.
    for (const listener of fake.configListeners) listener({ affectsConfiguration: (s: string) => s === "msprof-lsp" || s === "msprof-lsp.minShare" });
    const seen = await until("didChangeConfiguration", () => readRecord()?.didChangeConfiguration?.find((s: { "msprof-lsp": { minShare: number } }) => s["msprof-lsp"].minShare === 0.1));
    assert.deepEqual(seen, { "msprof-lsp": { minShare: 0.1, select: ["NPU1"] } });
  });
});
