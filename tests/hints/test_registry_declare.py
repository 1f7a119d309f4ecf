"""The one way to declare a rule (``hints.registry.declare``, issue 24): every rule of
``hints/rules/`` is a class decorated ``@declare`` whose docstring holds its texts; codes are
unique; every rule has its page and a row in the rules index."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from msprof_lsp.hints import registry
from msprof_lsp.hints.registry import Rule, RuleError, all_rules, declare, doc_texts

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "hints" / "rules"
DOCS = REPO / "docs" / "rules"


def _declared_codes() -> list[str]:
    """The code of every ``@declare(...)`` in hints/rules/, and no rule made any other way."""
    codes = []
    for path in sorted(RULES_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register":
                pytest.fail(f"{path.name}:{node.lineno}: a rule registered without @declare")
            if isinstance(node, ast.ClassDef):
                codes += [ast.literal_eval(d.args[0]) for d in node.decorator_list
                          if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "declare"]
    return codes


def test_every_rule_is_one_declared_class_with_a_unique_code():
    codes = _declared_codes()
    assert [c for c, n in Counter(codes).items() if n > 1] == []
    rules = all_rules()
    assert sorted(codes) == [r.code for r in rules]
    assert len({type(r) for r in rules}) == len(rules)  # one class per rule: a family's rules are subclasses


@pytest.mark.parametrize("r", all_rules(), ids=lambda r: r.code)
def test_texts_come_from_the_docstring_and_the_docs_list_the_rule(r: Rule):
    assert r.summary and r.rationale and "\n" not in r.summary
    assert doc_texts(type(r)) == (r.summary, r.rationale)
    assert (DOCS / f"{r.code}.md").read_text(encoding="utf-8").splitlines()[0] == f"# {r.code} {r.name}"
    assert f"| [{r.code}]({r.code}.md) | {r.name} |" in (DOCS / "README.md").read_text(encoding="utf-8")


def test_declare_reads_the_docstring_and_registers_one_value():
    try:
        @declare("TST801", "test-declared", thresholds=("smallKernelUs",))
        class Declared(Rule):
            """A one-line summary that the source
            wraps.

            The rationale's first line,
            and its second.
            """

            def check(self, ctx):  # noqa: ANN001, ANN201
                return []

        r = registry.rule("TST801")
        assert type(r) is Declared and r.name == "test-declared" and r.thresholds == ("smallKernelUs",)
        assert r.summary == "A one-line summary that the source wraps."
        assert r.rationale == "The rationale's first line, and its second."
    finally:
        registry._REGISTRY.pop("TST801", None)


def test_a_class_without_both_texts_is_refused():
    for doc in (None, "Only a summary."):
        cls = type("Undocumented", (Rule,), {"__doc__": doc, "check": lambda self, ctx: []})
        with pytest.raises(RuleError, match="docstring"):
            declare("TST802", "undocumented")(cls)
    assert "TST802" not in registry._REGISTRY
