"""NPU103 transdata-format (docs/rules/NPU103.md).

Evidence: ``TransData`` kernels (``trans_TransData_<n>``, ``aclnn<Op>_TransData_TransData``) that
the same host scope launched together with a Cube op (``MatMul*``, ``BatchMatMul*``, ``Conv2D*``),
plus the ``Cast`` kernels of those scopes (dtype conversions, listed separately). Without host
links a TransData next to a Cube kernel on the same stream (within two rows) counts. Fires when
their time is at least ``transdataMinPercent`` of the step; one finding per user call that
launched them (the Linear / Conv / matmul), related information at ``import torch_npu``, where
the global switch goes.

CUDA traces: NCHW<->NHWC layout-conversion kernels around convolutions -> channels_last (manual).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from msprof_lsp.mapping.profile.model import Backend
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.units import NS_PER_US

from ..context import RuleContext, Unit
from ..finding import Change, Effect, Finding, Related, Target
from ..fixes import npu_switches
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq

CUBE = re.compile(r"^(MatMul|BatchMatMul|Conv2D|Conv3D|GroupedMatmul|QuantBatchMatmul)", re.I)
PRIVATE_FORMATS = ("FRACTAL_NZ", "NC1HWC0", "FRACTAL_Z", "NDC1HWC0", "FRACTAL_Z_3D")
CUDA_LAYOUT = re.compile(r"nchwToNhwc|nhwcToNchw", re.I)
NEIGHBOUR_ROWS = 2


# pytorch_only: its advice is torch_npu's
@declare("NPU103", "transdata-format", thresholds=("transdataMinPercent",), pytorch_only=True)
class TransdataFormat(Rule):
    """Format conversions (TransData) around Cube ops take a share of each step.

    With internal formats allowed, torch_npu converts tensors into private layouts (FRACTAL_NZ,
    NC1HWC0) before MatMul/Conv kernels and back after them; each conversion is a separate TransData
    kernel that reads and writes the whole tensor. Turning internal formats off removes them, at the
    risk of slower Cube ops.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.backend == Backend.CUDA.value:
            yield from self._cuda(ctx)
            return
        if ctx.backend != Backend.ASCEND.value or not len(ctx.profile.kernels):
            return
        rows, casts, how = _paired(ctx)
        if not len(rows):
            return
        dur = ctx.profile.kernels["dur_ns"].to_numpy(np.int64)
        total = float(dur[rows].sum() + dur[casts].sum())
        limit = float(ctx.thresholds.transdata_min_percent)
        if ctx.share(ctx.per_step_ns(total)) * 100 < limit:
            return
        entry = sq.torch_npu_import(ctx)
        for site, trans, cast in _by_call(ctx.attribution, rows, casts):
            yield self._finding(ctx, site, trans, cast, how, entry, limit)

    def _finding(self, ctx: RuleContext, site, trans: np.ndarray, cast: np.ndarray, how: str, entry, limit: float) -> Finding:
        prof = ctx.profile
        k = prof.kernels
        dur = k["dur_ns"].to_numpy(np.int64)
        total = float(dur[trans].sum() + dur[cast].sum())
        steps = ctx.num_steps
        cubes = sorted(_cube_types_of(ctx, trans))
        formats = _private_formats(ctx, np.concatenate([trans, cast]))
        qual = [f"with {round(len(cast) / steps)} Cast"] if round(len(cast) / steps) else []
        if cubes:
            qual.append(f"around {'/'.join(cubes)}")
        message = ctx.message(
            "TransData", total_ns=total, events=len(trans), unit=Unit.KERNEL,
            qualifier=", ".join(qual), diagnosis="format conversions around Cube ops",
            fix="Try allow_internal_format = False and re-profile (A/B test)",
        )
        evidence = {
            "backend": ctx.backend,
            "evidence": how,
            "transdata": _table(ctx, trans),
            "casts": _table(ctx, cast),
            "transdata_us_per_step": round(float(dur[trans].sum()) / steps / NS_PER_US, 3),
            "cast_us_per_step": round(float(dur[cast].sum()) / steps / NS_PER_US, 3),
            "cube_ops": cubes,
            "private_formats": formats,
            "thresholds": {"transdataMinPercent": limit},
        }
        related: list[Related] = []
        fixes = []
        if entry is not None:
            index, imp = entry
            related.append(Related(imp.span, "the global switch allow_internal_format goes after this import"))
            fixes = sq.fixes(ctx, (npu_switches.disable_internal_format, imp.span, index.path, {}))
        # the switch removes the conversions; the Cube ops may run slower on ND (low end: half stay)
        effect = Effect((Change(Target.KERNELS, tuple(int(r) for r in trans), 0.0, best=0.0, worst=0.5),),
                        basis="its TransData kernels removed (low end: half of them stay)")
        if site is None:
            conf = Confidence.INFERRED if how == "kernel order" else Confidence.MODULE
            return ctx.finding(self, span=None, message=message, total_ns=total, evidence=evidence, confidence=conf,
                               fixes=fixes, related=related, effect=effect)
        return ctx.finding(self, span=site.span, message=message, total_ns=total, evidence=evidence,
                           confidence=site.confidence, fixes=fixes, related=related, effect=effect)

    def _cuda(self, ctx: RuleContext) -> Iterable[Finding]:
        k = ctx.profile.kernels
        if not len(k):
            return
        sel = pq.mask(k["name"], CUDA_LAYOUT.search) & pq.kernels_in_steps_mask(ctx.profile)
        if not sel.any():
            return
        dur = k["dur_ns"].to_numpy(np.int64)
        total = float(dur[sel].sum())
        limit = float(ctx.thresholds.transdata_min_percent)
        if ctx.share(ctx.per_step_ns(total)) * 100 < limit:
            return
        message = ctx.message(
            "Layout copies", total_ns=total, events=int(sel.sum()), unit=Unit.KERNEL,
            diagnosis="NCHW/NHWC conversions around convolutions",
            fix="Use channels_last for the model and its inputs",
        )
        evidence = {"backend": ctx.backend, "kernels": _table(ctx, np.flatnonzero(sel)),
                    "manual_fix": "model = model.to(memory_format=torch.channels_last); "
                                  "x = x.to(memory_format=torch.channels_last)",
                    "thresholds": {"transdataMinPercent": limit}}
        att = ctx.attribution
        site = att.site_of_kernel(int(np.flatnonzero(sel)[0])) if att is not None else None
        yield ctx.finding(self, span=site.span if site else None, message=message, total_ns=total, evidence=evidence,
                          confidence=site.confidence if site else Confidence.MODULE)


def _by_call(att, rows: np.ndarray, casts: np.ndarray) -> list[tuple[object, np.ndarray, np.ndarray]]:  # noqa: ANN001
    """One group per user call (forward and backward kernels of a call share its span; kernels
    with no site, one group): (its site, its TransData rows, its Cast rows), in order of the
    groups' first row (TransData rows first), rows in their order. A span's site is its most
    certain one (the lowest confidence rank), the first such. Worked out per distinct site, not
    per kernel row."""
    parts = []
    for items in (np.asarray(rows, np.int64), np.asarray(casts, np.int64)):
        ok = (items < len(att.kernel_site)) if att is not None else np.zeros(len(items), bool)
        site = np.where(ok, att.kernel_site[np.where(ok, items, 0)], -1) if att is not None else np.full(len(items), -1)
        parts.append((items, site))
    every = np.concatenate([site for _, site in parts])
    ids, first = np.unique(every, return_index=True)
    key_of: dict[int, object] = {}  # site -> its span (None: no site)
    best: dict[object, object] = {}  # span -> its site
    for s in ids[np.argsort(first)].tolist():  # in order of first appearance
        site = att.sites[s] if s >= 0 else None
        key = site.span if site is not None else None
        key_of[s] = key
        old = best.get(key)
        if old is None or (site is not None and site.confidence.rank < old.confidence.rank):
            best[key] = site
    keys = list(best)
    index = {k: i for i, k in enumerate(keys)}
    group_of = np.array([index[key_of[s]] for s in ids.tolist()], dtype=np.int64)  # per distinct site (ids sorted)
    out_rows = []
    for items, site in parts:
        k = group_of[np.searchsorted(ids, site)]
        order = np.argsort(k, kind="stable")  # rows grouped by call, each call's in their order
        bounds = np.searchsorted(k[order], np.arange(len(keys) + 1))
        out_rows.append([items[order[a:b]] for a, b in zip(bounds[:-1], bounds[1:])])
    return [(best[key], out_rows[0][i], out_rows[1][i]) for i, key in enumerate(keys)]


def _paired(ctx: RuleContext) -> tuple[np.ndarray, np.ndarray, str]:
    """TransData and Cast kernel rows paired with a Cube op, and how they were paired."""
    prof = ctx.profile
    k = prof.kernels
    types = pq.kernel_types(prof.kernels)
    ok = pq.kernels_in_steps_mask(prof) & pq.is_task(prof)
    is_trans = ok & (types == "TransData")
    is_cast = ok & (types == "Cast")
    is_cube = ok & pq.matches(types, CUBE, full_start=True)
    host = k["host_op"].to_numpy(np.int64)
    if (host >= 0).any():
        cube_scopes = np.unique(host[is_cube & (host >= 0)])
        paired = np.isin(host, cube_scopes) & (host >= 0)
        return np.flatnonzero(is_trans & paired), np.flatnonzero(is_cast & paired), "host scope"
    # kernel order: a Cube kernel within two rows on the same stream
    order = np.lexsort((k["start_ns"].to_numpy(np.int64), k["stream"].to_numpy(np.int64)))
    stream = k["stream"].to_numpy(np.int64)[order]
    cube_o = is_cube[order]
    near = np.zeros(len(order), dtype=bool)
    for d in range(1, NEIGHBOUR_ROWS + 1):
        same = stream[d:] == stream[:-d]
        near[:-d] |= cube_o[d:] & same
        near[d:] |= cube_o[:-d] & same
    paired = np.zeros(len(k), dtype=bool)
    paired[order] = near
    return np.flatnonzero(is_trans & paired), np.flatnonzero(is_cast & paired), "kernel order"


def _cube_types_of(ctx: RuleContext, rows: np.ndarray) -> set[str]:
    k = ctx.profile.kernels
    host = k["host_op"].to_numpy(np.int64)
    types = pq.kernel_types(ctx.profile.kernels)
    cube = pq.matches(types, CUBE, full_start=True)
    scopes = set(host[rows].tolist()) - {-1}
    # without host links: the Cube types of the profile (the pairing was by kernel order)
    sel = (np.isin(host, list(scopes)) & cube) if scopes else cube
    return {re.sub(r"(Backprop\w+)$", "", str(t)) for t in types[sel]}


def _private_formats(ctx: RuleContext, rows: np.ndarray) -> list[str]:
    k = ctx.profile.kernels
    seen: set[str] = set()
    for col in ("input_formats", "output_formats"):
        for text in set(pq.strs(k[col])[rows].tolist()):
            for f in text.split(";"):
                if f in PRIVATE_FORMATS:
                    seen.add(f)
    return sorted(seen)


def _table(ctx: RuleContext, rows: np.ndarray) -> list[dict]:
    if not len(rows):
        return []
    k = ctx.profile.kernels
    names = pq.strs(k["name"])[rows]
    dur = k["dur_ns"].to_numpy(np.int64)[rows]
    by: dict[str, list[int]] = defaultdict(list)
    for n, d in zip(names, dur):
        key = re.sub(r"_\d+$", "_<n>", n) if n.startswith("trans_") else n
        by[key].append(int(d))
    return sorted(({"name": n, "count": len(v), "total_us": round(sum(v) / NS_PER_US, 3)} for n, v in by.items()),
                  key=lambda e: -e["total_us"])
