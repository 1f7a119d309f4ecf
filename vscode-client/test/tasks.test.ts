// The `msprof-lsp` task: its command line, the provider under the fake vscode module, and the real
// task process on the samples read through the contributed problem matcher, checked against the
// same run's `--format json` findings.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import { checkArgs, checkProcess, PROBLEM_MATCHER, TASK_TYPE } from "../src/checkTask";
import { NO_PYTHON, PYTHON, REPO, run, samplesJson } from "./checkRun";
import { withFakeVscode } from "./fakeVscode";
import { applyMatcher, type Matcher } from "./problemMatcher";

const manifest = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8"));
const matcher: Matcher = manifest.contributes.problemMatchers.find((m: Matcher) => `$${m.name}` === PROBLEM_MATCHER);

describe("check task definition -> command line", () => {
  test("concise output, the definition's options, paths after --", () => {
    assert.deepEqual(checkArgs({ type: TASK_TYPE }), ["--check", "--format", "concise", "--quiet"]);
    assert.deepEqual(
      checkArgs({ type: TASK_TYPE, paths: ["src", "-odd"], profile: "runs/a", baseline: "runs/b", rank: 1, select: ["NPU1", "NPU220"], ignore: ["NPU9"], failOn: "never" }),
      ["--check", "--format", "concise", "--quiet", "--profile", "runs/a", "--baseline", "runs/b", "--rank", "1", "--select", "NPU1,NPU220", "--ignore", "NPU9", "--fail-on", "never", "--", "src", "-odd"],
    );
    // Mistyped fields fall back to the CLI's defaults rather than producing a bad command line.
    const bad = { type: TASK_TYPE, rank: -1, failOn: "sometimes", paths: "src", select: [3] } as unknown as Parameters<typeof checkArgs>[0];
    assert.deepEqual(checkArgs(bad), ["--check", "--format", "concise", "--quiet"]);
  });

  test("runs isolated on the interpreter the server uses", () => {
    const p = checkProcess({ command: "/env/bin/python", args: ["-X", "utf8"], source: "setting" }, { type: TASK_TYPE });
    assert.deepEqual(p, { command: "/env/bin/python", args: ["-X", "utf8", "-I", "-m", "msprof_lsp.server", "--check", "--format", "concise", "--quiet"] });
  });

  test("package.json declares the task type's fields and the matcher the tasks use", () => {
    const def = manifest.contributes.taskDefinitions.find((d: { type: string }) => d.type === TASK_TYPE);
    assert.deepEqual(Object.keys(def.properties).sort(), ["baseline", "failOn", "ignore", "paths", "profile", "rank", "select"]);
    assert.deepEqual(def.properties.failOn.enum, ["error", "warning", "info", "hint", "never"]);
    assert.ok(matcher, "problem matcher msprof-lsp");
    assert.equal(matcher.owner, "msprof-lsp");
  });
});

describe("the matcher on lines of the concise format", () => {
  test("fields, severities and paths with colons", () => {
    const out = [
      "samples/m.py:25:41: warning NPU103 TransData: 4 kernels, 225 µs/step (6.7% of step), with 2 Cast.",
      "dir:x/a b.py:3:1: hint NPU101 ReLU→Dropout: 5 kernels.",
      "(profile): info NPU243 ACLNN_CACHE_LIMIT unset.",
      "msprof-lsp: job 1 of 4 under /ws: cnn/kineto: kineto, 1 rank (0)",
    ].join("\n");
    assert.deepEqual(applyMatcher(matcher, out, "/ws"), [
      { file: "/ws/samples/m.py", line: 25, column: 41, severity: "warning", code: "NPU103", message: "TransData: 4 kernels, 225 µs/step (6.7% of step), with 2 Cast." },
      { file: "/ws/dir:x/a b.py", line: 3, column: 1, severity: "info", code: "NPU101", message: "ReLU→Dropout: 5 kernels." },
    ]);
  });
});

describe("the task provider and the real task on the samples", { skip: PYTHON ? false : NO_PYTHON }, () => {
  const { fake, modules } = withFakeVscode(() => require("../src/tasks") as typeof import("../src/tasks"));

  test("one check task per folder; its process's output gives one marker per located finding", async () => {
    const tasks = modules();
    const folder = { uri: { fsPath: REPO }, name: "repo", index: 0 };
    fake.workspaceFolders = [folder];
    const interpreter = { command: PYTHON!, args: [], source: "setting" as const };
    const disposables = tasks.registerCheckTasks(() => Promise.resolve(interpreter));
    const provider = fake.taskProviders.get(TASK_TYPE)!;
    const provided = (await provider.provideTasks()) as { name: string; scope: unknown; problemMatchers: string[] }[];
    assert.equal(provided.length, 1);
    assert.equal(provided[0].name, "check");
    assert.equal(provided[0].scope, folder);
    assert.deepEqual(provided[0].problemMatchers, [PROBLEM_MATCHER]);

    // A tasks.json entry: resolved with its own definition, checking the samples folder.
    const definition = { type: TASK_TYPE, paths: ["samples"] };
    const task = (await provider.resolveTask({ definition, scope: folder, name: "samples" })) as {
      definition: unknown;
      name: string;
      execution: { process: string; args: string[]; options: { cwd: string } };
    };
    assert.equal(task.definition, definition);
    assert.equal(task.name, "samples");
    assert.equal(task.execution.process, PYTHON);
    assert.equal(task.execution.options.cwd, REPO);

    const output = run(task.execution.process, task.execution.args, task.execution.options.cwd);
    const markers = applyMatcher(matcher, output, REPO);
    const located = samplesJson(PYTHON!).findings.filter((f) => f.path !== null && f.line !== null);
    assert.ok(located.length >= 10, "the samples have findings");
    const expected = located.map((f) => ({
      file: join(REPO, f.path!),
      line: f.line,
      column: f.column,
      severity: f.severity === "hint" ? "info" : f.severity,
      code: f.code,
      message: f.message.split(/\s+/).join(" "),
    }));
    const key = (m: { file: string; line: number | null; column: number | null; code: string }) => `${m.file}:${m.line}:${m.column}:${m.code}`;
    assert.deepEqual([...markers].sort((a, b) => key(a).localeCompare(key(b))), expected.sort((a, b) => key(a).localeCompare(key(b))));
    for (const d of disposables) d.dispose();
  });
});
