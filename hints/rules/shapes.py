"""NPU106 cube-shape-alignment (manual fix; docs/rules/NPU106.md).

Ascend (advisor ``ai_core_performance_analysis``): MatMul kernels (``Type`` containing "matmul")
that move at least ``cubeMinBytes`` (inputs + outputs) and whose inner axis -- the last dim of
each 2-D ND input; ``dims[1] x dims[2]`` of a 4-D FRACTAL_NZ one -- is not a multiple of
``cubeAlign``; ``FlashAttentionScore[Grad]`` whose query/key/value last axis (head dim, or hidden
size in BSH/SBH layouts) is not a multiple of ``faAlign``. The sequence axis is not checked: the
kernel row does not say which axis it is. CUDA: fp16/bf16 GEMM dims not a multiple of 8.

One finding per launching call and shape; related information at integer literals in the
workspace equal to the unaligned dim (``nn.Linear(4096, 15365)``, ``vocab_size = 32003``).

The advice pads a dim UP to the next multiple, never down (rounding a vocabulary down drops
tokens: 4095 -> 3840 is wrong), and only a dim padding can serve: one that grows by at most
``MAX_PAD_GROWTH`` (32003 -> 32256 is +0.8 %). A dim that would grow more -- ``d_model`` 128 with
a 256 alignment would double -- is left as it is and named in the evidence; a finding whose dims
are all such has no advice and is not reported. The advice says what the padding costs
(``pad_cost``: 4095 -> 4096 is "+1, +0.02 % params": one padded entry along the axis, and the
params -- and GEMM FLOPs -- of every layer with that axis grow by 1/4095).
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile.shapes import DTYPE_BYTES, Shape, dtype_bytes, gemm_flops, io_bytes, numel, parse_shapes
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.units import NS_PER_US
from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.profile.model import Backend

from ..context import RuleContext
from ..finding import Change, Effect, Finding, Related, Target
from ..registry import Rule, register
from .. import profile_query as pq

MATMUL = re.compile(r"matmul", re.I)
FLASH = re.compile(r"^FlashAttentionScore", re.I)
HALF_TYPES = re.compile(r"Half|BFloat16", re.I)
CUDA_GEMMS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
CUDA_ALIGN = 8
MAX_RELATED = 3
PLURAL = {"inner axis": "inner axes", "head dim": "head dims", "GEMM dim": "GEMM dims"}
MAX_PAD_GROWTH = 0.125  # padding that adds more than an eighth of the dim costs more than it saves


def pad_up(dim: int, align: int) -> int:
    """The nearest multiple of ``align`` at or above ``dim``."""
    return -(-dim // align) * align


def paddable(dim: int, align: int) -> bool:
    """Whether padding ``dim`` up to ``pad_up`` is advice: it grows by at most ``MAX_PAD_GROWTH``."""
    return dim > 0 and pad_up(dim, align) - dim <= MAX_PAD_GROWTH * dim


def pad_cost(dim: int, align: int) -> str:
    """What padding ``dim`` up costs: the padded entries along that axis, and the growth of every
    weight and GEMM that has the axis (the same fraction: one more row of each per padded entry)."""
    added = pad_up(dim, align) - dim
    return f"+{added}, +{100 * added / dim:.2f} % params"


@dataclass(frozen=True, slots=True)
class _Bad:
    kind: str  # matmul | flash | gemm
    op_type: str
    shapes: str
    dims: tuple[int, ...]  # the unaligned values
    align: int
    axis: str  # "inner axis" | "head dim"
    nbytes: int


class CubeShapeAlignment(Rule):
    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        rows, bad = (_cuda(ctx) if ctx.backend is Backend.CUDA else _ascend(ctx))
        if not rows:
            return
        dur = ctx.profile.kernels["dur_ns"].to_numpy(np.int64)
        att = ctx.attribution
        # one finding per launching call: its forward and backward shapes together
        groups: dict[object, list[tuple[int, _Bad]]] = defaultdict(list)
        sites: dict[object, object] = {}
        for r, b in zip(rows, bad):
            site = att.site_of_kernel(r) if att is not None and r < len(att.kernel_site) else None
            key = site.span if site is not None else b  # no call site: one finding per shape
            groups[key].append((r, b))
            if key not in sites or (site is not None and site.confidence.rank < sites[key].confidence.rank):
                sites[key] = site
        rates = _aligned_rates(ctx, set(rows)) if ctx.backend is not Backend.CUDA else None
        for key, members in groups.items():
            f = self._finding(ctx, members, dur, sites[key])
            if f is not None:  # None: no dim padding can serve
                f.effect = _at_aligned_rate(ctx, [r for r, _ in members], rates)
                yield f

    def _finding(self, ctx: RuleContext, members: list[tuple[int, _Bad]], dur: np.ndarray, site) -> Finding | None:
        steps = ctx.num_steps
        by_shape: dict[_Bad, list[int]] = defaultdict(list)
        for r, b in members:
            by_shape[b].append(r)
        ranked = sorted(by_shape.items(), key=lambda kv: -int(dur[kv[1]].sum()))
        top = ranked[0][0]
        total = float(sum(int(dur[rows].sum()) for _, rows in ranked))
        every = tuple(dict.fromkeys(d for b, _ in ranked for d in b.dims))
        align = top.align
        dims = tuple(x for x in every if paddable(x, align))
        if not dims:
            return None  # padding any of them would add more work than the alignment saves
        d = max(dims)
        fix = f"Pad {d} up to {pad_up(d, align)} ({pad_cost(d, align)}); mask the padding"
        more = f" (+{len(ranked) - 1} more)" if len(ranked) > 1 else ""
        n = round(len(members) / steps)
        axis = top.axis if len(dims) == 1 else PLURAL.get(top.axis, top.axis)
        verb = "is not a multiple" if len(dims) == 1 else "are not multiples"
        message = ctx.message(
            f"Unaligned {top.op_type}", total_ns=total, count=n, unit="kernel" if n == 1 else "kernels",
            qualifier=f"shapes {top.shapes}{more}",
            diagnosis=f"{axis} {', '.join(str(x) for x in dims)} {verb} of {align}", fix=fix,
        )
        evidence = {
            "backend": ctx.backend,
            "shapes": [
                {"op_type": b.op_type, "input_shapes": b.shapes, "unaligned": list(b.dims), "alignment": b.align,
                 "axis": b.axis, "bytes_in_out": b.nbytes, "kernels": len(rows),
                 "us_per_step": round(int(dur[rows].sum()) / steps / NS_PER_US, 3)}
                for b, rows in ranked
            ],
            "unaligned": list(every),
            "pad_to": {str(x): pad_up(x, align) for x in dims},
            "pad_cost": {str(x): pad_cost(x, align) for x in dims},
            "not_padded": {str(x): f"{pad_up(x, align)} would add {(pad_up(x, align) - x) / x:.0%}, more than "
                                   f"{MAX_PAD_GROWTH:.1%}" for x in every if x not in dims},
            "manual_fix": [
                "pad hidden / vocab / intermediate sizes to multiples of 256 and mask the padded logits",
                "keep tensor-parallel shards aligned; head_dim a multiple of 128; pad_to_multiple_of=128 for sequences",
                "changes the checkpoint layout: never applied automatically",
            ],
            "thresholds": {"cubeAlign": ctx.thresholds.cube_align, "faAlign": ctx.thresholds.fa_align,
                           "cubeMinBytes": ctx.thresholds.cube_min_bytes},
        }
        related = [r for x in sorted(dims, reverse=True) for r in _literals(ctx, x, up=pad_up(x, align))]
        related = related[:MAX_RELATED]
        if site is None:
            return ctx.finding(self, span=None, message=message, total_ns=total, evidence=evidence,
                               confidence=Confidence.MODULE, related=related)
        return ctx.finding(self, span=site.span, message=message, total_ns=total, evidence=evidence,
                           confidence=site.confidence, related=related)


register(CubeShapeAlignment(
    "NPU106", "cube-shape-alignment",
    summary="MatMul / FlashAttention shapes not aligned to the Cube unit's tiles run slower.",
    rationale=(
        "The Cube unit computes in fixed tiles; an inner axis that is not a multiple of 256 elements (128 for "
        "FlashAttention's head dim) leaves partial tiles and forces extra data movement, so the same FLOPs take "
        "longer. Padding the model dimensions (hidden, vocab, intermediate sizes) to aligned values avoids it."
    ),
    thresholds=("cubeAlign", "faAlign", "cubeMinBytes"),
    backends=(Backend.ASCEND, Backend.CUDA),
))


def _gemm_flops(ins: str, out: str) -> float | None:
    """2·M·N·K of a MatMul row from its shapes (``shapes.gemm_flops``); None without them."""
    return float(gemm_flops(parse_shapes(ins), parse_shapes(out))) or None


def _aligned_rates(ctx: RuleContext, bad: set[int]) -> dict[str, float]:
    """FLOP per ns the profile's aligned MatMul kernels achieve, per op type (in the steps)."""
    k = ctx.profile.kernels
    types = pq.kernel_types(k)
    sel = np.flatnonzero(pq.matches(types, MATMUL) & pq.kernels_in_steps_mask(ctx.profile))
    sel = sel[~np.isin(sel, list(bad))]
    ins, outs = pq.strs(k["input_shapes"]), pq.strs(k["output_shapes"])
    dur = k["dur_ns"].to_numpy(np.int64)
    flops: dict[str, float] = defaultdict(float)
    ns: dict[str, float] = defaultdict(float)
    memo: dict[tuple[str, str], float | None] = {}
    for r in sel.tolist():
        key = (str(ins[r]), str(outs[r]))
        if key not in memo:
            memo[key] = _gemm_flops(*key)
        if memo[key] is not None and dur[r] > 0:
            flops[str(types[r])] += memo[key]  # type: ignore[operator]
            ns[str(types[r])] += float(dur[r])
    return {t: flops[t] / ns[t] for t in flops if ns[t] > 0}


def _at_aligned_rate(ctx: RuleContext, rows: list[int], rates: dict[str, float] | None) -> Effect:
    """Each misaligned MatMul at the rate the profile's aligned MatMuls of its type achieve (never
    slower than recorded); the low end keeps half the gain."""
    if rates is None:
        return Effect(unknown="A/B test: the CUDA GEMMs' shapes are on their host ops, not their kernels")
    k = ctx.profile.kernels
    types = pq.kernel_types(k)
    ins, outs = pq.strs(k["input_shapes"]), pq.strs(k["output_shapes"])
    dur = k["dur_ns"].to_numpy(np.int64)
    changes = []
    missing = set()
    for r in rows:
        t = str(types[r])
        fl = _gemm_flops(str(ins[r]), str(outs[r]))
        if t not in rates or fl is None or dur[r] <= 0:
            missing.add(t)
            continue
        f = min(1.0, fl / rates[t] / float(dur[r]))
        changes.append(Change(Target.KERNELS, (int(r),), f, best=f, worst=0.5 + 0.5 * f))
    if not changes:
        kinds = "/".join(sorted(missing)) or "MatMul"
        return Effect(unknown=f"unknown: no aligned {kinds} kernel with shapes in the profile to take the rate from")
    return Effect(tuple(changes), basis="the misaligned MatMuls at the FLOP rate of the profile's aligned ones of "
                                        "their type (low end: half the gain)")


def _ascend(ctx: RuleContext) -> tuple[list[int], list[_Bad]]:
    prof = ctx.profile
    k = prof.kernels
    if not len(k):
        return [], []
    align = ctx.thresholds.cube_align
    fa_align = ctx.thresholds.fa_align
    min_bytes = ctx.thresholds.cube_min_bytes
    types = pq.kernel_types(prof.kernels)
    cols = {c: pq.strs(k[c]) for c in ("input_shapes", "input_dtypes", "input_formats",
                                                     "output_shapes", "output_dtypes")}
    kind = pq.matches(types, MATMUL) | pq.matches(types, FLASH, full_start=True)
    sel = np.flatnonzero(kind & pq.kernels_in_steps_mask(prof) & (cols["input_shapes"] != ""))
    if not len(sel):
        return [], []
    # judge each distinct (type, shapes, dtypes, formats) once: millions of kernels, few shapes
    keys = [types[sel]] + [cols[c][sel] for c in cols]
    codes, uniques = pd.factorize(pd.MultiIndex.from_arrays(keys))
    verdicts = [_judge(*u, align=align, fa_align=fa_align, min_bytes=min_bytes) for u in uniques]
    hit = np.array([v is not None for v in verdicts], dtype=bool)[codes]
    return sel[hit].tolist(), [verdicts[c] for c in codes[hit]]


def _judge(t: str, shapes: str, dtypes: str, formats: str, out_shapes: str, out_dtypes: str, *,
           align: int, fa_align: int, min_bytes: int) -> _Bad | None:
    ins = parse_shapes(shapes)
    fmts = [f.strip() for f in formats.split(";")] if formats else []
    nbytes = io_bytes(ins, dtypes) + io_bytes(parse_shapes(out_shapes), out_dtypes)
    if FLASH.match(t):
        dims = tuple(s[-1] for s in ins[:3] if s and s[-1] % fa_align)
        return _Bad("flash", t, shapes, tuple(dict.fromkeys(dims)), fa_align, "head dim", nbytes) if dims else None
    if nbytes < min_bytes:
        return None
    inner = []
    for i, s in enumerate(ins[:2]):
        if not s:
            continue
        nz = i < len(fmts) and fmts[i] == "FRACTAL_NZ" and len(s) == 4
        inner.append(s[1] * s[2] if nz else s[-1])
    dims = tuple(dict.fromkeys(d for d in inner if d % align))
    return _Bad("matmul", t, shapes, dims, align, "inner axis", nbytes) if dims else None


def _cuda(ctx: RuleContext) -> tuple[list[int], list[_Bad]]:
    """fp16/bf16 GEMMs whose dims are not multiples of 8 (TorchTidy MatMulDimInFP16): their kernels."""
    prof = ctx.profile
    h = prof.host_ops
    k = prof.kernels
    if not len(h) or not len(k):
        return [], []
    gemm = pq.rows_named(prof, CUDA_GEMMS) & pq.mask(h["input_types"], HALF_TYPES.search)
    if not gemm.any():
        return [], []
    owner = pq.nearest_marked(pq.parents(prof), gemm)
    host = k["host_op"].to_numpy(np.int64)
    ok = (host >= 0) & (host < len(h))
    krow_owner = np.full(len(k), -1, np.int64)
    krow_owner[ok] = owner[host[ok]]
    rows, bad = [], []
    dims_col = pq.strs(h["input_dims"])
    names = pq.strs(h["name"])
    for r in np.flatnonzero((krow_owner >= 0) & pq.kernels_in_steps_mask(prof)):
        op = int(krow_owner[r])
        shapes = [s for s in parse_shapes(dims_col[op].replace("[", "").replace("]", "")) if s]
        dims = tuple(dict.fromkeys(d for s in shapes for d in s[-2:] if d % CUDA_ALIGN))
        if dims:
            rows.append(int(r))
            bad.append(_Bad("gemm", str(names[op]), dims_col[op], dims, CUDA_ALIGN, "GEMM dim", 0))
    return rows, bad


def _literals(ctx: RuleContext, value: int, *, up: int) -> list[Related]:
    """Integer literals equal to ``value`` in the workspace's Python files (searched once per context)."""
    return ctx.derived(("shapes/literals", value, up), lambda: _search_literals(ctx, value, up))


def _search_literals(ctx: RuleContext, value: int, up: int) -> list[Related]:
    out: list[Related] = []
    for path in (ctx.workspace.python_files() if ctx.workspace is not None else []):
        text = ctx.source_text(path)
        if text is None or str(value) not in text:
            continue
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError, IndentationError):
            continue
        for tok in tokens:
            if tok.type == tokenize.NUMBER and int64_of(tok.string.replace("_", ""), integral_floats=False) == value:
                (line, col), (end_line, end_col) = tok.start, tok.end
                out.append(Related(Span(path, line, col, end_line, end_col),
                                   f"{value} here: {up} would be aligned (pad up and mask the extra part)"))
    return out
