"""NPU250 dropout-in-inference: dropout still draws masks in a run without any backward pass,
optimizer step or gradient communication -- the model was left in training mode.

"Inference" is judged from the whole profile (``training_evidence``), never from the absence of
one marker: a run is training when it holds any backward host op or kernel, any optimizer step or
update kernel (ApplyAdamW), or any all-reduce / reduce-scatter collective.

Dropout work: Ascend mask-generation / ``DropOutDoMask`` kernels (names or types containing
dropout, genmask, genbitmask, domask); Kineto ``aten::dropout`` / ``aten::native_dropout`` /
``aten::feature_dropout`` ops whose ``Concrete Inputs`` third entry (``train``) is ``"True"``.
In ``eval()`` mode ``F.dropout`` returns its input without launching anything, so any such work
means training mode. Anchored on the model call inside the inference loop (found through the
dropout op's recorded frames), else on the dropout call; fixes ``model.eval()`` before the loop
(safe when the model variable is known) and ``torch.inference_mode()``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator

import numpy as np

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Finding, FixOffer, Related
from msprof_lsp.hints.fixes import inference as fx
from msprof_lsp.hints.fixes import make_offer
from msprof_lsp.hints.registry import Rule, declare
from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.source.constructs import OPTIMIZER_KERNEL
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq

DROPOUT_KERNEL = re.compile(r"dropout|genmask|genbitmask|domask", re.IGNORECASE)
DROPOUT_OPS = ("aten::dropout", "aten::native_dropout", "aten::feature_dropout", "aten::dropout_", "aten::feature_dropout_")


def _train_flag(concrete: str) -> bool | None:
    """The ``train`` argument from Kineto's Concrete Inputs (``["", "0.1", "True"]``)."""
    try:
        values = json.loads(concrete) if concrete else None
    except ValueError:
        return None
    if not isinstance(values, list) or len(values) < 3:
        return None
    return {"True": True, "False": False}.get(str(values[2]))


GRAD_KERNEL = re.compile(r"Grad(V\d+)?$|Backward")
# collectives that reduce gradients (allGather and broadcast also move parameters and outputs)
GRADIENT_COLLECTIVE = re.compile(r"all_?reduce|reduce_?scatter", re.IGNORECASE)
# host ops that issue a collective (device tasks go through the time model's classifier)
COLLECTIVE = re.compile(r"^hcom_|nccl|c10d::|^HcclAll|^HcclReduce", re.IGNORECASE)


def training_evidence(p) -> dict[str, int]:  # noqa: ANN001 - Profile
    """Counts of what only training does, over the whole profile: backward host ops, backward or
    gradient kernels, optimizer steps and update kernels, gradient collectives. All zero means an
    inference run; any one of them is enough to call it training."""
    h, k = p.host_ops, p.kernels
    hname = h["name"] if len(h) else None
    ev = {
        "backward_ops": int(pq.mask(hname, pq.is_backward_node).sum()) if hname is not None else 0,
        "optimizer_steps": int(pq.mask(hname, lambda n: n.startswith(("Optimizer.step#", "Optimizer.zero_grad#"))).sum())
        if hname is not None else 0,
        "backward_kernels": 0,
        "optimizer_kernels": 0,
        "gradient_collectives": int(pq.mask(hname, lambda n: bool(COLLECTIVE.search(n) and GRADIENT_COLLECTIVE.search(n))).sum())
        if hname is not None else 0,
    }
    if len(k):
        def either(test) -> np.ndarray:  # noqa: ANN001
            return pq.mask(k["type"], test) | pq.mask(k["name"], test)

        ev["backward_kernels"] = int((k["backward"].to_numpy(dtype=bool) | either(lambda t: bool(GRAD_KERNEL.search(t)))).sum())
        ev["optimizer_kernels"] = int(either(lambda t: bool(OPTIMIZER_KERNEL.search(t))).sum())
        comm = timemodel.collective_mask(k)  # the time model's classifier: hcom_*, HCCL core, NCCL
        ev["gradient_collectives"] += int((comm & either(lambda t: bool(GRADIENT_COLLECTIVE.search(t)))).sum())
    return ev


def _is_inference_loop(index, loop) -> bool:  # noqa: ANN001
    return "backward" not in {index.calls[i].name for i in loop.calls}


@declare("NPU250", "dropout-in-inference")
class DropoutInInference(Rule):
    """Dropout runs in a profile without backward or optimizer: the model is still in training mode.

    In training mode every dropout generates a random mask and applies it; in an inference run that
    is wasted device time and changes the outputs. model.eval() turns dropout into the identity (and
    batch norm to its running statistics).
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        p = ctx.profile
        h = p.host_ops
        training = training_evidence(p)
        if any(training.values()):
            return
        k = p.kernels_in_steps()
        ops = np.zeros(0, dtype=np.int64)
        if ctx.backend is Backend.ASCEND:
            sel = pq.mask(k["name"], lambda n: bool(DROPOUT_KERNEL.search(n))) | pq.mask(k["type"], lambda n: bool(DROPOUT_KERNEL.search(n))) if len(k) else np.zeros(0, dtype=bool)
            if not sel.any():
                return
            work = k[sel]
            total = int(work["dur_ns"].sum())
            launched = work["host_op"].to_numpy(np.int64)
            ops = np.unique(launched[launched >= 0])
            count, unit = len(work), Unit.KERNEL
            names = Counter(pq.strs(work["name"]))
        else:
            if not len(h):
                return
            cand = np.flatnonzero(pq.mask(h["name"], lambda n: n in DROPOUT_OPS) & pq.in_steps(p, h["start_ns"].to_numpy(np.int64)))
            ci = h["concrete_inputs"].to_numpy(dtype=object)
            ops = np.array([r for r in cand if _train_flag(str(ci[r])) is True], dtype=np.int64)
            # aten::dropout calls aten::native_dropout on CUDA: count the outermost only
            if len(ops):
                outer = pq.strict_ancestor(pq.mask_of(len(h), ops.tolist()), pq.parents(p))
                ops = ops[outer[ops] < 0]
            if not len(ops):
                return
            work = pq.kernels_under(p, ops.tolist())
            total = int(work["dur_ns"].sum()) if len(p.kernels) else int(h["dur_ns"].to_numpy(np.int64)[ops].sum())
            count, unit = len(ops), Unit.DROPOUT_CALL
            names = Counter(pq.strs(h["name"])[ops])
        span, conf, related = self._anchor(ctx, ops)
        evidence = {
            "backend": ctx.backend,
            "dropout": dict(names.most_common(6)),
            "count": count,
            **training,
            "time_us_per_step": pq.format_ns_us(ctx.per_step_ns(total)),
        }
        fixes = self._fixes(ctx, span, evidence)
        msg = ctx.message(
            "Dropout in inference",
            total_ns=total,
            events=count,
            unit=unit,
            qualifier="no backward pass or optimizer step",
            diagnosis="the model runs in training mode",
            fix="Call model.eval() before the loop",
        )
        yield ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf, evidence=evidence,
                          fixes=fixes, related=related)

    @staticmethod
    def _anchor(ctx: RuleContext, ops: np.ndarray) -> tuple[Span | None, Confidence, list[Related]]:
        site = None
        for r in ops.tolist():
            site = site or sq.site_of_op(ctx, int(r))
            stack = pq.op_stack(ctx.profile, int(r))
            if stack < 0:
                continue
            hit = sq.loop_with_frame(ctx, ctx.profile.stack_of(stack), _is_inference_loop)
            if hit is None:
                continue
            header, path = hit
            # the model call: the frame's line inside that loop
            for p, f in sq.user_frames(ctx, ctx.profile.stack_of(stack)):
                if p == path and header.line <= f.line:
                    stmt = sq.statement_span(ctx, path, f.line)
                    if stmt is not None and stmt.line != header.line:
                        conf = site.confidence if site is not None else Confidence.STACK
                        related = [Related(sq.site_statement(ctx, site), "dropout called here")] if site is not None else []
                        return stmt, conf, related
            break
        if site is not None:
            return sq.site_statement(ctx, site), site.confidence, []
        return None, Confidence.MODULE, []

    @staticmethod
    def _fixes(ctx: RuleContext, span: Span | None, evidence: dict) -> list[FixOffer]:
        if span is None:
            return []
        return [make_offer(t, span.path, span) for t in (fx.eval_before_loop, fx.inference_mode)]
