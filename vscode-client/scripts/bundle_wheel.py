"""Build the product's wheel for the .vsix (vscode-client/bundled/) or for tests (--out DIR).

The wheel is built from a clean copy of what the wheel holds (pyproject.toml, README.md and the
package folders): an in-tree build reuses build/lib, where a module deleted from the sources
lives on and would be shipped. When the sources are unchanged since the last build (same digest),
the wheel already there is kept, so one `npm run check` builds it once.

Prints the wheel's path. Exit 1 with one line when the build fails.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What setuptools needs to build the wheel; the package folders are those of pyproject.toml's
# package-dir (tests/test_install_commands.py checks the wheel against the package list).
FILES = ("pyproject.toml", "README.md")
PACKAGE_DIRS = ("msprof_lsp", "mapping", "hints", "server")
DIGEST_FILE = ".source-digest"


def sources() -> list[Path]:
    out = [REPO / name for name in FILES]
    for folder in PACKAGE_DIRS:
        out += sorted(p for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    return out


def digest(files: list[Path]) -> str:
    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(REPO).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def build(out: Path) -> Path:
    files = sources()
    want = digest(files)
    wheels = sorted(out.glob("msprof_lsp-*.whl"))
    stamp = out / DIGEST_FILE
    if len(wheels) == 1 and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == want:
        return wheels[0]
    out.mkdir(parents=True, exist_ok=True)
    for old in wheels:
        old.unlink()
    stamp.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="msprof-wheel-") as tmp:
        src = Path(tmp) / "src"
        for path in files:
            target = src / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"bundle_wheel: `{' '.join(cmd)}` failed (exit {done.returncode})")
    wheels = sorted(out.glob("msprof_lsp-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"bundle_wheel: expected one msprof_lsp wheel in {out}, found {[w.name for w in wheels]}")
    stamp.write_text(want + "\n", encoding="utf-8")
    return wheels[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "vscode-client" / "bundled", help="folder for the wheel")
    args = parser.parse_args()
    print(build(args.out.resolve()))


if __name__ == "__main__":
    main()
