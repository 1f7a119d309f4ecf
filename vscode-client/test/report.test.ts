// The report renderer's bundle is committed inside the Python package (the HTML report embeds it,
// the wheel carries it): it must be what a fresh build of src/report/ gives.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

const CLIENT = join(__dirname, "..", "..");
const ASSETS = join(CLIENT, "..", "server", "check", "report", "assets");

function check(assets?: string) {
  const args = [join(CLIENT, "report.build.mjs"), "--check", ...(assets ? [`--assets=${assets}`] : [])];
  return spawnSync(process.execPath, args, { encoding: "utf8" });
}

test("the committed report bundle equals a fresh build of src/report", () => {
  const run = check();
  assert.equal(run.status, 0, run.stderr);
});

test("the drift check fails on a bundle that differs from the sources", () => {
  const copy = mkdtempSync(join(tmpdir(), "report-assets-"));
  cpSync(ASSETS, copy, { recursive: true });
  assert.equal(check(copy).status, 0);
  const js = join(copy, "report.js");
  writeFileSync(js, readFileSync(js, "utf8").replace("msprof-timeline", "msprof-timelinX"));
  const run = check(copy);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /build:report/);
});
