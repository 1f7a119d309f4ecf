"""One home per concept in hints/: rules take their shared helpers from the two query modules
(profile_query, source_query), and the concepts they hold are defined once. The import arrows are
checked in tests/test_layering.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

HINTS = Path(__file__).resolve().parents[2] / "hints"


RULES = HINTS / "rules"
QUERY_MODULES = ("profile_query", "source_query")
OLD_HELPERS = ("_facts", "_ops", "_places", "_sequences")


def _relative_imports(path: Path) -> list[tuple[int, str | None, list[str]]]:
    """(level, module, names) of every relative import of a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            out.append((node.level, node.module, [a.name for a in node.names]))
    return out


def _rule_modules() -> list[Path]:
    return sorted(p for p in RULES.glob("*.py") if p.name != "__init__.py")


def test_old_helper_modules_are_gone():
    assert [p.name for p in RULES.glob("_*.py") if p.name != "__init__.py"] == []
    old = re.compile(r"rules\._(?:facts|ops|places|sequences)\b|rules import _(?:facts|ops|places|sequences)\b")
    repo = HINTS.parent
    for path in sorted(p for d in ("hints", "mapping", "server", "tests", "benchmarks") for p in (repo / d).rglob("*.py")):
        if path != Path(__file__):
            assert not old.search(path.read_text(encoding="utf-8")), path


def test_rules_take_shared_helpers_from_the_two_query_modules():
    """A rule module imports nothing from its own package (no sibling helpers) and the shared
    queries only as ``from .. import profile_query as pq, source_query as sq``."""
    assert len(_rule_modules()) >= 15
    users = {q: 0 for q in QUERY_MODULES}
    for path in _rule_modules():
        for level, module, names in _relative_imports(path):
            assert level == 2, f"{path.name}: imports a sibling rule module ({module}, {names})"
            if module is None:
                for name in names:
                    if name in QUERY_MODULES:
                        users[name] += 1
        text = path.read_text(encoding="utf-8")
        for old in OLD_HELPERS:
            assert f"{old}." not in text.replace("host_ops.", "").replace("comm_ops.", ""), f"{path.name}: {old}"
    assert all(n >= 10 for n in users.values()), users


def test_query_modules_have_one_home_per_concept():
    """Each helper name is defined once across the two query modules, and the kernel OpType and
    training-loop concepts have exactly one definition in hints/ and mapping/."""
    defined: dict[str, str] = {}
    for q in QUERY_MODULES:
        tree = ast.parse((HINTS / f"{q}.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert node.name not in defined, f"{node.name} in {defined.get(node.name)} and {q}"
                defined[node.name] = q
    counts = {"op_type": 0, "is_training_loop": 0, "Place": 0, "nearest_on_chain": 0}
    for root in (HINTS, HINTS.parent / "mapping"):
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in counts:
                    counts[node.name] += 1
                assert not (isinstance(node, ast.FunctionDef) and node.name in ("kernel_op_type", "kernel_type_of", "_is_training_loop")), path
    assert counts == {"op_type": 1, "is_training_loop": 1, "Place": 1, "nearest_on_chain": 1}, counts


def test_one_bound_verdict():
    """What bounds a kernel is decided in one place (profile_query.kernel_bounds / bound_verdict),
    read by NPU202, NPU206, NPU209 and the hover; ``Bound`` is only the critical path's (what a
    line's path time waits for), ``PipeBound`` only the kernel's (issue 24, "Twins")."""
    repo = HINTS.parent
    wanted = {"Bound": 0, "PipeBound": 0, "bound_verdict": 0, "kernel_bounds": 0, "BoundVerdict": 0}
    gone = ("classify_bound", "judge", "Verdict", "_pair")
    for root in ("hints", "mapping", "server"):
        for path in (repo / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    if node.name in wanted:
                        wanted[node.name] += 1
                    assert node.name not in gone, f"{path}: {node.name}"
    assert wanted == dict.fromkeys(wanted, 1), wanted
    users = [p.name for p in (HINTS / "rules").glob("*.py") if "kernel_bounds(" in p.read_text(encoding="utf-8")]
    assert sorted(users) == ["kernel_bound.py", "pipe_bound.py"]  # NPU202; NPU206 and NPU209
    assert "kernel_bounds(" in (HINTS / "line_counters.py").read_text(encoding="utf-8")  # the hover's table
