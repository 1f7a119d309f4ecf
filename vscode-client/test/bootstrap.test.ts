// First start on a machine with only Python and the .vsix: the real bundle, with no interpreter
// setting and a `python3` that lacks msprof-lsp, creates its own environment in a fresh global
// storage folder, installs the bundled wheel there with the dependencies from a local package
// index (a PEP 503 folder served on 127.0.0.1, named by PIP_INDEX_URL as a user's pip would be
// told), and the real server started from that environment publishes diagnostics on the CNN
// sample. Then: a second start reuses the environment; an unreachable index gives the error.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { devNull, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";

import { findBundledWheel } from "../src/bootstrap";
import { FakeVscode, installFakeVscode } from "./fakeVscode";
import { pythons, until } from "./pythons";

const ROOT = resolve(__dirname, "..", "..");
const REPO = resolve(ROOT, "..");
const SAMPLE = join(REPO, "samples", "cnn_classifier");

const FOUND = pythons();

/** PEP 503 layout: simple/<normalised project>/<file> for every file pip download fetched. */
function simpleIndex(files: string, simple: string): void {
  for (const name of readdirSync(files)) {
    const project = (name.endsWith(".whl") ? name.split("-")[0] : name.replace(/-[^-]+\.(tar\.gz|zip)$/, "")).replace(/[-_.]+/g, "-").toLowerCase();
    mkdirSync(join(simple, project), { recursive: true });
    symlinkSync(join(files, name), join(simple, project, name));
  }
}

/** Serves a folder: directory listings as the anchors pip reads, files as they are. */
function serve(root: string, requests: string[]): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    requests.push(path);
    const local = resolve(root, "." + path);
    if (!local.startsWith(root) || !existsSync(local)) {
      res.writeHead(404).end();
    } else if (statSync(local).isDirectory()) {
      const links = readdirSync(local).map((n) => `<a href="${encodeURIComponent(n)}${statSync(join(local, n)).isDirectory() ? "/" : ""}">${n}</a><br>`);
      res.writeHead(200, { "content-type": "text/html" }).end(`<!DOCTYPE html><html><body>${links.join("\n")}</body></html>`);
    } else {
      res.writeHead(200, { "content-type": "application/octet-stream" }).end(readFileSync(local));
    }
  });
  return new Promise((done) => server.listen(0, "127.0.0.1", () => done({ server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}/simple/` })));
}

describe("first start: the extension installs its own environment", { skip: FOUND ? false : "needs a POSIX Python 3.10+ with pip and venv" }, () => {
  const fake = new FakeVscode();
  const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  const requests: string[] = [];
  const savedEnv = { ...process.env };
  let undo: () => void;
  let bundle: { activate(context: unknown): void; deactivate(): Promise<void> };
  let server: Server;
  let storage: string;
  let launches: string;
  let vscode: { Uri: { file(path: string): unknown } };
  const wheel = findBundledWheel(ROOT);
  const context = (dir: string) => ({ subscriptions: [], extension: { packageJSON: manifest }, extensionUri: vscode.Uri.file(ROOT), globalStorageUri: vscode.Uri.file(dir) });
  // The server reports its own work-done progress too (loading the profile).
  const installProgress = () => fake.progress.filter((p) => p.title === "msprof-lsp: installing the server");
  const state = () => `status: ${fake.statusItems[0]?.text}\nmessages: ${JSON.stringify(fake.messages)}\nlog:\n${fake.logLines.slice(-40).join("\n")}`;

  before(async () => {
    assert.ok(wheel, `no wheel in ${join(ROOT, "bundled")}: npm run wheel builds it`);
    const dir = mkdtempSync(join(tmpdir(), "msprof-bootstrap-"));
    // The wheelhouse: the bundled wheel and its dependencies, fetched once through the machine's
    // own pip configuration.
    const files = join(dir, "files");
    execFileSync(FOUND!.pip, ["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", files, wheel!.path], { stdio: ["ignore", "ignore", "inherit"] });
    simpleIndex(files, join(dir, "index", "simple"));
    const served = await serve(join(dir, "index"), requests);
    server = served.server;
    // The user's pip configuration: only the local index (no config files, no other PIP_*).
    for (const key of Object.keys(process.env)) if (key.startsWith("PIP_")) delete process.env[key];
    Object.assign(process.env, { PIP_CONFIG_FILE: devNull, PIP_INDEX_URL: served.url, PIP_NO_CACHE_DIR: "1", PIP_RETRIES: "0", PIP_TIMEOUT: "5" });
    // `python3` on PATH is a Python without msprof-lsp (-S: not even in its site-packages); it
    // records how it is called.
    const bin = join(dir, "bin");
    mkdirSync(bin);
    launches = join(dir, "launches.txt");
    writeFileSync(join(bin, "python3"), `#!/bin/sh\nprintf '%s\\n' "$*" >> ${JSON.stringify(launches)}\nexec ${JSON.stringify(FOUND!.base)} -S "$@"\n`);
    chmodSync(join(bin, "python3"), 0o755);
    process.env.PATH = `${bin}:${process.env.PATH}`;
    storage = join(dir, "globalStorage");

    undo = installFakeVscode(fake);
    vscode = require("vscode");
    fake.workspaceFolders = [{ uri: vscode.Uri.file(SAMPLE), name: "cnn_classifier", index: 0 }];
    fake.settings = { profile: join(SAMPLE, "npu_profile"), cacheDir: join(dir, "cache") };
    bundle = require(join(ROOT, "dist", "extension.js"));
  });

  after(async () => {
    await bundle?.deactivate();
    undo?.();
    server?.close();
    for (const key of Object.keys(process.env)) if (!(key in savedEnv)) delete process.env[key];
    Object.assign(process.env, savedEnv);
  });

  test("creates the environment, installs the wheel from the configured index, and the server publishes diagnostics", async () => {
    bundle.activate(context(storage));
    const model = `file://${join(SAMPLE, "model.py")}`;
    const diags = await until("diagnostics on model.py", () => ((fake.diagnostics.get(model)?.length ?? 0) > 0 ? fake.diagnostics.get(model) : undefined), 8 * 60 * 1000, state);
    // What `msprof-lsp --check samples/cnn_classifier` reports on model.py for this profile:
    // NPU103 at line 25, NPU101 at lines 34, 48 and 49 (0-based below).
    const found = diags.map((d) => `${(d.code as { value: string }).value}:${d.range.start.line}`).sort();
    assert.deepEqual(found, ["NPU101:33", "NPU101:47", "NPU101:48", "NPU103:24"]);

    const python = join(storage, "venv", "bin", "python");
    assert.ok(existsSync(python));
    // The environment was made from the chosen python3, isolated, and got the bundled version.
    const calls = readFileSync(launches, "utf8").trim().split("\n");
    assert.ok(calls.includes("-I -c import msprof_lsp.server"), calls.join("\n"));
    assert.ok(calls.includes(`-I -m venv ${join(storage, "venv")}`), calls.join("\n"));
    const version = execFileSync(python, ["-I", "-c", "import importlib.metadata as m; print(m.version('msprof-lsp'))"], { encoding: "utf8" }).trim();
    assert.equal(version, wheel!.version);
    // The dependencies came from the local index.
    for (const project of ["pygls", "libcst", "msgspec"]) assert.ok(requests.includes(`/simple/${project}/`), `${project} not asked from the index: ${requests.join(" ")}`);
    assert.ok(requests.some((r) => r.startsWith("/simple/pygls/pygls-") && r.endsWith(".whl")));

    const installs = installProgress();
    assert.equal(installs.length, 1);
    assert.ok(installs[0].messages.includes(`installing msprof-lsp ${wheel!.version} and its dependencies`), installs[0].messages.join(" | "));
    assert.ok(fake.logLines.some((l) => l.startsWith("info Installing: ") && l.includes(wheel!.path)));
    assert.deepEqual(fake.messages.filter((m) => m.kind === "error"), []);
    await until("the loaded status", () => fake.statusItems[0].text.startsWith("$(flame)"), 60000, state);
  });

  test("the next start uses the environment as it is: no install, no progress", async () => {
    await bundle.deactivate();
    fake.diagnostics.clear();
    fake.statusItems = [];
    fake.commands.clear();
    const before = requests.length;
    bundle.activate(context(storage));
    await until("diagnostics again", () => fake.diagnostics.get(`file://${join(SAMPLE, "model.py")}`)?.length, 120000, state);
    assert.equal(installProgress().length, 1);
    assert.equal(requests.length, before);
    assert.ok(fake.logLines.some((l) => l === `info Using the extension's own environment: ${join(storage, "venv", "bin", "python")}`));
  });

  test("an unreachable index: a clear error with the command to run by hand and the setting", async () => {
    await bundle.deactivate();
    fake.statusItems = [];
    fake.commands.clear();
    fake.messages = [];
    await new Promise<void>((done) => server.close(() => done()));
    const fresh = join(storage, "..", "globalStorage-offline");
    fake.answer = (m) => (m.kind === "error" && m.actions.includes("Copy command") ? "Copy command" : undefined);
    bundle.activate(context(fresh));
    await until("the copied command", () => fake.clipboard.length > 0, 5 * 60 * 1000, state);
    const errors = fake.messages.filter((m) => m.kind === "error");
    assert.equal(errors.length, 1);
    const text = errors[0].text;
    assert.ok(text.startsWith("msprof-lsp: could not install the server into its own environment: pip could not get the dependencies from your package index"), text);
    const manual = `python3 -m venv ${join(fresh, "venv")} && ${join(fresh, "venv", "bin", "python")} -m pip install ${wheel!.path}`;
    assert.ok(text.includes(`Run it by hand: ${manual}`), text);
    assert.ok(text.includes('"msprof-lsp.interpreter"'));
    assert.deepEqual(fake.clipboard, [manual]);
    assert.equal(fake.statusItems[0].text, "$(error) msprof: server unavailable");
    // pip's own output is in the log.
    assert.ok(fake.logLines.some((l) => /Could not find a version|No matching distribution|Failed to establish/.test(l)), state());
    assert.ok(!existsSync(join(fresh, "install.lock")));
  });
});
