"""NPU220 fused-optimizer and NPU221 fused-grad-clip (docs/rules/NPU220.md, NPU221.md).

NPU220: an ``Optimizer.step#<Name>.step`` scope whose update runs per parameter (no ``_fused_``
or ``_foreach_`` op inside): its host time is the cost (one small kernel launch per parameter and
tensor op, ``aten::item`` syncs on the step counters). Profiles without host ops show it as
per-parameter ``Apply<Name>`` kernels. On Ascend, a multi-tensor step (``_foreach_`` ops) whose
host time is ``foreach_host_ratio`` times its kernels' device time or more: few kernels, but the
host still dispatches tensor by tensor. Anchored on the ``torch.optim.<Name>(...)`` construction,
with ``optimizer.step()`` as related information; fixes ``fused=True`` (preferred) and, on Ascend,
``torch_npu.optim.NpuFused<Name>`` (preferred for the multi-tensor step, as the advisor's affinity API).

NPU221: gradient clipping as per-tensor norms: the advisor's ``add-reciprocal-mul`` sequence
(``max_norm / (total + eps)`` inside ``clip_grad_norm_``) with per-tensor ``LpNormReduceV2`` /
``LpNormUpdateV2`` kernels on Ascend, per-tensor ``linalg_vector_norm`` on CUDA. Fix:
``clip_grad_norm_fused_`` for an NpuFused optimizer, else ``foreach=True``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import numpy as np

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Change, Effect, Finding, FixOffer, Related, Target
from msprof_lsp.hints.fixes import make_offer
from msprof_lsp.hints.fixes import optimizer as fx
from msprof_lsp.hints.registry import Rule, declare
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.profile.model import Backend, Profile
from msprof_lsp.mapping.profile.shapes import dtype_bytes, io_bytes, numel, parse_shapes
from msprof_lsp.mapping.source.optimizer_anchor import adam_update_pattern

from .. import profile_query as pq, source_query as sq

OPTIMIZERS = ("AdamW", "Adam", "SGD", "Adadelta", "Lamb", "AdamP", "BertAdam", "RMSprop", "RMSpropTF")
STEP_RE = re.compile(r"^Optimizer\.step#(?P<name>\w+)\.step$")
# Per-parameter update kernels of the stock optimizers (acl_op era names, Type column).
APPLY_KERNELS = {
    "ApplyAdamW": "AdamW", "ApplyAdamWD": "AdamW", "ApplyAdam": "Adam", "ApplyAdamD": "Adam",
    "ApplyMomentum": "SGD", "ApplyMomentumD": "SGD", "ApplyRMSProp": "RMSprop", "ApplyRMSPropD": "RMSprop",
    "ApplyAdadelta": "Adadelta", "ApplyAdadeltaD": "Adadelta",
}
# Single-tensor Adam/AdamW's per-parameter update as eager aclnn kernels: exp_avg_sq.addcmul_, the
# denominator sqrt / bias correction + eps, param.addcdiv_ (the kernel types determine the update;
# the mapping places the same kernels on optimizer.step(): one spelling, in mapping)
ADAM_UPDATE = adam_update_pattern()
ADAM_FAMILY = ("Adam", "AdamW")  # fused=True: torch_npu's _fused_adam(w)_, per parameter with a step counter
FUSED, FOREACH = "_fused_", "_foreach_"  # inner op names of the fused and the multi-tensor update
CLIP_CALLS = ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_")
CLIP_PATTERN = "add-reciprocal-mul"
CLIP_KERNELS = "(Add|Adds)-Reciprocal-(Mul|Muls)"  # the same coefficient as eager aclnn kernels
NORM_KERNELS = ("LpNormReduceV2", "LpNormUpdateV2")
PER_TENSOR_NORMS = ("linalg_vector_norm", "norm")
CLAMP_OPS = ("clamp", "clamp_")  # the coefficient clamped to 1 before the per-tensor mul_
# fused=True's update on the host (torch's _fused_adam(w)_, _fused_sgd_, _fused_adagrad_): one pass
# over each parameter element that reads its gradient and reads and writes the parameter and each
# state tensor (Adam/AdamW: exp_avg, exp_avg_sq, max_exp_avg_sq with amsgrad; SGD: the momentum
# buffer when there is momentum; Adagrad: the sum of squares). State tensors per parameter:
FUSED_STATE = {"Adam": 2, "AdamW": 2, "SGD": 1, "Adagrad": 1}
AMSGRAD_OP = "aten::maximum"  # Adam(W)'s amsgrad keeps a third state tensor: max(max_exp_avg_sq, exp_avg_sq)
MEMORY_BOUND_BYTES = 1 << 20  # an in-place op moving this much times the memory, not its dispatch


def _optimizer_construction(ctx: RuleContext, name: str, step_site) -> tuple[Span | None, Confidence]:  # noqa: ANN001
    """``torch.optim.<Name>(...)``: the binding of the receiver of the profiled ``x.step()`` call,
    else the workspace's one construction of that class (several: the first, inferred)."""
    qualnames = (f"torch.optim.{name}", f"torch.optim.{name.lower()}.{name}")
    if step_site is not None:
        m = re.match(r"^\s*([\w.]+)\.step\s*\(", step_site.call_text)
        index = sq.index_of(ctx, step_site.span.path)
        if m and index is not None:
            b = index.binding_for(step_site.function, m.group(1))
            if b is not None and b.ctor_qualname in qualnames:
                return b.span, step_site.confidence
    found = list(sq.calls_named(ctx, qualnames))
    if found:
        return found[0][1].span, Confidence.MODULE if len(found) == 1 else Confidence.INFERRED
    return None, Confidence.MODULE


def _step_site(ctx: RuleContext, rows: np.ndarray):  # noqa: ANN202 - Site | None
    """Where ``optimizer.step()`` is called (the site of a step scope, or of an op inside it)."""
    for r in rows:
        s = sq.site_of_op(ctx, int(r))
        if s is not None and ".step" in s.call_text:
            return s
    return None


def _fix_list(ctx: RuleContext, span: Span | None, transforms, evidence: dict) -> list[FixOffer]:  # noqa: ANN001
    if span is None:
        return []
    return [make_offer(t, span.path, span) for t in transforms]


@declare("NPU220", "fused-optimizer", thresholds=("foreachHostRatio",))
class FusedOptimizer(Rule):
    """The optimizer updates parameters one at a time: use its fused (or NpuFused) form.

    A per-parameter optimizer step launches several small kernels for every parameter tensor and
    reads its step counter with aten::item; the host spends the step dispatching. A fused optimizer
    updates all parameters with a few multi-tensor kernels.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        h = ctx.profile.host_ops
        if len(h):
            names = pq.strs(h["name"])
            steps = pq.mask(h["name"], lambda n: bool(STEP_RE.match(n)) and STEP_RE.match(n).group("name") in OPTIMIZERS)
            steps &= pq.in_steps(ctx.profile, h["start_ns"].to_numpy(np.int64))
            rows = np.flatnonzero(steps)
            for name in sorted({STEP_RE.match(names[r]).group("name") for r in rows}):
                mine = np.array([r for r in rows if STEP_RE.match(names[r]).group("name") == name])
                for f in self._host(ctx, name, mine):
                    per_parameter = ctx.backend is Backend.ASCEND and "foreach_ops" not in f.evidence
                    f.effect = fused_step(ctx, mine, name) if per_parameter else \
                        host_fused_step(ctx, mine, name) or \
                        multi_tensor(ctx, mine, np.zeros(0, np.int64), "the optimizer step", calls=len(mine))
                    yield f
            if len(rows):
                return
        if ctx.backend is Backend.ASCEND:
            for f in self._kernels_only(ctx):
                f.effect = Effect(unknown="unknown: without host ops the profile does not say which kernels one "
                                          "multi-tensor kernel would replace")
                yield f

    def _host(self, ctx: RuleContext, name: str, rows: np.ndarray) -> Iterator[Finding]:
        p = ctx.profile
        h = p.host_ops
        inside = pq.descendants(p, rows.tolist())
        inner_names = pq.strs(h["name"])[inside]
        if any(FUSED in n for n in inner_names):
            return  # already fused
        foreach_ops = sum(FOREACH in n and n.startswith("aten::") for n in inner_names)
        if foreach_ops and ctx.backend is not Backend.ASCEND:
            return  # multi-tensor: the stock fast path off Ascend
        total = int(h["dur_ns"].to_numpy(np.int64)[rows].sum())
        k = pq.kernels_under(p, rows.tolist())
        if foreach_ops:
            yield from self._foreach(ctx, name, rows, total, k, foreach_ops, int(inside.sum()))
            return
        items_all = pq.mask(h["name"], lambda n: n == "aten::item") & pq.in_steps(p, h["start_ns"].to_numpy(np.int64))
        items_in = int((items_all & inside).sum())
        ktypes = Counter(pq.kernel_types(k)) if len(k) else Counter()
        apply_k = sum(c for t, c in ktypes.items() if t in APPLY_KERNELS)
        site = _step_site(ctx, np.flatnonzero(inside))
        span, conf = _optimizer_construction(ctx, name, site)
        related = [Related(sq.site_statement(ctx, site), f"{name}.step(): {ctx.per_step_us(total):.1f} µs/step on the host")] if site is not None else []
        if span is None and site is not None:
            span, conf = sq.site_statement(ctx, site), site.confidence
        evidence = {
            "backend": ctx.backend,
            "optimizer": name,
            "scope": f"Optimizer.step#{name}.step",
            "calls": len(rows),
            "step_time_us": pq.format_ns_us(total / max(len(rows), 1)),
            "kernels": len(k),
            "kernels_per_step": round(len(k) / ctx.num_steps, 1),
            "device_time_us_per_step": pq.format_ns_us(ctx.per_step_ns(int(k["dur_ns"].sum()) if len(k) else 0)),
            "kernel_types": dict(ktypes.most_common(8)),
            "apply_kernels": apply_k,
            "item_in_step": items_in,
            "item_total": int(items_all.sum()),
        }
        qual = f"{items_in} of {int(items_all.sum())} aten::item inside" if items_in else ""
        if ctx.backend is Backend.ASCEND:
            transforms, fix = (fx.fused_optimizer, fx.npu_fused_optimizer), f"Pass fused=True or use torch_npu.optim.NpuFused{name}"
        elif ctx.backend is Backend.CUDA:
            transforms, fix = (fx.fused_optimizer,), "Pass fused=True (or foreach=True)"
        else:
            transforms, fix = (fx.fused_optimizer,), "Pass fused=True"
        evidence["fix_api"] = f"torch.optim.{name}(..., fused=True)" + (f" / torch_npu.optim.NpuFused{name}" if ctx.backend is Backend.ASCEND else "")
        fixes = _fix_list(ctx, span, transforms, evidence)
        msg = ctx.message(
            f"Unfused {name}",
            total_ns=total,
            events=len(k) or len(rows),
            unit=Unit.KERNEL if len(k) else Unit.CALL,
            qualifier=qual,
            diagnosis="the optimizer updates one parameter at a time",
            fix=fix,
            wall=True,  # the step scope's host time: a share of the wall-clock step
        )
        yield ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf,
                          evidence=evidence, fixes=fixes, related=related, wall=True)

    def _foreach(self, ctx: RuleContext, name: str, rows: np.ndarray, total: int, k, foreach_ops: int,  # noqa: ANN001
                 inner_ops: int) -> Iterator[Finding]:
        """A multi-tensor (``_foreach_``) step on Ascend: few kernels, but each ``_foreach_`` op still
        dispatches per tensor on the host (the real AlexNet job: 4 kernels, 2.3 ms on the device,
        10.5 ms on the host). NpuFused optimizers update one combined buffer instead. Fires when
        the step's host time is at least ``foreach_host_ratio`` times its kernels' device time."""
        device = int(k["dur_ns"].sum()) if len(k) else 0
        limit = ctx.thresholds.foreach_host_ratio
        ratio = total / device if device else None
        if ratio is not None and ratio < limit:
            return  # the device, not the host dispatch, is what the update costs
        site = _step_site(ctx, np.flatnonzero(pq.descendants(ctx.profile, rows.tolist())))
        span, conf = _optimizer_construction(ctx, name, site)
        related = [Related(sq.site_statement(ctx, site), f"{name}.step(): {ctx.per_step_us(total):.1f} µs/step on the host")] if site is not None else []
        if span is None and site is not None:
            span, conf = sq.site_statement(ctx, site), site.confidence
        ktypes = Counter(pq.kernel_types(k)) if len(k) else Counter()
        evidence = {
            "backend": ctx.backend,
            "optimizer": name,
            "scope": f"Optimizer.step#{name}.step",
            "path": "multi-tensor",
            "calls": len(rows),
            "step_time_us": pq.format_ns_us(total / max(len(rows), 1)),
            "foreach_ops": foreach_ops,
            "foreach_ops_per_step": round(foreach_ops / ctx.num_steps, 1),
            "host_ops_inside": inner_ops,
            "kernels": len(k),
            "kernels_per_step": round(len(k) / ctx.num_steps, 1),
            "device_time_us_per_step": pq.format_ns_us(ctx.per_step_ns(device)),
            "host_device_ratio": round(ratio, 2) if ratio is not None else None,
            "threshold_ratio": limit,
            "kernel_types": dict(ktypes.most_common(8)),
            "fix_api": f"torch_npu.optim.NpuFused{name} / torch.optim.{name}(..., fused=True)",
        }
        on_device = f"{pq.format_ns_us(ctx.per_step_ns(device)):,.0f} µs on the device" if device else "no kernels recorded"
        times = f", host {ratio:.1f}× that" if ratio is not None else ""
        msg = ctx.message(
            f"Multi-tensor {name} host-bound",
            total_ns=total,
            events=len(k),
            unit=Unit.FOREACH_KERNEL,
            qualifier=f"{on_device}{times}",
            diagnosis=f"{ctx.per_step_count(foreach_ops)} _foreach_ ops dispatch tensor by tensor on the host",
            fix=f"Use torch_npu.optim.NpuFused{name} (one combined buffer) or fused=True",
            wall=True,
        )
        fixes = _fix_list(ctx, span, (fx.npu_fused_optimizer, fx.fused_optimizer), evidence)
        yield ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf,
                          evidence=evidence, fixes=fixes, related=related, wall=True)

    def _kernels_only(self, ctx: RuleContext) -> Iterator[Finding]:
        k = ctx.profile.kernels_in_steps()
        if not len(k):
            return
        types = pq.kernel_types(k)
        per: dict[str, list[int]] = {}
        for i, t in enumerate(types):
            if t in APPLY_KERNELS:
                per.setdefault(APPLY_KERNELS[t], []).append(i)
        for name, idx in sorted(per.items()):
            if len(idx) < 2 * ctx.num_steps:  # one kernel per step is already a fused update
                continue
            yield self._kernel_finding(ctx, name, k.iloc[idx], f"{sorted(set(types[idx]))[0]} kernels", "apply_kernels")
        if per:
            return
        # eager (aclnn) single-tensor Adam/AdamW: no Apply kernel, the update spelled out per parameter
        toks = pq.kernel_tokens(ctx)
        found = toks.find(pq.pattern_regex(ADAM_UPDATE))
        name = _constructed_adam(ctx)
        if len(found) < 2 * ctx.num_steps or name is None:
            return  # one per step is a fused update; no single Adam/AdamW construction: no class to name
        rows = np.concatenate([toks.rows[a:b] for a, b in found])
        yield self._kernel_finding(ctx, name, k.loc[rows], "update kernels", "update_sequences", matches=len(found),
                                   pattern=ADAM_UPDATE)

    def _kernel_finding(self, ctx: RuleContext, name: str, sub, unit: str, count_key: str, *,  # noqa: ANN001
                        matches: int | None = None, pattern: str = "") -> Finding:
        """Kernel-only evidence (no host ops): ``sub`` are the per-parameter update kernels."""
        n = len(sub) if matches is None else matches
        total = int(sub["dur_ns"].sum())
        span, _conf = _optimizer_construction(ctx, name, None)
        evidence = {
            "backend": ctx.backend, "optimizer": name, count_key: n,
            f"{count_key}_per_step": round(n / ctx.num_steps, 1),
            "kernel_types": dict(Counter(pq.kernel_types(sub)).most_common(4)),
            "matched_in": "kernel types",
            **({"pattern": pattern, "kernels": len(sub)} if pattern else {}),
        }
        transforms = (fx.fused_optimizer, fx.npu_fused_optimizer)
        fixes = _fix_list(ctx, span, transforms, evidence)
        msg = ctx.message(
            f"Unfused {name}",
            total_ns=total,
            count=round(len(sub) / ctx.num_steps),
            unit=unit,
            qualifier="one per parameter" if not pattern else f"{round(n / ctx.num_steps)} parameters",
            diagnosis="the optimizer updates one parameter at a time",
            fix=f"Use torch_npu.optim.NpuFused{name} or fused=True",
        )
        return ctx.finding(self, span=span, message=msg, total_ns=total, confidence=Confidence.INFERRED,
                           evidence=evidence, fixes=fixes)


def _constructed_adam(ctx: RuleContext) -> str | None:
    """Adam or AdamW, whichever the workspace constructs (None: neither, or both)."""
    names = [n for n in ("AdamW", "Adam") if next(sq.calls_named(ctx, (f"torch.optim.{n}", f"torch.optim.{n.lower()}.{n}")), None)]
    return names[0] if len(names) == 1 else None


@declare("NPU221", "fused-grad-clip", backends=(Backend.ASCEND, Backend.CUDA))
class FusedGradClip(Rule):
    """Gradient clipping computes one norm per tensor: clip with the fused or foreach form.

    clip_grad_norm_ without the multi-tensor path launches a norm kernel per gradient tensor, then
    add, reciprocal and mul for the coefficient and a mul_ per tensor; NpuFused optimizers clip
    their combined gradient buffer in one pass, foreach=True batches the rest.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        p = ctx.profile
        toks = pq.host_tokens(ctx)
        matches = toks.find(pq.pattern_regex(CLIP_PATTERN)) if len(toks.rows) else []
        ascend = ctx.backend is Backend.ASCEND
        k = p.kernels_in_steps()
        types = pq.kernel_types(k) if len(k) else np.zeros(0, dtype=object)
        norm_k = np.isin(types, NORM_KERNELS) if len(k) else np.zeros(0, dtype=bool)
        per_tensor = 0
        if not ascend:
            # CUDA: only the per-tensor path is worth a hint (foreach is the CUDA default).
            for a, _b in matches:
                i = a - 1
                while i >= 0 and toks.names[i] in (*PER_TENSOR_NORMS, "stack"):
                    per_tensor += toks.names[i] in PER_TENSOR_NORMS
                    i -= 1
            if per_tensor < 2 * max(len(matches), 1):
                return
        n_norm = int(norm_k.sum())
        if not matches and not (ascend and n_norm >= 2 * ctx.num_steps):
            return
        rows = np.concatenate([toks.rows[a:b] for a, b in matches]) if matches else np.zeros(0, dtype=np.int64)
        matched_ns = pq.op_time_ns(p, rows.tolist()) if len(rows) else 0
        coefficient = []
        if not len(toks.rows) and ascend and n_norm >= 2 * ctx.num_steps:
            # kernels only (msprof CLI): the coefficient's kernels count with the norms, as its ops do
            ktoks = pq.kernel_tokens(ctx)
            coefficient = ktoks.find(pq.pattern_regex(CLIP_KERNELS))
            if coefficient:
                krows = np.concatenate([ktoks.rows[a:b] for a, b in coefficient])
                matched_ns = int(k.loc[krows, "dur_ns"].sum())
        norm_ns = int(k["dur_ns"].to_numpy(np.int64)[norm_k].sum()) if n_norm else 0
        total = matched_ns + norm_ns
        if matches:
            place = sq.place_ops(ctx, toks.rows[matches[0][0]:matches[0][1]].tolist())
            span, conf = place.span, place.confidence
        else:
            span, conf = None, Confidence.INFERRED
        if span is None:
            found = list(sq.calls_named(ctx, CLIP_CALLS))
            if found:
                span = found[0][1].span
                conf = Confidence.MODULE if len(found) == 1 and matches else Confidence.INFERRED
        evidence = {
            "backend": ctx.backend,
            "sequence": CLIP_PATTERN if matches else "",
            "matches": len(matches),
            "norm_kernels": dict(Counter(types[norm_k]).most_common()) if n_norm else {},
            "norm_kernels_per_step": round(n_norm / ctx.num_steps, 1),
            "per_tensor_norm_ops": per_tensor,
            "coefficient_kernel_matches": len(coefficient),
            "time_us_per_step": pq.format_ns_us(ctx.per_step_ns(total)),
        }
        fixes = _fix_list(ctx, span, (fx.fused_grad_clip,), evidence)
        norms = n_norm or per_tensor
        msg = ctx.message(
            "Per-tensor grad clipping",
            total_ns=total,
            count=ctx.per_step_count(norms) if norms else len(matches),
            unit=Unit.NORM_KERNEL if norms else Unit.CLIP,
            qualifier=CLIP_PATTERN if matches else "",
            diagnosis="clip_grad_norm_ computes one norm per gradient tensor",
            fix="Use clip_grad_norm_fused_ (NpuFused optimizers) or foreach=True" if ascend else "Pass foreach=True to clip_grad_norm_",
        )
        norm_rows = p.kernels.index.get_indexer(k.index[norm_k]) if n_norm else np.zeros(0, np.int64)
        whole = [toks.rows[x:y] for a, b in matches for x, y in (_clip_extent(toks, a, b),)]
        fused = np.concatenate(whole) if whole else rows
        yield ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf, evidence=evidence, fixes=fixes,
                          effect=multi_tensor(ctx, fused, norm_rows, "the clipping",
                                              calls=len(matches) or len(coefficient) or ctx.num_steps))


def _clip_extent(toks: pq.Tokens, a: int, b: int) -> tuple[int, int]:
    """The whole per-tensor clip around a match [a, b) of ``CLIP_PATTERN``, what ``foreach=True``
    fuses: the per-tensor norms and their stack before it, the clamp and one ``mul_`` per norm
    after it (the optimizer's own ``mul_`` that may follow is not the clip's)."""
    names = toks.names
    i = a - 1
    while i >= 0 and names[i] in PER_TENSOR_NORMS:  # the total norm
        i -= 1
    tensors = 0
    if i >= 0 and names[i] == "stack":
        i -= 1
        while i >= 0 and names[i] in PER_TENSOR_NORMS:
            tensors += 1
            i -= 1
    j = b
    while j < len(names) and names[j] in CLAMP_OPS:
        j += 1
    scaled = 0
    while j < len(names) and names[j] == "mul_" and scaled < tensors:
        j += 1
        scaled += 1
    return i + 1, j


def _at_ratio(kernels: np.ndarray, host: np.ndarray, f: float) -> tuple[Change, ...]:
    """The kernels and host ops at ``f`` of their time; low end: half the gain."""
    return tuple(Change(target, tuple(int(r) for r in rows), f, best=f, worst=0.5 + 0.5 * f)
                 for target, rows in ((Target.KERNELS, kernels), (Target.HOST_OPS, host)) if len(rows))


def fused_step(ctx: RuleContext, ops: np.ndarray, name: str) -> Effect:
    """``fused=True`` as torch_npu runs it: op-plugin's ``_fused_adamw_``
    (FusedAdamWKernelNpuOpApi.cpp) loops over the parameters, one ``aclnnApplyAdamWV2`` kernel
    and one ``state_steps[i].sub(1)`` each, after torch's one ``_foreach_add_`` of the step
    counters; other optimizers: one fused kernel per parameter. The parameters are the launches of
    the step's least frequent kernel type (a per-parameter update launches each of its types once
    per parameter). The step's kernels and host time scale by the kernel count after / before."""
    p = ctx.profile
    under = pq.kernels_under(p, np.asarray(ops).tolist())
    if not len(under):
        return multi_tensor(ctx, ops, np.zeros(0, np.int64), "the optimizer step", calls=len(ops))
    rows = p.kernels.index.get_indexer(under.index)
    params = min(Counter(pq.kernel_types(under)).values())
    per, once = (2, 1) if name in ADAM_FAMILY else (1, 0)
    after = params * per + once * len(ops)
    f = min(1.0, after / len(rows))
    host = np.flatnonzero(pq.descendants(p, np.asarray(ops).tolist()))
    each = "an ApplyAdamWV2 and a step-counter kernel" if per == 2 else "one fused update kernel"
    return Effect(_at_ratio(rows, host, f),
                  basis=f"fused=True as torch_npu runs it: {each} per parameter ({round(params / max(1, len(ops)))})"
                        f"{' and one step increment' if once else ''}: "
                        f"its {len(rows)} kernels and host time at {after}/{len(rows)} (low end: half the gain)")


def _moved(dims: str, types: str) -> tuple[int, int, int]:
    """(bytes an in-place op moves: its tensor inputs read and its first input written; its first
    input's elements; their size in bytes) from its recorded shapes. A scalar first input: 0."""
    shapes = parse_shapes(dims)
    if not shapes or shapes[0] is None or numel(shapes[0]) <= 1:
        return 0, 0, 0
    size = dtype_bytes(types, 1)[0]
    return io_bytes(shapes, types) + numel(shapes[0]) * size, numel(shapes[0]), size


def host_fused_step(ctx: RuleContext, ops: np.ndarray, name: str) -> Effect | None:
    """``fused=True`` on a host-only trace (a CPU run: the ops are the update's arithmetic, run where
    they are dispatched). The per-tensor loop costs its dispatch, its out-of-place temporaries and
    one memory pass per op; the fused kernel still makes one pass over every parameter's state:
    reads the gradient, reads and writes the parameter and each state tensor (``FUSED_STATE``), at
    the rate the step's own in-place ops move memory (their bytes over their time, those moving at
    least ``MEMORY_BOUND_BYTES``: bandwidth-bound, and allocating nothing, as the fused kernel). The
    parameters are the first inputs of the least frequent in-place op with a tensor first input (the
    per-parameter loop runs each of its ops once per parameter). The step scope's own Python time
    (gathering parameters, gradients and state, which the fused path does too) stays. High end: the
    ops at one per op name (dispatch as the whole cost); low end: half the gain. None (the op count
    model instead): an optimizer without a fused form, no recorded shapes, or no memory-bound
    in-place op (small parameters: dispatch is the cost)."""
    if name not in FUSED_STATE:
        return None
    p = ctx.profile
    h = p.host_ops
    roots = np.asarray(ops, np.int64)
    if len(pq.kernels_under(p, roots.tolist())):
        return None  # device kernels: the update runs there (fused_step, multi_tensor)
    inner = np.setdiff1d(np.flatnonzero(pq.descendants(p, roots.tolist())), roots)
    top = inner[np.isin(pq.parents(p)[inner], roots)]
    if not len(top):
        return None
    names = pq.strs(h["name"])[top]
    dur = h["dur_ns"].to_numpy(np.int64)[top]
    moved = [_moved(d, ty) for d, ty in zip(pq.strs(h["input_dims"])[top], pq.strs(h["input_types"])[top])]
    tensor_ops = [i for i, n in enumerate(names) if n.endswith("_") and moved[i][0]]
    big = [i for i in tensor_ops if moved[i][0] >= MEMORY_BOUND_BYTES]
    if not big:
        return None
    per_name = Counter(names[i] for i in tensor_ops)
    least = min(per_name, key=lambda n: (per_name[n], n))
    params = [i for i in tensor_ops if names[i] == least]
    state = FUSED_STATE[name]
    if name == "SGD" and len(tensor_ops) <= len(params):
        state = 0  # one in-place op per parameter (param.add_): no momentum buffer
    if name in ADAM_FAMILY and AMSGRAD_OP in set(names):
        state += 1
    accesses = 2 * (1 + state) + 1
    fused_bytes = sum(accesses * moved[i][1] * moved[i][2] for i in params)
    rate = sum(moved[i][0] for i in big) / max(int(dur[big].sum()), 1)  # bytes per ns
    inner_ns = int(dur.sum())
    _, by_count = _op_ratio(p, inner, len(roots))
    f = min(1.0, max(fused_bytes / rate / max(inner_ns, 1), by_count))
    steps = max(ctx.num_steps, 1)
    return Effect((Change(Target.HOST_OPS, tuple(int(r) for r in inner), f, best=by_count, worst=0.5 + 0.5 * f),),
                  basis=f"fused=True on the host: one pass over each parameter's state ({accesses} accesses per element, "
                        f"{len(params) // steps} parameters, {fused_bytes / steps / 2**20:,.0f} MiB) at the rate of the step's "
                        f"in-place ops moving ≥ 1 MiB ({rate:.1f} GB/s): its ops' host time at {f:.3f}; the step's own Python "
                        f"stays (low end: half the gain; high end: one op per op name)")


def multi_tensor(ctx: RuleContext, ops: np.ndarray, kernels: np.ndarray, what: str, *, calls: int = 1) -> Effect:
    """A per-tensor loop made multi-tensor: the kernels launched under ``ops`` (and ``kernels``)
    become one per kernel type and call, so their time and the ops' host time scale by the kernel
    count ratio (types x calls / kernels): the per-tensor launches were the cost. ``calls``: how
    often the loop runs in the analysed steps (one optimizer step or clip per step: a profile of
    several steps launches each type once per step after the fix, not once in all). Low end: half
    the gain."""
    calls = max(1, calls)
    p = ctx.profile
    under = pq.kernels_under(p, np.asarray(ops).tolist()) if len(ops) else p.kernels.iloc[0:0]
    rows = np.union1d(p.kernels.index.get_indexer(under.index), np.asarray(kernels, np.int64))
    rows = rows[rows >= 0]
    host = np.flatnonzero(pq.descendants(p, np.asarray(ops).tolist())) if len(ops) else np.zeros(0, np.int64)
    if not len(rows):
        # a host-only trace (CPU): the same ratio over the ops inside, one per op name
        inner = np.setdiff1d(host, np.asarray(ops, np.int64))
        if not len(inner):
            return Effect(unknown=f"unknown: no kernels or ops inside {what} in the profile")
        n_types, f = _op_ratio(p, inner, calls)
        return Effect(_at_ratio(np.zeros(0, np.int64), host, f),
                      basis=f"{what} as one op per op name{_per_call(calls)}: its host time at {n_types}/{len(inner)} "
                            "(the op count ratio; low end: half the gain)")
    n_types = len(set(pq.kernel_types(p.kernels)[rows].tolist())) * calls
    f = min(1.0, n_types / len(rows))
    return Effect(_at_ratio(rows, host, f),
                  basis=f"{what} as one kernel per kernel type{_per_call(calls)}: its {len(rows)} kernels and host time "
                        f"at {n_types}/{len(rows)} (the kernel count ratio; low end: half the gain)")


def _op_ratio(p: Profile, inner: np.ndarray, calls: int) -> tuple[int, float]:
    """A host-only loop at one op per op name and call (the names counted once, the ops ``inner``
    over every call): the ops left and their share of ``inner``."""
    n = len(set(pq.strs(p.host_ops["name"])[inner].tolist())) * calls
    return n, min(1.0, n / len(inner))


def _per_call(calls: int) -> str:
    return f" and call ({calls} in the analysed steps)" if calls > 1 else ""
