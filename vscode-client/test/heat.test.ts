import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { bucketOf, gutterIconDataUri, HEAT_BUCKETS, heatMarks, parseLineHeat } from "../src/heat";

describe("line heat -> gutter buckets", () => {
  test("bucket edges: >0, 2 %, 5 %, 10 % of step time", () => {
    const cases: [number, number][] = [
      [0.001, 0],
      [0.0199, 0],
      [0.02, 1],
      [0.0499, 1],
      [0.05, 2],
      [0.0999, 2],
      [0.1, 3],
      [0.95, 3],
    ];
    for (const [share, bucket] of cases) assert.equal(bucketOf(share), bucket, `share ${share}`);
    assert.equal(HEAT_BUCKETS.length, 4);
  });

  test("parse keeps well-formed entries only", () => {
    const raw = [
      { line: 4, share: 0.12, perStepUs: 50_000, label: "12.0% · 50 ms/step" },
      { line: -1, share: 0.5 }, // negative line
      { line: 2.5, share: 0.5 }, // not an integer
      { line: 7, share: 0 }, // no heat
      { line: 8, share: "0.3" }, // wrong type
      { line: 9, share: Number.NaN },
      null,
      "x",
      { line: 10, share: 0.03 }, // no perStepUs/label: still fine
    ];
    const parsed = parseLineHeat(raw);
    assert.deepEqual(parsed, [
      { line: 4, share: 0.12, perStepUs: 50_000, label: "12.0% · 50 ms/step" },
      { line: 10, share: 0.03, perStepUs: null, label: "" },
    ]);
    assert.deepEqual(parseLineHeat({ not: "a list" }), []);
    assert.deepEqual(parseLineHeat(null), []);
  });

  test("marks per bucket, in line order, within the document", () => {
    // A 20-line file: lines 3 and 15 very hot, 5 warm, 9 cool, 30 past the end (file shrank).
    const entries = parseLineHeat([
      { line: 15, share: 0.2, perStepUs: 80_000, label: "" },
      { line: 3, share: 0.11, perStepUs: 44_000, label: "" },
      { line: 5, share: 0.06, perStepUs: 24_000, label: "" },
      { line: 9, share: 0.004, perStepUs: 1_600, label: "" },
      { line: 30, share: 0.5, perStepUs: 200_000, label: "" },
    ]);
    const marks = heatMarks(entries, 20);
    assert.equal(marks.length, 4);
    assert.deepEqual(marks.map((bucket) => bucket.map((m) => m.line)), [[9], [], [5], [3, 15]]);
    assert.equal(marks[3][1].hover, "msprof: 20.0% of step time · 80 ms/step");
    assert.equal(marks[0][0].hover, "msprof: 0.4% of step time · 1.6 ms/step");
  });

  test("a line listed twice keeps its hottest entry; the server label is appended", () => {
    const entries = parseLineHeat([
      { line: 1, share: 0.03, perStepUs: 1000, label: "" },
      { line: 1, share: 0.07, perStepUs: 2000, label: "MatMulV2 ×12" },
    ]);
    const marks = heatMarks(entries, 5);
    assert.deepEqual(marks[1], []);
    assert.deepEqual(marks[2], [{ line: 1, hover: "msprof: 7.0% of step time · 2 ms/step — MatMulV2 ×12" }]);
  });

  test("gutter icons are SVG data URIs, wider and redder as the bucket gets hotter", () => {
    const svgs = HEAT_BUCKETS.map((b) => {
      const uri = gutterIconDataUri(b);
      assert.ok(uri.startsWith("data:image/svg+xml;base64,"));
      return Buffer.from(uri.split(",")[1], "base64").toString("utf8");
    });
    svgs.forEach((svg, i) => {
      assert.ok(svg.startsWith("<svg") && svg.includes(`fill="${HEAT_BUCKETS[i].color}"`));
      assert.ok(svg.includes(`width="${HEAT_BUCKETS[i].barWidth}"`));
    });
    const widths = HEAT_BUCKETS.map((b) => b.barWidth);
    assert.deepEqual([...widths].sort((a, b) => a - b), widths);
    assert.equal(new Set(HEAT_BUCKETS.map((b) => b.color)).size, 4);
  });
});
