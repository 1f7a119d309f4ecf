"""``msprof-lsp rule [CODE]``: a rule explained on the terminal, from the homes of each part.

Name, summary, rationale, severity, backends, the data it needs and thresholds come from the rule registry
(``hints.registry``); the fixes from the fix catalog (``hints.fixes.CATALOG``); the saving's model
from docs/savings.md "Each rule's model" where the docs are beside the package (a checkout),
else from ``hints.savings.UNMODELLED`` for a rule without a model, else a link to that table.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .cli import UsageError
from .protocol import PROJECT_URL, rule_doc_url

SAVINGS_DOC = Path(__file__).resolve().parents[1] / "docs" / "savings.md"
WIDTH = 80
_ROW_CODES = re.compile(r"^\|\s*\[(?P<first>[A-Z]{3}\d{3})(?:[–-](?P<last>[A-Z]{3}\d{3}))?\]")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_COLUMNS = ("the change", "estimate", "low end", "high end", "limits")


def listing() -> str:
    """Every rule, one line each: code, name, summary."""
    from msprof_lsp.hints.registry import all_rules

    return "".join(f"{r.code} {r.name}: {r.summary}\n" for r in all_rules())


def describe(code: str) -> str:
    """The explanation of the rule ``code``; UsageError naming the nearest codes when unknown."""
    from msprof_lsp.hints.fixes import fixes_for
    from msprof_lsp.hints.registry import nearest_codes, rule, rules_matching

    try:
        r = rule(code)
    except KeyError:
        near = nearest_codes(code.upper())
        if near is None:  # a prefix (NPU10): the codes it starts
            near = [r.code for r in rules_matching([code])][:3]
        hint = f"; did you mean {' or '.join(near)}?" if near else "; msprof-lsp rule lists the rules"
        raise UsageError(f"unknown rule code {code!r}{hint}") from None
    severity = r.default_severity.value if r.default_severity else "by share of the step time (docs/rules/README.md)"
    lines = [f"{r.code} {r.name}", "", *_para("What it detects", r.summary), *_para("Why it costs time", r.rationale),
             f"Severity: {severity}", f"Backends: {', '.join(b.value for b in r.backends)}"]
    if r.needs:
        lines.append(f"Needs: {'; '.join(d.value for d in r.needs)}")
    if r.thresholds:
        lines.append(f"Thresholds: {', '.join(r.thresholds)}")
    lines += ["", *_para("Saving (its model)", saving_model(r.code))]
    lines.append("Fixes:")
    specs = fixes_for(r.code)
    for s in specs:
        lines += textwrap.wrap(f"{s.safety.value}: {s.summary} ({s.id})", WIDTH, initial_indent="  ",
                               subsequent_indent="    ")
    if not specs:
        lines.append("  none to apply: the finding's message says what to change")
    lines += ["", f"More: {rule_doc_url(r.code)}"]
    return "\n".join(lines) + "\n"


def _para(title: str, text: str) -> list[str]:
    return [f"{title}:", *textwrap.wrap(" ".join(text.split()), WIDTH, initial_indent="  ", subsequent_indent="  "), ""]


def saving_model(code: str) -> str:
    """The model of ``code``'s saving in one paragraph (see the module docstring for where from)."""
    from msprof_lsp.hints.savings import UNMODELLED

    if code in UNMODELLED:
        return f"none: {UNMODELLED[code]}"
    row = _savings_row(code)
    if row is not None:
        return "; ".join(f"{name}: {cell}" for name, cell in zip(_COLUMNS, row) if cell)
    return f"replayed over the recorded steps; the model per rule: {PROJECT_URL}/blob/main/docs/savings.md"


def _savings_row(code: str) -> list[str] | None:
    """The cells after the rule's of its row in docs/savings.md's table (a range row covers its codes)."""
    try:
        text = SAVINGS_DOC.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        m = _ROW_CODES.match(line)
        if m and m.group("first") <= code <= (m.group("last") or m.group("first")):
            cells = [_LINK.sub(r"\1", c).replace("`", "").strip() for c in line.strip().strip("|").split(" | ")]
            return cells[1:]
    return None
