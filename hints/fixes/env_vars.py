"""NPU241-NPU247 environment fixes (review): edit an environment variable the script itself sets.

Recognised: ``os.environ["X"] = ...``, ``os.environ.setdefault("X", ...)`` and
``os.putenv("X", ...)``. The new value is a string (or a function of the old literal value, e.g.
to add ``expandable_segments:True`` to an existing ``PYTORCH_NPU_ALLOC_CONF``); ``None`` deletes
the statement (for "unset" advice). With no such statement there is no edit: the rule reports on
the entry script instead, and the variable belongs in the launcher.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .result import Anchor, FixResult, Text, anchor_path, decline, result

Value = str | None | Callable[[str | None], str | None]


def _sites(src: Source, name: str) -> list[tuple[cst.SimpleStatementLine, cst.BaseExpression]]:
    """(statement, value expression) for every recognised assignment of ``name``."""
    out = []
    for line in src.walk(cst.SimpleStatementLine, hint=name):
        if len(line.body) != 1:
            continue
        small = line.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Subscript):
            sub = small.targets[0].target
            if src.is_api(sub.value, "os.environ") and len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
                if ct.literal(sub.slice[0].slice.value) == name:
                    out.append((line, small.value))
        elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
            if src.is_api(call.func, "os.environ.setdefault", "os.putenv") and len(call.args) == 2 and not ct.has_star(call):
                if ct.literal(call.args[0].value) == name:
                    out.append((line, call.args[1].value))
    return out


def set_env_value(
    source: Text,
    anchor: Anchor = 1,
    *,
    name: str,
    value: Value,
    path: str | None = None,
    why: list[str] | None = None,
) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    sites = _sites(src, name)
    if not sites:
        return decline(why, f"{name} is not set in this file")
    changes: dict[cst.CSTNode, ct.Replacement] = {}
    new_value: str | None = None
    for line, expr in sites:
        old = ct.literal(expr)
        old_text = old if isinstance(old, str) else None
        new_value = value(old_text) if callable(value) else value
        if new_value is None:
            changes = ct.remove_statements(src, [line], changes)
        elif old_text != new_value:
            quote = expr.quote if isinstance(expr, cst.SimpleString) and expr.prefix == "" else '"'
            changes[expr] = cst.SimpleString(f"{quote}{new_value}{quote}" if quote not in new_value and "\\" not in new_value else repr(new_value))
    if not changes:
        return decline(why, f"{name} already has the advised value")
    module = src.rewrite(changes)
    title = f"Unset {name}" if new_value is None else f"Set {name}={new_value}"
    notes = ("takes effect only if set before `import torch_npu` (better: in the launcher)",)
    return result(source, module.code, title, safe=False, path=anchor_path(anchor, path), notes=notes)


def merge_setting(item: str) -> Callable[[str | None], str]:
    """A ``value`` for comma-separated ``key:value`` variables (``PYTORCH_NPU_ALLOC_CONF``).

    Sets ``key`` to ``value`` and keeps every other setting: ``merge_setting("expandable_segments:True")``
    turns ``max_split_size_mb:2048`` into ``expandable_segments:True,max_split_size_mb:2048`` and
    leaves a value that already has it unchanged.
    """
    key = item.split(":", 1)[0].strip()

    def apply(old: str | None) -> str:
        parts = [p.strip() for p in (old or "").split(",") if p.strip()]
        kept = [p for p in parts if p.split(":", 1)[0].strip() != key]
        if item in parts:
            return ",".join(parts)
        return ",".join([item, *kept])

    return apply
