// The rendering test of the "Show profile" webview: headless chromium loads the page the extension
// writes (pageHtml, its CSP and nonce) with the built dist/webview.js and dist/webview.css, a stub
// of the webview API that answers "ready" with the CNN sample's real report model, and the
// report's self-test click. The webview must draw what the HTML report draws, resolve the click to
// the same file:line the HTML report does (tests/server/check/report/test_html_report.py checks that one against
// the profile) and post it to the extension, under the CSP without a violation, in theme colours.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, test } from "node:test";

import { makeNonce, pageHtml } from "../src/webview/page";
import { NO_PYTHON, PYTHON, REPO, run } from "./checkRun";

const DIST = join(__dirname, "..", "..", "dist");
const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"].find((p) => existsSync(p));

function dumpDom(url: string): string {
  const out = spawnSync(CHROMIUM!, ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000", "--virtual-time-budget=10000", "--dump-dom", url], {
    encoding: "utf8",
    timeout: 120_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  assert.equal(out.status, 0, out.stderr);
  return out.stdout;
}

/** The value of `attr` on the element with `id`, from a dumped DOM. */
function attrOf(dom: string, id: string, attr: string): string | undefined {
  const tag = new RegExp(`<[a-z]+ [^>]*id="${id}"[^>]*>`).exec(dom)?.[0];
  const value = tag ? new RegExp(` ${attr}="([^"]*)"`).exec(tag)?.[1] : undefined;
  return value?.replace(/&quot;/g, '"').replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

const count = (dom: string, cls: string) => [...dom.matchAll(new RegExp(`class="(?:[^"]* )?${cls}(?: [^"]*)?"`, "g"))].length;

const skip = !CHROMIUM ? "chromium is not installed (.ci/run installs Debian's chromium)" : !PYTHON ? NO_PYTHON : false;

describe("the webview page in chromium", { skip }, () => {
  test("draws the sample's report, posts the hot kernel's line, no CSP violation, theme colours", () => {
    const dir = mkdtempSync(join(tmpdir(), "msprof-webview-"));
    const report = join(dir, "report.html");
    run(PYTHON!, ["-I", "-m", "msprof_lsp.server", "--check", "samples/cnn_classifier", "--profile", "samples/cnn_classifier/npu_profile",
      "--format", "html", "--output", report, "--quiet", "--fail-on", "never"], REPO);
    const html = readFileSync(report, "utf8");
    const embedded = /<script type="application\/json" id="msprof-report-model">([\s\S]*?)<\/script>/.exec(html)?.[1];
    assert.ok(embedded, "the HTML report embeds its model");
    const model = JSON.parse(embedded);
    assert.ok(model.jobs.length >= 1);
    // What the HTML report's own self-test click resolves.
    const reportDom = dumpDom(pathToFileURL(report).href + "#selftest=click");
    const expected = attrOf(reportDom, "msprof-report", "data-opened");
    assert.ok(expected && /:\d+$/.test(expected), `the HTML report's click resolved ${expected}`);

    // The webview page: the extension's HTML; the test adds a theme (what VS Code injects) and
    // the webview API stub, both as files and the stub with the page's nonce, before the bundle.
    for (const f of ["webview.js", "webview.css"]) copyFileSync(join(DIST, f), join(dir, f));
    writeFileSync(join(dir, "theme.css"), ":root { --vscode-charts-blue: rgb(1, 2, 3); --vscode-editor-background: rgb(30, 30, 30); --vscode-editor-foreground: rgb(220, 220, 220); }\n");
    writeFileSync(
      join(dir, "stub.js"),
      `const MODEL = ${JSON.stringify(model)};
document.addEventListener("securitypolicyviolation", (e) => { document.body.dataset.violations = (document.body.dataset.violations || "") + e.violatedDirective + " "; });
window.acquireVsCodeApi = () => ({
  postMessage(m) {
    const posted = JSON.parse(document.body.dataset.posted || "[]");
    posted.push(m);
    document.body.dataset.posted = JSON.stringify(posted);
    if (m.type === "ready") window.postMessage({ type: "model", model: MODEL, note: "" }, "*");
    document.body.dataset.compute = getComputedStyle(document.getElementById("root")).getPropertyValue("--msprof-compute").trim();
  },
});
`,
    );
    const nonce = makeNonce();
    const page = pageHtml({ cspSource: "file:", nonce, scriptUri: "webview.js", styleUri: "webview.css" })
      .replace('<link rel="stylesheet"', '<link rel="stylesheet" href="theme.css">\n<link rel="stylesheet"')
      .replace(`<script nonce="${nonce}" src="webview.js">`, `<script nonce="${nonce}" src="stub.js"></script>\n<script nonce="${nonce}" src="webview.js">`);
    writeFileSync(join(dir, "page.html"), page.replace("<body>", '<body id="body">'));
    const dom = dumpDom(pathToFileURL(join(dir, "page.html")).href + "#selftest=click");

    assert.equal(attrOf(dom, "root", "data-rendered"), "true", "the page script ran under the CSP");
    assert.equal(attrOf(dom, "body", "data-violations"), undefined, "no CSP violation");
    assert.equal(count(dom, "msprof-job"), model.jobs.length);
    assert.equal(count(dom, "msprof-job"), count(reportDom, "msprof-job"));
    for (const cls of ["msprof-bar", "msprof-lane", "msprof-hotspot", "msprof-cell", "msprof-rank-bar"]) {
      assert.equal(count(dom, cls), count(reportDom, cls), `${cls}: the webview draws what the HTML report draws`);
    }
    assert.equal(count(dom, "msprof-bar"), model.jobs.reduce((n: number, j: { breakdown: unknown[] }) => n + j.breakdown.length, 0));
    assert.ok(count(dom, "msprof-hotspot") > 0);

    assert.equal(attrOf(dom, "root", "data-opened"), expected, "the click resolves the hot kernel's line");
    const posted = JSON.parse(attrOf(dom, "body", "data-posted") ?? "[]") as { type: string; path?: string; line?: number }[];
    const [path, line] = [expected.slice(0, expected.lastIndexOf(":")), Number(expected.slice(expected.lastIndexOf(":") + 1))];
    assert.deepEqual(posted, [{ type: "ready" }, { type: "open", path, line }]);
    assert.equal(attrOf(dom, "body", "data-compute"), "rgb(1, 2, 3)", "the compute colour comes from the theme");
  });
});
