"""No product function over 80 lines (issue 24, "Size"): a long function is split into named
steps that read as the algorithm. Lines run from the ``def`` line to the last line of the body
(a nested function counts in its parent too). The allowlist names each exception and why; an
entry that is no longer needed fails too, so the list only shrinks."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("mapping", "hints", "server")
MAX_LINES = 80

ALLOWED: dict[str, str] = {}


def long_functions(source: str, where: str, limit: int = MAX_LINES) -> dict[str, int]:
    """``where::Qual.name`` -> line count of each function in ``source`` longer than ``limit``."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > limit:
                        found[f"{where}::{name}"] = lines
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source, where), "")
    return found


def _product_long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found.update(long_functions(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix()))
    return found


def test_no_function_over_the_limit():
    over = {k: n for k, n in _product_long_functions().items() if k not in ALLOWED}
    assert not over, "split these into named steps (or allowlist one with the reason):\n" + "\n".join(
        f"{k}: {n} lines" for k, n in sorted(over.items()))


def test_every_allowlisted_function_is_still_long():
    found = _product_long_functions()
    stale = [k for k in ALLOWED if k not in found]
    assert not stale, "no longer over the limit (or gone): drop from ALLOWED:\n" + "\n".join(stale)


def test_the_measure_finds_long_methods_and_nested_functions():
    def body(indent: int) -> str:  # the def line + 80 = 81 lines
        return "\n".join(" " * indent + f"x{i} = {i}" for i in range(MAX_LINES))

    source = (f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body(8)}\n\n\n"
              f"def outer():\n    def inner():\n{body(8)}\n    return inner\n")
    found = long_functions(source, "m.py")
    assert found == {"m.py::C.long": MAX_LINES + 1, "m.py::outer.inner": MAX_LINES + 1,
                     "m.py::outer": MAX_LINES + 3}
