"""Source queries the rules share: from a profile op, kernel or stack to a place in the user's
source, static searches over the workspace, the training loop, and quick fixes offered through
``hints.fixes.make_offer``.

Confidence follows docs/rules/README.md "Confidence": a user frame of a recorded stack is
``stack`` (Kineto frames that carry def lines are ``module``: the call itself is found by
searching that function's body); a pattern search with no frame is ``inferred``. The profile side
(ops, kernels, tokens) is :mod:`.profile_query`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from msprof_lsp.mapping.source.constructs import call_keys
from msprof_lsp.mapping.profile.frames import Frame
from msprof_lsp.mapping.source.heat import Site, SiteKind
from msprof_lsp.mapping.source.source_index import Binding, CallSite, ImportInfo, LoopInfo, SourceIndex
from msprof_lsp.mapping.spans import Confidence, Span

from . import profile_query as pq
from .context import RuleContext
from .finding import Finding, FixOffer, Related
from .fixes import make_offer

if TYPE_CHECKING:
    from .registry import Rule

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")

# ---------------------------------------------------------------------------------------------
# Files and indexes


def index_of(ctx: RuleContext, path: str) -> SourceIndex | None:
    """The index of a workspace file (None: no workspace, unreadable or not Python)."""
    ws = ctx.workspace
    if ws is None:
        return None
    try:
        return ws.index(path)
    except (OSError, ValueError):
        return None


def python_files(ctx: RuleContext) -> list[str]:
    ws = ctx.workspace
    if ws is None:
        return []
    try:
        return ws.python_files()
    except OSError:
        return []


def indexes(ctx: RuleContext) -> Iterator[SourceIndex]:
    """Every parsable Python file of the workspace."""
    for path in python_files(ctx):
        index = index_of(ctx, path)
        if index is not None:
            yield index


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


def path_name(path: str) -> str:
    return Path(path).name


def text(index: SourceIndex, span: Span) -> str:
    return index.lines.slice(span.line, span.col, span.end_line, span.end_col)


def rel_line(index: SourceIndex, span: Span) -> str:
    """``train.py:42`` for related-information messages."""
    return f"{path_name(index.path)}:{span.line}"


def statement_span(ctx: RuleContext, path: str, line: int) -> Span | None:
    """The innermost statement (or compound header) of ``path`` covering ``line``."""
    index = index_of(ctx, path)
    if index is None:
        return None
    stmt = index.statement_at(line)
    return stmt.span if stmt is not None else None


def entry_scripts(ctx: RuleContext) -> list[str]:
    """The scripts the job was started from: the outermost ``<module>`` frame of the recorded
    stacks, else workspace files with an ``if __name__ == "__main__":`` guard that import
    torch_npu (or torch), preferring those (docs/rules/README.md "Entry script")."""
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
        if imports_torch(index):
            ranked.append((0 if uses_npu else 1, path))
    return [p for _, p in sorted(ranked)]


def imports_torch(index: SourceIndex) -> bool:
    return index.torch_npu_import is not None or any(i.target == "torch" or i.target.startswith("torch.")
                                                     for i in index.imports)


def runs_pytorch(ctx: RuleContext) -> bool:
    """Whether PyTorch advice applies: the profile says so (``profile_query.profile_is_pytorch``), or
    -- an msprof CLI capture without its framework layer -- the attribution placed kernels on
    workspace files that import torch. A program that is not PyTorch gives neither."""
    if pq.profile_is_pytorch(ctx.profile):
        return True
    att = ctx.attribution
    if att is None:
        return False
    used = np.unique(att.kernel_site[att.kernel_site >= 0])
    paths = {att.sites[int(i)].span.path for i in used.tolist()}
    return any(ix is not None and imports_torch(ix) for ix in (index_of(ctx, p) for p in sorted(paths)))


def torch_npu_import(ctx: RuleContext) -> tuple[SourceIndex, ImportInfo] | None:
    """``import torch_npu`` of the entry script: a file with a ``__main__`` guard first."""
    found = [(ix, ix.torch_npu_import) for ix in indexes(ctx) if ix.torch_npu_import is not None]
    if not found:
        return None
    found.sort(key=lambda t: (t[0].main_guard is None, t[0].path))
    return found[0]  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Calls


def calls_where(ctx: RuleContext, pred: Callable[[SourceIndex, CallSite], bool]) -> list[tuple[SourceIndex, CallSite]]:
    """Static search: calls of the whole workspace that satisfy ``pred`` (source order)."""
    return [(ix, c) for ix in indexes(ctx) for c in ix.calls if pred(ix, c)]


def calls_named(ctx: RuleContext, qualnames: Sequence[str], paths: Sequence[str] | None = None) -> Iterator[tuple[SourceIndex, CallSite]]:
    """(index, call) of every call resolving to one of ``qualnames``; only files that mention a
    last component are parsed."""
    wanted = set(qualnames)
    last = {q.rsplit(".", 1)[-1] for q in qualnames}
    for path in files_containing(ctx, *last, paths=paths):
        index = index_of(ctx, path)
        if index is None:
            continue
        for call in index.calls:
            if call.qualname in wanted:
                yield index, call


# Data-parallel wrappers: where the gradient collectives are set up (bucket_cap_mb, no_sync()).
DDP = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
FSDP = (
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
)


def constructed(ctx: RuleContext, *qualnames: str) -> tuple[SourceIndex, CallSite] | None:
    """The first call in the workspace to one of ``qualnames`` (a constructor, usually)."""
    return next(calls_named(ctx, qualnames), None)


def call_on_line(index: SourceIndex, line: int, pred: Callable[[CallSite], bool], function: str | None = None) -> CallSite | None:
    """The innermost call covering ``line`` that satisfies ``pred`` (optionally in ``function``)."""
    for c in index.calls_on_line(line):
        if (function is None or c.function == function) and pred(c):
            return c
    return None


def call_of_site(index: SourceIndex, span: Span) -> CallSite | None:
    """The call whose span a site is."""
    return call_on_line(index, span.line, lambda c: c.span == span)


# ---------------------------------------------------------------------------------------------
# Sites: where the attribution tied profile time


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


def best_site(sites: Sequence[Site | None]) -> Site | None:
    """The most confident site, first seen on ties."""
    best: Site | None = None
    for s in sites:
        if s is not None and (best is None or s.confidence.rank > best.confidence.rank):
            best = s
    return best


def site_statement(ctx: RuleContext, site: Site) -> Span:
    """The statement holding a site (the site's own span when the file has no index)."""
    return statement_span(ctx, site.span.path, site.span.line) or site.span


@dataclass(slots=True)
class KernelGroup:
    """Kernels (rows of ``profile.kernels``) that map to one statement; ``span`` None: to no code."""

    site: Site | None  # the first kernel's site (its confidence is the finding's)
    span: Span | None
    rows: list[int] = field(default_factory=list)
    # the same kernels as positions in the frame a rule picked them from (``kernels_by_statement_in``)
    positions: list[int] = field(default_factory=list)

    @property
    def confidence(self) -> Confidence:
        """The confidence of a finding on the group: its first kernel's site's (STACK without one)."""
        return self.site.confidence if self.site is not None else Confidence.STACK


def kernels_by_statement(ctx: RuleContext, rows: Sequence[int]) -> list[KernelGroup]:
    """Kernel rows grouped by the statement their sites are in, first-seen order: one finding per
    line, as the layers of one ``nn.Sequential(...)`` or the calls of one comprehension are one
    statement."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    a = ctx.attribution
    if a is None:
        site_ids = np.full(len(rows), -1, dtype=np.int64)
    else:
        ok = (rows >= 0) & (rows < len(a.kernel_site))
        site_ids = np.where(ok, a.kernel_site[np.where(ok, rows, 0)], -1)
    # One statement lookup per distinct site, not per kernel (a large profile has 10^5 rows and
    # a few hundred sites); distinct sites are visited in first-seen order, so each group keeps
    # its first kernel's site and the groups their first-seen order.
    distinct, first, inverse = np.unique(site_ids, return_index=True, return_inverse=True)
    number: dict[Span | None, int] = {}
    out: list[KernelGroup] = []
    group_of = np.empty(len(distinct), dtype=np.int64)
    for i in np.argsort(first, kind="stable").tolist():
        sid = int(distinct[i])
        site = a.sites[sid] if a is not None and sid >= 0 else None
        span = site_statement(ctx, site) if site is not None else None
        if span not in number:
            number[span] = len(out)
            out.append(KernelGroup(site, span))
        group_of[i] = number[span]
    per_row = group_of[inverse.reshape(-1)]
    order = np.argsort(per_row, kind="stable")
    cuts = np.cumsum(np.bincount(per_row, minlength=len(out)))[:-1]
    for group, part in zip(out, np.split(rows[order], cuts)):
        group.rows = part.tolist()
    return out


def kernels_by_statement_in(ctx: RuleContext, k: pd.DataFrame, positions: Sequence[int]) -> list[KernelGroup]:
    """``kernels_by_statement`` of kernels picked by position in ``k``, a part of
    ``profile.kernels`` (``kernels_in_steps()``): the sites are by row of the whole table, so the
    positions go to rows and back; each group's ``positions`` are its kernels in ``k``."""
    at = np.asarray(positions, dtype=np.int64).reshape(-1).tolist()
    rows = ctx.profile.kernels.index.get_indexer(k.index[at]).tolist()
    position_of = dict(zip(rows, at))
    groups = kernels_by_statement(ctx, rows)
    for g in groups:
        g.positions = [position_of[r] for r in g.rows]
    return groups


def statements_matching(ctx: RuleContext, site: Site, pattern: re.Pattern[str]) -> list[Span]:
    """Statements of the site's function whose text ``pattern`` finds: where a construct is
    looked for when the frame names only the function (Kineto def-line frames)."""
    index = index_of(ctx, site.span.path)
    if index is None:
        return []
    return [st.span for st in index.statements_in(site.function) if pattern.search(st.text)]


# ---------------------------------------------------------------------------------------------
# Places: where a finding anchors


@dataclass(frozen=True, slots=True)
class Place:
    """A place in the user's source a finding anchors to, and how it was found."""

    span: Span | None  # None: nothing in the source is known
    confidence: Confidence
    site: Site | None = None  # the attribution site it came from (None: a frame line, or nothing)
    index: SourceIndex | None = None  # the file's index (set for places taken from a stack)
    function: str = ""  # qualname of the function the place runs in
    def_line: bool = False  # a Kineto frame: the span is the function's def line, not the executing one

    @property
    def line(self) -> int:
        return self.span.line if self.span is not None else 0


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


def stack_place(ctx: RuleContext, stack_id: int) -> Place | None:
    """The innermost user frame of a stack that maps to an indexed local file."""
    if stack_id < 0 or stack_id >= len(ctx.profile.stacks):
        return None
    def_line = ctx.profile.meta.def_line_frames
    for local, frame in reversed(user_frames(ctx, ctx.profile.stacks[stack_id])):
        index = index_of(ctx, local)
        if index is None:
            continue
        function = index.scope_at(frame.line)
        if def_line:
            function = next((f.qualname for f in index.functions_starting_at(frame.line) if f.name == frame.func), function)
        span = Span(local, frame.line, 0, frame.line, 0)
        return Place(span, Confidence.MODULE if def_line else Confidence.STACK, None, index, function, def_line)
    return None


def op_place(ctx: RuleContext, row: int) -> Place | None:
    """Place of a host op: its own stack, else the nearest enclosing op's."""
    return stack_place(ctx, pq.op_stack(ctx.profile, row))


def _common_prefix(chains: Sequence[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    chains = [c for c in chains if c]
    if not chains:
        return []
    out = []
    for level in zip(*chains):
        if all(x == level[0] for x in level):
            out.append(level[0])
        else:
            break
    return out


def _site_place(ctx: RuleContext, site: Site, confidence: Confidence | None = None) -> Place:
    return Place(site_statement(ctx, site), site.confidence if confidence is None else confidence, site, function=site.function)


def place_ops(ctx: RuleContext, rows: Sequence[int]) -> Place:
    """The first statement of the code that ran ``rows`` (time order).

    The matched ops may sit in nested calls (rotary: ``chunk``/``neg``/``cat`` inside
    ``rotate_half``, the ``mul``/``add`` in ``forward``): the anchor is in the deepest function
    every op's user call chain passes through, at the earliest line any of them was called from
    there.
    """
    sites = [site_of_op(ctx, int(r)) for r in rows]
    stack_ids = ctx.profile.host_ops["stack"].to_numpy(np.int64)
    framed = [user_frames(ctx, ctx.profile.stack_of(int(stack_ids[int(r)]))) for r in rows]
    common = _common_prefix([[(p, f.func) for p, f in fr] for fr in framed])
    if common:
        path, func = common[-1]
        here = [s for s in sites if s is not None and s.span.path == path and s.function.rsplit(".", 1)[-1] == func]
        # A "function" site is the def header (the call inside was ambiguous): a last resort.
        lines = [s for s in here if s.kind != SiteKind.FUNCTION]
        if lines:
            return _site_place(ctx, min(lines, key=lambda s: (s.span.line, s.span.col)))
        level = len(common) - 1
        index = index_of(ctx, path)
        frame_lines = sorted({fr[level][1].line for fr in framed if len(fr) > level})
        for line in frame_lines:  # executing lines (torch_npu); Kineto's def lines are skipped
            if index is not None and line > 0 and not index.functions_starting_at(line):
                span = statement_span(ctx, path, line)
                if span is not None:
                    return Place(span, Confidence.STACK, None, index, index.scope_at(line))
        if here:
            return _site_place(ctx, here[0])
    real = [s for s in sites if s is not None and s.kind != SiteKind.FUNCTION]
    if not common and real and len(real) == len(sites) and len({(s.span.path, s.function) for s in real}) == 1:
        # no frames, every op placed in one function: its earliest line, as the frames would give
        return _site_place(ctx, min(real, key=lambda s: (s.span.line, s.span.col)))
    site = real[0] if real else best_site(sites)
    if site is None:
        return Place(None, Confidence.MODULE)
    return _site_place(ctx, site)


def place_kernels(ctx: RuleContext, rows: Sequence[int]) -> Place:
    """Anchor of a kernel-only match: the attribution's site of its first kernel (inferred)."""
    for r in rows:
        site = site_of_kernel_row(ctx, int(ctx.profile.kernels.index.get_loc(int(r))))
        if site is not None:
            return _site_place(ctx, site, Confidence.INFERRED)
    return Place(None, Confidence.INFERRED)


# ---------------------------------------------------------------------------------------------
# Loops: the training loop (docs/rules/README.md "Training loop") and loops over a DataLoader


def is_optimizer_step(index: SourceIndex, call: CallSite) -> bool:
    """``<opt>.step()`` of an optimizer: the construct table's answer (mapping.constructs)."""
    return call.name == "step" and "optimizer_step" in call_keys(index, call.idx)


def is_training_loop(index: SourceIndex, loop: LoopInfo) -> bool:
    """A loop whose body calls ``<x>.backward()`` and an optimizer's ``.step()``."""
    calls = [index.calls[i] for i in loop.calls]
    return any(c.name == "backward" for c in calls) and any(is_optimizer_step(index, c) for c in calls)


def training_loops(index: SourceIndex) -> list[LoopInfo]:
    return [lp for lp in index.loops if is_training_loop(index, lp)]


def innermost_training_loop(index: SourceIndex, line: int) -> LoopInfo | None:
    best = None
    for lp in training_loops(index):
        if lp.span.line <= line <= lp.span.end_line and (best is None or lp.span.line >= best.span.line):
            best = lp
    return best


def loop_with_frame(ctx: RuleContext, stack: Sequence[Frame], predicate: Callable[[SourceIndex, LoopInfo], bool]) -> tuple[Span, str] | None:
    """(header span, path) of the innermost loop satisfying ``predicate(index, loop)`` around the
    outermost workspace frame of ``stack`` that sits in such a loop."""
    for path, frame in user_frames(ctx, stack):
        index = index_of(ctx, path)
        if index is None or frame.line <= 0:
            continue
        around = [lp for lp in index.loops if lp.span.line <= frame.line <= lp.span.end_line and predicate(index, lp)]
        if around:
            return max(around, key=lambda lp: lp.span.line).header, path
    return None


def training_loop(ctx: RuleContext) -> tuple[Span | None, Confidence]:
    """The training loop's header: found through a recorded frame of an op inside the profiled
    steps (stack confidence), else by searching the entry scripts and then the workspace
    (inferred)."""
    h = ctx.profile.host_ops
    if len(h) and ctx.profile.stacks:
        ids = h["stack"].to_numpy(np.int64)[pq.in_steps(ctx.profile, h["start_ns"].to_numpy(np.int64))]
        for sid in list(dict.fromkeys(int(s) for s in ids if s >= 0))[:200]:
            hit = loop_with_frame(ctx, ctx.profile.stack_of(sid), is_training_loop)
            if hit is not None:
                return hit[0], Confidence.STACK
    for path in dict.fromkeys([*entry_scripts(ctx), *files_containing(ctx, "backward")]):
        index = index_of(ctx, path)
        loops = training_loops(index) if index is not None else []
        if loops:
            return max(loops, key=lambda lp: lp.span.line).header, Confidence.INFERRED
    return None, Confidence.INFERRED


def loop_call(index: SourceIndex, loop: LoopInfo, name: str) -> CallSite | None:
    """The first call ``<x>.<name>()`` directly in the loop's body (nested loops too)."""
    for i in loop.calls:
        c = index.calls[i]
        if c.name == name and c.receiver:
            return c
    return None


def optimizer_step_call(index: SourceIndex, loop: LoopInfo) -> CallSite | None:
    return next((index.calls[i] for i in loop.calls if is_optimizer_step(index, index.calls[i])), None)


def backward_call(ctx: RuleContext) -> tuple[SourceIndex, CallSite, LoopInfo, Confidence] | None:
    """The ``<loss>.backward()`` of the training loop, with how it was found.

    A site the profile tied to ``.backward()`` through a stack (the gradient seed kernel) comes
    first, with that site's confidence; else the only training loop of the workspace holding a
    ``.backward()`` call (``inferred``).
    """
    att = ctx.attribution
    if att is not None:
        best = None
        for site in att.sites:
            if not site.call_text.endswith(".backward()"):
                continue
            index = index_of(ctx, site.span.path)
            call = call_of_site(index, site.span) if index is not None else None
            loop = innermost_training_loop(index, site.span.line) if call is not None else None
            if call is not None and loop is not None and (best is None or site.confidence.rank > best[3].rank):
                best = (index, call, loop, site.confidence)
        if best is not None:
            return best
    found = []
    for index in indexes(ctx):
        for loop in training_loops(index):
            call = loop_call(index, loop, "backward")
            if call is not None and innermost_training_loop(index, call.span.line) == loop:
                found.append((index, call, loop, Confidence.INFERRED))
    return found[0] if len(found) == 1 else None


def loops_iterating_loader(index: SourceIndex, function: str) -> list[tuple[LoopInfo, Binding | None]]:
    """``for`` loops of ``function`` over a DataLoader: (loop, the construction binding or None).

    A name in the iterable bound to ``DataLoader(...)`` counts (``enumerate(loader)``); without
    such a binding, a name that says loader (``train_loader``) still counts, with no binding.
    """
    found = []
    for lp in index.loops_in(function):
        if lp.kind != "for":
            continue
        best = None
        named = False
        for name in _NAME.findall(lp.iter_text):
            b = index.binding_for(function, name)
            if b is not None and b.ctor.rsplit(".", 1)[-1] == "DataLoader":
                best = b
                break
            named = named or "loader" in name.lower()
        if best is not None or named:
            found.append((lp, best))
    return found


# ---------------------------------------------------------------------------------------------
# Quick fixes and related information


def fixes(ctx: RuleContext, *candidates: tuple[Callable[..., Any], Span | int, str, dict[str, Any]]) -> list[FixOffer]:
    """Offers of ``(transform, anchor, path, options)``; expanded (and sorted safe first) later."""
    return [make_offer(t, p, a, **o) for t, a, p, o in candidates]


def related(span: Span | None, message: str) -> list[Related]:
    return [Related(span, message)] if span is not None else []


def gradient_sync_anchor(ctx: RuleContext) -> tuple[Span | None, Confidence, list[Related]]:
    """Where data-parallel training issues its collectives: the training loop's ``loss.backward()``
    (DDP's hooks all-reduce the buckets there), with the DDP wrap as related information; the wrap
    itself without a loop; nothing without either."""
    span, conf, extra = None, Confidence.MODULE, []
    ddp = constructed(ctx, *DDP)
    found = backward_call(ctx)
    if found is not None:
        _, call, _, conf = found
        span = call.span
    elif ddp is not None:
        span, conf = ddp[1].span, Confidence.INFERRED
    if ddp is not None and ddp[1].span != span:
        extra.append(Related(ddp[1].span, "DistributedDataParallel: bucket_cap_mb sets the gradient buckets"))
    return span, conf, extra


def gradient_sync_finding(ctx: RuleContext, rule: Rule, *, message: str, total_ns: float,
                          evidence: dict[str, Any]) -> Finding:
    """A finding on the job's gradient collectives, on the line that issues them
    (``gradient_sync_anchor``): the one anchor of the communication and cluster rules."""
    span, conf, related = gradient_sync_anchor(ctx)
    return ctx.finding(rule, span=span, message=message, total_ns=total_ns, confidence=conf, evidence=evidence,
                       related=related)
