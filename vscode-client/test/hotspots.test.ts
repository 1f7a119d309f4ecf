import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { hotspotItems, operatorItems, parseHotspots, topOp } from "../src/hotspots";

// The `hotspots` list in design.md's JSON output shape (1-based lines), plus absolute path and uri.
const result = {
  hotspots: [
    {
      path: "/ws/train/model.py",
      uri: "file:///ws/train/model.py",
      line: 42,
      end_line: 44,
      device_time_us: 123_400,
      share: 0.318,
      calls: 120,
      ops: [
        { name: "aclnnAdd", type: "Add", core: "AI_VECTOR_CORE", time_us: 1_200, count: 120 },
        { name: "MatMulV2", type: "MatMulV2", core: "AI_CORE", time_us: 110_000, count: 120 },
      ],
    },
    { path: "/ws/train/data.py", uri: "file:///ws/train/data.py", line: 7, end_line: 7, device_time_us: 900, share: 0.004, calls: 1, ops: [] },
    { path: "", uri: "", line: 3 }, // no location: skipped
    { path: "/ws/x.py", line: 0 }, // lines are 1-based: skipped
  ],
};

describe("hotspot quick pick", () => {
  const hotspots = parseHotspots(result);

  test("parse keeps located entries with 1-based lines", () => {
    assert.equal(hotspots.length, 2);
    assert.equal(hotspots[0].endLine, 44);
    assert.deepEqual(parseHotspots({}), []);
    assert.deepEqual(parseHotspots([result]), []);
  });

  test("rows read path:line — share — top op and point at 0-based lines", () => {
    const items = hotspotItems(hotspots, (p) => p.replace("/ws/", ""));
    assert.equal(items[0].label, "train/model.py:42 — 31.8% — MatMulV2");
    assert.equal(items[0].detail, "123 ms device time · 120 calls · 2 ops");
    assert.equal(items[0].line, 41);
    assert.equal(items[0].endLine, 43);
    assert.equal(items[0].uri, "file:///ws/train/model.py");
    assert.equal(items[1].label, "train/data.py:7 — 0.4% — no ops");
    assert.equal(items[1].line, 6);
  });

  test("top op is the one with the most device time", () => {
    assert.equal(topOp(hotspots[0].ops)?.name, "MatMulV2");
    assert.equal(topOp([]), undefined);
  });

  test("operator rows for the code-lens command, hottest first", () => {
    const rows = operatorItems({ ops: result.hotspots[0].ops });
    assert.deepEqual(rows.map((r) => r.label), ["MatMulV2", "aclnnAdd"]);
    assert.equal(rows[0].description, "MatMulV2 · AI_CORE");
    assert.equal(rows[0].detail, "110 ms device time · 120 launches");
    assert.deepEqual(operatorItems(undefined), []);
  });
});
