// When the first start installs, and that it can be cancelled: the real bundle, no interpreter
// setting, a `python3` that lacks msprof-lsp, a fresh global storage folder. Without a profile in
// the workspace and without a command nothing is installed; a profile appearing, a profile found
// at activation, or "Restart server" starts the install, in a cancellable notification; Cancel
// kills pip (which waits on a package index that never answers) and leaves no environment behind.

import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { devNull, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";

import { findBundledWheel, pipInstallArgs, profileGlob } from "../src/bootstrap";
import { FakeVscode, installFakeVscode } from "./fakeVscode";
import { pythons, until } from "./pythons";

const ROOT = resolve(__dirname, "..", "..");
const FOUND = pythons();
const TITLE = "msprof-lsp: installing the server";

describe("what pip is given", () => {
  test("a platform package's bundled/wheels/ makes the install offline; the universal one uses the index", () => {
    const ext = mkdtempSync(join(tmpdir(), "msprof-ext-"));
    mkdirSync(join(ext, "bundled", "wheels"), { recursive: true });
    const wheel = join(ext, "bundled", "msprof_lsp-0.1.0-py3-none-any.whl");
    writeFileSync(wheel, "");
    // An empty folder is no wheelhouse: pip would find nothing there.
    assert.deepEqual(pipInstallArgs(findBundledWheel(ext)!), [wheel]);
    writeFileSync(join(ext, "bundled", "wheels", "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"), "");
    const found = findBundledWheel(ext)!;
    assert.deepEqual(found, { path: wheel, version: "0.1.0", wheelhouse: join(ext, "bundled", "wheels") });
    assert.deepEqual(pipInstallArgs(found), ["--no-index", "--find-links", join(ext, "bundled", "wheels"), wheel]);
  });
});

describe("first start: only for a profile or a command, and cancellable", { skip: FOUND ? false : "needs a POSIX Python 3.10+ with pip and venv" }, () => {
  const fake = new FakeVscode();
  const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  const savedEnv = { ...process.env };
  const sockets: Socket[] = [];
  let undo: () => void;
  let bundle: { activate(context: unknown): void; deactivate(): Promise<void> };
  let index: Server;
  let dir: string;
  let storage: string;
  let vscode: { Uri: { file(path: string): unknown } };
  const context = () => ({ subscriptions: [], extension: { packageJSON: manifest }, extensionUri: vscode.Uri.file(ROOT), globalStorageUri: vscode.Uri.file(storage) });
  const installs = () => fake.progress.filter((p) => p.title === TITLE);
  const state = () => `status: ${fake.statusItems[0]?.text}\nmessages: ${JSON.stringify(fake.messages)}\nlog:\n${fake.logLines.slice(-30).join("\n")}`;
  const venv = () => join(storage, "venv");

  /** Waits until pip talks to the index, cancels, and checks pip died and nothing is left. */
  async function cancelWhilePipRuns(count: number): Promise<void> {
    const install = await until("the install notification", () => installs()[count - 1], 120000, state);
    assert.equal(install.cancellable, true);
    const connected = sockets.length;
    await until("pip asking the index", () => sockets.length > connected, 180000, state);
    assert.ok(install.messages.some((m) => m.startsWith("installing msprof-lsp")), install.messages.join(" | "));
    const asked = sockets[sockets.length - 1];
    let closed = false;
    asked.once("close", () => (closed = true));
    install.cancel();
    await until("the cancelled status", () => fake.statusItems[0]?.text === "$(cloud-download) msprof: not installed", 60000, state);
    await until("pip's connection closing", () => closed, 30000, state); // pip was killed
    assert.ok(!existsSync(venv()), "a half environment was left behind");
    assert.ok(!existsSync(join(storage, "install.lock")));
    assert.ok(String(fake.statusItems[0].tooltip).includes("install was cancelled"), String(fake.statusItems[0].tooltip));
    assert.ok(fake.logLines.some((l) => l === `info Install cancelled; removed ${venv()}.`), state());
    assert.deepEqual(fake.messages.filter((m) => m.kind === "error"), []);
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "msprof-firststart-"));
    // A package index that accepts connections and never answers: pip waits until killed.
    index = createServer((socket) => {
      sockets.push(socket);
      socket.resume(); // reads (and drops) the request, so that pip hanging up is seen
    });
    await new Promise<void>((done) => index.listen(0, "127.0.0.1", () => done()));
    const url = `http://127.0.0.1:${(index.address() as { port: number }).port}/simple/`;
    for (const key of Object.keys(process.env)) if (key.startsWith("PIP_")) delete process.env[key];
    Object.assign(process.env, { PIP_CONFIG_FILE: devNull, PIP_INDEX_URL: url, PIP_FIND_LINKS: "", PIP_NO_CACHE_DIR: "1", PIP_RETRIES: "0", PIP_TIMEOUT: "600" });
    const bin = join(dir, "bin");
    mkdirSync(bin);
    writeFileSync(join(bin, "python3"), `#!/bin/sh\nexec ${JSON.stringify(FOUND!.base)} -S "$@"\n`);
    chmodSync(join(bin, "python3"), 0o755);
    process.env.PATH = `${bin}:${process.env.PATH}`;
    storage = join(dir, "globalStorage");
    mkdirSync(join(dir, "workspace"));
    undo = installFakeVscode(fake);
    vscode = require("vscode");
    fake.workspaceFolders = [{ uri: vscode.Uri.file(join(dir, "workspace")), name: "workspace", index: 0 }];
    bundle = require(join(ROOT, "dist", "extension.js"));
  });

  after(async () => {
    await bundle?.deactivate();
    undo?.();
    for (const socket of sockets) socket.destroy();
    index?.close();
    for (const key of Object.keys(process.env)) if (!(key in savedEnv)) delete process.env[key];
    Object.assign(process.env, savedEnv);
  });

  test("no profile and no command: nothing is installed, the status says when it will be", async () => {
    bundle.activate(context());
    await until("the not-installed status", () => fake.statusItems[0]?.text === "$(cloud-download) msprof: not installed", 60000, state);
    assert.equal(installs().length, 0);
    assert.ok(!existsSync(venv()));
    assert.ok(String(fake.statusItems[0].tooltip).includes("when a profile appears in the workspace"));
    // The watcher looks for what activates the extension: the manifest's profile globs.
    assert.deepEqual(fake.watchers.map((w) => w.glob), [profileGlob(manifest.activationEvents)]);
    assert.ok(fake.watchers[0].glob.includes("**/*_ascend_pt/profiler_info*.json"));
  });

  test("a profile appearing starts the install; Cancel kills pip and leaves no environment", async () => {
    fake.watchers[0].create(join(dir, "workspace", "run_ascend_pt", "profiler_info_0.json"));
    await cancelWhilePipRuns(1);
    assert.ok(fake.watchers[0].disposed, "the watcher outlived the install");
  });

  test("a profile found at activation starts the install", async () => {
    await bundle.deactivate();
    fake.statusItems = [];
    fake.commands.clear();
    fake.foundFiles = [join(dir, "workspace", "PROF_1", "msprof_1.db")];
    bundle.activate(context());
    await cancelWhilePipRuns(2);
  });

  test("without a profile, Restart server starts the install", async () => {
    fake.foundFiles = [];
    await bundle.deactivate();
    fake.statusItems = [];
    fake.commands.clear();
    bundle.activate(context());
    await until("the not-installed status", () => fake.statusItems[0]?.text === "$(cloud-download) msprof: not installed", 60000, state);
    assert.equal(installs().length, 2);
    void fake.commands.get("msprof-lsp.restart")!(); // settles only after the install
    await cancelWhilePipRuns(3);
  });
});
