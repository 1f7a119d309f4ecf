import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import {
  answerConfiguration,
  classifyChange,
  type Inspection,
  type ManifestLike,
  serverSettingKeys,
  serverSettings,
  shouldNotify,
} from "../src/settings";

const manifest = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8")) as {
  contributes: { configuration: { properties: Record<string, { type: unknown; default: unknown }> } };
};
const properties = manifest.contributes.configuration.properties;
const CLIENT_ONLY = ["msprof-lsp.interpreter", "msprof-lsp.trace.server", "msprof-lsp.gutterHeat", "msprof-lsp.showNotifications", "msprof-lsp.recordCommand"];

describe("server keys from the manifest", () => {
  const keys = serverSettingKeys(manifest as ManifestLike);

  test("every msprof-lsp.* property except the client-only ones", () => {
    const expected = Object.keys(properties)
      .filter((name) => !CLIENT_ONLY.includes(name))
      .map((name) => name.replace(/^msprof-lsp\./, ""));
    assert.deepEqual(keys, expected);
    for (const name of CLIENT_ONLY) assert.ok(name in properties, `${name} missing from package.json`);
    for (const key of ["profile", "select", "ignore", "severity", "minShare", "rank", "pathMappings", "codeLens", "inlayHints", "baseline", "cacheDir"]) {
      assert.ok(keys.includes(key), `design.md key ${key} missing`);
    }
    assert.ok(!keys.includes("interpreter") && !keys.includes("gutterHeat") && !keys.includes("trace.server"));
  });

  test("an array of configuration blocks and foreign keys are handled", () => {
    const m: ManifestLike = {
      contributes: {
        configuration: [
          { properties: { "msprof-lsp.profile": {}, "python.x": {} } },
          { properties: { "msprof-lsp.rank": {}, "msprof-lsp.gutterHeat": {} } },
        ],
      },
    };
    assert.deepEqual(serverSettingKeys(m), ["profile", "rank"]);
    assert.deepEqual(serverSettingKeys({}), []);
  });
});

describe("serverSettings: initializationOptions and configuration answers", () => {
  const keys = serverSettingKeys(manifest as ManifestLike);
  // What VS Code's inspect() reports: every key has its manifest default, a few are set by the user.
  const user: Record<string, Inspection> = {
    profile: { globalValue: "/data/prof_user", workspaceFolderValue: "runs/rank0_ascend_pt" },
    minShare: { workspaceValue: 0.05 },
    rank: { globalValue: 0 },
    select: { globalValue: Object.freeze(["NPU1", "NPU2"]) },
    severity: { workspaceValue: { NPU101: "error" } },
    codeLens: { globalValue: false },
    baseline: { globalValue: null },
    smallKernelUs: { workspaceFolderValue: 20 },
    interpreter: { globalValue: "/opt/python" },
    gutterHeat: { globalValue: false },
  };
  const inspect = (key: string): Inspection => ({ defaultValue: properties[`msprof-lsp.${key}`]?.default, ...user[key] });
  const flat = serverSettings(keys, inspect);

  test("only explicitly set server keys, the most specific scope winning", () => {
    assert.deepEqual(flat, {
      profile: "runs/rank0_ascend_pt",
      minShare: 0.05,
      rank: 0,
      select: ["NPU1", "NPU2"],
      severity: { NPU101: "error" },
      codeLens: false,
      baseline: null,
      smallKernelUs: 20,
    });
  });

  test("defaults are not sent, so pyproject.toml values still apply", () => {
    for (const key of ["ignore", "inlayHints", "pathMappings", "cacheDir", "compileBackend", "freeMaxPercent"]) {
      assert.ok(!(key in flat), `${key} sent although unset`);
    }
  });

  test("types are kept: numbers, zero, booleans, arrays, objects", () => {
    assert.equal(typeof flat.minShare, "number");
    assert.equal(flat.rank, 0);
    assert.equal(flat.codeLens, false);
    assert.ok(Array.isArray(flat.select));
    assert.equal(typeof flat.severity, "object");
  });

  test("client-only keys never reach the server", () => {
    assert.ok(!("interpreter" in flat) && !("gutterHeat" in flat));
  });

  test("the result is plain data, detached from vscode's values", () => {
    (flat.select as string[]).push("NPU9");
    assert.deepEqual(user.select.globalValue, ["NPU1", "NPU2"]);
    assert.deepEqual(serverSettings(keys, inspect).select, ["NPU1", "NPU2"]);
  });
});

describe("answerConfiguration", () => {
  const keys = ["profile", "minShare", "rank"];
  const flats: Record<string, Record<string, unknown>> = {
    "file:///a": { profile: "runs/a", minShare: 0.02 },
    "": { profile: "runs/root" },
  };
  const flatFor = (scope: string | undefined) => flats[scope ?? ""] ?? {};

  test("our section gets the flat object per scope; other sections keep the client's answer", () => {
    const answers = answerConfiguration(
      [
        { section: "msprof-lsp", scopeUri: "file:///a" },
        { section: "msprof-lsp" },
        { section: "python.analysis", scopeUri: "file:///a" },
        { section: "msprof-lsp.minShare", scopeUri: "file:///a" },
        { section: "msprof-lsp.rank", scopeUri: "file:///a" },
        { section: "msprof-lsp.interpreter" },
      ],
      ["raw", "raw", { typeCheckingMode: "basic" }, 0.01, null, "/opt/python"],
      keys,
      flatFor,
    );
    assert.deepEqual(answers, [
      { profile: "runs/a", minShare: 0.02 },
      { profile: "runs/root" },
      { typeCheckingMode: "basic" },
      0.02,
      null, // unset: null, not the manifest default, so pyproject.toml still decides
      "/opt/python",
    ]);
  });
});

describe("classifyChange and shouldNotify", () => {
  const keys = ["profile", "minShare"];
  const affects = (changed: string[]) => (section: string) => changed.some((c) => c === section || c.startsWith(`${section}.`) || section.startsWith(`${c}.`));

  test("interpreter -> restart; server key -> resend; gutterHeat -> redraw", () => {
    assert.deepEqual(classifyChange(affects(["msprof-lsp.interpreter"]), keys), { restart: true, serverSettings: false, gutterHeat: false });
    assert.deepEqual(classifyChange(affects(["msprof-lsp.minShare"]), keys), { restart: false, serverSettings: true, gutterHeat: false });
    assert.deepEqual(classifyChange(affects(["msprof-lsp.gutterHeat"]), keys), { restart: false, serverSettings: false, gutterHeat: true });
    assert.deepEqual(classifyChange(affects(["editor.fontSize"]), keys), { restart: false, serverSettings: false, gutterHeat: false });
  });

  test("notification levels", () => {
    assert.equal(shouldNotify("off", "error"), false);
    assert.equal(shouldNotify("onError", "error"), true);
    assert.equal(shouldNotify("onError", "warning"), false);
    assert.equal(shouldNotify("onWarning", "warning"), true);
    assert.equal(shouldNotify("onWarning", "info"), false);
    assert.equal(shouldNotify("always", "info"), true);
    assert.equal(shouldNotify(undefined, "error"), true, "default is onError");
    assert.equal(shouldNotify("bogus", "warning"), false);
    assert.equal(properties["msprof-lsp.showNotifications"].default, "onError");
  });
});
