// Shared by the first-start tests (bootstrap.test.ts, firstStart.test.ts): a Python that can make
// virtual environments, and polling for what the extension does in the background.

import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

const REPO = resolve(__dirname, "..", "..", "..");

function works(python: string, code: string): boolean {
  try {
    execFileSync(python, ["-c", code], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** A Python with pip (to fill the wheelhouse) and the base interpreter it was made from (what a
 * user's `python3` is: it can make virtual environments). */
export function pythons(): { pip: string; base: string } | undefined {
  if (process.platform === "win32") return undefined;
  for (const candidate of [process.env.MSPROF_TEST_PYTHON, join(REPO, ".venv", "bin", "python"), "python3"]) {
    if (!candidate || (candidate.includes("/") && !existsSync(candidate))) continue;
    if (!works(candidate, "import pip, sys; assert sys.version_info >= (3, 10)")) continue;
    const base = execFileSync(candidate, ["-c", "import sys; print(getattr(sys, '_base_executable', sys.executable))"], { encoding: "utf8" }).trim();
    if (works(base, "import venv, ensurepip")) return { pip: candidate, base };
  }
  return undefined;
}

export async function until<T>(what: string, probe: () => T | undefined | false, timeoutMs: number, context: () => string): Promise<T> {
  const start = Date.now();
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}\n${context()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
