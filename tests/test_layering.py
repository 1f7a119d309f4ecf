"""The layering of design.md, checked on the source: each arrow runs one way (inside mapping too:
reading profiles never depends on mapping to source), only `server` imports pygls/lsprotocol (and
not its application core, `server/analysis`, which knows neither front-end), the
product never imports torch, never calls exec/eval, and the language server never prints (stdout is
the JSON-RPC stream)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "mapping": ("msprof_lsp.hints", "msprof_lsp.server", "pygls", "lsprotocol", "torch", "torch_npu"),
    "hints": ("msprof_lsp.server", "pygls", "lsprotocol", "torch", "torch_npu"),
    "server": ("torch", "torch_npu"),
    # the application core sits between the rules and the two front-ends: it knows neither
    "server/analysis": ("pygls", "lsprotocol", "torch", "torch_npu", "msprof_lsp.server.lsp", "msprof_lsp.server.check"),
    "mapping/profile": ("msprof_lsp.mapping.source",),
}


def _imports(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package's installed name
                base = "msprof_lsp." + package.replace("/", ".")
                out.append((node.lineno, f"{base}.{node.module or ''}" if node.level == 1 else "msprof_lsp"))
            elif node.module:
                out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_each_arrow_runs_one_way(package):
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, name in _imports(tree, package):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[package]):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_only_the_mcp_adapter_imports_the_sdk():
    """``mcp`` is an optional extra (msprof-lsp[mcp]): nothing outside server/mcp may need it."""
    bad = []
    for package in ("mapping", "hints", "server", "msprof_lsp"):
        for path in sorted((REPO / package).rglob("*.py")):
            if (REPO / "server" / "mcp") in path.parents:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            bad += [f"{path.relative_to(REPO)}:{line} imports {name}" for line, name in _imports(tree, package)
                    if name == "mcp" or name.startswith("mcp.")]
    assert not bad, "\n".join(bad)


def test_language_server_never_prints():
    bad = []  # the MCP server's stdout is its JSON-RPC stream too
    for path in sorted([*(REPO / "server" / "lsp").rglob("*.py"), *(REPO / "server" / "mcp").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, "print() in the language server corrupts JSON-RPC on stdout: " + ", ".join(bad)


# The one exec: trace_json builds a column extractor from an integer field count (no input text
# reaches it); measured several times faster than getattr over tens of thousands of structs.
EXEC_ALLOWED = {("mapping/profile/readers/trace_json.py", "_extractor")}


def test_product_never_execs_or_evals():
    bad = []
    for package in ("mapping", "hints", "server"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for fn in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
                allowed = isinstance(fn, ast.FunctionDef) and (rel, fn.name) in EXEC_ALLOWED
                body = fn.body if isinstance(fn, ast.FunctionDef) else [n for n in tree.body if not isinstance(n, ast.FunctionDef)]
                for node in (n for b in body for n in ast.walk(b)):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval", "__import__"):
                        if not (allowed and node.func.id == "exec"):
                            bad.append(f"{rel}:{node.lineno} {node.func.id}")
    assert not bad, bad
