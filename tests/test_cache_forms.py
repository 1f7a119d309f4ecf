"""Derived values are cached in one form per lifetime (issue 24), checked on the source:

* a figure of the profile alone: ``profile.derived.memo`` (mapping/profile/model.py ``Derived``),
  kept with the profile and, with a ``Persist``, in its cache entry;
* a value of one rules run (the attribution, the source, the settings): ``RuleContext.derived``;
* a value of one language-server snapshot (a buffer version, a view): ``Snapshot.derived``.

No other form may come back: no ``WeakKeyDictionary``/``WeakValueDictionary`` keyed by a context, no
``functools.cache``/``lru_cache`` on a function of anything but plain values (a function of strings
or types is pure, its memo can live for the process), no attribute or field named as a cache.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("mapping", "hints", "server")
SOURCES = sorted(p for d in PRODUCT for p in (ROOT / d).rglob("*.py"))

WEAK = {"WeakKeyDictionary", "WeakValueDictionary"}
MEMO_DECORATORS = {"cache", "lru_cache"}
# parameter types of a pure function whose process-wide memo holds nothing of a profile or a run
VALUE_TYPES = {"str", "int", "float", "bool", "bytes", "type"}
CACHE_NAME = re.compile(r"(^|_)(cache|memo|cached)(_|$)")
# settings of the on-disk profile cache (mapping/profile/cache.py), not in-memory caches
NOT_A_CACHE = {"use_cache", "cache_dir", "no_cache"}
# the one memo of each lifetime: (file, class, the attribute that holds it)
HOMES = {
    ("mapping/profile/model.py", "Derived", "memos"),  # the loaded profile
    ("hints/context.py", "RuleContext", "_derived"),  # one rules run
    ("server/lsp/state/snapshot.py", "Snapshot", "_derived"),  # one language-server snapshot
    # the server session (record_action's loops and edits per buffer text outlive snapshots):
    # held by the server, handed to each request
    ("server/lsp/app.py", "MsprofLanguageServer", "memo"),
    ("server/lsp/state/context.py", "RequestContext", "memo"),
}
# memos that live no longer than the one computation their object performs (a local variable
# spread over methods); not derived values anyone else reads. Listed so that a new one is a choice.
SCOPED = {
    ("mapping/source/anchor.py", "Anchorer", "_frame_cache"),  # one attribution
    ("mapping/source/anchor.py", "Anchorer", "_place_cache"),
    ("mapping/source/sequence_anchor.py", "SequenceAnchorer", "_cache"),
    ("mapping/source/sizes.py", "SizeResolver", "_module_cache"),
    ("mapping/source/source_index.py", "SourceIndex", "keys_cache"),  # one parsed file's construct keys
    ("server/lsp/diagnostics.py", "Views", "_cache"),  # one request
    ("server/mcp/app.py", "Tools", "cache"),  # the analyses the MCP session holds (api.workspace_run.RunCache)
}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        where = f"{_rel(path)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.Name, ast.Attribute)) and _name(node) in WEAK:
            out.append(f"{where}: {_name(node)} (a cache keyed by an object's life; use the memo of its lifetime)")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_name(d) in MEMO_DECORATORS for d in node.decorator_list):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                impure = [a.arg for a in args if not (a.annotation is not None and ast.unparse(a.annotation) in VALUE_TYPES)]
                if impure:
                    out.append(f"{where}: {node.name} is memoised for the process on {impure}, not plain values")
    return out


def _cache_attributes(path: Path) -> list[str]:
    """Attributes assigned on ``self`` and class fields whose name says they cache."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = _rel(path)
    out = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names: dict[str, int] = {}
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.setdefault(node.target.id, node.lineno)
        for node in ast.walk(cls):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.setdefault(t.attr, node.lineno)
        for name, line in names.items():
            if (CACHE_NAME.search(name) and name not in NOT_A_CACHE) or name.endswith("_counters"):
                if (rel, cls.name, name) not in HOMES | SCOPED:
                    out.append(f"{rel}:{line}: {cls.name}.{name}")
    return out


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_no_other_cache_form(path: Path):
    assert _problems(path) == [] and _cache_attributes(path) == []


def test_the_checks_find_what_they_look_for(tmp_path: Path):
    """The scans catch the forms issue 24 found (so an empty answer above means something)."""
    root = tmp_path / "hints"
    root.mkdir()
    bad = root / "bad.py"
    bad.write_text(
        "import functools, weakref\n"
        "_MATCHES = weakref.WeakKeyDictionary()\n"
        "@functools.lru_cache(maxsize=4)\n"
        "def parse(ctx: object) -> int:\n    return 1\n"
        "@functools.cache\n"
        "def pure(name: str) -> int:\n    return 1\n"
        "class Doc:\n    suppress_cache: int = 0\n"
        "class Engine:\n    def __init__(self):\n        self._counters = None\n        self.cache_dir = ''\n",
        encoding="utf-8",
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        problems, attrs = _problems(bad), _cache_attributes(bad)
    finally:
        ROOT = saved
    problems.sort()
    assert len(problems) == 2 and "WeakKeyDictionary" in problems[0] and "parse" in problems[1]
    assert attrs == ["hints/bad.py:10: Doc.suppress_cache", "hints/bad.py:13: Engine._counters"]


def test_each_lifetime_has_one_memo():
    for rel, cls, attr in HOMES:
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
        assert attr in ast.unparse(node), f"{rel}: {cls} lost its memo {attr}"
