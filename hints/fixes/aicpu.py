"""NPU201 aicpu-fallback fixes (review): move work that falls back to the AI CPU onto AI Cores.

* ``double_to_float``: ``.double()`` -> ``.float()`` and ``torch.float64``/``torch.double`` ->
  ``torch.float32`` on the anchor line and at every other float64 site of the same function (of the
  module level outside functions): a float64 accumulator left behind would promote the op back to
  float64 and keep it on the AI CPU (precision changes; integer dtypes are never touched).
* ``masked_fill``: ``t[mask] = v`` -> ``t.masked_fill_(mask, v)`` for a scalar ``v`` and an index
  that is visibly boolean (a comparison, ``~m``, ``a & b``, ``isnan(...)``, a name containing
  "mask"). The mask must also have ``t``'s shape: ``masked_fill_`` broadcasts from the right,
  boolean indexing from the left — the reason this is review.
* ``index_select``: ``t[idx]`` -> ``torch.index_select(t, 0, idx)`` when ``idx`` was last bound to
  a 1-D index tensor maker (``torch.randperm``, ``torch.arange``, ``torch.tensor([...])``,
  ``.argsort()``, ...).
"""

from __future__ import annotations

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .dataflow import NameFlow
from .result import Anchor, FixResult, Text, anchor_path, decline, where

FLOAT64 = ("torch.float64", "torch.double")
INDEX_MAKERS = ("torch.randperm", "torch.arange", "torch.tensor", "torch.as_tensor", "torch.LongTensor", "torch.argsort", "torch.multinomial")
INDEX_METHODS = ("argsort", "long")
BOOL_FUNCS = ("isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_and", "logical_or", "logical_not", "logical_xor", "bool")


def _float64_sites(src: Source, nodes: list[cst.CSTNode]) -> dict[cst.CSTNode, cst.CSTNode]:
    """The edits that make float32 of the ``.double()`` calls and ``torch.float64``/``torch.double``
    among ``nodes``."""
    changes: dict[cst.CSTNode, cst.CSTNode] = {}
    for node in nodes:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "double" and not node.args:
            changes[node.func.attr] = cst.Name("float")
        elif isinstance(node, cst.Attribute) and src.is_api(node, *FLOAT64):
            changes[node.attr] = cst.Name("float32")
    return changes


def double_to_float(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """float32 for the float64 on the anchor line and every other float64 site of the same function
    (module level: outside any function): one float64 operand left (an accumulator, a constant)
    promotes the op back to float64 and keeps it on the AI CPU."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    line = where(anchor).line
    here = [n for n in [*src.at(where(anchor), cst.Call), *src.at(where(anchor), cst.Attribute)] if src.lines(n)[0] == line]
    if not _float64_sites(src, here):
        return decline(why, "no .double() or torch.float64 on this line")
    scope = src.function_of(here[0])
    kinds = (cst.Call, cst.Attribute)
    nodes = list(src.within(scope, kinds)) if scope is not None else [n for n in src.walk(kinds) if src.function_of(n) is None]
    changes = _float64_sites(src, nodes)
    sites = len({src.lines(n)[0] for n in changes})
    return src.fixed(
        changes,
        "Compute in float32 instead of float64 (AI Cores have no float64)",
        safe=False,
        path=anchor_path(anchor, path),
        notes=("precision drops to float32",
               *([f"{sites} lines of this function make float64: all become float32 (one left keeps the op on the AI CPU)"]
                 if sites > 1 else [])),
    )


def _scalar(node: cst.BaseExpression) -> bool:
    if ct.literal(node) is not ct.NOT_LITERAL and not isinstance(ct.literal(node), str) and ct.literal(node) is not None:
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _scalar(node.expression)
    if isinstance(node, cst.Call) and ct.dotted(node.func) == "float" and len(node.args) == 1:
        return isinstance(ct.literal(node.args[0].value), str)
    d = ct.dotted(node)
    return d in ("math.inf", "math.pi", "math.e", "torch.inf", "float('inf')")


def _boolean_index(src: Source, node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Comparison):
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert):
        return _boolean_index(src, node.expression)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
        return _boolean_index(src, node.left) and _boolean_index(src, node.right)
    if isinstance(node, cst.Call):
        name = ct.dotted(node.func) or ""
        return name.rsplit(".", 1)[-1] in BOOL_FUNCS
    d = ct.dotted(node)
    return bool(d) and "mask" in d.rsplit(".", 1)[-1].lower()


def _single_index(sub: cst.Subscript) -> cst.BaseExpression | None:
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    idx = sub.slice[0].slice
    if idx.star is not None:
        return None
    return idx.value


def masked_fill(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    for line in src.at(where(anchor), cst.SimpleStatementLine):
        if len(line.body) != 1 or not isinstance(line.body[0], cst.Assign):
            continue
        assign = line.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Subscript):
            continue
        sub = assign.targets[0].target
        mask = _single_index(sub)
        if mask is None or ct.dotted(sub.value) is None:
            return decline(why, "the target is not `name[mask]`")
        if not _scalar(assign.value):
            return decline(why, "the assigned value is not a scalar literal")
        if not _boolean_index(src, mask):
            return decline(why, "the index is not visibly a boolean mask")
        call = ct.expr(f"{ct.code(sub.value)}.masked_fill_({ct.code(mask)}, {ct.code(assign.value)})")
        new_line = line.with_changes(body=[cst.Expr(call)])
        return src.fixed(
            {line: new_line},
            "Use masked_fill_ instead of boolean index assignment",
            safe=False,
            path=anchor_path(anchor, path),
            notes=("the mask must be bool and shaped like the tensor (masked_fill_ broadcasts from the right)",),
        )
    return decline(why, "no `t[mask] = v` statement here")


def _index_tensor(src: Source, sub: cst.Subscript, idx: cst.Name) -> bool:
    func = src.function_of(sub)
    if func is None:
        return False
    flow = NameFlow(src, func)
    occ = flow.occurrence_of(idx)
    if occ is None:
        return False
    bind = flow.last_store_before(idx.value, occ.pos)
    if bind is None or not isinstance(bind.binder, cst.Assign) or not isinstance(bind.binder.value, cst.Call):
        return False
    value = bind.binder.value
    if len(bind.binder.targets) != 1 or bind.binder.targets[0].target is not bind.node:
        return False
    if src.is_api(value.func, *INDEX_MAKERS):
        if src.is_api(value.func, "torch.tensor", "torch.as_tensor"):
            pos = ct.positional(value)
            return bool(pos) and isinstance(pos[0].value, cst.List)
        return True
    return isinstance(value.func, cst.Attribute) and value.func.attr.value in INDEX_METHODS


def index_select(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    torch = ct.binds_module(src.module, "torch")
    if torch is None:
        return decline(why, "torch is not imported as a module here")
    for sub in src.at(where(anchor), cst.Subscript):
        parent = src.parent(sub)
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign)) or isinstance(parent, cst.Del):
            continue
        idx = _single_index(sub)
        if not isinstance(idx, cst.Name) or ct.dotted(sub.value) is None:
            continue
        if not _index_tensor(src, sub, idx):
            return decline(why, f"'{idx.value}' is not visibly a 1-D index tensor")
        call = ct.expr(f"{torch}.index_select({ct.code(sub.value)}, 0, {idx.value})")
        return src.fixed(
            {sub: call},
            "Use torch.index_select instead of tensor indexing",
            safe=False,
            path=anchor_path(anchor, path),
            notes=("the index must be a 1-D integer tensor selecting along dim 0",),
        )
    return decline(why, "no `t[idx]` here")
