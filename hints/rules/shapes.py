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

The saving (``_at_aligned_rate``, docs/savings.md): each MatMul the padding aligns at the FLOP rate
of the profile's GEMMs of comparable work (its type and dtypes, FLOPs and bytes within
``COMPARABLE_WORK``) that are aligned but for the axes the padding keeps; "A/B test" without one.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from msprof_lsp.mapping.profile.shapes import DTYPE_BYTES, Shape, dtype_bytes, gemm_flops, io_bytes, numel, parse_shapes
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.units import NS_PER_US
from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.profile.model import Backend

from ..context import RuleContext
from ..finding import Change, Effect, Finding, Related, Target
from ..registry import Rule, declare
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


@declare("NPU106", "cube-shape-alignment", thresholds=("cubeAlign", "faAlign", "cubeMinBytes"),
         backends=(Backend.ASCEND, Backend.CUDA))
class CubeShapeAlignment(Rule):
    """MatMul / FlashAttention shapes not aligned to the Cube unit's tiles run slower.

    The Cube unit computes in fixed tiles; an inner axis that is not a multiple of 256 elements (128
    for FlashAttention's head dim) leaves partial tiles and forces extra data movement, so the same
    FLOPs take longer. Padding the model dimensions (hidden, vocab, intermediate sizes) to aligned
    values avoids it.
    """

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
        gemms = _gemms(ctx) if ctx.backend is not Backend.CUDA else None
        for key, members in groups.items():
            f = self._finding(ctx, members, dur, sites[key])
            if f is not None:  # None: no dim padding can serve
                f.effect = _at_aligned_rate(ctx, [r for r, _ in members], gemms)
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


@dataclass(frozen=True, slots=True)
class _Gemm:
    """One distinct MatMul of the steps (OpType, shapes, dtypes, formats)."""

    op_type: str
    dtypes: str  # its input dtypes ("" not recorded)
    shapes: str
    flops: float  # 2·M·N·K per kernel (0: unknown)
    nbytes: int  # its inputs and outputs
    unaligned: frozenset[int]  # its inner axes that are not multiples of cubeAlign
    kernels: int  # its kernels with a recorded time
    ns: float  # their recorded time


def _gemms(ctx: RuleContext) -> tuple[np.ndarray, list[_Gemm]]:
    """Every MatMul kernel of the steps with shapes, by distinct (OpType, shapes, dtypes, formats):
    (per kernel row its index in the list, -1 for none; the list). Once per rule run."""
    k = ctx.profile.kernels
    types = pq.kernel_types(k)
    cols = [k[c] for c in ("input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes")]
    sel = np.flatnonzero(pq.matches(types, MATMUL) & pq.kernels_in_steps_mask(ctx.profile) & (pq.strs(cols[0]) != ""))
    code_of = np.full(len(k), -1, np.int64)
    if not len(sel):
        return code_of, []
    codes, uniques = timemodel.distinct_rows([types[sel]] + [c.iloc[sel] for c in cols])
    code_of[sel] = codes
    dur = k["dur_ns"].to_numpy(np.int64)[sel]
    timed = dur > 0
    n = np.bincount(codes[timed], minlength=len(uniques))
    ns = np.bincount(codes[timed], weights=dur[timed].astype(np.float64), minlength=len(uniques))
    align = ctx.thresholds.cube_align
    out = []
    for i, (t, ins, dtypes, formats, outs, out_dtypes) in enumerate(uniques):
        a, b = parse_shapes(ins), parse_shapes(outs)
        unaligned = frozenset(d for d in _inner_axes(a, formats) if d % align)
        out.append(_Gemm(str(t), str(dtypes), str(ins), float(gemm_flops(a, b)),
                         io_bytes(a, dtypes) + io_bytes(b, out_dtypes), unaligned, int(n[i]), float(ns[i])))
    return code_of, out


def _reference_rate(g: _Gemm, table: list[_Gemm], keeps: frozenset[int]) -> float | None:
    """FLOP per ns of the GEMMs that stand for ``g`` padded: its OpType (and input dtypes where both
    are recorded), FLOPs and bytes moved per kernel each within ``COMPARABLE_WORK`` either way of
    its own (a GEMM's rate grows with its size and its FLOPs per byte), and no unaligned inner axis
    but those ``g`` keeps (``keeps``: the ones the advice does not pad). None: no such GEMM in the
    profile."""
    def near(x: float, y: float) -> bool:
        return y / pq.COMPARABLE_WORK <= x <= y * pq.COMPARABLE_WORK

    peers = [h for h in table if h.op_type == g.op_type and (h.dtypes == g.dtypes or not h.dtypes or not g.dtypes)
             and h.kernels > 0 and h.ns > 0 and near(h.flops, g.flops) and near(h.nbytes, g.nbytes)
             and h.unaligned <= keeps]
    ns = sum(h.ns for h in peers)
    return sum(h.flops * h.kernels for h in peers) / ns if peers and ns > 0 else None


def _at_aligned_rate(ctx: RuleContext, rows: list[int], gemms: tuple[np.ndarray, list[_Gemm]] | None) -> Effect:
    """Each MatMul the padding aligns (a padded dim among its inner axes) at the FLOP rate the
    profile's aligned GEMMs of comparable work reach (``_reference_rate``; never slower than
    recorded); the low end keeps half the gain. "A/B test" where the profile has none: a smaller
    GEMM's rate says nothing of a larger one's (docs/savings.md)."""
    if gemms is None:
        return Effect(unknown="A/B test: the CUDA GEMMs' shapes are on their host ops, not their kernels")
    code_of, table = gemms
    align = ctx.thresholds.cube_align
    types = pq.kernel_types(ctx.profile.kernels)
    dur = ctx.profile.kernels["dur_ns"].to_numpy(np.int64)
    by_gemm: dict[int, list[int]] = defaultdict(list)
    for r in rows:
        by_gemm[int(code_of[r])].append(int(r))
    changes: list[Change] = []
    unrated: dict[str, list[str]] = defaultdict(list)  # OpType -> the shapes of its GEMMs with no reference
    other: set[str] = set()  # FlashAttention, or a MatMul without shapes or FLOPs: no rate model
    for c, members in by_gemm.items():
        g = table[c] if c >= 0 else None
        if g is None or g.flops <= 0:
            other.add(str(types[members[0]]))
            continue
        padded = frozenset(d for d in g.unaligned if paddable(d, align))
        if not padded:
            continue  # the padding leaves its inner axes as they are (a vocabulary along its M axis)
        rate = _reference_rate(g, table, g.unaligned - padded)
        if rate is None:
            unrated[g.op_type].append(g.shapes)
            continue
        for r in members:
            if dur[r] > 0:
                f = min(1.0, g.flops / rate / float(dur[r]))
                changes.append(Change(Target.KERNELS, (r,), f, best=f, worst=0.5 + 0.5 * f))
    peers = f"within {pq.COMPARABLE_WORK:g}x their FLOPs and bytes"
    left = [f"{t} {' and '.join(sh)}" for t, sh in sorted(unrated.items())] + sorted(other)
    if not changes:
        if unrated:
            shapes = " or ".join(x for v in unrated.values() for x in v)
            return Effect(unknown=f"A/B test: the profile has no aligned {'/'.join(sorted(unrated))} GEMM within "
                                  f"{pq.COMPARABLE_WORK:g}x the FLOPs and bytes of {shapes} to take the rate from "
                                  "(a GEMM's rate depends on its size)")
        if other:
            return Effect(unknown=f"A/B test: no rate model for {'/'.join(sorted(other))} (no FLOPs from its shapes)")
        return Effect(unknown="unknown: the misaligned MatMuls have no recorded time")
    basis = (f"the misaligned MatMuls at the FLOP rate of the profile's GEMMs of their type and dtypes {peers} "
             "whose inner axes are aligned but for those the padding keeps")
    if left:  # the ones without a reference save nothing in the estimate: said, not guessed
        basis += f"; {', '.join(left)} as recorded (nothing to rate {'them' if len(left) > 1 else 'it'} by)"
    return Effect(tuple(changes), basis=basis + " (low end: half the gain)")


def _inner_axes(shapes: list, formats: str) -> list[int]:
    """The inner axis of a MatMul's two inputs: the last dim of a 2-D ND input, ``dims[1] x
    dims[2]`` of a 4-D FRACTAL_NZ one."""
    fmts = [f.strip() for f in formats.split(";")] if formats else []
    out = []
    for i, s in enumerate(shapes[:2]):
        if not s:
            continue
        nz = i < len(fmts) and fmts[i] == "FRACTAL_NZ" and len(s) == 4
        out.append(s[1] * s[2] if nz else s[-1])
    return out


def _ascend(ctx: RuleContext) -> tuple[list[int], list[_Bad]]:
    prof = ctx.profile
    k = prof.kernels
    if not len(k):
        return [], []
    align = ctx.thresholds.cube_align
    fa_align = ctx.thresholds.fa_align
    min_bytes = ctx.thresholds.cube_min_bytes
    types = pq.kernel_types(prof.kernels)
    cols = [k[c] for c in ("input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes")]
    kind = pq.matches(types, MATMUL) | pq.matches(types, FLASH, full_start=True)
    sel = np.flatnonzero(kind & pq.kernels_in_steps_mask(prof) & (pq.strs(cols[0]) != ""))
    if not len(sel):
        return [], []
    # judge each distinct (type, shapes, dtypes, formats) once: millions of kernels, few shapes
    codes, uniques = timemodel.distinct_rows([types[sel]] + [c.iloc[sel] for c in cols])
    verdicts = [_judge(*u, align=align, fa_align=fa_align, min_bytes=min_bytes) for u in uniques]
    hit = np.array([v is not None for v in verdicts], dtype=bool)[codes]
    return sel[hit].tolist(), [verdicts[c] for c in codes[hit]]


def _judge(t: str, shapes: str, dtypes: str, formats: str, out_shapes: str, out_dtypes: str, *,
           align: int, fa_align: int, min_bytes: int) -> _Bad | None:
    ins = parse_shapes(shapes)
    nbytes = io_bytes(ins, dtypes) + io_bytes(parse_shapes(out_shapes), out_dtypes)
    if FLASH.match(t):
        dims = tuple(s[-1] for s in ins[:3] if s and s[-1] % fa_align)
        return _Bad("flash", t, shapes, tuple(dict.fromkeys(dims)), fa_align, "head dim", nbytes) if dims else None
    if nbytes < min_bytes:
        return None
    dims = tuple(dict.fromkeys(d for d in _inner_axes(ins, formats) if d % align))
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
