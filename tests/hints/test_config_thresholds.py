"""Rule thresholds are typed fields of hints.config.Thresholds: what rules read, what they declare
(their ``thresholds`` attribute, which the registry checks) and what their doc pages list must be
the same keys, so a misspelt name or an undocumented threshold fails here rather than at run time."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Annotated

import pytest
from msgspec import Meta

from msprof_lsp.hints.config import THRESHOLD_KEYS, RuleConfig, Thresholds, camel, kebab, setting_specs
from msprof_lsp.hints.registry import all_rules
from msprof_lsp.server.analysis.settings import SETTING_KEYS  # a page may also name a general setting (minShare)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "hints" / "rules"
FIELDS = {f.name for f in dataclasses.fields(Thresholds)}


def _limits_reads() -> set[str]:
    """The fields ``profile_query.BoundLimits.of(thresholds)`` reads (the one bound verdict's limits)."""
    tree = ast.parse((ROOT / "hints" / "profile_query.py").read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BoundLimits"]
    (of,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "of"]
    arg = of.args.args[1].arg
    return {n.attr for n in ast.walk(of) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == arg}


def _reads(tree: ast.AST) -> set[str]:
    """Field names read as ``<anything>.thresholds.<name>`` in one module, and those
    ``BoundLimits.of(<anything>.thresholds)`` reads for it."""
    out = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "thresholds"
    }
    if any(isinstance(n, ast.Attribute) and n.attr == "of" and isinstance(n.value, ast.Attribute)
           and n.value.attr == "BoundLimits" for n in ast.walk(tree)):
        out |= _limits_reads()
    return out


def _declared(tree: ast.AST) -> set[str]:
    """The keys of the ``thresholds=(...)`` declarations of the rules in one module."""
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "thresholds":
                    keys |= set(ast.literal_eval(kw.value))
    return keys


MODULES = sorted(p for p in RULES.glob("*.py") if "thresholds" in p.read_text(encoding="utf-8"))


def test_every_threshold_is_read_by_some_rule() -> None:
    assert len(MODULES) >= 10  # ten rule modules read thresholds today
    read = set().union(*(_reads(ast.parse(p.read_text(encoding="utf-8"))) for p in MODULES))
    assert read == FIELDS, f"no rule reads {sorted(FIELDS - read)}"
    assert set().union(*(r.thresholds for r in all_rules())) == THRESHOLD_KEYS


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_rules_read_exactly_what_they_declare(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    reads, declared = _reads(tree), _declared(tree)
    assert reads <= FIELDS, f"{path.name} reads unknown thresholds {sorted(reads - FIELDS)}"
    assert {camel(n) for n in reads} == declared, f"{path.name}: declared {sorted(declared)}, reads {sorted(reads)}"


def test_rule_pages_list_the_thresholds_the_rule_declares() -> None:
    checked = 0
    for rule in all_rules():
        page = (ROOT / rule.doc).read_text(encoding="utf-8")
        listed = re.search(r"\*\*Thresholds\*\*: ([^·\n]+)", page)
        keys = set(re.findall(r"`(\w+)`", listed.group(1))) if listed else set()
        assert keys & THRESHOLD_KEYS == set(rule.thresholds), f"{rule.doc}: lists {sorted(keys)}, the rule declares {sorted(rule.thresholds)}"
        assert keys - THRESHOLD_KEYS <= SETTING_KEYS, f"{rule.doc}: lists unknown settings {sorted(keys - SETTING_KEYS)}"
        checked += bool(keys & THRESHOLD_KEYS)
    assert checked >= 10


def test_keys_spelling() -> None:
    specs = {s.name: s for s in setting_specs(Thresholds)}
    assert set(specs) == FIELDS and THRESHOLD_KEYS == {camel(n) for n in FIELDS}
    assert specs["h2d_max_percent"].key == "h2dMaxPercent" and specs["h2d_max_percent"].toml_key == "h2d-max-percent"
    assert kebab("h2dMaxPercent") == "h2d-max-percent" == kebab("h2d_max_percent")
    assert specs["cube_align"].integer and specs["cube_align"].minimum == 1 and specs["cube_align"].default == 256
    assert specs["free_max_percent"].maximum == 100 and specs["free_max_percent"].unit == "%"
    assert all(s.description and s.unit and s.minimum is not None for s in specs.values())


def test_a_misspelt_threshold_is_an_attribute_error() -> None:
    config = RuleConfig(thresholds=Thresholds(aicpu_min_us=40))
    assert config.thresholds.aicpu_min_us == 40 and RuleConfig().thresholds.aicpu_min_us == 20
    with pytest.raises(AttributeError):
        config.thresholds.aicpuMinUs  # noqa: B018 - the camelCase key is not a field
    with pytest.raises(TypeError):
        Thresholds(aicpuMinUs=40)  # type: ignore[call-arg]


def test_an_unknown_meta_extra_key_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        x: Annotated[int, Meta(description="x", extra={"unti": "s"})] = 1

    with pytest.raises(TypeError, match="unti"):
        setting_specs(Odd)
