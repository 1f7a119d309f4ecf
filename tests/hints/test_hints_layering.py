"""hints imports neither the server, pygls/lsprotocol, nor torch/torch_npu (it parses user code,
never imports or runs it)."""

from __future__ import annotations

import ast
from pathlib import Path

HINTS = Path(__file__).resolve().parents[2] / "hints"
FORBIDDEN = ("torch", "torch_npu", "pygls", "lsprotocol", "msprof_lsp.server")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
    return out


def test_no_forbidden_imports_in_hints():
    bad = []
    for path in sorted(HINTS.rglob("*.py")):
        for mod in _imports(path):
            if any(mod == f or mod.startswith(f + ".") for f in FORBIDDEN):
                bad.append(f"{path.relative_to(HINTS.parent)}: {mod}")
    assert not bad, bad


def test_no_exec_or_eval_in_hints():
    for path in sorted(HINTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("exec", "eval", "__import__"), f"{path}: {node.func.id}"
