"""Profile and source queries the rule families share (a helper module: the leading underscore
keeps the registry from importing it as a rule module).

Everything here works on the columnar tables with numpy: name tests run once per distinct
category (a few thousand) and are broadcast through the category codes, ancestor questions use
pointer doubling over ``host_ops.parent`` -- so a profile with millions of ops costs a handful of
array passes, not a Python loop per op.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_lsp.hints.context import RuleContext
from msprof_lsp.mapping.frames import Frame
from msprof_lsp.mapping.heat import Site
from msprof_lsp.mapping.model import Profile
from msprof_lsp.mapping.spans import Confidence, Span

from . import _facts

# ---------------------------------------------------------------------------------------------
# Columns


def cat_mask(col: pd.Series, pred: Callable[[str], bool]) -> np.ndarray:
    """``pred`` per row, evaluated once per distinct value of a categorical column."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        ok = np.array([bool(pred(str(c))) for c in col.cat.categories] + [False], dtype=bool)
        return ok[col.cat.codes.to_numpy(np.int64)]  # code -1 (missing) hits the trailing False
    return np.fromiter((bool(pred(str(v))) for v in col), dtype=bool, count=len(col))


# ---------------------------------------------------------------------------------------------
# Host op trees


def strict_ancestor(marked: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Nearest strict ancestor that is ``marked`` (-1 none), per row."""
    if not len(marked):
        return np.empty(0, dtype=np.int64)
    own = _facts.nearest_marked(parent, marked)
    return np.where(parent >= 0, own[np.where(parent >= 0, parent, 0)], -1)


def is_framework_op(name: str) -> bool:
    return name.startswith(("aten::", "npu::"))


_BACKWARD_NODE = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$")


def is_backward_node(name: str) -> bool:
    """An autograd node scope (``autograd::engine::evaluate_function: ReluBackward0``, ``ReluBackward0``)."""
    return bool(_BACKWARD_NODE.search(name))


def backward_mask(profile: Profile) -> np.ndarray:
    """Host ops that run inside an autograd node (the backward pass), the nodes included."""
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    node = cat_mask(h["name"], is_backward_node)
    return _facts.nearest_marked(h["parent"].to_numpy(np.int64), node) >= 0


def outermost_framework_ops(profile: Profile, *, forward_only: bool = True) -> np.ndarray:
    """Boolean mask of ``aten::``/``npu::`` ops not nested in another such op (the ops user
    code called: ``aten::linear`` above ``aten::addmm``, ``aten::dropout`` above
    ``npu::_npu_dropout``), inside the profiled steps; by default outside the backward pass,
    whose op sequences mirror the forward ones."""
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    fw = cat_mask(h["name"], is_framework_op)
    parent = h["parent"].to_numpy(np.int64)
    top = fw & (strict_ancestor(fw, parent) < 0)
    if forward_only:
        top &= ~backward_mask(profile)
    return top & _facts.in_steps(profile, h["start_ns"].to_numpy(np.int64))


def kernel_time_per_root(profile: Profile, roots: np.ndarray, kernels: pd.DataFrame | None = None) -> np.ndarray:
    """Device ns of the kernels launched inside each root op's subtree (indexed by host op row)."""
    h = profile.host_ops
    out = np.zeros(len(h), dtype=np.int64)
    k = profile.kernels_in_steps() if kernels is None else kernels
    if not len(k) or not len(h):
        return out
    owner = _facts.nearest_marked(h["parent"].to_numpy(np.int64), roots)
    launched = k["host_op"].to_numpy(np.int64)
    ok = launched >= 0
    root = np.where(ok, owner[np.where(ok, launched, 0)], -1)
    sel = root >= 0
    np.add.at(out, root[sel], k["dur_ns"].to_numpy(np.int64)[sel])
    return out


def kernels_under(profile: Profile, rows: Iterable[int], kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """The kernels launched inside the subtrees of ``rows``."""
    h = profile.host_ops
    k = profile.kernels_in_steps() if kernels is None else kernels
    roots = np.zeros(len(h), dtype=bool)
    roots[list(rows)] = True
    if not roots.any() or not len(k):
        return k.iloc[0:0]
    owner = _facts.nearest_marked(h["parent"].to_numpy(np.int64), roots)
    launched = k["host_op"].to_numpy(np.int64)
    ok = launched >= 0
    return k[ok & (owner[np.where(ok, launched, 0)] >= 0)]


def descendants(profile: Profile, rows: Iterable[int]) -> np.ndarray:
    """Mask of host ops inside the subtrees of ``rows`` (the rows included)."""
    h = profile.host_ops
    roots = np.zeros(len(h), dtype=bool)
    roots[list(rows)] = True
    if not roots.any():
        return roots
    return _facts.nearest_marked(h["parent"].to_numpy(np.int64), roots) >= 0


def op_time_ns(profile: Profile, rows: Sequence[int], per_root_device: np.ndarray | None = None) -> int:
    """Time of the ops: device time of their kernels, or host duration when the profile has no
    device kernels at all (Kineto CPU traces)."""
    if not len(rows):
        return 0
    if len(profile.kernels):
        dev = per_root_device if per_root_device is not None else kernel_time_per_root(profile, mask_of(len(profile.host_ops), rows))
        return int(dev[list(rows)].sum())
    return int(profile.host_ops["dur_ns"].to_numpy(np.int64)[list(rows)].sum())


def mask_of(n: int, rows: Iterable[int]) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[list(rows)] = True
    return m


# ---------------------------------------------------------------------------------------------
# CANN versions ("8.0.RC3", "7.0.0", "8.5.0"): RCs come before the release of the same x.y


_CANN_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(?:(?P<rc>RC|rc|T|t)?(?P<n>\d+)))?")


def cann_key(version: str) -> tuple[int, int, int, int] | None:
    m = _CANN_RE.match(version or "")
    if not m:
        return None
    n = int(m.group("n") or 0)
    return int(m.group(1)), int(m.group(2)), 0 if m.group("rc") else 1, n


def cann_at_least(version: str, minimum: str) -> bool:
    have, need = cann_key(version), cann_key(minimum)
    return have is None or need is None or have >= need


# ---------------------------------------------------------------------------------------------
# Sites and source


def site_of_op(ctx: RuleContext, row: int) -> Site | None:
    a = ctx.attribution
    if a is None or row < 0 or row >= len(a.op_site):
        return None
    return a.site_of_op(row)


def site_of_kernel_row(ctx: RuleContext, row: int) -> Site | None:
    a = ctx.attribution
    if a is None or row < 0 or row >= len(a.kernel_site):
        return None
    return a.site_of_kernel(row)


def best_site(sites: Iterable[Site | None]) -> Site | None:
    """The most confident site, first seen on ties."""
    best: Site | None = None
    for s in sites:
        if s is not None and (best is None or s.confidence.rank > best.confidence.rank):
            best = s
    return best


def index_of(ctx: RuleContext, path: str):  # noqa: ANN201 - SourceIndex | None
    ws = ctx.workspace
    if ws is None:
        return None
    try:
        return ws.index(path)
    except (OSError, ValueError):
        return None


def statement_span(ctx: RuleContext, path: str, line: int) -> Span | None:
    """The innermost statement (or compound header) of ``path`` covering ``line``."""
    index = index_of(ctx, path)
    if index is None:
        return None
    stmt = index.statement_at(line)
    return stmt.span if stmt is not None else None


def statements_matching(ctx: RuleContext, site: Site, pattern: re.Pattern[str]) -> list[Span]:
    """Statements of the site's function whose text ``pattern`` finds: where a construct is
    looked for when the frame names only the function (Kineto def-line frames)."""
    index = index_of(ctx, site.span.path)
    if index is None:
        return []
    return [st.span for st in index.statements_in(site.function) if pattern.search(st.text)]


def site_statement(ctx: RuleContext, site: Site) -> Span:
    """The statement holding a site (the site's own span when the file has no index)."""
    return statement_span(ctx, site.span.path, site.span.line) or site.span


def user_frames(ctx: RuleContext, stack: Sequence[Frame]) -> list[tuple[str, Frame]]:
    """(local path, frame) of the stack's workspace frames, outermost first (lines where the code
    is now: ``RuleContext.frame_now``)."""
    ws = ctx.workspace
    if ws is None:
        return []
    out = []
    for f in reversed(stack):
        local = ws.frame_file(f)
        now = ctx.frame_now(f, local) if local is not None else None
        if now is not None:
            out.append((local, now))
    return out


def python_files(ctx: RuleContext) -> list[str]:
    ws = ctx.workspace
    if ws is None:
        return []
    try:
        return ws.python_files()
    except OSError:
        return []


def text_of(ctx: RuleContext, path: str) -> str | None:
    return ctx.source_text(path)


def files_containing(ctx: RuleContext, *needles: str, paths: Sequence[str] | None = None) -> list[str]:
    """Workspace files whose text holds any of ``needles``: a plain substring test before any
    file is parsed and indexed (a large workspace is read, not parsed, by a static search)."""
    out = []
    for path in python_files(ctx) if paths is None else paths:
        text = ctx.source_text(path)
        if text is not None and any(n in text for n in needles):
            out.append(path)
    return out


def file_start(path: str) -> Span:
    """A file-level anchor: the start of line 1."""
    return Span(path, 1, 0, 1, 0)


def entry_scripts(ctx: RuleContext) -> list[str]:
    """The scripts the job was started from: the outermost ``<module>`` frame of the recorded
    stacks, else workspace files with an ``if __name__ == "__main__":`` guard that import
    torch_npu (or torch), preferring those (formats §0.4 "entry point")."""
    found: list[str] = []
    seen: set[str] = set()
    for stack in ctx.profile.stacks[:2000]:
        for f in reversed(stack):
            if f.opaque:
                continue
            if f.func == "<module>":
                local = ctx.workspace.frame_file(f) if ctx.workspace is not None else None
                if local is not None and local not in seen:
                    seen.add(local)
                    found.append(local)
            break
    if found:
        return found
    ranked: list[tuple[int, str]] = []
    for path in files_containing(ctx, "__main__"):
        index = index_of(ctx, path)
        if index is None or index.main_guard is None:
            continue
        uses_npu = index.torch_npu_import is not None
        uses_torch = any(i.target == "torch" or i.target.startswith("torch.") for i in index.imports)
        if uses_npu or uses_torch:
            ranked.append((0 if uses_npu else 1, path))
    return [p for _, p in sorted(ranked)]


def calls_named(ctx: RuleContext, qualnames: Sequence[str], paths: Sequence[str] | None = None):  # noqa: ANN201
    """(path, CallSite) of every call resolving to one of ``qualnames`` in the workspace."""
    wanted = set(qualnames)
    last = {q.rsplit(".", 1)[-1] for q in qualnames}
    for path in files_containing(ctx, *last, paths=paths):
        index = index_of(ctx, path)
        if index is None:
            continue
        for call in index.calls:
            if call.qualname in wanted:
                yield path, call


def min_confidence(*cs: Confidence) -> Confidence:
    return min(cs, key=lambda c: c.rank)


def format_ns_us(ns: float) -> float:
    """ns -> µs rounded to 0.1 (evidence numbers; a plain float for JSON)."""
    return round(float(ns) / 1000.0, 1)


_ACL_OP_NUMBER = re.compile(r"^(?:trans_)?([A-Za-z]+?)_?\d+$")


def kernel_type_of(name: str, op_type: str) -> str:
    """The kernel's OpType: the ``Type`` column, else from the name (trace_view.json has no
    type): aclnn ``<api>_<impl>_<OpType>`` -> OpType, acl_op ``Cast16``/``trans_Cast_5`` -> Cast."""
    if op_type:
        return op_type
    if name.startswith("aclnn") and name.count("_") >= 2:
        return name.rsplit("_", 1)[1]
    m = _ACL_OP_NUMBER.match(name)
    return m.group(1) if m else name


def kernel_types(k: pd.DataFrame) -> np.ndarray:
    """``kernel_type_of`` per kernel row."""
    names = _facts.strs(k["name"])
    types = _facts.strs(k["type"])
    return np.array([kernel_type_of(n, t) for n, t in zip(names, types)], dtype=object)


def path_name(path: str) -> str:
    return Path(path).name


# ---------------------------------------------------------------------------------------------
# Loops


def _is_training_loop(index, loop) -> bool:  # noqa: ANN001 - SourceIndex, LoopInfo
    names = {index.calls[i].name for i in loop.calls}
    return "backward" in names and "step" in names


def loop_with_frame(ctx: RuleContext, stack: Sequence[Frame], predicate: Callable[[object, object], bool]) -> tuple[Span, str] | None:
    """(header span, path) of the innermost loop satisfying ``predicate(index, loop)`` around the
    outermost workspace frame of ``stack`` that sits in such a loop."""
    for path, frame in user_frames(ctx, stack):
        index = index_of(ctx, path)
        if index is None or frame.line <= 0:
            continue
        around = [lp for lp in index.loops if lp.span.line <= frame.line <= lp.span.end_line and predicate(index, lp)]
        if around:
            lp = max(around, key=lambda lp: lp.span.line)
            return lp.header, path
    return None


def training_loop(ctx: RuleContext) -> tuple[Span | None, Confidence]:
    """The training loop's header (``for``/``while`` whose body calls ``.backward()`` and
    ``.step()``, hint-rules §0.4): found through a recorded frame of an op inside the profiled
    steps (stack confidence), else by searching the entry scripts and then the workspace
    (inferred)."""
    h = ctx.profile.host_ops
    if len(h) and ctx.profile.stacks:
        ids = h["stack"].to_numpy(np.int64)[_facts.in_steps(ctx.profile, h["start_ns"].to_numpy(np.int64))]
        for sid in list(dict.fromkeys(int(s) for s in ids if s >= 0))[:200]:
            hit = loop_with_frame(ctx, ctx.profile.stack_of(sid), _is_training_loop)
            if hit is not None:
                return hit[0], Confidence.STACK
    seen: set[str] = set()
    for path in [*entry_scripts(ctx), *files_containing(ctx, "backward")]:
        if path in seen:
            continue
        seen.add(path)
        index = index_of(ctx, path)
        if index is None:
            continue
        loops = [lp for lp in index.loops if _is_training_loop(index, lp)]
        if loops:
            return max(loops, key=lambda lp: lp.span.line).header, Confidence.INFERRED
    return None, Confidence.INFERRED
