import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { formatDuration, formatShare, parseProfileStatus, profileStatusView, serverStatusView, statusMenuItems } from "../src/status";

const loaded = {
  state: "loaded",
  kind: "torch_npu",
  path: "/data/run1/node0_123_ascend_pt",
  rank: 3,
  ranks: [0, 1, 2, 3],
  steps: 10,
  stepTimeUs: 412_500,
  mappedShare: 0.831,
  message: "",
};

describe("status bar text from profileStatus notifications", () => {
  test("loading shows the spinner", () => {
    const view = profileStatusView(parseProfileStatus({ state: "loading", path: "/data/run1" }));
    assert.ok(view.text.startsWith("$(sync~spin)"));
    assert.ok(view.tooltip.includes("/data/run1"));
    assert.equal(view.warning, false);
  });

  test("loaded shows kind · rank · step time", () => {
    const view = profileStatusView(parseProfileStatus(loaded));
    assert.equal(view.text, "$(flame) torch_npu · rank 3 · 413 ms/step");
    assert.ok(view.tooltip.includes("Profile: /data/run1/node0_123_ascend_pt"));
    assert.ok(view.tooltip.includes("Rank: 3 (ranks 0, 1, 2, 3)"));
    assert.ok(view.tooltip.includes("Steps: 10"));
    assert.ok(view.tooltip.includes("Mapped to source: 83.1% of device time"));
  });

  test("loaded with a start-here finding names the biggest saving", () => {
    const headline = "Start here: saves 2.1 ms/step · NPU104 dataloader-input · train.py:102";
    const view = profileStatusView(parseProfileStatus({ ...loaded, topCode: "NPU104", topSavingUs: 2100, headline }));
    assert.equal(view.text, "$(flame) torch_npu · rank 3 · 413 ms/step · saves 2.1 ms: NPU104");
    assert.ok(view.tooltip.includes(headline));
    const unknown = profileStatusView(parseProfileStatus({ ...loaded, topCode: "NPU105", topSavingUs: null, headline: "Start here: …" }));
    assert.ok(unknown.text.endsWith(" · start: NPU105"));
  });

  test("loaded without rank or step time leaves those parts out", () => {
    const view = profileStatusView(parseProfileStatus({ state: "loaded", kind: "kineto", path: "/t.json", rank: null, stepTimeUs: null }));
    assert.equal(view.text, "$(flame) kineto");
  });

  test("error shows a warning with the message in the tooltip", () => {
    const message = "trace_view.json line 1207: unexpected end of data (file still being written?)";
    const view = profileStatusView(parseProfileStatus({ state: "error", path: "/p", message }));
    assert.equal(view.text, "$(warning) msprof: profile error");
    assert.ok(view.tooltip.startsWith(message));
    assert.equal(view.warning, true);
  });

  test("none says no profile", () => {
    const view = profileStatusView(parseProfileStatus({ state: "none" }));
    assert.equal(view.text, "$(circle-slash) msprof: no profile");
  });

  test("server phases before any profile status", () => {
    assert.ok(serverStatusView("starting").text.startsWith("$(sync~spin)"));
    const failed = serverStatusView("failed", "msprof-lsp is not installed for python3.");
    assert.ok(failed.warning && failed.tooltip.includes("not installed"));
    assert.ok(serverStatusView("stopped").warning);
  });

  test("malformed payloads become an error state that says so, never a throw", () => {
    for (const payload of [null, 42, "loaded", [], { state: "exploded" }, {}]) {
      const status = parseProfileStatus(payload);
      assert.equal(status.state, "error", JSON.stringify(payload));
      assert.ok(status.message.includes("unreadable profile status"));
    }
    const odd = parseProfileStatus({ state: "loaded", rank: "3", ranks: [2, "x", 1, 2, -1, 1.5], stepTimeUs: "fast", steps: NaN });
    assert.equal(odd.rank, null);
    assert.deepEqual(odd.ranks, [1, 2]);
    assert.equal(odd.stepTimeUs, null);
    assert.equal(odd.steps, null);
  });
});

describe("formatting", () => {
  test("durations", () => {
    assert.equal(formatDuration(8.25), "8.3 µs");
    assert.equal(formatDuration(850), "850 µs");
    assert.equal(formatDuration(12_340), "12.3 ms");
    assert.equal(formatDuration(412_000), "412 ms");
    assert.equal(formatDuration(1_234_567), "1.23 s");
  });
  test("shares", () => {
    assert.equal(formatShare(0.1234), "12.3%");
    assert.equal(formatShare(1), "100.0%");
  });
});

describe("status menu", () => {
  test("ranks of a multi-rank profile, the current one marked", () => {
    const items = statusMenuItems(parseProfileStatus(loaded), true);
    const ranks = items.filter((i) => i.action?.kind === "rank");
    assert.deepEqual(ranks.map((i) => (i.action?.kind === "rank" ? i.action.rank : -1)), [0, 1, 2, 3]);
    assert.equal(ranks.filter((i) => i.description === "current").length, 1);
    assert.ok(ranks[3].label.includes("Rank 3") && ranks[3].description === "current");
    const kinds = items.map((i) => i.action?.kind).filter(Boolean);
    for (const kind of ["selectFolder", "selectFile", "hotspots", "reload", "baseline", "restart", "logs"]) assert.ok(kinds.includes(kind as never), kind);
  });

  test("a single-rank profile offers no rank choice; no hotspots before loading", () => {
    const single = statusMenuItems(parseProfileStatus({ ...loaded, ranks: [0], rank: 0 }), true);
    assert.equal(single.filter((i) => i.action?.kind === "rank").length, 0);
    const none = statusMenuItems(parseProfileStatus({ state: "none" }), true);
    assert.ok(!none.some((i) => i.action?.kind === "hotspots"));
  });

  test("without a running server only restart and logs remain", () => {
    const items = statusMenuItems(undefined, false);
    assert.deepEqual(items.map((i) => i.action?.kind), ["restart", "logs"]);
  });
});
