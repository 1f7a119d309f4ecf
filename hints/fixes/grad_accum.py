"""NPU102 grad-accumulation fix (hint-rules NPU102 **Fix**, review).

Offered only for a ``for`` loop whose body holds, as plain statements of that body, exactly one
``.backward()``, one optimizer step (``opt.step()`` or AMP ``scaler.step(opt)``) and one
``.zero_grad()``. The rewrite:

* ``ACCUM_STEPS = N`` once after the imports (an existing module-level ``ACCUM_STEPS`` is reused);
* a step counter: the loop's own ``enumerate``/``range`` counter, else ``enumerate`` is added;
* ``sync_now = (step + 1) % ACCUM_STEPS == 0``, plus ``or step + 1 == len(loader)`` when the loop
  runs over a DataLoader whose length is known (so the epoch's leftover micro-batches still step);
* the loss assignment divided by ``ACCUM_STEPS`` (or the backward operand when the loss is not
  assigned in the loop), so the accumulated gradient equals the big-batch gradient;
* with a model wrapped in ``DistributedDataParallel`` / ``FullyShardedDataParallel``: forward and
  backward inside ``with (contextlib.nullcontext() if sync_now else model.no_sync()):`` (DDP only
  skips the all-reduce when the forward also runs under ``no_sync()``) and ``import contextlib``;
* clipping, ``scaler.unscale_``, the optimizer step (AMP: ``scaler.step`` + ``scaler.update``), the
  scheduler steps and ``zero_grad`` moved under ``if sync_now:`` in their order, with ``zero_grad``
  last when it used to open the loop body.

Anything else (nested steps, several backward calls, while loops, unknown ``.step()`` receivers)
returns None with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .result import Anchor, FixResult, Text, anchor_path, decline, result, where

WRAPPERS = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
)
CLIPS = ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad.clip_grad_norm_")
DATALOADER = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader")
CONST = "ACCUM_STEPS"


@dataclass(slots=True)
class _Loop:
    loop: cst.For
    body: list[cst.BaseStatement]
    backward: int = -1
    loss: str | None = None
    scaler: str | None = None
    optimizer: str | None = None
    zero_grad: int = -1
    moved: list[int] = field(default_factory=list)  # indices that go under `if sync_now:` (not zero_grad)


def _stmt_call(s: cst.BaseStatement) -> cst.Call | None:
    """The call of a statement that is just ``<call>`` or ``name = <call>``."""
    if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1:
        small = s.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.value
        if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call):
            return small.value
    return None


def _method(call: cst.Call | None) -> tuple[cst.BaseExpression, str] | None:
    if call is not None and isinstance(call.func, cst.Attribute):
        return call.func.value, call.func.attr.value
    return None


def _assigned_from(src: Source, name: str, apis: tuple[str, ...], prefixes: tuple[str, ...] = ()) -> bool:
    """Is ``name`` (or ``self.name``) assigned anywhere from a call to one of ``apis`` / an API under ``prefixes``?"""
    for a in src.walk(cst.Assign, hint=name.rsplit(".", 1)[-1]):
        if not isinstance(a.value, cst.Call):
            continue
        if not any(ct.dotted(t.target) in (name, f"self.{name}") for t in a.targets):
            continue
        qn = src.qnames(a.value.func) or ({ct.dotted(a.value.func)} - {None})
        if any(q in apis or any(q.startswith(p) for p in prefixes) for q in qn):
            return True
    return False


def _wrapper_hints(src: Source) -> tuple[str, ...]:
    """Text that any wrapping call must contain: the class names and their local aliases."""
    names = {"DistributedDataParallel", "FullyShardedDataParallel"}
    for local, fulls in src._alias_table().items():
        if fulls & set(WRAPPERS):
            names.add(local)
    return tuple(sorted(names))


def _wrapped_models(src: Source, loop: cst.For) -> set[str]:
    """Names that hold a DDP/FSDP-wrapped model inside the loop's function.

    Wrapped there, at module level, as ``self.<attr>`` in the same class, or a parameter that a
    caller in this file passes a wrapped model to (``model = DDP(model); train(model, ...)``).
    """
    func = src.function_of(loop)
    cls = src.class_of(loop)
    by_scope: dict[int, set[str]] = {}
    for a in src.walk(cst.Assign, hint=_wrapper_hints(src)):
        if isinstance(a.value, cst.Call) and src.is_api(a.value.func, *WRAPPERS):
            scope = src.function_of(a)
            for t in a.targets:
                d = ct.dotted(t.target)
                if d:
                    by_scope.setdefault(id(scope), set()).add(d)
                    if d.startswith("self.") and cls is not None and src.class_of(a) is cls:
                        by_scope.setdefault(id(func), set()).add(d)
    out = set(by_scope.get(id(func), set())) | set(by_scope.get(id(None), set()))
    if func is not None:
        params = [p.name.value for p in func.params.params]
        for call in src.walk(cst.Call, hint=func.name.value):
            if ct.dotted(call.func) not in (func.name.value, f"self.{func.name.value}"):
                continue
            caller = by_scope.get(id(src.function_of(call)), set()) | by_scope.get(id(None), set())
            offset = 1 if params and params[0] == "self" else 0
            for i, arg in enumerate(call.args):
                name = ct.dotted(arg.value)
                if name not in caller:
                    continue
                if arg.keyword is not None and arg.keyword.value in params:
                    out.add(arg.keyword.value)
                elif arg.keyword is None and not arg.star and i + offset < len(params):
                    out.add(params[i + offset])
    return out


def _is_profiler(src: Source, recv: cst.BaseExpression) -> bool:
    """``prof.step()`` advances a torch.profiler schedule: neutral for accumulation, stays in place."""
    name = ct.dotted(recv)
    if not name:
        return False
    return "prof" in name.rsplit(".", 1)[-1].lower() or _assigned_from(src, name, (), ("torch.profiler.", "torch_npu.profiler."))


def _count(src: Source, root: cst.CSTNode, attr: str) -> int:
    return sum(
        1
        for c in src.within(root, cst.Call)
        if isinstance(c.func, cst.Attribute) and c.func.attr.value == attr and not (attr == "step" and _is_profiler(src, c.func.value))
    )


def _recognise(src: Source, loop: cst.For, why: list[str] | None) -> _Loop | None:
    if not isinstance(loop.body, cst.IndentedBlock):
        return decline(why, "one-line loop body")
    names = ct.all_names(loop)
    if CONST in names:
        return decline(why, "this loop already accumulates gradients")
    if _count(src, loop, "backward") != 1 or _count(src, loop, "zero_grad") != 1:
        return decline(why, "the loop needs exactly one .backward() and one .zero_grad()")
    info = _Loop(loop, list(loop.body.body))
    step_calls = 0
    for i, s in enumerate(info.body):
        m = _method(_stmt_call(s))
        if m is None:
            continue
        recv, attr = m
        call = _stmt_call(s)
        if attr == "backward" and isinstance(s.body[0], cst.Expr):  # type: ignore[union-attr]
            info.backward = i
            if isinstance(recv, cst.Name):
                info.loss = recv.value
            elif (inner := _method(recv if isinstance(recv, cst.Call) else None)) and inner[1] == "scale" and isinstance(inner[0], cst.Name):
                info.scaler = inner[0].value  # scaler.scale(loss).backward()
                arg = ct.positional(recv)  # type: ignore[arg-type]
                info.loss = arg[0].value.value if len(arg) == 1 and isinstance(arg[0].value, cst.Name) else None  # type: ignore[union-attr]
            else:
                return decline(why, "unrecognised backward call")
        elif attr == "zero_grad":
            info.zero_grad = i
            if isinstance(recv, cst.Name) and info.optimizer is None and not _assigned_from(src, recv.value, WRAPPERS):
                zg = recv.value
                if _assigned_from(src, zg, (), ("torch.optim.", "torch_npu.optim.")) or "opt" in zg.lower():
                    info.optimizer = zg
    if info.backward < 0 or info.zero_grad < 0:
        return decline(why, "backward() and zero_grad() must be plain statements of the loop body")
    opt_steps = 0
    for i, s in enumerate(info.body):
        call = _stmt_call(s)
        m = _method(call)
        if m is None:
            continue
        recv, attr = m
        r = ct.dotted(recv)
        if attr == "step" and _is_profiler(src, recv):
            continue
        if attr == "step":
            step_calls += 1
            kind = _step_kind(src, r, info)
            if kind is None:
                return decline(why, f"unrecognised .step() on {r or 'an expression'}")
            if kind == "scaler":
                pos = ct.positional(call)  # type: ignore[arg-type]
                info.optimizer = ct.dotted(pos[0].value) if len(pos) == 1 else None
            if kind in ("scaler", "optimizer"):
                opt_steps += 1
                info.optimizer = info.optimizer or r
            info.moved.append(i)
        elif info.scaler and r == info.scaler and attr in ("update", "unscale_"):
            info.moved.append(i)
        elif src.is_api(call.func, *CLIPS) or attr in ("clip_grad_norm_", "clip_grad_value_"):  # type: ignore[union-attr]
            info.moved.append(i)
    if step_calls != _count(src, info.loop, "step"):
        return decline(why, "a .step() call is nested inside another statement of the loop")
    if opt_steps != 1 or info.optimizer is None:
        return decline(why, "the loop needs exactly one optimizer step")
    if any(i < info.backward for i in info.moved):
        return decline(why, "an optimizer/scheduler step or clipping comes before backward()")
    group = sorted([*info.moved, *([info.zero_grad] if info.zero_grad > info.backward else [])])
    if group != list(range(group[0], group[0] + len(group))):
        return decline(why, "other statements sit between the optimizer step, scheduler, clipping and zero_grad()")
    return info


def _step_kind(src: Source, r: str | None, info: _Loop) -> str | None:
    """What a ``<r>.step()`` statement steps: scaler, optimizer or scheduler (None: unknown)."""
    if not r:
        return None
    if info.scaler and r == info.scaler:
        return "scaler"
    if _assigned_from(src, r, (), ("torch.optim.lr_scheduler.", "transformers.")) or "sched" in r.lower():
        return "scheduler"
    if r == info.optimizer or _assigned_from(src, r, (), ("torch.optim.", "torch_npu.optim.")):
        return "optimizer"
    if info.optimizer is None and "opt" in r.lower():
        return "optimizer"
    return None


def _needs_parens(value: cst.BaseExpression) -> bool:
    low = (cst.Add, cst.Subtract, cst.LeftShift, cst.RightShift, cst.BitAnd, cst.BitXor, cst.BitOr)
    if value.lpar:
        return False
    if isinstance(value, cst.BinaryOperation):
        return isinstance(value.operator, low)
    return isinstance(value, (cst.Comparison, cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr))


def _divided(value: cst.BaseExpression, const: str) -> cst.BinaryOperation:
    left = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if _needs_parens(value) else value
    return cst.BinaryOperation(left=left, operator=cst.Divide(), right=cst.Name(const))


def _loss_assignment(body: list[cst.BaseStatement], upto: int, loss: str) -> cst.Assign | None:
    """The last ``loss = ...`` before the backward, at loop level or one ``with`` deep (autocast)."""
    found = None
    for s in body[:upto]:
        lines: list[cst.BaseStatement] = [s]
        if isinstance(s, cst.With) and isinstance(s.body, cst.IndentedBlock):
            lines = list(s.body.body)
        for line in lines:
            if isinstance(line, cst.SimpleStatementLine):
                for small in line.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 and ct.dotted(small.targets[0].target) == loss:
                        found = small
                    elif isinstance(small, (cst.AugAssign, cst.AnnAssign)) and ct.dotted(small.target) == loss:
                        found = None  # modified in place afterwards: divide at the backward instead
    return found


def _calls_model(s: cst.CSTNode, models: set[str]) -> bool:
    stack = [s]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Call) and ct.dotted(n.func) in models:
            return True
        stack.extend(n.children)
    return False


def _loader_len(src: Source, it: cst.BaseExpression, func: cst.FunctionDef | None) -> str | None:
    """``len(<loader>)`` when the iterable is a DataLoader whose length is defined."""
    name = ct.dotted(it)
    if not name:
        return None
    if _assigned_from(src, name, DATALOADER):
        return f"len({name})"
    if func is not None:
        for p in func.params.params:
            if p.name.value == name and p.annotation is not None and "DataLoader" in ct.code(p.annotation.annotation):
                return f"len({name})"
    return None


@dataclass(frozen=True, slots=True)
class _Counter:
    """The loop's micro-batch counter: its name, the loop header that provides it, the epoch length."""

    name: str
    target: cst.BaseAssignTargetExpression
    iter: cst.BaseExpression
    length: str | None  # code for the number of micro-batches per epoch, when known


@dataclass(frozen=True, slots=True)
class _NoSync:
    """The DDP/FSDP-wrapped model the forward calls (None: none), and the first statement that calls it."""

    model: str | None = None
    first_forward: int | None = None


def accumulate_gradients(
    source: Text,
    anchor: Anchor,
    *,
    accum_steps: int = 4,
    path: str | None = None,
    why: list[str] | None = None,
) -> FixResult | None:
    """Rewrite the training loop at the anchor to step the optimizer every ``accum_steps`` micro-batches.

    Phases: recognise the loop, find or add its counter, find the wrapped model for ``no_sync()``,
    divide the loss, regroup the body under ``if sync_now:``, then add the constant and imports.
    """
    if accum_steps < 2:
        return decline(why, "accumSteps must be at least 2")
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    info = _training_loop(src, anchor, why)
    if info is None:
        return None
    module = src.module
    counter = _counter(src, info.loop, why)
    if counter is None:
        return None
    defined = ct.module_level_names(module)
    sync = ct.fresh_name(module, "sync_now")
    cond = f"({counter.name} + 1) % {CONST} == 0"
    if counter.length:
        cond += f" or {counter.name} + 1 == {counter.length}"
    no_sync = _no_sync(src, info, why)
    if no_sync is None:
        return None
    body = _regrouped_body(info, _loss_divided(info), sync, ct.stmt(f"{sync} = {cond}"), no_sync)
    new_loop = info.loop.with_changes(target=counter.target, iter=counter.iter, body=info.loop.body.with_changes(body=body))
    module = src.rewrite({info.loop: new_loop})
    if no_sync.model is not None:
        module = ct.add_stdlib_import(module, "contextlib")
    if CONST not in defined:
        module = ct.insert_after_imports(module, [ct.stmt(f"{CONST} = {accum_steps}  # micro-batches per optimizer step (msprof-lsp NPU102)")])
    title = f"Accumulate gradients over {accum_steps if CONST not in defined else CONST} micro-batches"
    if no_sync.model is not None:
        title += f" with {no_sync.model}.no_sync()"
    notes = _notes(info, counter, no_sync)
    return result(source, module.code, title, safe=False, path=anchor_path(anchor, path), notes=notes)


def _training_loop(src: Source, anchor: Anchor, why: list[str] | None) -> _Loop | None:
    """The innermost for-loop around the anchor that is a recognised training loop."""
    loops = src.at(where(anchor), cst.For)
    if not loops:
        return decline(why, "no for-loop around this line")
    reasons: list[str] = []
    for loop in loops:
        info = _recognise(src, loop, reasons)
        if info is not None:
            return info
    return decline(why, reasons[0] if reasons else "no recognised training loop")


def _counter(src: Source, loop: cst.For, why: list[str] | None) -> _Counter | None:
    """The counter ``enumerate``/``range`` already gives, else a fresh one with ``enumerate(...)``."""
    func = src.function_of(loop)
    target, it = loop.target, loop.iter
    if isinstance(it, cst.Call) and ct.dotted(it.func) == "enumerate":
        pos = ct.positional(it)
        start = ct.argument(it, 1, "start")
        if start is not None and ct.literal(start.value) != 0:
            return decline(why, "enumerate(..., start=...) with a non-zero start")
        if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(target.elements[0].value, cst.Name) and len(pos) >= 1:
            return _Counter(target.elements[0].value.value, target, it, _loader_len(src, pos[0].value, func))
    elif isinstance(it, cst.Call) and ct.dotted(it.func) == "range" and isinstance(target, cst.Name):
        pos = ct.positional(it)
        if len(pos) == 1 or (len(pos) == 2 and ct.literal(pos[0].value) == 0):
            n = pos[-1].value
            length = ct.code(n)
            if isinstance(n, (cst.Comparison, cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)) and not n.lpar:
                length = f"({length})"
            return _Counter(target.value, target, it, length)
    name = ct.fresh_name(src.module, "step")
    t = target
    if isinstance(t, cst.Tuple) and not t.lpar:
        t = t.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    new_target = cst.Tuple(
        elements=[
            cst.Element(cst.Name(name), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Element(t),
        ],
        lpar=[],
        rpar=[],
    )
    return _Counter(name, new_target, cst.Call(func=cst.Name("enumerate"), args=[cst.Arg(it)]), _loader_len(src, it, func))


def _no_sync(src: Source, info: _Loop, why: list[str] | None) -> _NoSync | None:
    """The DDP/FSDP model whose forward and backward go under ``no_sync()`` off the boundary steps."""
    wrapped = _wrapped_models(src, info.loop)
    if not wrapped:
        return _NoSync()
    b = info.backward
    for i, s in enumerate(info.body[: b + 1]):
        if _calls_model(s, wrapped):
            if i <= info.zero_grad < b:
                return decline(why, "zero_grad() sits between the forward and backward()")
            return _NoSync(next(n for n in sorted(wrapped) if _calls_model(s, {n})), i)
    return decline(why, "the DDP/FSDP-wrapped model is not called in this loop before backward()")


def _loss_divided(info: _Loop) -> list[cst.BaseStatement]:
    """The loop body with the loss divided by the constant: at its assignment, else in backward()."""
    body, b = info.body, info.backward
    assign = _loss_assignment(body, b, info.loss) if info.loss else None
    if assign is not None:
        replacements: dict[cst.CSTNode, ct.Replacement] = {assign: assign.with_changes(value=_divided(assign.value, CONST))}
        return [ct.rewrite(s, replacements) if isinstance(s, cst.CSTNode) else s for s in body]  # type: ignore[misc]
    bw_call = _stmt_call(body[b])
    recv = bw_call.func.value  # type: ignore[union-attr]
    if info.scaler:
        arg = ct.positional(recv)[0]  # type: ignore[arg-type]
        new_recv = recv.with_changes(args=[arg.with_changes(value=_divided(arg.value, CONST))])  # type: ignore[union-attr]
    else:
        new_recv = _divided(recv, CONST).with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    new_call = bw_call.with_changes(func=bw_call.func.with_changes(value=new_recv))  # type: ignore[union-attr]
    out = list(body)
    out[b] = ct.rewrite(body[b], {bw_call: new_call})  # type: ignore[arg-type]
    return out


def _regrouped_body(
    info: _Loop, new_body: list[cst.BaseStatement], sync: str, sync_stmt: cst.BaseStatement, no_sync: _NoSync
) -> list[cst.BaseStatement]:
    """``sync_now = ...`` first; the optimizer statements (and zero_grad) under ``if sync_now:`` where
    the first of them was; forward and backward under ``no_sync()`` for a wrapped model."""
    body, b = info.body, info.backward
    moved = sorted(info.moved)
    zg = info.zero_grad
    zg_first = zg < b
    group_idx = [i for i in range(len(body)) if i in moved or (i == zg and not zg_first)]
    group = [new_body[i] for i in group_idx]
    if zg_first:
        zg_stmt = new_body[zg]
        comments = [ln for ln in zg_stmt.leading_lines if ln.comment is not None]  # type: ignore[union-attr]
        group.append(zg_stmt.with_changes(leading_lines=comments))  # type: ignore[union-attr]
    first_group = group_idx[0] if group_idx else None
    if_stmt = cst.If(
        test=cst.Name(sync),
        body=cst.IndentedBlock(body=[group[0].with_changes(leading_lines=()), *group[1:]]),  # type: ignore[union-attr]
        leading_lines=new_body[first_group].leading_lines if first_group is not None else (),  # type: ignore[union-attr]
    )
    out: list[cst.BaseStatement] = [sync_stmt]
    first_fwd = no_sync.first_forward
    i = 0
    while i < len(body):
        if i == zg and zg_first:
            i += 1  # moved to the end of `if sync_now:` with its comments
            continue
        if no_sync.model is not None and i == first_fwd:
            inner = [new_body[k] for k in range(first_fwd, b + 1) if not (k == zg and zg_first)]
            lead = inner[0].leading_lines  # type: ignore[union-attr]
            inner[0] = inner[0].with_changes(leading_lines=())  # type: ignore[union-attr]
            w = ct.stmt(f"with (contextlib.nullcontext() if {sync} else {no_sync.model}.no_sync()):\n    pass")
            out.append(w.with_changes(body=cst.IndentedBlock(body=inner), leading_lines=lead))  # type: ignore[union-attr]
            i = b + 1
            continue
        if i in group_idx:
            if i == first_group:
                out.append(if_stmt)
            i += 1
            continue
        out.append(new_body[i])
        i += 1
    return out


def _notes(info: _Loop, counter: _Counter, no_sync: _NoSync) -> tuple[str, ...]:
    notes = [
        f"effective batch = batch size x {CONST}: learning-rate schedules count optimizer steps",
        f"the loss seen by logging is divided by {CONST}",
    ]
    if not counter.length:
        notes.append("leftover micro-batches at the end of an epoch carry into the next epoch's first step")
    if no_sync.model is not None:
        notes.append(f"{no_sync.model}.no_sync() skips the gradient all-reduce on non-boundary steps (FSDP: holds unsharded grads)")
    if info.scaler:
        notes.append("AMP: scaler.scale(loss).backward() every micro-step, scaler.step/update on boundaries")
    return tuple(notes)
