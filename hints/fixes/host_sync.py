"""NPU108 host-sync fixes (review).

* ``defer_loss_item``: the two recognised shapes in a training loop —
  ``running += loss.item()`` -> ``running += loss.detach()`` (the sum stays on the device and is
  synchronised only where it is printed or returned), and a per-step ``print(..., loss.item())``
  directly in the loop body -> the same print under ``if <step> % N == 0:``.
* ``remove_synchronize``: a statement ``torch.npu.synchronize()`` / ``torch_npu.npu.synchronize()``
  / ``torch.cuda.synchronize()`` inside a loop is deleted — unless its function also reads a clock,
  in which case the synchronize is there for timing and stays.
"""

from __future__ import annotations

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .result import Anchor, FixResult, Text, anchor_path, decline, result, where

SYNCS = ("torch.npu.synchronize", "torch_npu.npu.synchronize", "torch.cuda.synchronize")
CLOCKS = ("time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.perf_counter_ns", "time.monotonic_ns")


def _item_call(node: cst.CSTNode) -> cst.Call | None:
    """``<name>.item()``."""
    if (
        isinstance(node, cst.Call)
        and not node.args
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "item"
        and isinstance(node.func.value, cst.Name)
    ):
        return node
    return None


def _loop_counter(loop: cst.For) -> str | None:
    it, target = loop.iter, loop.target
    if isinstance(it, cst.Call) and ct.dotted(it.func) == "enumerate":
        start = ct.argument(it, 1, "start")
        if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(target.elements[0].value, cst.Name):
            if start is None or isinstance(ct.literal(start.value), int):
                return target.elements[0].value.value
    if isinstance(it, cst.Call) and ct.dotted(it.func) == "range" and isinstance(target, cst.Name):
        return target.value
    return None


def defer_loss_item(source: Text, anchor: Anchor, *, every: int = 100, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Stop synchronising with the device on every step just to read the loss."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    for line in src.at(where(anchor), cst.SimpleStatementLine):
        loop = src.enclosing(line, (cst.For, cst.While))
        if loop is None:
            return decline(why, "the .item() call is not inside a loop")
        if len(line.body) != 1:
            continue
        small = line.body[0]
        if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and _item_call(small.value):
            item = _item_call(small.value)
            detached = item.with_changes(func=item.func.with_changes(attr=cst.Name("detach")))  # type: ignore[union-attr]
            module = src.rewrite({item: detached})  # type: ignore[dict-item]
            acc = ct.code(small.target)
            return result(
                source,
                module.code,
                f"Accumulate {ct.code(item.func.value)}.detach() instead of .item() every step",  # type: ignore[union-attr]
                safe=False,
                path=anchor_path(anchor, path),
                notes=(f"{acc} becomes a device tensor: it synchronises only where it is printed or converted",),
            )
        if (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and ct.dotted(small.value.func) == "print"
            and any(_item_call(n) for n in src.within(small.value, cst.Call))
        ):
            if src.parent(line) is not loop.body:
                return decline(why, "the print is already conditional")
            counter = _loop_counter(loop) if isinstance(loop, cst.For) else None
            if counter is None:
                return decline(why, "the loop has no step counter to log every N steps")
            guarded = cst.If(
                test=ct.expr(f"{counter} % {int(every)} == 0"),
                body=cst.IndentedBlock(body=[line.with_changes(leading_lines=())]),
                leading_lines=line.leading_lines,
            )
            return src.fixed(
                {line: guarded},
                f"Print the loss every {int(every)} steps instead of every step",
                safe=False,
                path=anchor_path(anchor, path),
                notes=("each .item() waits for the device to finish the step",),
            )
    return decline(why, "no `total += loss.item()` or per-step `print(..., loss.item())` here")


def remove_synchronize(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Delete a device-wide synchronize inside a loop (it blocks the host every iteration)."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    for line, _call in src.call_statements(where(anchor), *SYNCS):
        loop = src.enclosing(line, (cst.For, cst.While))
        if loop is None:
            return decline(why, "the synchronize is not inside a loop")
        scope = src.function_of(loop) or src.module
        if any(src.is_api(c.func, *CLOCKS) for c in src.within(scope, cst.Call)):
            return decline(why, "the function reads a clock: the synchronize is there for timing")
        return _delete_statement(src, source, line, "Remove the synchronize() from the loop", safe=False, anchor=anchor, path=path)
    return decline(why, "no synchronize() statement here")


def _delete_statement(src: Source, source: Text, line: cst.SimpleStatementLine, title: str, *, safe: bool, anchor: Anchor, path: str | None) -> FixResult | None:
    module = src.rewrite(ct.removal(src, line))
    return result(source, module.code, title, safe=safe, path=anchor_path(anchor, path))
