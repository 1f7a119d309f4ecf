// "Record a profile": the command line built from the setting (run for real through a shell, with
// a path that needs quoting), the order save -> adoptNewProfile -> terminal, and the refusals.

import assert from "node:assert/strict";
import { execSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";

import { type Interpreter } from "../src/interpreter";
import {
  DEFAULT_RECORD_COMMAND,
  PROFILE_ENV,
  type RecordDeps,
  TERMINAL_NAME,
  UNTRUSTED_MESSAGE,
  recordCommandLine,
  recordProfile,
} from "../src/record";

const POSIX = process.platform !== "win32";
const PY: Interpreter = { command: "/opt/py env/bin/python", args: [], source: "setting" };

describe("recordCommandLine", () => {
  test("the default runs the active file with the extension's interpreter, quoted", () => {
    assert.equal(DEFAULT_RECORD_COMMAND, "${python} ${file}");
    const line = recordCommandLine("", { interpreter: PY, file: "/w/my run/train.py", platform: "linux" });
    assert.deepEqual(line, { command: "'/opt/py env/bin/python' '/w/my run/train.py'" });
  });

  test("an interpreter with arguments and the other variables", () => {
    const conda: Interpreter = { command: "conda", args: ["run", "-n", "npu"], source: "python-extension" };
    const line = recordCommandLine("torchrun --nproc-per-node 2 ${fileDirname}/train.py --steps 8 # ${workspaceFolder}", {
      interpreter: conda, file: "/w/src/train.py", workspaceFolder: "/w", platform: "linux",
    });
    assert.deepEqual(line, { command: "torchrun --nproc-per-node 2 /w/src/train.py --steps 8 # /w" });
    assert.deepEqual(recordCommandLine("${python} -m train", { interpreter: conda, platform: "linux" }),
      { command: "conda run -n npu -m train" });
  });

  test("a variable with nothing behind it is refused, not left empty", () => {
    const noFile = recordCommandLine(undefined, { interpreter: PY, platform: "linux" });
    assert.ok("error" in noFile && noFile.error.includes("open the training script"));
    const noFolder = recordCommandLine("cd ${workspaceFolder} && make", { interpreter: PY, file: "/t.py", platform: "linux" });
    assert.ok("error" in noFolder && noFolder.error.includes("no folder is open"));
  });
});

function deps(overrides: Partial<RecordDeps>, log: string[]): RecordDeps {
  return {
    trusted: true,
    offerTrust: async (text) => log.push(`trust ${text}`),
    template: undefined,
    vars: { interpreter: PY, file: "/w/train.py", workspaceFolder: "/w", platform: "linux" },
    save: async () => log.push("save"),
    adopt: async () => {
      log.push("adopt");
      return { current: "/w/msprof_profiles/a.pt.trace.json" };
    },
    createTerminal: (options) => {
      log.push(`terminal ${options.name} ${JSON.stringify(options.env)} cwd=${options.cwd}`);
      return { show: () => log.push("show"), sendText: (text) => log.push(`send ${text}`) };
    },
    notify: (kind, text) => log.push(`${kind} ${text}`),
    ...overrides,
  };
}

describe("recordProfile", () => {
  test("saves, tells the server, then runs the command with the variable set", async () => {
    const log: string[] = [];
    const outcome = await recordProfile(deps({}, log));
    assert.deepEqual(outcome, { ran: "'/opt/py env/bin/python' /w/train.py", baseline: "/w/msprof_profiles/a.pt.trace.json" });
    assert.deepEqual(log.slice(0, 5), [
      "save",
      "adopt",
      `terminal ${TERMINAL_NAME} {"${PROFILE_ENV}":"1"} cwd=/w`,
      "show",
      "send '/opt/py env/bin/python' /w/train.py",
    ]);
    assert.match(log[5], /^info .*compared with \/w\/msprof_profiles\/a\.pt\.trace\.json/);
  });

  test("the first recording has no baseline", async () => {
    const log: string[] = [];
    const outcome = await recordProfile(deps({ adopt: async () => ({ current: null }) }, log));
    assert.deepEqual(outcome, { ran: "'/opt/py env/bin/python' /w/train.py", baseline: null });
  });

  test("no server, no recording (the new profile would not become current with a baseline)", async () => {
    const log: string[] = [];
    const outcome = await recordProfile(deps({ adopt: async () => undefined }, log));
    assert.ok("error" in outcome);
    assert.ok(!log.some((l) => l.startsWith("terminal")));
  });

  test("an untrusted workspace: refused with the offer to manage trust; nothing saved, asked or run", async () => {
    const log: string[] = [];
    const outcome = await recordProfile(deps({ trusted: false }, log));
    assert.deepEqual(outcome, { error: UNTRUSTED_MESSAGE });
    assert.deepEqual(log, [`trust ${UNTRUSTED_MESSAGE}`]);
    assert.match(UNTRUSTED_MESSAGE, /not trusted.*Trust the workspace/);
  });

  test("no file open: nothing saved or sent", async () => {
    const log: string[] = [];
    const outcome = await recordProfile(deps({ vars: { interpreter: PY, platform: "linux" } }, log));
    assert.ok("error" in outcome);
    assert.deepEqual(log.map((l) => l.split(" ")[0]), ["error"]);
  });

  test("the command it sends runs in a shell, with the variable, from a path that needs quoting", { skip: POSIX ? false : "POSIX shell" }, async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "msprof-record-")), "my run");
    mkdirSync(dir);
    const script = join(dir, "train's.js");
    const out = join(dir, "seen.txt");
    writeFileSync(script, `require("node:fs").writeFileSync(${JSON.stringify(out)}, String(process.env.${PROFILE_ENV}));\n`);
    const node: Interpreter = { command: process.execPath, args: [], source: "setting" };
    const outcome = await recordProfile({
      ...deps({}, []),
      vars: { interpreter: node, file: script, workspaceFolder: dir, platform: process.platform },
      createTerminal: (options) => ({
        show() {},
        sendText: (text) => execSync(text, { cwd: options.cwd, env: { ...process.env, ...options.env }, shell: "/bin/sh" }),
      }),
    });
    assert.ok("ran" in outcome);
    assert.equal(readFileSync(out, "utf8"), "1");
  });
});
