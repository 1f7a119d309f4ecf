"""NPU107 online-compile (docs/rules/NPU107.md).

Ascend: at least ``opCompileMaxCount`` ``AscendCL@aclopCompileAndExecute`` events in the capture
(advisor ``timeline_op_dispatch``; ``api_statistic.csv`` when the trace has none) -> operators
compiled online; cost = the host time of those calls and of ``AscendCL@opCompile``. These are
CANN-layer events: at Level0 the rule skips and notice NPU901 names it. Weak variant (``hint``):
kernels carry an ``OP State`` and none is ``static`` (advisor ``dynamic_shape_analysis``), judged
on every format that records it (kernel_details, op_summary, the DB's ``opState``) and at Level0
too; where no kernel records one, NPU901's line for NPU107 says dynamic shape could not be judged.

CUDA/CPU (Kineto): ``Torch-Compiled Region: <frame>/<n>`` with n >= 1 -> torch.compile
recompiled a frame; ``hint`` (inferred), manual fix ``torch._dynamo.mark_dynamic``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.profile.timemodel import TaskClass, is_class
from msprof_lsp.mapping.units import NS_PER_US
from msprof_lsp.mapping.profile.model import Backend

from ..context import RuleContext, Unit
from ..finding import Finding, Severity
from ..fixes import npu_switches
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq

COMPILE_API = "aclopCompileAndExecute"
COMPILE_APIS = frozenset({COMPILE_API, "opCompile"})
REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)")
LEVEL1_NEED = "AscendCL@aclopCompileAndExecute events (CANN layer) to count online compilations"
NO_OP_STATE = ("and no kernel records an OP State (Level0's kernel_details.csv has no such column), "
               "so dynamic-shape operators cannot be judged either")


def _op_states(ctx: RuleContext) -> np.ndarray:
    """Mask of the profiled steps' compute kernels with a recorded OP State (dynamic / static):
    kernel_details' or op_summary's column, the DB's COMPUTE_TASK_INFO.opState."""
    def compute() -> np.ndarray:
        k = ctx.profile.kernels
        if not len(k):
            return np.zeros(0, dtype=bool)
        recorded = pq.mask(k["op_state"], lambda s: s.lower() in ("dynamic", "static"))  # once per distinct state
        compute = is_class(k, TaskClass.COMPUTE)  # operator binaries; collectives have no OP State to judge
        return compute & pq.kernels_in_steps_mask(ctx.profile) & recorded
    return ctx.derived(("op_states",), compute)


# pytorch_only: its advice is torch_npu's
@declare("NPU107", "online-compile", thresholds=("opCompileMaxCount",), pytorch_only=True, level1=LEVEL1_NEED)
class OnlineCompile(Rule):
    """Operators are compiled at run time (aclopCompileAndExecute) instead of using prebuilt binaries.

    With jit_compile on, torch_npu compiles an operator the first time it sees a shape (and again
    for every new shape); compilation takes milliseconds on the host and the device waits. Prebuilt
    operator binaries (jit_compile=False) skip it; stable shapes keep the cache effective.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.backend is not Backend.ASCEND:
            yield from self._recompiles(ctx)
            return
        strong = None
        # At Level0 the count is not judged; the weak variant still is, from the OP State that
        # kernel_details records -- and where none is recorded, NPU901's line says so.
        if not ctx.needs_level1(self, also="" if _op_states(ctx).any() else NO_OP_STATE):
            strong = self._count(ctx)
            if strong is not None:
                yield strong
        if strong is None:
            weak = self._all_dynamic(ctx)
            if weak is not None:
                yield weak

    def _count(self, ctx: RuleContext) -> Finding | None:
        prof = ctx.profile
        ev = prof.host_events
        calls = pq.mask(ev["name"], lambda n: n.split("@", 1)[-1] == COMPILE_API)
        involved = pq.mask(ev["name"], lambda n: n.split("@", 1)[-1] in COMPILE_APIS)
        count = int(calls.sum())
        source = "trace"
        if not count and prof.api_statistic is not None and len(prof.api_statistic):
            api = prof.api_statistic
            hit = api[api["api_name"].astype(str) == COMPILE_API]
            count, source = int(hit["count"].sum()), "api_statistic.csv"
            total = float(hit["time_ns"].sum())
        else:
            total = float(ev["dur_ns"].to_numpy(np.int64)[involved].sum())
        limit = ctx.thresholds.op_compile_max_count
        if count < limit:
            return None
        steps = ctx.num_steps
        n_compile = int(pq.mask(ev["name"], lambda n: n.split("@", 1)[-1] == "opCompile").sum())
        message = ctx.message(
            "Online compile", total_ns=total, count=count, unit=COMPILE_API, wall=True,
            diagnosis="operators compiled at run time", fix="Use prebuilt binaries: set_compile_mode(jit_compile=False)",
        )
        evidence = {
            "backend": ctx.backend,
            "source": source,
            "aclopCompileAndExecute": count,
            "per_step": count / steps,
            "opCompile": n_compile,
            "host_us_per_step": round(total / steps / NS_PER_US, 3),
            "manual_fix": ["export ACLNN_CACHE_LIMIT=100000", "export HOST_CACHE_CAPACITY=20",
                           "DataLoader(..., drop_last=True) when only the last batch has another shape",
                           "bucket sequence lengths"],
            "thresholds": {"opCompileMaxCount": limit},
        }
        return self._anchored(ctx, message, total, evidence, None)

    def _all_dynamic(self, ctx: RuleContext) -> Finding | None:
        prof = ctx.profile
        k = prof.kernels
        if not len(k):
            return None
        sel = _op_states(ctx)
        if not sel.any() or (sel & pq.mask(k["op_state"], lambda s: s.lower() == "static")).any():
            return None
        total = float(k["dur_ns"].to_numpy(np.int64)[sel].sum())
        types = pq.kernel_types(prof.kernels)[sel]
        shapes = pq.strs(k["input_shapes"])[sel]
        variants: dict[str, set[str]] = {}
        for t, s in zip(types, shapes):
            variants.setdefault(str(t), set()).add(s)
        n = int(sel.sum())
        message = ctx.message(
            "Dynamic shapes", total_ns=total, events=n, unit=Unit.KERNEL, qualifier="all OP State dynamic",
            diagnosis="no operator ran as a static binary",
            fix="Try set_compile_mode(jit_compile=False); keep input shapes fixed",
        )
        evidence = {
            "backend": ctx.backend,
            "variant": "all dynamic",
            "dynamic_kernels": n,
            "static_kernels": 0,
            "distinct_input_shapes": {t: len(v) for t, v in sorted(variants.items())},
            "thresholds": {"opCompileMaxCount": ctx.thresholds.op_compile_max_count},
        }
        return self._anchored(ctx, message, total, evidence, Severity.HINT)

    def _anchored(self, ctx: RuleContext, message: str, total: float, evidence: dict, severity: Severity | None) -> Finding:
        wall = evidence.get("variant") != "all dynamic"
        call = sq.calls_where(ctx, lambda ix, c: c.qualname.endswith("npu.set_compile_mode"))
        if call:
            index, c = call[0]
            fixes = sq.fixes(ctx, (npu_switches.disable_jit_compile, c.span, index.path, {}))
            return ctx.finding(self, span=c.span, message=message, total_ns=total, evidence=evidence, wall=wall,
                               confidence=Confidence.MODULE, fixes=fixes, severity=severity)
        entry = sq.torch_npu_import(ctx)
        if entry is not None:
            index, imp = entry
            fixes = sq.fixes(ctx, (npu_switches.disable_jit_compile, imp.span, index.path, {}))
            return ctx.finding(self, span=imp.span, message=message, total_ns=total, evidence=evidence, wall=wall,
                               confidence=Confidence.MODULE, fixes=fixes, severity=severity)
        return ctx.finding(self, span=None, message=message, total_ns=total, evidence=evidence, wall=wall,
                           confidence=Confidence.MODULE, severity=severity)

    def _recompiles(self, ctx: RuleContext) -> Iterable[Finding]:
        prof = ctx.profile
        h = prof.host_ops
        if not len(h):
            return
        m = pd.Series(pq.strs(h["name"])).str.extract(REGION)
        ok = m[0].notna().to_numpy(dtype=bool) & pq.in_steps(prof, h["start_ns"].to_numpy(np.int64))
        if not ok.any():
            return
        frame = m[0].to_numpy()[ok].astype(int)
        n = m[1].to_numpy()[ok].astype(int)
        again = n >= 1
        if not again.any():
            return
        total = float(h["dur_ns"].to_numpy(np.int64)[np.flatnonzero(ok)[again]].sum())
        recompiled = sorted({f"{f}/{c}" for f, c in zip(frame[again], n[again])})
        message = ctx.message(
            "torch.compile recompiles", total_ns=total, count=len(recompiled), unit=Unit.GRAPH,
            diagnosis="input shapes change between steps",
            fix="Mark the varying dim dynamic: torch._dynamo.mark_dynamic(t, dim)",
        )
        evidence = {"backend": ctx.backend, "recompiled_regions": recompiled,
                    "manual_fix": ["torch._dynamo.mark_dynamic(t, dim)", "torch.compile(..., dynamic=True)"]}
        yield ctx.finding(self, span=None, message=message, total_ns=total, evidence=evidence,
                          confidence=Confidence.INFERRED, severity=Severity.HINT)
