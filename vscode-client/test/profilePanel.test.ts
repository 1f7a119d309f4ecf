// The "Show profile" webview: the page the extension writes (CSP, nonce, our files only), the
// messages it accepts, and the panel under the fake vscode module: model from the server command,
// redraw on reload, a click message opening the right file and line and nothing outside the base.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { CMD_REPORT_MODEL, CMD_SHOW_PROFILE, VIEW_PROFILE } from "../src/constants";
import { contentSecurityPolicy, makeNonce, pageHtml, parseFromPage, resolveSource } from "../src/webview/page";
import { withFakeVscode } from "./fakeVscode";

describe("the webview page", () => {
  test("CSP: nothing by default, the nonce'd script, styles and images from the extension only", () => {
    assert.equal(
      contentSecurityPolicy("https://x.vscode-cdn.net", "abc"),
      "default-src 'none'; script-src 'nonce-abc'; style-src https://x.vscode-cdn.net; img-src https://x.vscode-cdn.net data:; font-src https://x.vscode-cdn.net",
    );
  });

  test("one script, with the nonce and our bundle; no inline code, no unsafe sources", () => {
    const nonce = makeNonce();
    const html = pageHtml({ cspSource: "https://x", nonce, scriptUri: "https://x/dist/webview.js", styleUri: "https://x/dist/webview.css" });
    const csp = /<meta http-equiv="Content-Security-Policy" content="([^"]+)">/.exec(html)?.[1];
    assert.equal(csp, contentSecurityPolicy("https://x", nonce));
    const scripts = [...html.matchAll(/<script([^>]*)>([\s\S]*?)<\/script>/g)];
    assert.equal(scripts.length, 1);
    assert.equal(scripts[0][1], ` nonce="${nonce}" src="https://x/dist/webview.js"`);
    assert.equal(scripts[0][2], "");
    assert.ok(html.includes('<link rel="stylesheet" href="https://x/dist/webview.css">'));
    assert.ok(!/unsafe-|\son\w+=|style="/.test(html));
  });

  test("nonces are 128 random bits, fresh each time", () => {
    const a = makeNonce();
    assert.equal(Buffer.from(a, "base64").length, 16);
    assert.notEqual(a, makeNonce());
  });

  test("messages from the page are checked", () => {
    assert.deepEqual(parseFromPage({ type: "open", path: "m.py", line: 25 }), { type: "open", path: "m.py", line: 25 });
    assert.deepEqual(parseFromPage({ type: "ready" }), { type: "ready" });
    for (const bad of [null, "open", { type: "open", path: "m.py", line: 0 }, { type: "open", path: "m.py", line: 2.5 }, { type: "open", path: "", line: 1 }, { type: "run", path: "x" }]) {
      assert.equal(parseFromPage(bad), undefined, JSON.stringify(bad));
    }
  });

  test("a clicked path resolves under the model's base, never outside it", () => {
    assert.equal(resolveSource("/ws", "samples/m.py"), "/ws/samples/m.py");
    assert.equal(resolveSource("/ws", "a/../b.py"), "/ws/b.py");
    assert.equal(resolveSource("/ws", "../etc/passwd"), undefined);
    assert.equal(resolveSource("/ws", "/etc/passwd"), undefined);
    assert.equal(resolveSource("", "m.py"), undefined);
  });
});

describe("the profile panel (fake vscode)", () => {
  const { fake, modules } = withFakeVscode(() => require("../src/profilePanel") as typeof import("../src/profilePanel"));

  test("draws the server's model, redraws on reload, opens clicked lines", async () => {
    const mod = modules();
    const model = { version: 1, tool_version: "0.1.0", base: "/ws", jobs: [] };
    const requests: string[] = [];
    const panel = new mod.ProfilePanel({ fsPath: "/ext", scheme: "file" } as never, {
      request: (command: string) => (requests.push(command), Promise.resolve(model)),
    });
    const disposables = mod.registerProfilePanel(panel);
    await panel.profileChanged("loaded"); // no panel yet: nothing is fetched
    assert.deepEqual(requests, []);

    await fake.commands.get(CMD_SHOW_PROFILE)!();
    assert.equal(fake.panels.length, 1);
    const p = fake.panels[0];
    assert.equal(p.viewType, VIEW_PROFILE);
    assert.equal(p.options.enableScripts, true);
    assert.deepEqual(p.options.localResourceRoots!.map((u) => u.fsPath), ["/ext/dist"]);
    assert.ok(p.html.includes('src="https://fake.vscode-cdn.net/ext/dist/webview.js"'));
    assert.ok(p.html.includes("default-src 'none'; script-src 'nonce-"));

    await p.fromPage({ type: "ready" });
    assert.deepEqual(requests, [CMD_REPORT_MODEL]);
    assert.deepEqual(p.posted, [{ type: "model", model, note: "" }]);

    await p.fromPage({ type: "open", path: "samples/cnn_classifier/model.py", line: 25 });
    const shown = fake.shown.at(-1) as { uri: { fsPath: string }; options: { selection: { start: { line: number } } } };
    assert.equal(shown.uri.fsPath, "/ws/samples/cnn_classifier/model.py");
    assert.equal(shown.options.selection.start.line, 24);
    const before = fake.shown.length;
    await p.fromPage({ type: "open", path: "../../etc/passwd", line: 1 });
    await p.fromPage({ type: "open", path: "/etc/passwd", line: 1 });
    assert.equal(fake.shown.length, before, "nothing outside the model's base is opened");

    await panel.profileChanged("loading");
    assert.deepEqual(p.posted.at(-1), { type: "model", model: null, note: "Loading the profile…" });
    await panel.profileChanged("loaded");
    assert.deepEqual(requests, [CMD_REPORT_MODEL, CMD_REPORT_MODEL]);
    assert.deepEqual(p.posted.at(-1), { type: "model", model, note: "" });

    await fake.commands.get(CMD_SHOW_PROFILE)!(); // already open: brought forward
    assert.equal(fake.panels.length, 1);
    assert.equal(p.revealed, 1);
    p.dispose();
    await panel.profileChanged("loaded"); // closed: no more requests
    assert.equal(requests.length, 2);
    for (const d of disposables) d.dispose();
  });
});
