"""server/lsp imports without a cycle: every module imports on its own in a fresh interpreter, the
modules import each other without a cycle (module-level and function-level imports), the read-only
features see a RequestContext and never the server object (app.py), and the type-only imports of
the server are the few modules that drive it, named below with why."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LSP = REPO / "server" / "lsp"
APP = "msprof_lsp.server.lsp.app"

# Type-only imports of app.MsprofLanguageServer: these modules drive the whole server (its loader,
# publisher, poller, progress, registrations), so they take it, not a request's context.
DRIVE_THE_SERVER = {
    "msprof_lsp.server.lsp.lifecycle",  # initialize: registers features, resolves settings
    "msprof_lsp.server.lsp.text_sync",  # didOpen/didChange: moves buffers, schedules re-analysis
    "msprof_lsp.server.lsp.watch",  # file events and the poller: reloads
    "msprof_lsp.server.lsp.configuration",  # pulls workspace/configuration from the client
    "msprof_lsp.server.lsp.publish",  # pushes diagnostics to the client
    "msprof_lsp.server.lsp.progress",  # work-done progress of a load
    "msprof_lsp.server.lsp.state.loading",  # the loader: runs analyses on the worker, swaps snapshots
}
# The features: functions of (RequestContext, params); nothing in them may reach app.py.
FEATURES = {f"msprof_lsp.server.lsp.{m}" for m in (
    "hover", "code_lens", "inlay_hints", "code_action", "code_action_resolve", "pull", "diagnostics",
    "heat_view", "fixes_on_demand", "record_action", "convert")}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(LSP.rglob("*.py")):
        parts = p.relative_to(REPO / "server").with_suffix("").parts
        name = ".".join(("msprof_lsp", "server", *parts))
        out[name.removesuffix(".__init__")] = p
    return out


MODULES = _modules()


def _type_only(tree: ast.Module) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:`` (never executed)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            lines |= {n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def imports(name: str, path: Path, *, type_only: bool) -> set[str]:
    """The server/lsp modules ``name`` imports at run time (``type_only``: under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_only(tree)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or (node.lineno in skip) != type_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        out |= {t for t in targets if t in MODULES and t != name and t != "msprof_lsp.server.lsp"}
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (depth-first), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        stack.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_cycle_check_finds_one() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_server_lsp_imports_without_a_cycle() -> None:
    runtime = {m: imports(m, p, type_only=False) for m, p in MODULES.items()}
    assert cycle(runtime) is None, " -> ".join(cycle(runtime) or [])
    assert not any(APP in deps for deps in runtime.values()), "app.py wires the server: nothing imports it"


def test_features_see_a_request_context_not_the_server() -> None:
    every = {m: imports(m, p, type_only=False) | imports(m, p, type_only=True) for m, p in MODULES.items()}
    typed_app = {m for m, deps in every.items() if APP in deps}
    assert typed_app == DRIVE_THE_SERVER
    assert not FEATURES & typed_app
    # and no feature reaches app.py through another module
    reach = {m: set() for m in FEATURES}
    for m in FEATURES:
        todo = [m]
        while todo:
            for w in every.get(todo.pop(), ()):
                if w not in reach[m]:
                    reach[m].add(w)
                    todo.append(w)
    assert {m for m in FEATURES if APP in reach[m]} == set()


_ALONE = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "msprof_lsp" or m.startswith("msprof_lsp.")]:
        del sys.modules[loaded]  # ours afresh each time; third-party packages stay loaded (speed)
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_every_server_lsp_module_imports_on_its_own() -> None:
    """Each module with none of ours loaded before it: none may need another imported first."""
    run = subprocess.run([sys.executable, "-c", _ALONE, *sorted(MODULES)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "", run.stdout
