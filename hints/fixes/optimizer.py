"""NPU220 fused-optimizer and NPU221 fused-grad-clip fixes (review).

* ``fused_optimizer`` (Fix A): ``fused=True`` on ``torch.optim.{Adam,AdamW,SGD,Adagrad}`` — the
  optimizers that take ``fused`` in torch 2.13. Refused with ``foreach=True`` ("fused and foreach
  cannot be True together") or ``differentiable=True``.
* ``npu_fused_optimizer`` (Fix B, Ascend): ``torch.optim.<Name>(...)`` ->
  ``torch_npu.optim.NpuFused<Name>(...)`` for AdamW, Adam, SGD, RMSprop, Adadelta, keeping the
  user's arguments (positional order and defaults match; SGD gets the explicit ``lr=0.001`` torch
  defaults to, since NpuFusedSGD requires ``lr``). Refused for ``maximize``/``foreach``/``fused``/
  ``capturable``/``differentiable`` or unknown arguments. Params must be fp32/fp16.
* ``fused_grad_clip``: ``clip_grad_norm_(params, max_norm)`` -> ``opt.clip_grad_norm_fused_(max_norm)``
  when the file builds exactly one ``torch_npu.optim.NpuFused*`` optimizer and the total norm is
  not used; otherwise ``foreach=True`` is added.

The NpuFused optimizer and its fused clip are NPU-only: unless the file imports torch_npu
unconditionally they go behind ``if torch_npu is not None:`` with the torch.optim code in the
``else`` (``npu_access.behind_npu``), so the script still runs where torch_npu is not installed.
"""

from __future__ import annotations

import re

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .npu_access import behind_npu, npu_access
from .result import Anchor, FixResult, Text, anchor_path, decline, result, where

FUSED_CAPABLE = ("Adam", "AdamW", "SGD", "Adagrad")
# NpuFused<Name>'s parameters after params, from the torch_npu 2.14.0 signatures: also the leading
# positional parameters of torch.optim.<Name>, in the same order, so positional arguments carry over
# as they are (tests/hints/fixes/test_fixes_optim_infer.py checks the order against torch's).
NPU_FUSED = {
    "AdamW": ("lr", "betas", "eps", "weight_decay", "amsgrad"),
    "Adam": ("lr", "betas", "eps", "weight_decay", "amsgrad"),
    "SGD": ("lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "RMSprop": ("lr", "alpha", "eps", "weight_decay", "momentum", "centered"),
    "Adadelta": ("lr", "rho", "eps", "weight_decay"),
}
CLIP = ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_")


def _optimizer_calls(src: Source, anchor: Anchor, names: tuple[str, ...]) -> list[tuple[cst.Call, str]]:
    out = []
    for call in src.at(where(anchor), cst.Call):
        for n in names:
            if src.is_api(call.func, f"torch.optim.{n}", f"torch.optim.{n.lower()}.{n}"):
                out.append((call, n))
    return out


_FUSED = re.compile(r"\bfused\s*=\s*True\b|\bNpuFused[A-Za-z]+\s*\(")


def is_fused(text: str) -> bool:
    """The optimizer construction already has one of the NPU220 fixes: ``fused=True`` or a
    ``torch_npu.optim.NpuFused*`` class."""
    return _FUSED.search(text) is not None


def fused_optimizer(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    found = _optimizer_calls(src, anchor, FUSED_CAPABLE)
    if not found:
        if _npu_fused_at(src, anchor):
            return decline(why, "the optimizer is already a torch_npu NpuFused optimizer (the other NPU220 fix)")
        return decline(why, "no torch.optim Adam/AdamW/SGD/Adagrad construction here")
    call, name = found[0]
    if ct.has_star(call):
        return decline(why, "the optimizer gets **kwargs: cannot tell whether foreach is set")
    if ct.keyword(call, "fused") is not None:
        return decline(why, "fused is already given")
    for flag in ("foreach", "differentiable"):
        arg = ct.keyword(call, flag)
        if arg is not None and ct.literal(arg.value) is not False and ct.literal(arg.value) is not None:
            return decline(why, f"fused=True cannot be combined with {flag}=...")
    return src.fixed(
        {call: ct.append_args(call, [ct.kwarg("fused", "True")])},
        f"Use the fused {name} kernel: fused=True",
        safe=False,
        path=anchor_path(anchor, path),
        notes=("one kernel updates all parameters; results match the loop within float rounding",),
    )


def npu_fused_optimizer(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    found = _optimizer_calls(src, anchor, tuple(NPU_FUSED))
    if not found:
        return decline(why, "no torch.optim optimizer with an NpuFused counterpart here")
    call, name = found[0]
    fused = ct.keyword(call, "fused")
    if fused is not None and ct.literal(fused.value) is True:
        return decline(why, "the optimizer already has fused=True (the other NPU220 fix); NpuFused would not take it")
    if ct.has_star(call):
        return decline(why, "the optimizer gets *args/**kwargs")
    allowed = NPU_FUSED[name]
    pos = ct.positional(call)
    if not pos or len(pos) - 1 > len(allowed):  # past NPU_FUSED: torch-only parameters (Adadelta's foreach)
        return decline(why, "positional arguments do not line up with the NpuFused signature")
    for a in call.args:
        if a.keyword is not None and a.keyword.value not in (*allowed, "params"):
            return decline(why, f"NpuFused{name} does not take {a.keyword.value}=")
    new = call
    if name == "SGD" and ct.argument(call, 1, "lr") is None:
        new = ct.append_args(new, [ct.kwarg("lr", "0.001")])
    new = new.with_changes(func=ct.expr(f"{npu_access(src.module).name}.optim.NpuFused{name}"))
    module = behind_npu(src, {call: new}, why)  # the torch.optim one stays where torch_npu is not installed
    if module is None:
        return None
    return result(
        source,
        module.code,
        f"Use torch_npu.optim.NpuFused{name}",
        safe=False,
        path=anchor_path(anchor, path),
        notes=(
            "parameters must be float32/float16 (bf16 raises TypeError)",
            "gradients live in combined buffers: clip with optimizer.clip_grad_norm_fused_",
        ),
    )


def _npu_fused_at(src: Source, anchor: Anchor) -> bool:
    return any(
        any(q.startswith("torch_npu.optim.NpuFused") for q in (src.qnames(c.func) or {ct.dotted(c.func) or ""}))
        for c in src.at(where(anchor), cst.Call)
    )


def _npu_fused_names(src: Source) -> list[str]:
    names = []
    for a in src.walk(cst.Assign, hint="NpuFused"):
        if isinstance(a.value, cst.Call) and any(q.startswith("torch_npu.optim.NpuFused") for q in (src.qnames(a.value.func) or {ct.dotted(a.value.func) or ""})):
            for t in a.targets:
                d = ct.dotted(t.target)
                if d:
                    names.append(d)
    return names


def fused_grad_clip(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    calls = [c for c in src.at(where(anchor), cst.Call) if src.is_api(c.func, *CLIP)]
    if not calls:
        return decline(why, "no clip_grad_norm_ call here")
    call = calls[0]
    if ct.has_star(call):
        return decline(why, "clip_grad_norm_ gets *args/**kwargs")
    fused = _npu_fused_names(src)
    stmt = src.statement(call)
    result_unused = (
        isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is call
    )
    extra = [a.keyword.value for a in call.args if a.keyword is not None and a.keyword.value not in ("parameters", "max_norm", "norm_type")]
    max_norm = ct.argument(call, 1, "max_norm")
    norm_type = ct.argument(call, 2, "norm_type")
    if len(set(fused)) == 1 and result_unused and not extra and max_norm is not None and len(ct.positional(call)) <= 3:
        args = ct.code(max_norm.value) + (f", norm_type={ct.code(norm_type.value)}" if norm_type is not None else "")
        new = ct.expr(f"{fused[0]}.clip_grad_norm_fused_({args})")
        # behind the same test as the NpuFused optimizer: without torch_npu it is a torch.optim one
        module = behind_npu(src, {call: new}, why)
        if module is None:
            return None
        return result(source, module.code, f"Clip with {fused[0]}.clip_grad_norm_fused_ (one fused kernel)", safe=False,
                      path=anchor_path(anchor, path), notes=("only valid because the optimizer is a torch_npu NpuFused* optimizer",))
    if ct.keyword(call, "foreach") is not None or len(ct.positional(call)) > 4:
        return decline(why, "foreach is already given")
    return src.fixed(
        {call: ct.append_args(call, [ct.kwarg("foreach", "True")])},
        "Clip gradients with foreach=True (one multi-tensor kernel per step)",
        safe=False,
        path=anchor_path(anchor, path),
    )
