"""No dead code in the product: every top-level function and class of mapping/, hints/ and server/
is named somewhere besides its own definition (product code, tests, benchmarks, samples or the
entry points of pyproject.toml).

Decorated definitions are registered by their decorator (rules, LSP features, fixes) and count as
used. A name used only by tests is allowed (a reference implementation the tests compare with);
a name used nowhere is dead and fails here with its file and line.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("mapping", "hints", "server")
USERS = ("tests", "benchmarks", "samples")


def _texts(folders: tuple[str, ...]) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for d in folders for p in sorted((ROOT / d).rglob("*.py"))}


def _definitions(texts: dict[Path, str]) -> list[tuple[Path, int, str]]:
    out = []
    for path, text in texts.items():
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.decorator_list:
                out.append((path, node.lineno, node.name))
    return out


def test_every_top_level_definition_is_used() -> None:
    product = _texts(PRODUCT)
    everything = "\n".join(product.values()) + "\n".join(_texts(USERS).values())
    everything += (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    words = Counter(re.findall(r"\w+", everything))  # one pass; a name per definition is then a lookup
    dead = [f"{path.relative_to(ROOT)}:{line} {name}" for path, line, name in _definitions(product) if words[name] <= 1]
    assert not dead, "defined but never used:\n" + "\n".join(dead)


def test_the_check_finds_a_dead_function(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def used():\n    pass\n\n\ndef unused_xyz():\n    used()\n", encoding="utf-8")
    defs = _definitions({tmp_path / "m.py": (tmp_path / "m.py").read_text()})
    text = (tmp_path / "m.py").read_text()
    dead = [n for _, _, n in defs if len(re.findall(rf"\b{n}\b", text)) <= 1]
    assert dead == ["unused_xyz"]
