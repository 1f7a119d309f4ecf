"""NPU104 dataloader-input fixes (review).

* ``tune_dataloader``: on the ``DataLoader(...)`` call, ``num_workers=<workers>`` when absent or 0,
  ``pin_memory=True`` when absent or False, and — only when the worker count is then a literal
  above 0, since torch raises otherwise — ``persistent_workers=True`` and ``prefetch_factor=2``.
  Arguments the user wrote are kept.
* ``non_blocking_copies``: in the loop that consumes the loader, ``<batch>.to(device)`` ->
  ``<batch>.to(device, non_blocking=True)`` (pinning only pays off with non-blocking copies), and
  only together with ``pin_memory=True`` on that loader's construction in the same file (added when
  absent or False): from pageable memory a non-blocking copy is synchronous, so without a
  construction it can see the fix is declined;
  ``.cuda()`` / ``.npu()`` get ``non_blocking=True`` as well. Only copies of the loop's own batch
  variables are touched, never ``model.to(...)`` or a ``.to("cpu")``.
"""

from __future__ import annotations

import re

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .result import Anchor, FixResult, Text, anchor_path, decline, where

DATALOADER = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader")
# DataLoader's positional parameters, in order (torch 2.13).
POSITIONAL = (
    "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn",
    "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context", "generator",
)


_WORKERS = re.compile(r"\bnum_workers\s*=\s*([^,)\s]+)")
_PINNED = re.compile(r"\bpin_memory\s*=\s*True\b")


def is_tuned(text: str) -> bool:
    """The ``DataLoader(...)`` text already has what ``tune_dataloader`` adds: workers (a
    ``num_workers`` keyword that is not 0) and ``pin_memory=True``."""
    m = _WORKERS.search(text)
    return m is not None and m.group(1) != "0" and _PINNED.search(text) is not None


def _is_loader_call(src: Source, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and (src.is_api(node.func, *DATALOADER) or ct.dotted(node.func) == "DataLoader")


def _loader_calls(src: Source, anchor: Anchor) -> list[cst.Call]:
    """DataLoader calls at the anchor, or the construction of the loader a ``for`` there iterates."""
    calls = src.at(where(anchor), cst.Call, lambda c: _is_loader_call(src, c))
    if calls:
        return calls[:1]
    for loop in src.at(where(anchor), cst.For):
        built = _construction_of(src, loop)
        if built is not None:
            return [built]
    return []


def _construction_of(src: Source, loop: cst.For) -> cst.Call | None:
    """The ``DataLoader(...)`` call bound to the name the loop iterates, in this file."""
    name = _iterated_name(loop)
    if name:
        for a in src.walk(cst.Assign, hint=name.rsplit(".", 1)[-1]):
            if _is_loader_call(src, a.value) and any(ct.dotted(t.target) == name for t in a.targets):
                return a.value  # type: ignore[return-value]
    return None


def _pinned(src: Source, call: cst.Call) -> dict[cst.CSTNode, cst.CSTNode] | None:
    """The edit that makes the loader pin its batches ({} when it does), None when unknown."""
    if ct.has_star(call):
        return None
    pin = ct.argument(call, POSITIONAL.index("pin_memory"), "pin_memory")
    if pin is None:
        return {call: ct.append_args(call, [ct.kwarg("pin_memory", "True")])}
    if ct.literal(pin.value) is True:
        return {}
    return {call: _replace_arg(call, pin, "True")} if ct.literal(pin.value) is False else None


def _iterated_name(loop: cst.For) -> str | None:
    it = loop.iter
    if isinstance(it, cst.Call) and ct.dotted(it.func) in ("enumerate", "tqdm", "tqdm.tqdm") and ct.positional(it):
        it = ct.positional(it)[0].value
    return ct.dotted(it)


def tune_dataloader(source: Text, anchor: Anchor, *, workers: int = 4, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Load batches in worker processes into pinned memory."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    calls = _loader_calls(src, anchor)
    if not calls:
        return decline(why, "no DataLoader(...) call here")
    call = calls[0]
    if ct.has_star(call):
        return decline(why, "DataLoader gets *args/**kwargs: the arguments are not known")
    pos = ct.positional(call)
    if len(pos) > len(POSITIONAL):
        return decline(why, "too many positional arguments")
    given = {POSITIONAL[i]: a for i, a in enumerate(pos)}
    given.update({a.keyword.value: a for a in call.args if a.keyword is not None})
    new_call = call
    add: list[cst.Arg] = []
    workers_arg = given.get("num_workers")
    n_workers = ct.literal(workers_arg.value) if workers_arg is not None else 0
    if workers_arg is None or n_workers == 0:
        if workers < 1:
            return decline(why, "dataloaderWorkers must be at least 1")
        if workers_arg is None:
            add.append(ct.kwarg("num_workers", str(workers)))
        else:
            new_call = _replace_arg(new_call, workers_arg, str(workers))
        n_workers = workers
    pin = given.get("pin_memory")
    if pin is None:
        add.append(ct.kwarg("pin_memory", "True"))
    elif ct.literal(pin.value) is False:
        new_call = _replace_arg(new_call, pin, "True")
    if isinstance(n_workers, int) and not isinstance(n_workers, bool) and n_workers > 0:
        if "persistent_workers" not in given:
            add.append(ct.kwarg("persistent_workers", "True"))
        if "prefetch_factor" not in given:
            add.append(ct.kwarg("prefetch_factor", "2"))
    new_call = ct.append_args(new_call, add)
    return src.fixed(
        {call: new_call},
        f"Load batches with {n_workers if isinstance(n_workers, int) else 'the'} workers into pinned memory",
        safe=False,
        path=anchor_path(anchor, path),
        notes=(
            "workers need a picklable dataset/collate_fn and an `if __name__ == \"__main__\":` guard under spawn",
            "memory grows with the worker count; persistent workers keep their state across epochs",
        ),
    )


def _replace_arg(call: cst.Call, old: cst.Arg, value: str) -> cst.Call:
    return call.with_changes(args=[a.with_changes(value=ct.expr(value)) if a is old else a for a in call.args])


def _bound_by_target(target: cst.BaseExpression) -> set[str]:
    names: set[str] = set()
    stack: list[cst.CSTNode] = [target]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            names.add(n.value)
        elif isinstance(n, (cst.Tuple, cst.List)):
            stack.extend(e.value for e in n.elements)
        elif isinstance(n, cst.StarredElement):
            stack.append(n.value)
    return names


def _root_name(node: cst.BaseExpression) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def _is_device_arg(src: Source, arg: cst.Arg) -> bool:
    v = arg.value
    lit = ct.literal(v)
    if isinstance(lit, str):
        return not lit.startswith("cpu") and not lit.startswith("meta")
    if lit is not ct.NOT_LITERAL:
        return False
    qn = src.qnames(v) or ({ct.dotted(v)} - {None})
    if any(q.startswith("torch.") and not q.startswith("torch.device") for q in qn):
        return False  # torch.float16 and friends: a dtype cast, not a copy to the device
    return isinstance(v, (cst.Name, cst.Attribute, cst.Call))


def non_blocking_copies(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Make the batch's host-to-device copies in the consuming loop non-blocking."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    loops = src.at(where(anchor), cst.For)
    if not loops:
        # anchored on the DataLoader construction: find the loop over that loader in the file
        calls = src.at(where(anchor), cst.Call, lambda c: _is_loader_call(src, c))
        stmt = src.statement(calls[0]) if calls else None
        assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign) else None
        name = ct.dotted(assign.targets[0].target) if assign is not None else None
        loops = [lp for lp in src.walk(cst.For, hint=name.rsplit(".", 1)[-1]) if _iterated_name(lp) == name] if name else []
    changes: dict[cst.CSTNode, cst.CSTNode] = {}
    pinning: dict[cst.CSTNode, cst.CSTNode] | None = None
    for loop in loops:
        built = _construction_of(src, loop)
        pinning = _pinned(src, built) if built is not None else None
        if pinning is None:
            continue  # a copy from pageable memory is synchronous whatever non_blocking says
        batch = _bound_by_target(loop.target)
        if not batch:
            continue
        for call in src.within(loop.body, cst.Call):
            if not isinstance(call.func, cst.Attribute) or ct.has_star(call):
                continue
            method = call.func.attr.value
            if _root_name(call.func.value) not in batch and not _derived_from(src, loop, call.func.value, batch):
                continue
            if ct.keyword(call, "non_blocking") is not None:
                continue
            pos = ct.positional(call)
            if method == "to" and len(pos) == 1 and not any(a.keyword for a in call.args) and _is_device_arg(src, pos[0]):
                changes[call] = ct.append_args(call, [ct.kwarg("non_blocking", "True")])
            elif method == "to" and not pos and ct.keyword(call, "device") is not None and len(call.args) == 1:
                changes[call] = ct.append_args(call, [ct.kwarg("non_blocking", "True")])
            elif method in ("cuda", "npu") and len(call.args) <= 1 and not any(a.keyword for a in call.args):
                changes[call] = ct.append_args(call, [ct.kwarg("non_blocking", "True")])
        if changes:
            break
    if not changes:
        if loops and pinning is None:
            return decline(why, "the loop's DataLoader is not built in this file with a known pin_memory: "
                                "non_blocking=True does nothing without pinned memory")
        return decline(why, "no blocking .to(device) copy of the batch in the loop")
    assert pinning is not None
    return src.fixed(
        {**changes, **pinning},
        "Copy batches to the device with non_blocking=True" + (" from pinned memory (pin_memory=True)" if pinning else ""),
        safe=False,
        path=anchor_path(anchor, path),
        notes=("asynchronous only from pinned memory: the DataLoader gets pin_memory=True when it lacks it",),
    )


def _derived_from(src: Source, loop: cst.For, node: cst.BaseExpression, batch: set[str]) -> bool:
    """``x`` when the loop body did ``x, y = batch`` first (a common unpacking step)."""
    name = _root_name(node)
    if name is None or not isinstance(loop.body, cst.IndentedBlock):
        return False
    for s in loop.body.body:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Assign) and _root_name(small.value) in batch:
                    if any(name in _bound_by_target(t.target) for t in small.targets):
                        return True
    return False
