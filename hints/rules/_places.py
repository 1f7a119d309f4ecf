"""Source-side helpers the seed rules share: from a profile stack to a place in the user's source,
static searches over the workspace, and quick fixes run through ``hints.fixes.offer``.

Confidence follows hint-rules §0.4: a user frame of a recorded stack is ``stack`` (Kineto frames
that carry def lines are ``module``: the call itself is found by searching that function's
body); a pattern search with no frame is ``inferred``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msprof_lsp.mapping.frames import Frame
from msprof_lsp.mapping.source_index import CallSite, ImportInfo, LoopInfo, SourceIndex
from msprof_lsp.mapping.spans import Confidence, Span

from ..finding import Fix, Related
from ..fixes import offer
from . import _ops

if TYPE_CHECKING:
    from ..context import RuleContext

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


@dataclass(frozen=True, slots=True)
class Place:
    """The innermost user frame of a stack, in a local file."""

    index: SourceIndex
    frame: Frame
    confidence: Confidence
    def_line: bool  # the frame records the function's def line (Kineto), not the executing line

    @property
    def line(self) -> int:
        return self.frame.line

    @property
    def function(self) -> str:
        """Qualname of the function the frame runs in."""
        if self.def_line:
            for f in self.index.functions_starting_at(self.frame.line):
                if f.name == self.frame.func:
                    return f.qualname
        return self.index.scope_at(self.frame.line)


def def_line_frames(ctx: RuleContext) -> bool:
    meta = ctx.profile.meta
    return meta.def_line_frames


def stack_place(ctx: RuleContext, stack_id: int) -> Place | None:
    """Innermost frame of the stack that is the user's and maps to an indexed local file."""
    ws = ctx.workspace
    if ws is None or stack_id < 0 or stack_id >= len(ctx.profile.stacks):
        return None
    def_lines = def_line_frames(ctx)
    for frame in ctx.profile.stacks[stack_id]:
        local = ws.frame_file(frame)
        if local is None:
            continue
        index = ws.index(local)
        now = ctx.frame_now(frame, local)
        if index is None or now is None:
            continue
        return Place(index, now, Confidence.MODULE if def_lines else Confidence.STACK, def_lines)
    return None


def op_place(ctx: RuleContext, row: int) -> Place | None:
    """Place of a host op: its own stack, else the nearest enclosing op's (ancestor walk, §10.2)."""
    stacks = ctx.profile.host_ops["stack"].to_numpy()
    for op in ctx.profile.host_op_chain(row):
        sid = int(stacks[op])
        if sid >= 0:
            return stack_place(ctx, sid)
    return None


def text(index: SourceIndex, span: Span) -> str:
    return index.lines.slice(span.line, span.col, span.end_line, span.end_col)


def indexes(ctx: RuleContext) -> Iterator[SourceIndex]:
    """Every parsable Python file of the workspace."""
    ws = ctx.workspace
    if ws is None:
        return
    for path in ws.python_files():
        index = ws.index(path)
        if index is not None:
            yield index


def calls_where(ctx: RuleContext, pred: Callable[[SourceIndex, CallSite], bool]) -> list[tuple[SourceIndex, CallSite]]:
    """Static search: calls of the whole workspace that satisfy ``pred`` (source order)."""
    return [(ix, c) for ix in indexes(ctx) for c in ix.calls if pred(ix, c)]


def call_on_line(index: SourceIndex, line: int, pred: Callable[[CallSite], bool], function: str | None = None) -> CallSite | None:
    """The innermost call covering ``line`` that satisfies ``pred`` (optionally in ``function``)."""
    for c in index.calls_on_line(line):
        if (function is None or c.function == function) and pred(c):
            return c
    return None


def qualname_is(*names: str) -> Callable[[CallSite], bool]:
    wanted = frozenset(names)
    return lambda c: c.qualname in wanted


def loops_iterating_loader(index: SourceIndex, function: str) -> list[tuple[LoopInfo, Any]]:
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


def training_loops(index: SourceIndex) -> list[LoopInfo]:
    """Loops holding ``<x>.backward()`` and ``<opt>.step()`` (hint-rules §0.4)."""
    out = []
    for lp in index.loops:
        calls = [index.calls[i] for i in lp.calls]
        if any(c.name == "backward" for c in calls) and any(c.name == "step" and _is_optimizer(index, c) for c in calls):
            out.append(lp)
    return out


def _is_optimizer(index: SourceIndex, call: CallSite) -> bool:
    if not call.receiver:
        return False
    b = index.binding_for(call.function, call.receiver.split(".")[0])
    if b is not None and b.ctor_qualname.startswith(("torch.optim.", "torch_npu.optim.", "apex.optimizers.")):
        return True
    return bool(re.search(r"(^|_)(opt|optim|optimizer|optimiser)$", call.receiver, re.I))


def innermost_training_loop(index: SourceIndex, line: int) -> LoopInfo | None:
    best = None
    for lp in training_loops(index):
        if lp.span.line <= line <= lp.span.end_line and (best is None or lp.span.line >= best.span.line):
            best = lp
    return best


def loop_call(index: SourceIndex, loop: LoopInfo, name: str) -> CallSite | None:
    """The first call ``<x>.<name>()`` directly in the loop's body (nested loops too)."""
    for i in loop.calls:
        c = index.calls[i]
        if c.name == name and c.receiver:
            return c
    return None


def torch_npu_import(ctx: RuleContext) -> tuple[SourceIndex, ImportInfo] | None:
    """``import torch_npu`` of the entry script: a file with a ``__main__`` guard first."""
    found = [(ix, ix.torch_npu_import) for ix in indexes(ctx) if ix.torch_npu_import is not None]
    if not found:
        return None
    found.sort(key=lambda t: (t[0].main_guard is None, t[0].path))
    return found[0]  # type: ignore[return-value]


def fix(
    ctx: RuleContext,
    transform: Callable[..., Any],
    anchor: Span | int,
    path: str,
    **options: Any,
) -> Fix | None:
    """Run a fix transform on the current text of ``path``; None when it does not match."""
    source = ctx.source_text(path)
    if source is None:
        return None
    res = offer(transform, source, anchor, path=path, **options)
    return res.fix if res is not None else None


def fixes(ctx: RuleContext, *candidates: tuple[Callable[..., Any], Span | int, str, dict[str, Any]]) -> list[Fix]:
    """The fixes that apply among ``(transform, anchor, path, options)``; safe ones first."""
    out = [f for t, a, p, o in candidates if (f := fix(ctx, t, a, p, **o)) is not None]
    return sorted(out, key=lambda f: not f.safe)


def related(span: Span | None, message: str) -> list[Related]:
    return [Related(span, message)] if span is not None else []


def rel_line(index: SourceIndex, span: Span) -> str:
    """``train.py:42`` for related-information messages."""
    return f"{index.path.rsplit('/', 1)[-1]}:{span.line}"


def call_of_site(index: SourceIndex, span: Span) -> CallSite | None:
    for c in index.calls_on_line(span.line):
        if c.span == span:
            return c
    return None


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
            index = _ops.index_of(ctx, site.span.path)
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


def optimizer_step_call(index: SourceIndex, loop: LoopInfo) -> CallSite | None:
    for i in loop.calls:
        c = index.calls[i]
        if c.name == "step" and _is_optimizer(index, c):
            return c
    return None


def constructed(ctx: RuleContext, *qualnames: str) -> tuple[SourceIndex, CallSite] | None:
    """The first call in the workspace to one of ``qualnames`` (a constructor, usually)."""
    hits = calls_where(ctx, lambda ix, c: c.qualname in qualnames)
    return hits[0] if hits else None
