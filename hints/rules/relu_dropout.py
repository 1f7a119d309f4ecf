"""NPU101 relu-dropout-fusion (docs/rules/NPU101.md).

Evidence, by what the profile holds:

* host links (torch_npu, Kineto CUDA): consecutive outermost forward ops ``aten::relu`` ->
  ``aten::dropout`` on one thread; their kernels through the links (Relu, mask generation,
  DropOutDoMask; in backward ReluGrad and DropOutDoMask via the forward op);
* kernels only (kernel_details.csv without a trace): a ``Relu`` row followed within 3 rows of the
  same step by ``DropOutDoMask`` (mask generation may run on another stream) -- ``inferred``;
* CPU Kineto traces: the same op pair, timed by host duration (eager CPU runs ``clamp_min``,
  ``bernoulli_``, ``div_``, ``mul`` inside them).

One finding per source construct: ``F.dropout(F.relu(x))``, ``self.drop(self.act(x))`` (related
information: both ``__init__`` assignments), consecutive ``x = F.relu(x)`` / ``x = F.dropout(x)``
statements, or adjacent ``nn.ReLU(), nn.Dropout(p)`` in ``nn.Sequential``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from msprof_lsp.mapping.source.heat import Site, SiteKind
from msprof_lsp.mapping.profile.model import Backend
from msprof_lsp.mapping.source.source_index import MODULE_SCOPE, CallSite, ModuleAttr, SourceIndex
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.units import NS_PER_US

from ..context import RuleContext, Unit
from ..fixed_in_source import as_fixed
from ..fixes import fix_id
from ..finding import Change, Construct, Effect, Finding, Related, Target
from ..fixes import relu_dropout as fx
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq

RELU_OPS = frozenset({"aten::relu", "aten::relu_"})
DROPOUT_OPS = frozenset({"aten::dropout", "aten::native_dropout", "npu::_npu_dropout", "aten::_npu_dropout"})
RELU_CALLS = frozenset(fx.RELU_FUNCS)  # one recogniser with the fixes (hints.fixes.relu_dropout)
DROPOUT_CALLS = frozenset(fx.DROPOUT_FUNCS)
MASK_GEN = re.compile(r"gen_?(bit_?)?mask", re.I)
DO_MASK = re.compile(r"do_?mask", re.I)
LOOKAHEAD_ROWS = 3  # kernel-only fallback: DropOutDoMask within 3 rows after Relu


RELU_KERNEL = re.compile(r"^Relu(Grad)?(V\d+)?$", re.I)


def _one_kernel(ctx: RuleContext, rows: np.ndarray) -> Effect:
    """The pair as one kernel: the ReLU's kernels (forward and grad) and the dropout's (mask and
    DoMask) are two sides; the estimate and low end remove the cheaper side, the high end keeps
    only the dearer side's time, spread over both."""
    if not len(rows):
        return Effect(unknown="unknown: no device kernels of the pair in the profile (host time only)")
    types = pq.kernel_types(ctx.profile.kernels)[rows]
    dur = ctx.profile.kernels["dur_ns"].to_numpy(np.int64)[rows]
    relu = np.array([RELU_KERNEL.match(str(t)) is not None for t in types], dtype=bool)
    if relu.all() or not relu.any():
        return Effect(unknown="unknown: the pair's kernels are not told apart into ReLU and dropout")
    r, d = float(dur[relu].sum()), float(dur[~relu].sum())
    small, large = (relu, ~relu) if r <= d else (~relu, relu)
    keep = max(r, d) / (r + d) if r + d > 0 else 1.0
    side = lambda m: tuple(int(x) for x in rows[m])  # noqa: E731
    return Effect((Change(Target.KERNELS, side(small), 0.0, best=keep, worst=0.0),
                   Change(Target.KERNELS, side(large), 1.0, best=keep, worst=1.0)),
                  basis="the pair as one kernel: the cheaper side's kernels removed (high end: the dearer side's "
                        "time for both)")


@dataclass(slots=True)
class _Pair:
    relu: int  # host op row (-1: kernel-only evidence)
    dropout: int
    kernels: list[int] = field(default_factory=list)
    host_ns: int = 0  # CPU traces: host time of the pair and its backward nodes


@dataclass(frozen=True, slots=True)
class _Construct:
    kind: fx.PairKind
    span: Span  # the anchor
    relu: Span | None  # where the in-place fix looks
    dropout: Span | None  # where the p=0 fix looks
    related: tuple[Related, ...]
    confidence: Confidence
    names: tuple[str, ...] = ()  # the ReLU's and the dropout's names, as matched


@declare("NPU101", "relu-dropout-fusion", thresholds=("smallKernelUs", "schedulingDelayUs"))
class ReluDropoutFusion(Rule):
    """A ReLU followed by a dropout runs as three small kernels (Relu, mask generation, DoMask) per pair.

    Each kernel of the ReLU->Dropout pair does a trivial elementwise pass over the same tensor; when
    they are short, launching them costs more than computing them and the intermediate is written
    and read back. No fused relu+dropout API exists in torch or torch_npu: compiling the pair lets
    the compiler emit one kernel.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        pairs, how = _pairs(ctx)
        if not pairs:
            return
        groups: dict[tuple, list[_Pair]] = defaultdict(list)
        constructs: dict[tuple, _Construct | None] = {}
        for pair in pairs:
            c = _construct(ctx, pair) if how != "kernel order" else _kernel_construct(ctx, pair)
            key = (c.span.path, c.span.line, c.span.col, c.span.end_line, c.span.end_col) if c else ("",)
            groups[key].append(pair)
            constructs[key] = c
        if how == "kernel order" and ("",) in groups:
            c = _inferred_construct(ctx)
            constructs[("",)] = c
        if how == "kernel order":
            _attach_backward_kernels(ctx, groups, constructs)
        for key, members in groups.items():
            f = self._finding(ctx, members, constructs[key], how)
            if constructs[key] is None and how != "kernel order" and _compiled_since(ctx, members):
                f = as_fixed(f, ctx, fix_id(fx.compile_pair))
            yield f

    def _finding(self, ctx: RuleContext, pairs: list[_Pair], construct: _Construct | None, how: str) -> Finding:
        k = ctx.profile.kernels
        rows = np.array(sorted({r for p in pairs for r in p.kernels}), dtype=np.int64)
        dur = k["dur_ns"].to_numpy(np.int64)[rows] if len(rows) else np.zeros(0, np.int64)
        wait = k["wait_ns"].to_numpy(np.int64)[rows] if len(rows) else np.zeros(0, np.int64)
        small_us = float(ctx.thresholds.small_kernel_us)
        delay_us = float(ctx.thresholds.scheduling_delay_us)
        on_device = len(rows) > 0
        total_ns = float(dur.sum()) if on_device else float(sum(p.host_ns for p in pairs))
        each_small = on_device and bool((dur < small_us * NS_PER_US).all())
        waits = wait[wait >= 0]
        mean_wait_us = pq.mean(waits) / NS_PER_US
        dispatch = each_small and len(waits) > 0 and mean_wait_us >= delay_us
        steps = ctx.num_steps
        qualifier = f"each < {small_us:g} µs" if each_small else ""
        if on_device:
            events, unit = len(rows), Unit.KERNEL
            diagnosis = "dispatch-bound" if dispatch else "one elementwise pass split into separate kernels"
        else:
            events, unit = len(pairs), Unit.PAIR
            diagnosis = "two eager ops and a mask per pair on the host"
        if ctx.backend == Backend.ASCEND.value:
            fix_text = "No fused NPU API; compile the pair or use inplace ReLU"
        else:
            fix_text = "Compile the pair with torch.compile or use inplace ReLU"
        message = ctx.message(
            "ReLU→Dropout", total_ns=total_ns, diagnosis=diagnosis, fix=fix_text,
            events=events, unit=unit, qualifier=qualifier,
        )
        evidence = {
            "backend": ctx.backend,
            "evidence": how,
            "pairs": len(pairs),
            "pairs_per_step": len(pairs) / steps,
            "kernels": _kernel_table(ctx, rows),
            "kernels_per_step": len(rows) / steps,
            "max_kernel_us": float(dur.max()) / NS_PER_US if on_device else None,
            "mean_wait_us": round(mean_wait_us, 3) if on_device else None,
            "each_below_small_kernel": each_small,
            "dispatch_bound": dispatch,
            "thresholds": {"smallKernelUs": small_us, "schedulingDelayUs": delay_us},
        }
        if not on_device:
            evidence["host_time_us"] = total_ns / NS_PER_US
        evidence.update(_op_names(ctx, pairs))
        effect = _one_kernel(ctx, rows)
        if construct is None:
            return ctx.finding(
                self, span=None, message=message, total_ns=total_ns, evidence=evidence,
                confidence=Confidence.INFERRED if how == "kernel order" else Confidence.MODULE, effect=effect,
            )
        evidence["construct"] = construct.kind.value
        return ctx.finding(
            self,
            span=construct.span,
            message=message,
            total_ns=total_ns,
            confidence=construct.confidence,
            evidence=evidence,
            fixes=self._fixes(ctx, construct),
            related=construct.related,
            effect=effect,
        )

    def _fixes(self, ctx: RuleContext, c: _Construct):
        path = c.span.path
        backend = fx.compile_backend(ctx.config.compile_backend, ctx.backend)
        pair = Construct(c.kind.value, c.names)
        cands = [(fx.compile_pair, c.span, path, {"backend": backend, "construct": pair})]
        if c.relu is not None:
            cands.append((fx.inplace_relu, c.relu, path, {}))
        if c.dropout is not None:
            cands.append((fx.drop_zero_dropout, c.dropout, path, {}))
        return sq.fixes(ctx, *cands)


# -- evidence ---------------------------------------------------------------------------------------


def _pairs(ctx: RuleContext) -> tuple[list[_Pair], str]:
    prof = ctx.profile
    h = prof.host_ops
    if len(h):
        pairs = _host_pairs(ctx)
        if pairs:
            return pairs, "host links" if len(prof.kernels) else "host ops"
        linked = (prof.kernels["host_op"].to_numpy(np.int64) >= 0).any() if len(prof.kernels) else False
        if linked or not len(prof.kernels):
            return [], ""
    return _kernel_order_pairs(ctx), "kernel order"


def _forward_ops(ctx: RuleContext) -> np.ndarray:
    """Outermost forward framework ops inside the profiled steps."""
    prof = ctx.profile
    h = prof.host_ops
    ok = pq.outermost_ops(prof) & pq.in_steps(prof, h["start_ns"].to_numpy(np.int64))
    ok &= h["fwd_op"].to_numpy(np.int64) < 0
    ok &= ~pq.mask(h["name"], lambda n: n.startswith("autograd::"))
    if prof.meta.backend is Backend.ASCEND:
        ok &= h["fwd_thread"].to_numpy(np.int64) <= 0  # torch_npu: Fwd thread id 0 (1 = backward)
    return np.flatnonzero(ok)


def _host_pairs(ctx: RuleContext) -> list[_Pair]:
    prof = ctx.profile
    h = prof.host_ops
    rows = _forward_ops(ctx)
    if not len(rows):
        return []
    tid = h["tid"].to_numpy(np.int64)[rows]
    start = h["start_ns"].to_numpy(np.int64)[rows]
    order = np.lexsort((start, tid))
    rows, tid = rows[order], tid[order]
    names = pq.strs(h["name"])[rows]
    is_relu = np.isin(names, list(RELU_OPS))
    is_drop = np.isin(names, list(DROPOUT_OPS))
    hit = np.flatnonzero(is_relu[:-1] & is_drop[1:] & (tid[:-1] == tid[1:]))
    pairs = [_Pair(int(rows[i]), int(rows[i + 1])) for i in hit]
    if not pairs:
        return []
    _attach(ctx, pairs)
    return pairs


def _attach(ctx: RuleContext, pairs: list[_Pair]) -> None:
    """Kernels (forward via the launching op, backward via the forward op) and CPU host time."""
    prof = ctx.profile
    h = prof.host_ops
    n = len(h)
    marked = np.zeros(n, dtype=bool)
    pair_of = np.full(n, -1, dtype=np.int64)
    for i, p in enumerate(pairs):
        marked[[p.relu, p.dropout]] = True
        pair_of[[p.relu, p.dropout]] = i
    root = pq.nearest_marked(pq.parents(prof), marked)
    group = np.where(root >= 0, pair_of[np.maximum(root, 0)], -1)

    def via(col: np.ndarray) -> np.ndarray:
        ok = (col >= 0) & (col < n)
        out = np.full(len(col), -1, dtype=np.int64)
        out[ok] = group[col[ok]]
        return out

    k = prof.kernels
    if len(k):
        in_steps = pq.kernels_in_steps_mask(prof) & pq.is_task(prof)
        g = via(k["host_op"].to_numpy(np.int64))
        bwd = via(k["fwd_op"].to_numpy(np.int64))
        g = np.where(g >= 0, g, bwd)
        for r in np.flatnonzero((g >= 0) & in_steps):
            pairs[int(g[r])].kernels.append(int(r))
        if any(p.kernels for p in pairs):
            return
    # no device kernels (CPU trace): host time of the pair ops and their outermost backward nodes
    dur = h["dur_ns"].to_numpy(np.int64)
    for p in pairs:
        p.host_ns = int(dur[p.relu] + dur[p.dropout])
    fwd = via(h["fwd_op"].to_numpy(np.int64))
    par = pq.parents(prof)
    outer = fwd >= 0
    has = par >= 0
    outer[has] &= fwd[par[has]] != fwd[has]
    for r in np.flatnonzero(outer):
        pairs[int(fwd[r])].host_ns += int(dur[r])


def _kernel_order_pairs(ctx: RuleContext) -> list[_Pair]:
    """Kernel-only fallback: Relu then DropOutDoMask within 3 rows of the same step."""
    prof = ctx.profile
    k = prof.kernels
    if not len(k):
        return []
    types = pq.kernel_types(prof.kernels)
    sel = np.flatnonzero(pq.kernels_in_steps_mask(prof) & pq.is_task(prof))
    if not len(sel):
        return []
    order = np.lexsort((k["start_ns"].to_numpy(np.int64)[sel], k["device"].to_numpy(np.int64)[sel],
                        k["step"].to_numpy(np.int64)[sel]))
    rows = sel[order]
    step = k["step"].to_numpy(np.int64)[rows]
    t = types[rows]
    names = pq.strs(k["name"])[rows]
    pairs: list[_Pair] = []
    for i in np.flatnonzero(t == "Relu"):
        for j in range(i + 1, min(i + 1 + LOOKAHEAD_ROWS, len(rows))):
            if step[j] != step[i]:
                break
            if DO_MASK.search(str(t[j])) or DO_MASK.search(str(names[j])):
                between = [int(rows[m]) for m in range(i + 1, j) if MASK_GEN.search(str(t[m])) or MASK_GEN.search(str(names[m]))]
                pairs.append(_Pair(-1, -1, [int(rows[i]), *between, int(rows[j])]))
                break
    return pairs


def _kernel_table(ctx: RuleContext, rows: np.ndarray) -> list[dict]:
    if not len(rows):
        return []
    k = ctx.profile.kernels
    types = pq.kernel_types(ctx.profile.kernels)[rows]
    names = pq.strs(k["name"])[rows]
    dur = k["dur_ns"].to_numpy(np.int64)[rows]
    bwd = k["backward"].to_numpy(dtype=bool)[rows]
    table: dict[tuple[str, bool], dict] = {}
    for t, name, d, b in zip(types, names, dur, bwd):
        e = table.setdefault((str(t), bool(b)), {"type": str(t), "name": str(name), "backward": bool(b), "count": 0,
                                                "total_us": 0.0, "max_us": 0.0})
        e["count"] += 1
        e["total_us"] += d / NS_PER_US
        e["max_us"] = max(e["max_us"], d / NS_PER_US)
    out = sorted(table.values(), key=lambda e: -e["total_us"])
    for e in out:
        e["total_us"] = round(e["total_us"], 3)
        e["max_us"] = round(e["max_us"], 3)
    return out


def _op_names(ctx: RuleContext, pairs: list[_Pair]) -> dict:
    h = ctx.profile.host_ops
    if not len(h) or pairs[0].relu < 0:
        return {}
    out = {"relu_op": str(h["name"].iloc[pairs[0].relu]), "dropout_op": str(h["name"].iloc[pairs[0].dropout])}
    conc = str(h["concrete_inputs"].iloc[pairs[0].dropout])
    m = re.match(r'\s*\[\s*"[^"]*"\s*,\s*"([0-9.eE+-]+)"', conc)
    if m:
        out["dropout_p"] = float(m.group(1))  # Kineto Concrete Inputs: ["", "0.2...", "True"]
    return out


# -- anchoring ----------------------------------------------------------------------------------------


def _site(ctx: RuleContext, row: int) -> Site | None:
    if ctx.attribution is None or row < 0 or row >= len(ctx.attribution.op_site):
        return None
    return ctx.attribution.site_of_op(row)


def _attr_of(index: SourceIndex, call: CallSite) -> ModuleAttr | None:
    if call.self_attr and call.cls and call.element < 0:
        return index.module_attr(call.cls, call.self_attr)
    return None


def _is_relu(index: SourceIndex, c: CallSite) -> bool:
    if c.qualname in RELU_CALLS:
        return True
    a = _attr_of(index, c)
    return a is not None and fx.is_relu_module(a.ctor_qualname, a.class_name)


def _is_dropout(index: SourceIndex, c: CallSite) -> bool:
    if c.qualname in DROPOUT_CALLS:
        return True
    a = _attr_of(index, c)
    return a is not None and fx.is_dropout_module(a.ctor_qualname, a.class_name)


def _names(index: SourceIndex, *calls: CallSite) -> tuple[str, ...]:
    """``torch.nn.functional.relu``, or the module's constructor behind ``self.act(...)``."""
    out = []
    for c in calls:
        a = _attr_of(index, c)
        out.append(c.qualname if a is None else f"self.{c.self_attr} = {a.ctor_qualname or a.class_name}")
    return tuple(out)


def _init_related(index: SourceIndex, *calls: CallSite) -> tuple[Related, ...]:
    out = []
    for c in calls:
        a = _attr_of(index, c)
        if a is not None:
            out.append(Related(a.span, f"self.{c.self_attr} = {a.text} (built in __init__)"))
    return tuple(out)


def _construct(ctx: RuleContext, pair: _Pair) -> _Construct | None:
    """The source construct of a recorded pair; None when its line is gone, or now lands in the
    compile fix's own helper (the profile predates the fix: its pair is not the user's)."""
    found = _recorded_construct(ctx, pair)
    if found is None:
        return None
    index = sq.index_of(ctx, found.span.path)
    helper = _compiled_helper(index) if index is not None else None
    return None if helper is not None and _inside(found.span, helper) else found


def _recorded_construct(ctx: RuleContext, pair: _Pair) -> _Construct | None:
    rs, ds = _site(ctx, pair.relu), _site(ctx, pair.dropout)
    if ds is None and rs is None:
        place = sq.op_place(ctx, pair.dropout)
        if place is None:
            return None
        return _at_line(place.index, place.line, place.function, place.confidence)
    site = ds or rs
    index = sq.index_of(ctx, site.span.path)
    if index is None:
        return None
    conf = min((s.confidence for s in (rs, ds) if s is not None), key=lambda c: c.rank)
    if rs is not None and ds is not None and rs.kind == ds.kind == SiteKind.ELEMENT:
        found = _sequential_from_elements(index, rs.span, ds.span, conf)
        if found is not None:
            return found
    found = _at_line(index, site.span.line, site.function, conf, prefer=site.span)
    if found is not None:
        return found
    rel = (Related(rs.span, "the ReLU runs here"),) if rs is not None and ds is not None and rs.span != ds.span else ()
    return _Construct(fx.PairKind.CALL, site.span, rs.span if rs else None, ds.span if ds else None, rel, conf)


def _at_line(index: SourceIndex, line: int, function: str, conf: Confidence, prefer: Span | None = None) -> _Construct | None:
    calls = [c for c in index.calls_on_line(line) if c.function == function]
    if prefer is not None:
        calls.sort(key=lambda c: c.span != prefer)
    for d in (c for c in calls if _is_dropout(index, c)):
        inner = [r for r in index.calls_on_line(d.span.line) if r.function == function and r.depth == d.depth + 1
                 and _is_relu(index, r) and _inside(r.span, d.span)]
        if inner:
            r = inner[0]
            return _Construct(fx.PairKind.NESTED, d.span, r.span, d.span, _init_related(index, d, r), conf,
                              _names(index, r, d))
        pair = _adjacent_call(index, d, -1, _is_relu)
        if pair is not None:
            r = pair
            span = Span(d.span.path, r.stmt.line, r.stmt.col, d.stmt.end_line, d.stmt.end_col)
            return _Construct(fx.PairKind.STATEMENTS, span, r.span, d.span, _init_related(index, d, r), conf,
                              _names(index, r, d))
    for r in (c for c in calls if _is_relu(index, c)):
        d = _adjacent_call(index, r, 1, _is_dropout)
        if d is not None:
            span = Span(r.span.path, r.stmt.line, r.stmt.col, d.stmt.end_line, d.stmt.end_col)
            return _Construct(fx.PairKind.STATEMENTS, span, r.span, d.span, _init_related(index, d, r), conf,
                              _names(index, r, d))
    for c in calls:
        a = _attr_of(index, c)
        if a is not None and a.is_container:
            found = _sequential_pair(index, a, conf, runs_at=c)
            if found is not None:
                return found
    return None


def _compiled_since(ctx: RuleContext, pairs: list[_Pair]) -> bool:
    """The profile's pairs no longer anchor, and every file their frames name now holds the compile
    fix's helper (``_compiled_helper``) and no ReLU->Dropout
    construct outside it: the profile predates the fix. One construct left uncompiled and the
    finding stays as it is (which pairs were compiled cannot be told apart)."""
    indexes: dict[str, SourceIndex] = {}
    for p in pairs:
        for row in (p.dropout, p.relu):
            place = sq.op_place(ctx, row) if row >= 0 else None
            if place is None or place.index is None:
                return False
            indexes[place.index.path] = place.index
    return bool(indexes) and all(_compiled_helper(ix) is not None and not _uncompiled_pairs(ix) for ix in indexes.values())


def _compiled_helper(index: SourceIndex) -> Span | None:
    """The compile fix's helper, if the file has it: ``_relu_dropout = torch.compile(...)``, or
    (the "npu" form) the module-level ``_relu_dropout_fn`` that calls ``torch.compile``."""
    b = index.binding_for(MODULE_SCOPE, fx.HELPER)
    if b is not None and b.ctor_qualname == "torch.compile":
        return b.span
    lazy = index.functions.get(fx.LAZY)
    if lazy is None or fx.HELPER not in index.functions:
        return None
    compiles = any(c.qualname == "torch.compile" and _inside(c.span, lazy.span) for c in index.calls)
    return lazy.span if compiles else None


def _uncompiled_pairs(index: SourceIndex) -> bool:
    helper = _compiled_helper(index)
    for c in index.calls:
        if helper is not None and _inside(c.span, helper):
            continue  # the pair the helper compiles
        if (_is_dropout(index, c) or _is_relu(index, c) or ((a := _attr_of(index, c)) is not None and a.is_container)) \
                and _at_line(index, c.span.line, c.function, Confidence.MODULE) is not None:
            return True
    return False


def _inside(inner: Span, outer: Span) -> bool:
    return (outer.line, outer.col) <= (inner.line, inner.col) and (inner.end_line, inner.end_col) <= (outer.end_line, outer.end_col)


def _adjacent_call(index: SourceIndex, call: CallSite, step: int,
                   wanted: Callable[[SourceIndex, CallSite], bool]) -> CallSite | None:
    """The outermost call ``wanted`` accepts in the statement just before (``step`` -1) or after
    (``step`` 1) ``call``'s in its function: the other half of a ReLU / Dropout statement pair."""
    stmts = sorted((s.span for s in index.statements_in(call.function)), key=lambda s: (s.line, s.col))
    try:
        i = stmts.index(call.stmt) + step
    except ValueError:
        return None
    if not 0 <= i < len(stmts):
        return None
    return next((c for c in index.calls_in(call.function) if c.stmt == stmts[i] and c.depth == 0 and wanted(index, c)),
                None)


def _relu_elem(e: ModuleAttr) -> bool:
    return fx.is_relu_module(e.ctor_qualname, e.class_name)


def _drop_elem(e: ModuleAttr) -> bool:
    return fx.is_dropout_module(e.ctor_qualname, e.class_name)


def _sequential_pair(index: SourceIndex, container: ModuleAttr, conf: Confidence, runs_at: CallSite | None) -> _Construct | None:
    els = sorted(container.elements, key=lambda e: e.index)
    for a, b in zip(els, els[1:]):
        if _relu_elem(a) and _drop_elem(b):
            span = Span(a.span.path, a.span.line, a.span.col, b.span.end_line, b.span.end_col)
            rel = (Related(runs_at.span, f"the Sequential runs here: {runs_at.text}"),) if runs_at is not None else ()
            names = tuple(e.ctor_qualname or e.class_name for e in (a, b))
            return _Construct(fx.PairKind.SEQUENTIAL, span, a.span, b.span, rel, conf, names)
    return None


def _sequential_from_elements(index: SourceIndex, relu: Span, drop: Span, conf: Confidence) -> _Construct | None:
    for cls in index.classes.values():
        for attr in cls.attrs.values():
            if not attr.is_container:
                continue
            spans = [e.span for e in attr.elements]
            if relu in spans and drop in spans:
                runs = next((index.calls[i] for i in cls.attr_calls.get(attr.attr, ())), None)
                return _sequential_pair(index, attr, conf, runs)
    return None


def _attach_backward_kernels(ctx: RuleContext, groups: dict[tuple, list[_Pair]],
                             constructs: dict[tuple, _Construct | None]) -> None:
    """Kernel-only evidence: the ``ReluGrad`` / backward ``DropOutDoMask`` kernels the attribution
    placed on a group's construct belong to it too (as the host links give them)."""
    a = ctx.attribution
    k = ctx.profile.kernels
    if a is None or not len(k):
        return
    types = pq.kernel_types(ctx.profile.kernels)
    taken = {r for members in groups.values() for p in members for r in p.kernels}
    ok = pq.kernels_in_steps_mask(ctx.profile) & pq.is_task(ctx.profile)
    cand = [int(i) for i in np.flatnonzero(ok) if types[i] == "ReluGrad" or DO_MASK.search(str(types[i]))]
    for key, members in groups.items():
        c = constructs.get(key)
        if c is None:
            continue
        spans = {s for s in (c.relu, c.dropout) if s is not None}
        extra = []
        for i in cand:  # positions, as the pairs' kernels are
            site = a.site_of_kernel(i)
            if i not in taken and site is not None and site.span in spans:
                extra.append(i)
                taken.add(i)
        members[0].kernels.extend(extra)


def _kernel_construct(ctx: RuleContext, pair: _Pair) -> _Construct | None:
    """Kernel-only evidence: the construct on the line the attribution placed the pair's
    DoMask kernel (shape / launch-order anchoring, inferred), None when it placed none."""
    site = sq.site_of_kernel_row(ctx, int(pair.kernels[-1]))  # kernel positions
    index = sq.index_of(ctx, site.span.path) if site is not None else None
    if site is None or index is None:
        return None
    return _at_line(index, site.span.line, site.function, Confidence.INFERRED)


def _inferred_construct(ctx: RuleContext) -> _Construct | None:
    """Kernel-only evidence: the construct when exactly one ReLU->Dropout pair is in the workspace."""
    found: list[_Construct] = []
    for index in sq.indexes(ctx):
        seen: set[Span] = set()
        for c in index.calls:
            if not _is_dropout(index, c) and not (_attr_of(index, c) and _attr_of(index, c).is_container):  # type: ignore[union-attr]
                continue
            got = _at_line(index, c.span.line, c.function, Confidence.INFERRED)
            if got is not None and got.span not in seen:
                seen.add(got.span)
                found.append(got)
    return found[0] if len(found) == 1 else None
