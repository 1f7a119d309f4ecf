// The Hotspots tree from the real `--check --format json` hotspots of the CNN sample's NPU profile
// (the shape msprof-lsp.showHotspots returns), and the provider under the fake vscode module.

import assert from "node:assert/strict";
import { before, describe, test } from "node:test";

import { parseHotspots } from "../src/hotspots";
import { hotspotTree } from "../src/views/hotspotTree";
import { type JsonHotspot, NO_PYTHON, PYTHON, REPO, samplesJson } from "./checkRun";
import { withFakeVscode } from "./fakeVscode";

const NPU_PROFILE = "samples/cnn_classifier/npu_profile/";

function npuHotspots(python: string): JsonHotspot[] {
  const all = samplesJson(python).hotspots as (JsonHotspot & { profile_path: string })[];
  return all.filter((h) => h.profile_path.startsWith(NPU_PROFILE)).map((h) => ({ ...h, path: `${REPO}/${h.path}` }));
}

const pct = (share: number) => `${(share * 100).toFixed(1)}%`;

describe("Hotspots tree: file -> line -> operators", { skip: PYTHON ? false : NO_PYTHON }, () => {
  let raw: JsonHotspot[];
  before(() => {
    raw = npuHotspots(PYTHON!);
  });

  test("every hotspot is one line node under its file, in the server's order, with its figures", () => {
    assert.ok(raw.length > 3, "the sample maps several lines");
    const tree = hotspotTree(parseHotspots({ hotspots: raw }), (p) => p.slice(REPO.length + 1));
    const lines = tree.flatMap((f) => f.children);
    assert.equal(lines.length, raw.length);
    const files = new Set(raw.map((h) => h.path));
    assert.equal(tree.length, files.size);
    for (const file of tree) {
      const own = raw.filter((h) => `${REPO}/${file.label}` === h.path);
      assert.deepEqual(file.children.map((c) => c.location.line + 1), own.map((h) => h.line), file.label);
      const share = own.reduce((a, h) => a + h.share, 0);
      assert.ok(share >= 0 && share <= 1);
      assert.ok(file.description.startsWith(`${own.length} hot line${own.length === 1 ? "" : "s"} · `), file.description);
      assert.ok(file.description.endsWith(` · ${pct(share)}`), file.description);
    }
    // Files by their summed share, hottest first.
    const sums = tree.map((f) => raw.filter((h) => h.path === `${REPO}/${f.label}`).reduce((a, h) => a + h.share, 0));
    assert.deepEqual([...sums].sort((a, b) => b - a), sums);
  });

  test("a line reads line:col and the call, µs/step and share as the server reports them", () => {
    const tree = hotspotTree(parseHotspots({ hotspots: raw }), (p) => p.slice(REPO.length + 1));
    const model = tree.find((f) => f.label === "samples/cnn_classifier/model.py")!;
    const top = raw.filter((h) => h.path.endsWith("cnn_classifier/model.py"))[0];
    const node = model.children[0];
    assert.equal(node.label, `${top.line}:${top.column} ${top.code}`);
    assert.equal(node.description, `${Number(top.device_time_us.toFixed(0))} µs/step · ${pct(top.share)}`);
    // The --check text report of this profile prints the same line: "15.4%  516 µs  model.py:25 / self.conv(x)".
    assert.equal(node.label, "25:41 self.conv(x)");
    assert.equal(node.description, "516 µs/step · 15.4%");
    assert.deepEqual(node.location, { path: top.path, uri: "", line: 24, endLine: top.end_line - 1, character: 40 });
    // Operators hottest first, each with its µs/step and launches in the capture.
    assert.equal(node.children.length, top.ops.length);
    const hottest = [...top.ops].sort((a, b) => b.time_us - a.time_us)[0];
    assert.equal(node.children[0].label, hottest.name);
    assert.ok(node.children[0].description.endsWith(` · ×${hottest.count}`), node.children[0].description);
    assert.ok(node.children.every((op) => op.location === node.location), "an operator opens its line");
    const ids = tree.flatMap((f) => [f.id, ...f.children.flatMap((l) => [l.id, ...l.children.map((o) => o.id)])]);
    assert.equal(new Set(ids).size, ids.length, "tree item ids are unique");
  });
});

describe("Hotspots tree ids", () => {
  test("two spans with the same line, column and text stay two rows with two ids", () => {
    const h = { path: "/ws/m.py", uri: "", line: 3, end_line: 3, column: 5, code: "f(x)", device_time_us: 10, share: 0.1, ops: [] };
    const [file] = hotspotTree(parseHotspots({ hotspots: [h, { ...h, device_time_us: 5, share: 0.05 }] }), (p) => p);
    assert.deepEqual(file.children.map((c) => c.id), ["/ws/m.py:3:5:f(x)", "/ws/m.py:3:5:f(x)#2"]);
    assert.equal(file.description, "2 hot lines · 15 µs/step · 15.0%");
  });
});

describe("Hotspots provider (fake vscode)", () => {
  const { fake, modules } = withFakeVscode(() => ({
    view: require("../src/views/hotspotsView") as typeof import("../src/views/hotspotsView"),
    open: require("../src/open") as typeof import("../src/open"),
    constants: require("../src/constants") as typeof import("../src/constants"),
  }));

  const payload = {
    hotspots: [
      { path: "/ws/m.py", uri: "file:///ws/m.py", line: 25, end_line: 26, column: 41, code: "self.conv(x)", device_time_us: 516, share: 0.154, calls: 4,
        ops: [{ name: "TransData", time_us: 100, count: 8 }, { name: "Conv2D", time_us: 300, count: 4 }] },
      { path: "/ws/t.py", uri: "file:///ws/t.py", line: 99, end_line: 99, column: 17, code: "optimizer.step()", device_time_us: 92.8, share: 0.028, calls: 2, ops: [] },
    ],
  };

  test("fetches on a loaded profile, empties otherwise, and drops a stale answer", async () => {
    const { view, open, constants } = modules();
    const requests: string[] = [];
    let answer: (value: unknown) => void = () => {};
    const provider = new view.HotspotsProvider({
      request: (command: string) => {
        requests.push(command);
        return new Promise((r) => (answer = r));
      },
    });
    const disposables = view.registerHotspotsView(provider);
    const tree = fake.treeViews.get(constants.VIEW_HOTSPOTS)!;
    assert.equal(tree.message, "The msprof-lsp server is not running.");

    const loading = provider.profileChanged("loaded");
    assert.deepEqual(requests, [constants.CMD_SHOW_HOTSPOTS]);
    const stale = answer;
    await provider.profileChanged("loading"); // a reload starts before the answer arrives
    stale(payload);
    await loading;
    assert.deepEqual(provider.getChildren(), []);
    assert.equal(tree.message, "Loading the profile…");

    const loaded = provider.profileChanged("loaded");
    answer(payload);
    await loaded;
    const files = provider.getChildren();
    assert.deepEqual(files.map((f: { label: string }) => f.label), ["/ws/m.py", "/ws/t.py"]);
    assert.equal(tree.message, undefined);
    assert.equal(tree.changes, 2); // the reload emptied it, the answer filled it; the stale answer changed nothing

    // Tree items: files expanded, lines collapsible with their operators, every row opens its line.
    const fileItem = provider.getTreeItem(files[0]);
    assert.equal(fileItem.collapsibleState, 2);
    assert.equal(fileItem.description, "1 hot line · 516 µs/step · 15.4%");
    const line = provider.getChildren(files[0])[0];
    const lineItem = provider.getTreeItem(line);
    assert.equal(lineItem.label, "25:41 self.conv(x)");
    assert.equal(lineItem.collapsibleState, 1);
    assert.equal(lineItem.command?.command, constants.CMD_OPEN_SOURCE);
    const ops = provider.getChildren(line);
    assert.deepEqual(ops.map((o: { label: string }) => o.label), ["Conv2D", "TransData"]);
    assert.equal(provider.getTreeItem(ops[0]).description, "300 µs/step · ×4");

    // The click: the command's argument opens m.py at line 25, column 41 (0-based 24, 40).
    fake.shown = [];
    await open.openSource(lineItem.command!.arguments![0]);
    assert.equal(fake.shown.length, 1);
    const shown = fake.shown[0] as { uri: { fsPath: string }; options: { selection: { start: { line: number; character: number } } } };
    assert.equal(shown.uri.fsPath, "/ws/m.py");
    assert.deepEqual([shown.options.selection.start.line, shown.options.selection.start.character], [24, 40]);

    // The server went away: the view empties and says so.
    await provider.profileChanged(undefined);
    assert.deepEqual(provider.getChildren(), []);
    assert.equal(tree.message, "The msprof-lsp server is not running.");
    for (const d of disposables) d.dispose();
  });
});
