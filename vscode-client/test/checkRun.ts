// The real `msprof-lsp --check` on the repository's samples, for the client tests that read its
// output (problem matcher, task, Hotspots tree). Needs a Python with msprof-lsp installed: the
// project's .venv or $MSPROF_TEST_PYTHON; the tests skip with that reason otherwise.

import { execFileSync, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";

export const REPO = resolve(__dirname, "..", "..", "..");
const VENV_PYTHON = resolve(REPO, ".venv", "bin", "python");

function pythonWithServer(): string | undefined {
  for (const candidate of [process.env.MSPROF_TEST_PYTHON, VENV_PYTHON]) {
    if (!candidate || !existsSync(candidate)) continue;
    try {
      execFileSync(candidate, ["-I", "-c", "import msprof_lsp.server"], { stdio: "ignore" });
      return candidate;
    } catch {
      // try the next one
    }
  }
  return undefined;
}

export const PYTHON = process.platform === "win32" ? undefined : pythonWithServer();
export const NO_PYTHON = "needs a POSIX Python with msprof-lsp installed (the project's .venv or $MSPROF_TEST_PYTHON)";

/** Run a command to completion; --check exits 1 when it has findings, so only 2 and signals fail. */
export function run(command: string, args: readonly string[], cwd: string): string {
  const out = spawnSync(command, args, { cwd, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (out.error) throw out.error;
  if (out.status !== 0 && out.status !== 1) throw new Error(`${command} ${args.join(" ")} exited ${out.status}: ${out.stderr}`);
  return out.stdout;
}

export interface JsonFinding {
  code: string;
  severity: string;
  path: string | null;
  line: number | null;
  column: number | null;
  message: string;
}

export interface JsonHotspot {
  path: string;
  line: number;
  end_line: number;
  column: number;
  code: string;
  device_time_us: number;
  share: number;
  ops: { name: string; time_us: number; count: number }[];
}

let cached: { findings: JsonFinding[]; hotspots: JsonHotspot[]; profiles: { hotspots?: JsonHotspot[] }[] } | undefined;

/** `--check samples --format json`, run once per test process (from the repository root). */
export function samplesJson(python: string): NonNullable<typeof cached> {
  cached ??= JSON.parse(run(python, ["-I", "-m", "msprof_lsp.server", "--check", "--format", "json", "--quiet", "samples"], REPO));
  return cached!;
}
