"""``hints.registry.declare``: a rule declared by decorating its class, its docstring its texts."""

from __future__ import annotations

import pytest

from msprof_lsp.hints import registry
from msprof_lsp.hints.registry import Rule, RuleError, declare


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
