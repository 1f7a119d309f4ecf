"""NPU201 aicpu-fallback: device work that fell back to the AI CPU (the advisor's
``aicpu_analysis``); on CUDA traces, float64 kernels (no fast float64 on most GPUs).

Fires per source site when its longest ``AI_CPU`` kernel is at least ``aicpuMinUs`` (HCCL's
``*AicpuKernel`` communication tasks are not operators and are skipped). The evidence names the
dtypes: DOUBLE -> "convert double to float" (with the ``.double()`` -> ``.float()`` fix); integer
dtypes are reported, never cast; the advisor's op guides (index, index_put, argmin, nonzero) pick
the fix. Kernels without a call stack are anchored statically on the construct the evidence
points at (``.double()``/``torch.float64``, ``t[mask] = v``, ``t[idx]``, ``nonzero``, ``argmin``)
with ``inferred`` confidence, or not at all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Change, Effect, Finding, FixOffer, Related, Severity, Target
from msprof_lsp.hints.fixes import aicpu as fx
from msprof_lsp.hints.fixes import make_offer, offer
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.mapping.source.heat import Site
from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.units import format_us
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq

DOUBLE_TYPES = frozenset({"DOUBLE", "DT_DOUBLE", "FLOAT64", "DT_FLOAT64", "DOUBLE_T"})
INT_RE = re.compile(r"^(DT_)?U?INT(8|16|32|64)$")
DTYPE_CHECK_EXEMPT = frozenset({"cast", "tensorequal", "equal", "nonzero", "mul"})  # advisor aicpu_rules.yaml

# Static constructs per cause, and the fix transforms that apply there.
DOUBLE_SRC = re.compile(r"\.double\(\s*\)|\btorch\.(float64|double)\b")
MASKED_ASSIGN_SRC = re.compile(r"^\s*[\w.]+\s*\[[^\]\n]+\]\s*=(?!=)", re.MULTILINE)
INDEX_SRC = re.compile(r"[\w)\]]\[\s*[A-Za-z_]\w*\s*\]")
NONZERO_SRC = re.compile(r"\bnonzero\s*\(")
ARGMIN_SRC = re.compile(r"\bargmin\s*\(")
STATIC_CANDIDATES = 40  # statements tried per construct when no stack is available


def _float64_tensor_ops(h: pd.DataFrame) -> np.ndarray:
    """Host ops with a float64 *tensor* input: a ``double`` type whose dims are written. A Python
    float argument (SGD's ``momentum``, batch norm's ``eps``) is typed ``double`` / ``Double`` too,
    with no dims, and runs no float64 kernel."""
    out = np.zeros(len(h), dtype=bool)
    memo: dict[tuple[str, str], bool] = {}
    for i, (types, dims) in enumerate(zip(pq.strs(h["input_types"]), pq.strs(h["input_dims"]))):
        if "ouble" not in types:
            continue
        key = (types, dims)
        hit = memo.get(key)
        if hit is None:
            d = dims.split(";")
            hit = memo[key] = any(t.strip().lower() == "double" and j < len(d) and d[j] != ""
                                  for j, t in enumerate(types.split(";")))
        out[i] = hit
    return out


@dataclass(slots=True)
class Cause:
    key: str  # double | index_put | index | nonzero | argmin | int | other
    diagnosis: str
    fix: str  # <= 12 words
    pattern: re.Pattern[str] | None = None
    transforms: tuple[Callable[..., object], ...] = ()
    guide: str = ""


def _tokens(values: np.ndarray) -> list[str]:
    out: list[str] = []
    for v in values:
        out += [t.strip().upper() for t in re.split(r"[;,]", str(v)) if t.strip()]
    return out


def _cause(types: Counter, dtypes: Counter, cann: str) -> Cause:
    low = {t.lower() for t in types}
    doubles = [d for d in dtypes if d in DOUBLE_TYPES]
    ints = sorted(d for d in dtypes if INT_RE.match(d))
    checked = low - DTYPE_CHECK_EXEMPT
    if doubles:
        return Cause("double", "float64 data runs on the AI CPU", "Convert double to float: .float() / torch.float32",
                     DOUBLE_SRC, (fx.double_to_float,))
    if low & {"indexput", "indexputv2"}:
        return Cause("index_put", "masked assignment t[mask] = v runs as IndexPut on the AI CPU",
                     "Use t.masked_fill_(mask, v) for scalar values", MASKED_ASSIGN_SRC, (fx.masked_fill,),
                     "index_put: masked_fill_ (bool mask, scalar value)")
    if "index" in low:
        return Cause("index", "tensor indexing t[idx] runs as Index on the AI CPU",
                     "Use torch.index_select(t, 0, idx) for 1-D indices", INDEX_SRC, (fx.index_select,),
                     "index: index_select for a 1-D long index")
    if "nonzero" in low:
        return Cause("nonzero", "nonzero runs on the AI CPU", "Select with torch.where instead of nonzero()", NONZERO_SRC,
                     guide="nonzero used for selection: torch.where(cond, a, b)")
    if low & {"argmin", "argminv2", "argmind"}:
        newer = pq.cann_at_least(cann, "7.0.RC1") if cann else True
        return Cause("argmin", "argmin runs on the AI CPU", "Upgrade CANN to 7.0.RC1+ (AI Core argmin)" if not newer else "Compute argmin on a float tensor",
                     ARGMIN_SRC, guide="argmin: AI Core kernel from CANN 7.0.RC1")
    if ints:
        return Cause("int", f"{', '.join(sorted(types))} on {'/'.join(ints)} data runs on the AI CPU (integer dtypes: reported, not cast)",
                     "Keep integer dtypes; avoid the op or use a supported one")
    if checked:
        return Cause("other", f"{', '.join(sorted(types))} has no AI Core kernel for these inputs",
                     "Check the op's supported dtypes and shapes")
    return Cause("other", f"{', '.join(sorted(types))} runs on the AI CPU", "Check the op's supported dtypes and shapes")


@dataclass(slots=True)
class _Group:
    site: Site | None
    rows: list[int] = field(default_factory=list)


def _on_ai_core(ctx: RuleContext, rows: np.ndarray) -> Effect:
    """Each fallen-back kernel at the mean time the profile's AI Core kernels of its op type take
    (same input shapes where there are such, else the type); unknown when the profile never runs
    the type on the AI Core. The low end keeps half the gain."""
    k = ctx.profile.kernels
    types, core = pq.kernel_types(k), pq.strs(k["core"])
    shapes = pq.strs(k["input_shapes"])
    dur = k["dur_ns"].to_numpy(np.int64)
    on_core = np.flatnonzero(np.isin(core, ["AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV"]) & (dur > 0))
    frame = pd.DataFrame({"t": types[on_core], "s": shapes[on_core], "d": dur[on_core]})
    by_shape = frame.groupby(["t", "s"])["d"].mean().to_dict() if len(frame) else {}
    by_type = frame.groupby("t")["d"].mean().to_dict() if len(frame) else {}
    changes = []
    for r in np.asarray(rows).tolist():
        mean = by_shape.get((types[r], shapes[r]), by_type.get(types[r]))
        if mean is None or dur[r] <= 0:
            continue
        f = min(1.0, float(mean) / float(dur[r]))
        changes.append(Change(Target.KERNELS, (int(r),), f, best=f, worst=0.5 + 0.5 * f))
    if not changes:
        return Effect(unknown="unknown: the profile never runs these kernels' op types on the AI Core")
    return Effect(tuple(changes), basis="the fallen-back kernels at the time the profile's AI Core kernels of their "
                                        "type take (low end: half the gain)")


@declare("NPU201", "aicpu-fallback", thresholds=("aicpuMinUs",), backends=(Backend.ASCEND, Backend.CUDA),
         needs=(Data.KERNELS,))
class AicpuFallback(Rule):
    """Operators that fell back to the AI CPU (unsupported dtype or op); float64 kernels on CUDA.

    An AI_CPU task runs scalar code on the device's control CPU, far slower than an AI Core kernel,
    and forces copies between the cores; the usual cause is a dtype the AI Core kernel does not
    support (float64) or an indexing form without an AI Core kernel.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        k = ctx.profile.kernels_in_steps()
        if ctx.backend is Backend.ASCEND:
            core = pq.strs(k["core"])
            # HCCL's AI CPU tasks are communication in the time model, not operators that fell back
            sel = (core == "AI_CPU") & timemodel.is_class(k, timemodel.TaskClass.COMPUTE)
            yield from self._groups(ctx, k, np.flatnonzero(sel), cuda=False)
        else:
            h = ctx.profile.host_ops
            if not len(h):
                return
            double_op = _float64_tensor_ops(h)
            op = k["host_op"].to_numpy(np.int64)
            dbl = (op >= 0) & double_op[np.where(op >= 0, op, 0)]
            yield from self._groups(ctx, k, np.flatnonzero(dbl), cuda=True)

    def _groups(self, ctx: RuleContext, k: pd.DataFrame, positions: np.ndarray, *, cuda: bool) -> Iterator[Finding]:
        if not len(positions):
            return
        rows = ctx.profile.kernels.index.get_indexer(k.index[positions])  # kernel_site is by row of profile.kernels
        groups: dict[object, _Group] = {}
        for p, row in zip(positions.tolist(), rows.tolist()):
            site = sq.site_of_kernel_row(ctx, int(row))
            key = (site.span, site.function) if site is not None else None
            groups.setdefault(key, _Group(site)).rows.append(p)
        min_ns = float(ctx.thresholds.aicpu_min_us) * 1000
        for g in groups.values():
            sub = k.iloc[g.rows]
            longest = int(sub["dur_ns"].max())
            if longest < min_ns:
                continue
            f = self._finding(ctx, g, sub, cuda=cuda)
            f.effect = _on_ai_core(ctx, rows[np.isin(positions, g.rows)]) if not cuda else Effect(
                unknown="A/B test: how fast the op runs in float32 is not in the profile")
            yield f

    def _finding(self, ctx: RuleContext, g: _Group, sub: pd.DataFrame, *, cuda: bool) -> Finding:
        total = int(sub["dur_ns"].sum())
        names = pq.strs(sub["name"])
        types = Counter(pq.kernel_types(sub))
        dt_in, dt_out = _tokens(sub["input_dtypes"].to_numpy(dtype=object)), _tokens(sub["output_dtypes"].to_numpy(dtype=object))
        dtypes = Counter(dt_in + dt_out)
        if cuda:
            dtypes["DOUBLE"] += len(sub)
        cause = _cause(types, dtypes, ctx.profile.meta.cann_version)
        by_name = sub.groupby(names, observed=True)["dur_ns"].agg(["count", "sum", "max"]).sort_values("sum", ascending=False)
        evidence = {
            "backend": ctx.backend,
            "kernels": {str(n): {"count": int(r["count"]), "total_us": pq.format_ns_us(r["sum"]), "max_us": pq.format_ns_us(r["max"])}
                        for n, r in by_name.head(8).iterrows()},
            "types": dict(types.most_common(6)),
            "input_dtypes": dict(Counter(dt_in).most_common(6)),
            "output_dtypes": dict(Counter(dt_out).most_common(6)),
            "count": len(sub),
            "longest_us": pq.format_ns_us(int(sub["dur_ns"].max())),
            "shortest_us": pq.format_ns_us(int(sub["dur_ns"].min())),
            "threshold_us": float(ctx.thresholds.aicpu_min_us),
            "cause": cause.key,
        }
        if cause.guide:
            evidence["guide"] = cause.guide
        span: Span | None = None
        conf = Confidence.STACK
        related: list[Related] = []
        tries: list[Span] = []
        if g.site is not None:
            span, conf = sq.site_statement(ctx, g.site), g.site.confidence
            tries = [span]
            if cause.pattern is not None:
                # float64 is often made a few lines earlier in the same function (x.double()).
                extra = sq.statements_matching(ctx, g.site, cause.pattern)
                tries += [s for s in extra if s != span]
                related += [Related(s, "float64 made here" if cause.key == "double" else "candidate construct") for s in extra[:3] if s != span]
        elif cause.pattern is not None:
            found = self._static(ctx, cause)
            if found:
                span, conf = found[0], Confidence.INFERRED
                tries = found[:1]
                related = [Related(s, "another candidate") for s in found[1:4]]
                evidence["located"] = "statically, from the kernel evidence (no call stack)"
        fixes = self._fixes(ctx, cause, tries, evidence)
        msg = ctx.message(
            "float64 kernels" if cuda else "AI_CPU fallback",
            total_ns=total,
            events=len(sub),
            unit=Unit.KERNEL,
            qualifier=f"longest {format_us(int(sub['dur_ns'].max()) / 1000)}",
            diagnosis=cause.diagnosis if not cuda else "float64 runs far slower than float32 on the GPU",
            fix=cause.fix if not cuda else "Convert double to float: .float() / torch.float32",
        )
        return ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf, evidence=evidence,
                           fixes=fixes, related=related, severity=Severity.HINT if cuda else None)

    @staticmethod
    def _static(ctx: RuleContext, cause: Cause) -> list[Span]:
        """Statements of the workspace showing the construct; verified by the fix transform when
        there is one (the regexes only preselect)."""
        assert cause.pattern is not None
        found: list[Span] = []
        tried = 0
        for path in sq.python_files(ctx):
            raw = ctx.source_text(path)
            if raw is None or not cause.pattern.search(raw):
                continue  # read, not parsed: only files showing the construct get indexed
            index = sq.index_of(ctx, path)
            if index is None:
                continue
            text = None
            for st in index.statements:
                if not cause.pattern.search(st.text):
                    continue
                if cause.transforms and cause.key in ("index", "index_put"):
                    if tried >= STATIC_CANDIDATES:
                        return found
                    tried += 1
                    text = text if text is not None else ctx.source_text(path)
                    if text is None or offer(cause.transforms[0], text, st.span, path=path) is None:
                        continue
                found.append(st.span)
        return found

    @staticmethod
    def _fixes(ctx: RuleContext, cause: Cause, tries: list[Span], evidence: dict) -> list[FixOffer]:
        # the first place and transform that match win
        return [make_offer(t, where.path, where, choice=cause.key) for where in tries[:6] for t in cause.transforms]
