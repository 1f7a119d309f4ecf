"""NPU210-NPU217: hand-written operator sequences that one fused torch_npu API replaces
(the advisor's "Affinity API" analysis; CUDA/CPU analogues for Kineto traces).

Detection is the advisor's (see ``hints.profile_query``): outermost aten ops per thread, joined with
``-``, regex-searched with the catalog's patterns, each pattern gated on the profile's CANN
version (unknown version: 8.0.0, every set), each match widened to the whole expression the
fused API replaces (the spec's ``lead``/``tail``). Matches are grouped by where they start in the
source; each group is one finding whose impact is the device time of the matched ops -- their
forward kernels and the backward kernels of their autograd nodes (``kernels.fwd_op``), since the
fused API replaces both passes -- or host time on CPU-only traces. Profiles without framework ops use the legacy kernel ``Type`` sequences,
anchored by inference only.

The quick fix is the ``hints.fixes.fused_api`` transform, offered only when it recognises the
anchored expression exactly; otherwise ``evidence["snippet"]`` carries the replacement to show
in the hover.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.finding import Change, Effect, Finding, FixOffer, Related, Target
from msprof_lsp.hints.fixes import fused_api as fx
from msprof_lsp.hints.fixes import make_offer
from msprof_lsp.hints.registry import Rule, declare
from msprof_lsp.mapping.source.heat import SiteKind
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.profile.model import Backend, Profile
from msprof_lsp.mapping.profile.shapes import io_bytes, parse_shapes

from .. import profile_query as pq, source_query as sq

DEFAULT_CANN = "8.0.0"  # the advisor's default rule set (sets 0-3)


# ---------------------------------------------------------------------------------------------
# Matching (computed once per context for all eight codes)


@dataclass(slots=True)
class Group:
    """Matches of one code that start at the same place."""

    place: sq.Place
    matches: list[tuple[int, int]]  # token ranges
    pattern: str


def cann_version(ctx: RuleContext) -> str:
    return ctx.profile.meta.cann_version or DEFAULT_CANN


@dataclass(frozen=True, slots=True)
class _Roots:
    """The outermost framework op each kernel of the steps belongs to, computed once per profile
    for all eight codes: by launch (forward) and by the autograd link (backward)."""

    kernels: pd.DataFrame  # the kernels in steps
    forward: np.ndarray  # per kernel: the root op that launched it (-1 none)
    backward: np.ndarray  # per kernel: the root op whose backward it is (-1 none)
    forward_ns: np.ndarray  # per host op: device ns of its forward kernels
    backward_ns: np.ndarray  # per host op: device ns of its backward kernels

    def forward_of(self, rows: np.ndarray) -> pd.DataFrame:
        return self.kernels[np.isin(self.forward, rows)]

    def backward_of(self, rows: np.ndarray) -> pd.DataFrame:
        return self.kernels[np.isin(self.backward, rows)]


def _roots(ctx: RuleContext) -> _Roots:
    prof = ctx.profile
    return prof.derived.memo("fused_api/roots", prof.fields(), lambda: _device_roots(prof))


def _device_roots(prof: Profile) -> _Roots:
    roots = pq.outermost_framework_ops(prof)
    k = prof.kernels_in_steps()
    fwd, bwd = pq.kernel_roots(prof, roots, k), pq.backward_roots(prof, roots, k)
    dur = k["dur_ns"].to_numpy(np.int64)
    n = len(prof.host_ops)
    per = [np.bincount(r[r >= 0], weights=dur[r >= 0], minlength=n).astype(np.int64) for r in (fwd, bwd)]
    return _Roots(k, fwd, bwd, per[0], per[1])


def find(ctx: RuleContext, spec: FusedSpec) -> tuple[str, pq.Tokens, list[Group], dict]:
    """(variant "host"/"kernel", tokens, groups, gating info) for one code, once per context (the
    groups are placed in its source)."""
    return ctx.derived(("fused_api/find", spec.code), lambda: _find(ctx, spec))


def _find(ctx: RuleContext, spec: FusedSpec) -> tuple[str, pq.Tokens, list[Group], dict]:
    ascend = ctx.backend is Backend.ASCEND
    version = cann_version(ctx)
    active = [(p, v) for p, v in spec.patterns if not ascend or pq.cann_at_least(version, v)]
    gating = {"cann_version": ctx.profile.meta.cann_version or f"unknown (default {DEFAULT_CANN})",
              "patterns_gated_off": [p for p, v in spec.patterns if (p, v) not in active]}
    toks = pq.host_tokens(ctx)
    variant = "host"
    found: list[tuple[tuple[int, int], str]] = []
    if len(toks.rows):
        for pattern, _v in active:
            found += [(m, pattern) for m in toks.find(pq.pattern_regex(pattern))]
    elif ascend and spec.kernel_patterns and len(ctx.profile.kernels):
        variant = "kernel"
        toks = pq.kernel_tokens(ctx)
        for pattern in spec.kernel_patterns:
            found += [(m, pattern) for m in toks.find(pq.pattern_regex(pattern))]
    # Two patterns of one code can match the same ops: keep each start once (longest match).
    best: dict[int, tuple[tuple[int, int], str]] = {}
    for (a, b), pat in found:
        if a not in best or b > best[a][0][1]:
            best[a] = ((a, b), pat)
    groups: dict[Span | None, Group] = {}
    for a in sorted(best):
        (a, b), pat = best[a]
        if variant == "host":
            a, b = _widened(ctx, spec, toks, a, b)
        rows = toks.rows[a:b]
        place = sq.place_ops(ctx, rows.tolist()) if variant == "host" else _kernel_place(ctx, spec, rows.tolist())
        if place is None:
            continue
        g = groups.get(place.span)
        if g is None:
            groups[place.span] = g = Group(place, [], pat)
        g.matches.append((a, b))
    return variant, toks, list(groups.values()), gating


def _widened(ctx: RuleContext, spec: FusedSpec, toks: pq.Tokens, a: int, b: int) -> tuple[int, int]:
    """The match [a, b) with the ops the fused API also replaces (``spec.lead`` before it,
    ``spec.tail`` after it): each element optional, taken outward while the op next to the match
    has one of its names and runs in a function the match's ops run in (unplaced ops: with
    unplaced ones), so a neighbour from other code is never charged."""
    def where(i: int) -> tuple[str, str] | None:
        site = sq.site_of_op(ctx, int(toks.rows[i]))
        return None if site is None else (site.span.path, site.function)

    here = {where(i) for i in range(a, b)}

    def takes(i: int, names: str) -> bool:
        return 0 <= i < len(toks.rows) and toks.rows[i] >= 0 and toks.names[i] in names.split("|") and where(i) in here

    for names in reversed(spec.lead):
        if takes(a - 1, names):
            a -= 1
    for names in spec.tail:
        if takes(b, names):
            b += 1
    return a, b


def _kernel_place(ctx: RuleContext, spec: FusedSpec, rows: list[int]) -> sq.Place | None:
    """Anchor of a kernel-type match: the first statement, among those the attribution placed the
    match's kernels on, whose text has the pattern's own spelling (``spec.keywords``). Kernel types
    alone do not show a view (no kernel) nor which of two adjacent lines launched a kernel, so a
    statement that cannot have written the pattern is a wrong anchor: None (no finding) when the
    kernels were placed only on such statements. Unplaced matches keep no line (nothing to be wrong
    about)."""
    placed = False
    for i, r in enumerate(rows):
        place = sq.place_kernels(ctx, [r])
        if place.span is None:
            continue
        placed = True
        index = sq.index_of(ctx, place.span.path)
        # the match's first kernel may also be the optional element it starts with (spec.starts)
        spelling = "|".join(p for p in (spec.keywords, spec.starts if i == 0 else "") if p)
        if not spelling or (index is not None and re.search(spelling, sq.text(index, place.span))):
            return place
    return None if placed else sq.Place(None, Confidence.INFERRED)


# ---------------------------------------------------------------------------------------------
# The rules


def _already_tanh(ctx: RuleContext, rows: np.ndarray) -> bool:
    """Kineto records the GELU approximate argument in Concrete Inputs (["", "tanh"])."""
    ci = ctx.profile.host_ops["concrete_inputs"].to_numpy(dtype=object)
    return bool(len(rows)) and all("tanh" in str(ci[int(r)]) for r in rows)


def _io_bytes(k: pd.DataFrame) -> np.ndarray:
    """Bytes each kernel row reads and writes, from its shapes and dtypes (0: unknown)."""
    cols = [pq.strs(k[c]) for c in ("input_shapes", "input_dtypes", "output_shapes", "output_dtypes")]
    memo: dict[tuple[str, ...], int] = {}
    out = np.zeros(len(k), np.int64)
    for i, key in enumerate(zip(*(c.tolist() for c in cols))):
        if key not in memo:
            try:
                memo[key] = io_bytes(parse_shapes(key[0]), key[1]) + io_bytes(parse_shapes(key[2]), key[3])
            except (ValueError, OverflowError):
                memo[key] = 0
        out[i] = memo[key]
    return out


def _best_vector_rate(ctx: RuleContext) -> float | None:
    """Bytes per ns of the profile's fastest vector kernels that move at least 1 MiB (the 90th
    percentile, so one odd row does not set it)."""
    k = ctx.profile.kernels_in_steps()
    if not len(k):
        return None
    vec = k[pq.strs(k["core"]) == "AI_VECTOR_CORE"]
    if not len(vec):
        return None
    nbytes = _io_bytes(vec)
    dur = vec["dur_ns"].to_numpy(np.int64)
    ok = (nbytes >= 1 << 20) & (dur > 0)
    return float(np.percentile(nbytes[ok] / dur[ok], 90)) if ok.any() else None


def _one_call_per_match(ctx: RuleContext, ops: np.ndarray | None, matches: int) -> Change | None:
    """The host time of ``ops`` and everything inside them at matches / ops: one call per match
    stays (low end: all of it). None where there is no more than one op per match."""
    if ops is None or len(ops) <= matches:
        return None
    f = matches / len(ops)
    inside = np.flatnonzero(pq.descendants(ctx.profile, np.asarray(ops).tolist()))
    return Change(Target.HOST_OPS, tuple(int(r) for r in inside), f, best=f, worst=1.0)


def one_kernel_per_match(ctx: RuleContext, under: pd.DataFrame, matches: int, api: str,
                         ops: np.ndarray | None = None) -> Effect:
    """Each match's kernels replaced by the one fused kernel: the estimate and low end keep the
    group's longest kernel type (a fused kernel is at least its largest piece), the high end moves
    the match's largest input-plus-output at the profile's best vector rate. ``ops``: the matched
    host ops; one call per match stays, so their host time (dispatch, launches) scales by matches /
    ops -- in the estimate and high end; the low end keeps it."""
    if not len(under) or matches <= 0:
        return Effect(unknown=f"unknown: no kernels of the matched ops in the profile for {api} to replace")
    p = ctx.profile
    rows = p.kernels.index.get_indexer(under.index)
    types = pq.kernel_types(under)
    dur = under["dur_ns"].to_numpy(np.int64)
    means = pd.Series(dur).groupby(types).mean()
    keep = types == means.idxmax()
    total = float(dur.sum())
    rate = _best_vector_rate(ctx)
    nbytes = _io_bytes(under)
    best = None
    if rate and total > 0 and nbytes.max() > 0:
        per_match = float(nbytes.max()) / rate
        best = min(1.0, per_match * matches / total)
    kept = tuple(int(r) for r in rows[keep])
    gone = tuple(int(r) for r in rows[~keep])
    high = "its largest tensor moved at the profile's best vector rate" if best is not None else \
        "the same: no shapes or vector rate to time the fused kernel"
    changes = [Change(Target.KERNELS, gone, 0.0, best=best if best is not None else 0.0, worst=0.0)] if gone else []
    changes.append(Change(Target.KERNELS, kept, 1.0, best=best if best is not None else 1.0, worst=1.0))
    host = ""
    calls = _one_call_per_match(ctx, ops, matches)
    if calls is not None:
        changes.append(calls)
        host = f", one call per match ({matches}/{len(ops)} of the ops' host time; low end: all of it)"
    return Effect(tuple(changes), basis=f"each match as one {api} kernel: its longest kernel type kept{host} "
                                        f"(high end: {high})")


def _autograd_nodes(ctx: RuleContext, ops: np.ndarray) -> np.ndarray:
    """The backward pass's host ops linked to the forward ops in the subtrees of ``ops``
    (``host_ops.fwd_op``): one autograd node per op, one fused backward call per match after the fix."""
    h = ctx.profile.host_ops
    inside = pq.descendants(ctx.profile, np.asarray(ops).tolist())
    fwd = h["fwd_op"].to_numpy(np.int64)
    ok = (fwd >= 0) & (fwd < len(h))
    linked = np.zeros(len(h), dtype=bool)
    linked[ok] = inside[fwd[ok]]
    return np.flatnonzero(linked)


def fused_effect(ctx: RuleContext, forward: pd.DataFrame, backward: pd.DataFrame, matches: int, api: str,
                 ops: np.ndarray | None) -> Effect:
    """The forward kernels of each match as one fused kernel and their backward kernels as one
    fused backward kernel (``one_kernel_per_match`` on each pass: the fused API has a kernel of
    its own for each); the autograd nodes of the matched ops become one per match too, also where
    the backward launches no kernel. Without kernels of either pass (a CPU-only trace) the saving
    is unknown, but the effect still names the matched ops and what runs inside them: what the fix
    touches and the finding charges (``hints.charges``), so a finding whose ops another fused-API
    match holds is folded into that one on such a trace too, as it is where kernels are recorded."""
    fwd = one_kernel_per_match(ctx, forward, matches, api, ops)
    if not len(backward):
        if fwd.unknown:
            return _touching(ctx, fwd, ops)
        # a backward without kernels (views, permutes) still runs an autograd node per op
        nodes = _one_call_per_match(ctx, _autograd_nodes(ctx, ops), matches) if ops is not None else None
        if nodes is None:
            return fwd
        return Effect(fwd.changes + (nodes,), basis=f"{fwd.basis}; its autograd nodes one per match")
    bwd = one_kernel_per_match(ctx, backward, matches, api, _autograd_nodes(ctx, ops) if ops is not None else None)
    if fwd.unknown:
        return bwd
    return Effect(fwd.changes + bwd.changes, basis=f"{fwd.basis}; its backward kernels likewise")


def _touching(ctx: RuleContext, unknown: Effect, ops: np.ndarray | None) -> Effect:
    """``unknown`` with the matched host ops and everything inside them as the rows the fix acts on
    (factor 1: nothing replays an unknown effect, its saving stays unknown)."""
    if ops is None or not len(ops):
        return unknown
    inside = tuple(int(r) for r in np.flatnonzero(pq.descendants(ctx.profile, np.asarray(ops).tolist())))
    return Effect((Change(Target.HOST_OPS, inside, 1.0, best=1.0, worst=1.0),), basis=unknown.basis,
                  unknown=unknown.unknown)


@dataclass(frozen=True, eq=False, repr=False)
class FusedSpec(Rule):
    """One fused API: the rule's own fields after code and name; each API is a subclass below,
    its ``@declare`` giving them."""

    short: str  # message short name
    api: str  # the torch_npu API
    patterns: tuple[tuple[str, str], ...]  # (aten pattern, minimum CANN version)
    # Kernel ``Type`` patterns (``pattern_regex`` syntax) for profiles without framework ops: the
    # graph-mode (legacy) sequence and the eager aclnn one; only sequences that determine the
    # pattern by themselves (``_kernel_place`` makes the static check they also need)
    kernel_patterns: tuple[str, ...]
    transform: Callable[..., object]
    fix_npu: str  # <= 12 words
    fix_cuda: str  # <= 12 words
    snippet_cuda: str
    backend_fix: bool = False  # the transform takes backend= and has a CUDA/CPU form
    keywords: str = ""  # regex over statement text: where in a function the sequence can start
    # regex over statement text: where a kernel-type match may also start, checked on its first
    # kernel's statement only -- an optional leading element (NPU216's scale, a plain ``*``) too
    # common for ``keywords``, whose def-line search would take any statement of the function
    starts: str = ""
    # What the fused API also replaces next to a match: the advisor's patterns detect, and stop
    # short of the whole expression (RMSNorm's ``* weight``, rotary's ``q * cos``, attention's
    # ``k.transpose``). Op names per element ("a|b"), each optional, absorbed outward from the
    # match while the op runs in a function of the match (``_widened``).
    lead: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()
    # the replacements are torch_npu / torch APIs
    pytorch_only: bool = field(default=True, kw_only=True)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        spec = self
        variant, toks, groups, gating = find(ctx, spec)
        ascend = ctx.backend is Backend.ASCEND
        roots = _roots(ctx) if variant == "host" else None
        kernels = ctx.profile.kernels
        for g in groups:
            rows = np.concatenate([toks.rows[a:b] for a, b in g.matches])
            firsts = np.array([toks.rows[a] for a, _ in g.matches], dtype=np.int64)
            if spec.code == "NPU214" and not ascend and variant == "host" and _already_tanh(ctx, firsts):
                continue
            if variant == "host":  # the backward of the same ops too: the fused API replaces both passes
                back_ns = int(roots.backward_ns[rows].sum()) if len(kernels) else 0
                total = pq.op_time_ns(ctx.profile, rows.tolist(), roots.forward_ns) + back_ns
                forward, backward = roots.forward_of(rows), roots.backward_of(rows)
            else:
                forward, backward, back_ns = kernels.loc[rows], kernels.iloc[0:0], 0
                total = int(forward["dur_ns"].sum())
            under = pd.concat([forward, backward]) if len(backward) else forward
            ktypes = Counter(pq.kernel_types(under)) if len(under) else Counter()
            a0, b0 = g.matches[0]
            sequence = toks.sequence(a0, b0)
            n = len(g.matches)
            evidence = {
                "backend": ctx.backend,
                "api": spec.api if ascend else spec.fix_cuda,
                "pattern": g.pattern,
                "sequence": sequence,
                "matches": n,
                "matches_per_step": round(n / ctx.num_steps, 2),
                "matched_in": "host ops" if variant == "host" else "kernel types",
                "first_op": str(ctx.profile.host_ops["name"].iloc[int(firsts[0])]) if variant == "host" else sequence.split("-")[0],
                "first_op_stack": [fr.raw for fr in ctx.profile.stack_of(int(ctx.profile.host_ops["stack"].iloc[int(firsts[0])]))][:12]
                if variant == "host" else [],
                "kernels": len(under),
                "kernel_types": dict(ktypes.most_common(8)),
                "time_us_per_step": pq.format_ns_us(ctx.per_step_ns(total)),
                "backward_us_per_step": pq.format_ns_us(ctx.per_step_ns(back_ns)),
                "time_source": "device" if len(kernels) else "host",
                "snippet": fx.SNIPPETS[spec.code] if ascend else spec.snippet_cuda,
                **(gating if ascend else {}),
            }
            conf = g.place.confidence if variant == "host" else Confidence.INFERRED
            span, candidates = g.place.span, []
            if g.place.site is not None and g.place.site.kind == SiteKind.FUNCTION:
                # Kineto def-line frames name the function, not the line: search its body.
                candidates = sq.statements_matching(ctx, g.place.site, re.compile(spec.keywords)) if spec.keywords else []
                if candidates:
                    span, conf = candidates[0], Confidence.MODULE
                    evidence["located"] = f"statically in {g.place.site.function}()"
            per = len(under) // n
            qualifier = "inferred from kernel types" if variant == "kernel" else (
                f"{per} kernel{'s' if per != 1 else ''} each" if per and len(kernels) else "")
            per_step = ctx.per_step_count(n)
            msg = ctx.message(
                spec.short,
                total_ns=total,
                count=per_step,
                unit="match" if per_step == 1 else "matches",
                qualifier=qualifier,
                diagnosis=f"{sequence} runs as separate ops",
                fix=spec.fix_npu if ascend else spec.fix_cuda,
            )
            related = self._related(ctx, g, toks, variant) if not candidates else [
                Related(c, "also matches the sequence's start") for c in candidates[1:4]]
            tries = [span, *reversed([r.span for r in related])] if not candidates else candidates
            fixes = self._fixes(ctx, spec, evidence, tries)
            yield ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf,
                              evidence=evidence, fixes=fixes, related=related,
                              effect=fused_effect(ctx, forward, backward, n, spec.api if ascend else spec.fix_cuda,
                                                  rows if variant == "host" else None))

    def _fixes(self, ctx: RuleContext, spec: FusedSpec, evidence: dict, tries: list[Span | None]) -> list[FixOffer]:
        """The transform at the first statement it recognises. The anchor is where the sequence
        starts; the expression may end further down (SwiGLU's product after the chunk,
        attention's final matmul), so the other statements of the match are tried too."""
        tries = [t for t in tries if t is not None]
        if not tries or (ctx.backend is not Backend.ASCEND and not spec.backend_fix):
            return []
        opts = {"backend": ctx.backend} if spec.backend_fix else {}
        return [make_offer(spec.transform, where.path, where, choice=self.code, **opts) for where in tries[:6]]

    def _related(self, ctx: RuleContext, g: Group, toks: pq.Tokens, variant: str) -> list[Related]:
        if variant != "host" or g.place.span is None:
            return []
        a, b = g.matches[0]
        out: list[Related] = []
        seen = {g.place.span.line}
        for r in toks.rows[a:b]:
            site = sq.site_of_op(ctx, int(r))
            if site is None or site.span.path != g.place.span.path:
                continue
            stmt = sq.site_statement(ctx, site)
            if stmt.line in seen or g.place.span.line <= stmt.line <= g.place.span.end_line:
                continue
            seen.add(stmt.line)
            out.append(Related(stmt, f"part of the matched sequence ({ctx.profile.host_ops['name'].iloc[int(r)]})"))
        return out


# keywords: the pow line when split
@declare("NPU210", "fused-api-rms-norm", short="RMSNorm written out", api="torch_npu.npu_rms_norm",
         patterns=(("(pow){0,1}-(mean){0,1}-(add){0,1}-rsqrt-mul-(type_as){0,1}", "7.0.0"),),
         kernel_patterns=("Cast-Square-ReduceMeanD-Add-Rsqrt-Mul-Cast-Mul", "(Cast){0,1}-Pow-ReduceMean-(Add|Adds)-Rsqrt-Mul"),
         transform=fx.rms_norm, fix_npu="Use torch_npu.npu_rms_norm", fix_cuda="Use F.rms_norm or nn.RMSNorm",
         snippet_cuda="y = F.rms_norm(x, (x.shape[-1],), weight, eps)  # or nn.RMSNorm(dim, eps=eps)",
         keywords=r"\brsqrt\b|\bpow\b|\bsquare\b|\*\*\s*2\b", tail=("to|type_as", "mul"))
class FusedRmsNorm(FusedSpec):
    """RMSNorm computed as pow-mean-add-rsqrt-mul: one fused npu_rms_norm kernel instead.

    Each of pow, mean, add, rsqrt and mul is a separate kernel that reads and writes the whole
    activation; npu_rms_norm does it in one pass.
    """


@declare("NPU211", "fused-api-swiglu", short="SwiGLU written out", api="torch_npu.npu_swiglu",
         patterns=tuple((p, "7.0.0") for p in ("(slice|chunk)-silu-mul", "(slice|chunk)-mul-silu",
                                               "(slice|chunk)-sigmoid-mul-mul", "(slice|chunk)-mul-sigmoid-mul",
                                               "(slice|chunk)-mul-mul-sigmoid")),
         kernel_patterns=("Slice-Slice-Swish-Mul",), transform=fx.swiglu,
         fix_npu="Use torch_npu.npu_swiglu", fix_cuda="torch.compile the gated MLP",
         snippet_cuda="mlp = torch.compile(mlp)  # fuses chunk-silu-mul into one kernel",
         keywords=r"\bsilu\b|\bsigmoid\b|\bchunk\(")
class FusedSwiglu(FusedSpec):
    """SwiGLU as chunk-silu-mul: one fused npu_swiglu kernel instead.

    The split, the SiLU and the product are three kernels with two intermediate tensors; npu_swiglu
    computes silu(a) * b in one kernel.
    """


@declare("NPU212", "fused-api-rotary-mul", short="Rotary embedding written out", api="torch_npu.npu_rotary_mul",
         patterns=(("(chunk)-neg-cat-(mul){0,2}-add", "7.0.RC1"), ("(slice)-neg-cat-(mul){0,2}-add", "7.0.RC1")),
         kernel_patterns=("Mul-Slice-Neg-Slice-ConcatD-Mul",), transform=fx.rotary_mul,
         fix_npu="Use torch_npu.npu_rotary_mul", fix_cuda="torch.compile the rotary embedding",
         snippet_cuda="apply_rotary = torch.compile(apply_rotary)  # fuses chunk-neg-cat-mul-add",
         keywords=r"rotate_half|cat\(\s*[(\[]\s*-", lead=("mul", "slice"))
class FusedRotaryMul(FusedSpec):
    """Rotary embedding as chunk-neg-cat-mul-add: one fused npu_rotary_mul kernel instead.

    rotate_half and the two products launch five or more small kernels per tensor; npu_rotary_mul
    applies the rotation in one.
    """


# the bool mask's fill in place (aten::masked_fill_) or not (aten::masked_fill: a clone and the
# in-place fill inside it; eager kernels: the clone's copy, then MaskedFill)
@declare("NPU213", "fused-api-attention", short="Attention written out", api="torch_npu.npu_fusion_attention",
         patterns=(("matmul-(add){0,1}-(mul){0,1}-(masked_fill|masked_fill_){0,1}-softmax-(dropout){0,1}-matmul", "7.0.RC1"),
                   ("matmul-(add){0,1}-(mul){0,1}-(masked_fill|masked_fill_){0,1}-(add){0,1}-softmax-(dropout){0,1}-matmul",
                    "7.0.RC1")),
         kernel_patterns=("(BatchMatMulV2|BatchMatMul)-(Add|Adds){0,1}-(Mul|Muls){0,1}-(MaskedFill){0,1}-(Add|Adds){0,1}"
                          "-SoftmaxV2-(DropOutDoMask|DropOutDoMaskV3){0,1}-(BatchMatMulV2|BatchMatMul)",
                          "(BatchMatMulV2|BatchMatMul)-(Add|Adds){0,1}-(Mul|Muls){0,1}-(ViewCopy|TensorMove)-MaskedFill"
                          "-(Add|Adds){0,1}-SoftmaxV2-(DropOutDoMask|DropOutDoMaskV3){0,1}-(BatchMatMulV2|BatchMatMul)"),
         transform=fx.attention, fix_npu="Use torch_npu.npu_fusion_attention", fix_cuda="Use F.scaled_dot_product_attention",
         snippet_cuda="out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, scale=s)",
         backend_fix=True, keywords=r"@|\bmatmul\(|\bbmm\(|softmax", lead=("transpose|permute",))
class FusedAttention(FusedSpec):
    """Attention as matmul-softmax-matmul: one fused attention kernel instead.

    The score matrix (batch x heads x seq x seq) is written and read by every step of the
    hand-written attention; the fused kernel keeps it on chip.
    """


@declare("NPU214", "fused-api-fast-gelu", short="Exact GELU", api="torch_npu.fast_gelu",
         patterns=(("gelu", "6.3.RC2"),), kernel_patterns=(), transform=fx.fast_gelu,
         fix_npu="Use torch_npu.fast_gelu (approximation)", fix_cuda="Use the tanh GELU approximation",
         snippet_cuda='y = F.gelu(x, approximate="tanh")', backend_fix=True, keywords=r"\bgelu\b|GELU")
class FusedFastGelu(FusedSpec):
    """Exact GELU where the faster approximation would do.

    The erf-based GELU is slower than its approximation; fast_gelu (tanh GELU on CUDA) changes
    numerics slightly, so it is opt-in.
    """


@declare("NPU215", "fused-api-confusion-transpose", short="Transpose and reshape", api="torch_npu.npu_confusion_transpose",
         patterns=(("(permute|transpose)-(contiguous){0,1}-(reshape|view)", "6.3.RC2"),
                   ("(reshape|view)-(contiguous){0,1}-(permute|transpose)", "6.3.RC2")),
         kernel_patterns=("Transpose",), transform=fx.confusion_transpose,
         fix_npu="Use torch_npu.npu_confusion_transpose", fix_cuda="Drop .contiguous() where the consumer accepts strides",
         snippet_cuda="out = out.transpose(1, 2).reshape(b, s, h)  # reshape copies only when it must",
         keywords=r"\.(permute|transpose)\(.*\.(view|reshape)\(|\.(view|reshape)\(.*\.(permute|transpose)\(")
class FusedConfusionTranspose(FusedSpec):
    """permute/transpose + contiguous + view: one npu_confusion_transpose instead.

    The explicit contiguous() copy and the layout change are separate kernels;
    npu_confusion_transpose moves the data once.
    """


# scale, then mask, then softmax (what the fused kernel computes): the bool mask's fill, in place or
# not, or a float mask added; inside a written-out attention NPU213's match holds these ops too, and
# hints.consolidate folds this finding into that one. Kernel types: the graph-mode sequence, then the
# eager ones -- the bool mask's fill (out of place: the clone's copy first) or a float mask's tensor
# Add (Adds is a scalar: no mask). keywords: the mask's line when split, the softmax's otherwise;
# starts: a kernel match's scale (Mul/Muls) on a line of its own
@declare("NPU216", "fused-api-scaled-masked-softmax", short="Masked softmax written out",
         api="torch_npu.npu_scaled_masked_softmax",
         patterns=(("(mul){0,1}-(masked_fill|masked_fill_)-softmax", "6.3.RC2"), ("(mul){0,1}-(add)-softmax", "6.3.RC2")),
         kernel_patterns=("Cast-Mul-MaskedFill-SoftmaxV2-Cast", "(Mul|Muls){0,1}-(ViewCopy|TensorMove){0,1}-MaskedFill-SoftmaxV2",
                          "(Mul|Muls){0,1}-Add-SoftmaxV2"),
         transform=fx.scaled_masked_softmax,
         fix_npu="Use torch_npu.npu_scaled_masked_softmax", fix_cuda="Use SDPA or torch.compile",
         snippet_cuda="p = torch.compile(masked_softmax)(x, mask, scale)  # or F.scaled_dot_product_attention",
         keywords=r"masked_fill|softmax", starts=r"(?<!\*)\*(?!\*)|\bmul\(")
class FusedScaledMaskedSoftmax(FusedSpec):
    """Scale, mask and softmax as separate ops: one npu_scaled_masked_softmax kernel instead.

    Scaling and masking each write a full score-sized tensor before the softmax reads it; the fused
    kernel applies both on the fly.
    """


@declare("NPU217", "fused-api-add-layer-norm", short="Residual add then LayerNorm", api="torch_npu.npu_add_layer_norm",
         patterns=(("add-layer_norm", "8.0.RC1"),), kernel_patterns=("Add-LayerNorm",), transform=fx.add_layer_norm,
         fix_npu="Use torch_npu.npu_add_layer_norm", fix_cuda="torch.compile the residual add and LayerNorm",
         snippet_cuda="block = torch.compile(block)  # fuses the residual add into the LayerNorm",
         keywords=r"\+.*\bnorm|\bnorm\w*\(|layer_norm")
class FusedAddLayerNorm(FusedSpec):
    """Residual add followed by LayerNorm: one npu_add_layer_norm kernel instead.

    The sum is written to memory only to be read back by the LayerNorm; npu_add_layer_norm returns
    both from one kernel.
    """
