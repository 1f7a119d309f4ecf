"""Frame -> Site: which call in the user's source launched an op.

Three ways in, by decreasing confidence:

* **stack** (``anchor_frame``): the innermost user frame of a call stack. Ascend stacks record the
  executing line: among the calls on that line pick the one whose callee matches the op (``F.relu``
  for ``aten::relu``, the ``nn.Linear`` attribute for ``aten::linear``), else the whole statement.
  Kineto records the *def line* of functions entered after tracing began: the call is searched in
  that function's body.
* **module** (``anchor_module``): no stack, but ``nn.Module: <Class>_<k>`` events: the sub-module
  instance is matched to the ``self.<attr>`` assigned in ``__init__`` and its call in ``forward``.
* **inferred** (``anchor_inferred``): operator type -> construct search over the workspace, used
  only when exactly one construct matches.

When several calls match (``self.fc2(F.relu(self.fc1(x)))`` launches two ``aten::linear``), an
:class:`Anchor` lists them in execution order and the attributor picks one per op from the op's
position within its invocation (``i % N``), or falls back to the statement when the counts do not
divide evenly. Module instances are matched to attributes by per-class first-call order, the
order in which torch numbers ``<Class>_<k>``.

Drift (the file was edited after profiling): the recorded line must lie in a function of the
recorded name and hold a matching call; otherwise the call is searched again in that function by
the op's construct, helped by the line shifts other ops of the same function showed. Ambiguous or
missing -> no site and a note; an unrelated line is never used.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from msprof_lsp.mapping.source.constructs import (
    SEARCHABLE_KEYS,
    annotation_keys,
    call_keys,
    chain_keys,
    class_keys,
    is_constructor,
    is_opaque,
    module_class_called,
)
from msprof_lsp.mapping.profile.frames import Frame, Stack
from msprof_lsp.mapping.source.heat import Site, SiteKind
from msprof_lsp.mapping.source.source_index import (
    CONTAINER_CLASSES,
    MODULE_SCOPE,
    CallSite,
    ClassInfo,
    FunctionInfo,
    ModuleAttr,
    SourceIndex,
    Statement,
)
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.source.workspace import FrameKind, SourceWorkspace

ModuleInstance = tuple[str, int]  # ("Linear", 0) from "nn.Module: Linear_0"


@dataclass(frozen=True, slots=True)
class OpContext:
    """What the profile says about the op being anchored."""

    names: tuple[str, ...] = ()  # host op chain, launching op first .. the op the user code called
    kernel_types: tuple[str, ...] = ()  # device OpTypes (keys when no host op is known)
    modules: tuple[ModuleInstance, ...] = ()  # modules entered below the user's function, outer first
    modules_known: bool = False  # the profile records modules for this op (empty = launched directly)
    annotation: str = ""  # enclosing record_function scope: Optimizer.step#AdamW.step, ...

    @property
    def keys(self) -> frozenset[str]:
        # ops inside an optimizer step / a DataLoader fetch were launched by that construct
        keys = annotation_keys(self.annotation)
        return keys if keys else chain_keys(self.names, self.kernel_types)

    @property
    def label(self) -> str:
        if self.annotation and annotation_keys(self.annotation):
            return self.annotation
        if self.names:
            return self.names[-1]
        return self.kernel_types[0] if self.kernel_types else "?"


@dataclass(frozen=True, slots=True)
class Anchor:
    """Result of anchoring one op context.

    ``sites``: () not anchored (see ``note``); one site takes all the time; N sites are N calls in
    execution order, the op's ordinal within its invocation picks ``sites[i % N]``. ``fallback``
    is used instead when the ordinals do not divide evenly. ``levels_up``: how many module levels
    above the op's innermost module the invocation (the user function's module call) is.
    """

    sites: tuple[Site, ...] = ()
    note: str = ""
    fallback: Site | None = None
    levels_up: int = 0
    exact: bool = False  # a stack line held a matching call as recorded (no drift)
    scope: str = ""  # function qualname the frame was placed in ("" unknown)


@dataclass(frozen=True, slots=True)
class FrameChoice:
    """The innermost user frame of a stack that maps to a local file."""

    frame: Frame
    path: str  # local file
    modules: tuple[ModuleInstance, ...]  # nn.Module frames inside it (outermost first)
    has_module_frames: bool  # the stack carries nn.Module entries at all (Kineto)
    callee: str = ""  # function of the library frame just inside it ("backward" of torch/_tensor.py)
    library: Frame | None = None  # innermost frame of an installed library outside the workspace


@dataclass(frozen=True, slots=True)
class FrameScope:
    mode: str  # "line" | "def" | "drift"
    scope: str  # function / class qualname, "<module>"; "" when drifted
    function: FunctionInfo | None


NO_USER_FRAME = "no user frame in the call stack"


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def call_site(call: CallSite, confidence: Confidence, frame: Frame | None = None, note: str = "") -> Site:
    return Site(call.span, confidence, call.function, call.text, frame, note, kind=SiteKind.CALL,
                occurrence=call.occurrence)


def _attr_site(attr: ModuleAttr, owner_cls: str, confidence: Confidence, frame: Frame | None, note: str,
               index: SourceIndex) -> Site:
    """Site of a container element (``nn.ReLU()`` inside ``nn.Sequential(...)``)."""
    fn = f"{owner_cls}.__init__"
    occ = 0
    for c in index.calls_in(fn):
        if c.span == attr.span:
            occ = c.occurrence
            break
    return Site(attr.span, confidence, fn, attr.text, frame, note, kind=SiteKind.ELEMENT, occurrence=occ)


class Anchorer:
    """Anchors op contexts in one workspace; keeps the evidence drift handling needs."""

    def __init__(self, workspace: SourceWorkspace, *, def_line_frames: bool = False) -> None:
        """``def_line_frames``: the profile's frames carry def lines (Kineto), not executing lines."""
        self.workspace = workspace
        self.def_line_frames = def_line_frames
        # (path, function qualname, class key) -> module instance numbers seen there; class key is
        # the child class ("Linear") or "<Container>_<k>/<Class>" for a container's elements.
        self.observed: dict[tuple[str, str, str], set[int]] = {}
        # (path, scope) -> sorted [(recorded line, delta)] from ops anchored without doubt
        self.evidence: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self._frame_cache: dict[int, FrameChoice | None] = {}
        self.stale: set[tuple[str, str, int]] = set()  # (path, scope, line) that did not hold up
        self._place_cache: dict[FrameChoice, tuple[SourceIndex | None, FrameScope]] = {}
        self._classes: dict[str, list[tuple[str, str]]] | None = None  # class name -> [(path, qualname)]

    # -- frames --------------------------------------------------------------------------------

    def choose_frame(self, stack: Stack, key: int | None = None) -> FrameChoice | None:
        """Innermost frame that runs in a workspace file (unresolved user frames are noted once).

        ``library`` of the choice: the innermost frame of an installed library outside the
        workspace between it and the op, the hot code the user's call went into.
        """
        if key is not None and key in self._frame_cache:
            return self._frame_cache[key]
        modules: list[ModuleInstance] = []
        has_modules = False
        choice = None
        inner = ""  # the last library frame seen: the function the user frame called into
        library: Frame | None = None
        ws = self.workspace
        for frame in stack:
            mod = frame.module if frame.opaque else None
            if mod is not None:
                modules.append(mod)
                has_modules = True
                continue
            local = ws.frame_file(frame)
            if local is None:
                kind = ws.frame_kind(frame)
                if kind is FrameKind.USER:
                    ws.note_unmapped(frame.file)
                    continue
                if kind is FrameKind.LIBRARY and library is None:
                    library = frame
                if not frame.opaque:
                    inner = frame.func
                continue
            choice = FrameChoice(frame, local, tuple(reversed(modules)), has_modules, inner, library)
            break
        if choice is not None and not has_modules:
            has_modules = any(f.module is not None for f in stack)
            if has_modules:
                choice = replace(choice, has_module_frames=True)
        if key is not None:
            self._frame_cache[key] = choice
        return choice

    def frame_scope(self, index: SourceIndex, frame: Frame) -> FrameScope:
        """Where a frame is in the current source: its executing line, its def line, or drifted."""
        line = frame.line
        for f in index.functions_starting_at(line):
            if f.name == frame.func:
                return FrameScope("def", f.qualname, f)
        if not 1 <= line <= index.lines.line_count:
            return FrameScope("drift", "", None)
        scope = index.scope_at(line)
        name = scope.rsplit(".", 1)[-1] if scope != MODULE_SCOPE else MODULE_SCOPE
        func = frame.func
        # <lambda>, <listcomp>, <genexpr>: own frames in the profile, part of a function here
        ok = name == func or (func.startswith("<") and func != MODULE_SCOPE)
        if not ok or index.statement_at(line) is None:
            return FrameScope("drift", "", None)
        return FrameScope("line", scope, index.functions.get(scope))

    # -- observed module instances -------------------------------------------------------------

    def observe(self, path: str, scope: str, modules: tuple[ModuleInstance, ...]) -> None:
        """Record module instances seen below ``scope`` (for first-call-order matching)."""
        if not modules:
            return
        cls, k = modules[0]
        self.observed.setdefault((path, scope, cls), set()).add(k)
        if len(modules) > 1 and cls in CONTAINER_CLASSES:
            gcls, gk = modules[1]
            self.observed.setdefault((path, scope, f"{cls}_{k}/{gcls}"), set()).add(gk)

    def add_evidence(self, path: str, scope: str, line: int, delta: int) -> None:
        lst = self.evidence.setdefault((path, scope), [])
        bisect.insort(lst, (line, delta))

    def _shift_at(self, path: str, scope: str, line: int) -> int | None:
        """The line shift the neighbouring anchored ops agree on at ``line`` (None: no agreement)."""
        lst = self.evidence.get((path, scope))
        if not lst:
            return None
        i = bisect.bisect_left(lst, (line, -(10**9)))
        same = [d for (ln, d) in lst[i:] if ln == line]
        if same and all(d == same[0] for d in same):
            return same[0]
        below = lst[i][1] if i < len(lst) else None
        above = lst[i - 1][1] if i > 0 else None
        if below is not None and above is not None and below == above:
            return below
        return None

    # -- stack anchoring -----------------------------------------------------------------------

    def place(self, choice: FrameChoice) -> tuple[SourceIndex | None, FrameScope]:
        """The file index and where the frame sits in it (drifted frames: the likely function)."""
        hit = self._place_cache.get(choice)
        if hit is None:
            hit = self._place_cache[choice] = self._place(choice)
        return hit

    def _place(self, choice: FrameChoice) -> tuple[SourceIndex | None, FrameScope]:
        index = self.workspace.index(choice.path)
        if index is None:
            return None, FrameScope("drift", "", None)
        fs = self.frame_scope(index, choice.frame)
        if fs.mode == "line" and self.def_line_frames:
            # Kineto: a frame that is not on a def line was already running when tracing began;
            # its line stays where tracing started, so only the function is known
            return index, FrameScope("active", fs.scope, fs.function)
        if fs.mode == "drift":
            scope = self._drift_scope(index, choice.frame)
            if scope:
                # Kineto frames record def lines: a moved def is searched like one that did not move
                mode = "def-drift" if self.def_line_frames and scope in index.functions else "drift"
                return index, FrameScope(mode, scope, index.functions.get(scope))
        return index, fs

    def _loader_loops(self, index: SourceIndex, scope: str, line: int | None = None) -> list[Site]:
        """Headers of the loops of ``scope`` that iterate a DataLoader (a name bound to
        ``DataLoader(...)``, else a name that says loader), optionally only the one on ``line``."""
        found = []
        for lp in index.loops_in(scope):
            if lp.kind != "for" or (line is not None and not lp.header.line <= line <= lp.header.end_line):
                continue
            names = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", lp.iter_text)
            bound = [index.binding_for(scope, n) for n in names]
            if any(b is not None and b.ctor.rsplit(".", 1)[-1] == "DataLoader" for b in bound) or any(
                    "loader" in n.lower() for n in names):
                text = index.lines.slice(lp.header.line, lp.header.col, lp.header.end_line, lp.header.end_col)
                found.append(Site(lp.header, Confidence.STACK, scope, text, None, "", kind=SiteKind.STATEMENT,
                                  occurrence=index.statement_occurrence(lp.header, scope)))
        return found

    def matches_at(self, index: SourceIndex, scope: str, line: int, ctx: OpContext) -> list[CallSite]:
        """Calls of ``scope`` on ``line`` that can launch the op (those starting there first)."""
        on_line = [c for c in index.calls_on_line(line) if c.function == scope]
        matching = self._matching(index, on_line, ctx.keys, ctx)
        return [c for c in matching if c.span.line == line] or matching

    def anchor_frame(self, choice: FrameChoice, ctx: OpContext, *, final: bool = True) -> Anchor | None:
        """Anchor an op on its innermost user frame.

        With ``final=False`` only the undoubted cases are decided (a matching call on the recorded
        line, or a def-line frame) and None is returned otherwise: the caller aligns each
        function's ops first (``best_shift``, evidence), then calls again with ``final=True``.
        """
        index, fs = self.place(choice)
        frame = choice.frame
        if index is None:
            err = self.workspace.error(choice.path)
            reason = err.reason if err else "file unreadable"
            return Anchor(note=f"{choice.path}: {reason}; not mapped") if final else None
        keys = ctx.keys
        if fs.mode in ("def", "def-drift", "active"):
            note = "" if fs.mode != "def-drift" or fs.function is None else (
                f"re-anchored after edit: profile def line {frame.line}, now {fs.function.def_line}")
            since = frame.line if fs.mode == "active" else None
            return self._in_function(index, fs.scope, ctx, Confidence.MODULE, frame, fs.function, note=note,
                                     since=since, callee=choice.callee)
        if fs.mode == "line":
            stale = (choice.path, fs.scope, frame.line) in self.stale
            if "dataloader" in keys and not stale:
                loops = self._loader_loops(index, fs.scope, frame.line)
                if loops:
                    return Anchor((replace(loops[0], frame=frame),), exact=True, scope=fs.scope)
            starting = [] if stale else self.matches_at(index, fs.scope, frame.line, ctx)
            if starting:
                anchor = self._select(index, fs.scope, starting, ctx, Confidence.STACK, frame, note="",
                                      path=choice.path)
                if anchor.sites or anchor.fallback:
                    return replace(anchor, exact=True, scope=fs.scope)
            if not final:
                return None
            shift = self._shift_at(choice.path, fs.scope, frame.line)
            if shift not in (None, 0):
                return self._shifted(index, fs.scope, frame, ctx, shift)
            if not keys or shift == 0:
                stmt = index.statement_at(frame.line)
                if stmt is not None and stmt.function == fs.scope and self.plausible_statement(index, stmt, ctx):
                    site = Site(stmt.span, Confidence.STACK, stmt.function, stmt.text, frame, "",
                                kind=SiteKind.STATEMENT, occurrence=_stmt_occurrence(index, stmt))
                    return Anchor((site,), scope=fs.scope)
            return self._reanchor(index, choice.path, fs.scope, frame, ctx)
        # drifted: the recorded line is no longer in a function of the recorded name
        if not final:
            return None
        if not fs.scope:
            return Anchor(note=f"{frame.func}() not found (or not unique) in {Path(choice.path).name} "
                               f"(profile line {frame.line}; file edited after profiling?)")
        shift = self._shift_at(choice.path, fs.scope, frame.line)
        if shift not in (None, 0):
            return self._shifted(index, fs.scope, frame, ctx, shift)
        return self._reanchor(index, choice.path, fs.scope, frame, ctx)

    def _drift_scope(self, index: SourceIndex, frame: Frame) -> str | None:
        """The function a drifted frame meant: the one of that name, else among several the one
        containing the recorded line. Otherwise None: the nearest of several same-named functions
        (three ``forward``s) is a guess, and anchoring there moves the finding to other code."""
        if frame.func == MODULE_SCOPE:
            return MODULE_SCOPE
        funcs = index.functions_named(frame.func)
        if len(funcs) <= 1:
            return funcs[0].qualname if funcs else None
        line = frame.line
        inside = [f for f in funcs if f.span.line <= line <= f.span.end_line]
        return inside[0].qualname if len(inside) == 1 else None

    def shifted(self, choice: FrameChoice, scope: str, ctx: OpContext, shift: int) -> Anchor:
        index = self.workspace.index(choice.path)
        assert index is not None
        return self._shifted(index, scope, choice.frame, ctx, shift)

    def _shifted(self, index: SourceIndex, scope: str, frame: Frame, ctx: OpContext, shift: int) -> Anchor:
        """The neighbouring ops moved by ``shift`` lines: use the recorded line moved the same way."""
        line = frame.line + shift
        note = f"re-anchored after edit: profile line {frame.line}, source line {line}"
        starting = self.matches_at(index, scope, line, ctx)
        if starting:
            return replace(self._select(index, scope, starting, ctx, Confidence.MODULE, frame, note), scope=scope)
        stmt = index.statement_at(line)
        if stmt is not None and stmt.function == scope and self.plausible_statement(index, stmt, ctx):
            site = Site(stmt.span, Confidence.MODULE, scope, stmt.text, frame, note, kind=SiteKind.STATEMENT,
                        occurrence=_stmt_occurrence(index, stmt))
            return Anchor((site,), scope=scope)
        return Anchor(note=_drop_note(frame, ctx))

    def _reanchor(self, index: SourceIndex, path: str, scope: str, frame: Frame, ctx: OpContext) -> Anchor:
        """The recorded line holds no matching call: find the one matching call in the function."""
        keys = ctx.keys
        if not keys:
            return Anchor(note=_drop_note(frame, ctx))
        cands = self._matching(index, index.calls_in(scope), keys, ctx)
        picked = self._module_pick(index, scope, cands, ctx, path) if cands else []
        if len(picked) == 1:
            call = picked[0]
            note = f"re-anchored after edit: profile line {frame.line}, source line {call.span.line}"
            self.add_evidence(path, scope, frame.line, call.span.line - frame.line)
            return Anchor((call_site(call, Confidence.MODULE, frame, note),), levels_up=len(ctx.modules),
                          scope=scope)
        if not cands:
            return Anchor(note=_drop_note(frame, ctx))
        return Anchor(note=f"{ctx.label} at {Path(path).name}:{frame.line} matches {len(cands)} calls in "
                           f"{scope}() and the line changed since profiling; not mapped")

    # -- candidate selection -------------------------------------------------------------------

    def _matching(self, index: SourceIndex, calls: Iterable[CallSite], keys: frozenset[str],
                  ctx: OpContext) -> list[CallSite]:
        """Calls that can launch the op; when the profile records modules, only calls of the
        sub-module class it names (or, for ops launched directly, only non-module calls)."""
        if not keys:
            return []
        found = []
        ctors = []
        child = ctx.modules[0][0] if ctx.modules else ""
        for c in calls:
            if not keys & call_keys(index, c.idx):
                continue
            if ctx.modules_known:
                classes = module_class_called(index, c)
                if not ctx.modules and classes is not None:
                    continue  # launched directly by this function, not through a sub-module
                if ctx.modules and (classes is None or (classes and child not in classes)):
                    continue  # not a call of the sub-module class the profile names (() = unknown)
            (ctors if is_constructor(index, c) else found).append(c)
        return found or ctors

    def plausible_statement(self, index: SourceIndex, stmt: Statement, ctx: OpContext) -> bool:
        """Can this statement have launched the op although no call matched? Only through a call
        we cannot see into (or, for ops without a known construct, an expression with no call)."""
        calls = [c for c in index.calls_on_line(stmt.span.line)
                 if c.function == stmt.function and stmt.span.line <= c.span.line and c.span.end_line <= stmt.span.end_line]
        if any(is_opaque(index, c) for c in calls):
            return True
        return not calls and not ctx.keys

    def align(self, index: SourceIndex, scope: str, items: Iterable[tuple[int, OpContext]],
              max_rounds: int = 8) -> dict[int, int]:
        """Recorded line -> line shift, for the lines of one function that hold up after an edit.

        A recorded line holds up under a shift when *every* op recorded there finds its call at
        line + shift (if the line held a relu and a dropout and now only a relu, it is not the
        same line). The shift most ops agree on is taken first (0 wins ties), then, for the lines
        left, the next one -- an edit in the middle of a function shifts only the lines below it
        -- keeping recorded lines in order and never two on one source line.
        """
        by_line: dict[int, list[OpContext]] = {}
        for line, ctx in items:
            if ctx.keys:
                lst = by_line.setdefault(line, [])
                if ctx not in lst:
                    lst.append(ctx)
        accepted: dict[int, int] = {}
        if not by_line:
            return accepted
        calls = index.calls_in(scope)
        shifts = {0}
        for line, ctxs in by_line.items():
            for ctx in ctxs:
                shifts.update(c.span.line - line for c in self._matching(index, calls, ctx.keys, ctx))
        order = sorted(shifts, key=lambda d: (abs(d), d))
        matched_cache: dict[tuple[int, int], set[int] | None] = {}

        def matched(line: int, d: int) -> set[int] | None:
            key = (line, d)
            if key not in matched_cache:
                found: set[int] = set()
                for ctx in by_line[line]:
                    hits = self.matches_at(index, scope, line + d, ctx)
                    if not hits:
                        matched_cache[key] = None
                        break
                    found.update(c.idx for c in hits)
                else:
                    matched_cache[key] = found
            return matched_cache[key]

        def admissible(line: int, d: int) -> bool:
            target = line + d
            return all((line < a) == (target < a + da) and target != a + da for a, da in accepted.items())

        for _ in range(max_rounds):
            remaining = [ln for ln in by_line if ln not in accepted]
            if not remaining:
                break
            best_lines: list[int] = []
            best, best_score = 0, 0
            for d in order:
                lines = []
                score = 0
                for ln in remaining:
                    m = matched(ln, d)
                    if m is not None and admissible(ln, d):
                        lines.append(ln)
                        # distinct calls matched, so one container call matching three ops scores
                        # less than three calls that each do
                        score += min(len(by_line[ln]), len(m))
                if score > best_score:
                    best, best_lines, best_score = d, lines, score
            if not best_lines:
                break
            # accept in order, re-checking admissibility against lines accepted in this round
            for ln in sorted(best_lines):
                if admissible(ln, best):
                    accepted[ln] = best
        return accepted

    def _module_pick(self, index: SourceIndex, scope: str, cands: list[CallSite], ctx: OpContext,
                     path: str) -> list[CallSite]:
        """Narrow module calls to the sub-module instance the profile names (``Linear_1``).

        Instances of one class are numbered in first-call order, so the i-th smallest instance
        number seen under this function is the i-th distinct attribute of that class it calls.
        """
        if not ctx.modules:
            return cands
        cls, k = ctx.modules[0]
        by_attr: dict[str, list[CallSite]] = {}
        order: list[str] = []
        for c in index.calls_in(scope):
            classes = module_class_called(index, c)
            if not classes or cls not in classes:
                continue
            if c.self_attr:
                key = f"self.{c.self_attr}" + (f"[{c.element}]" if c.element >= 0 else "")
            elif c.loop_attr:
                key = f"for:{c.loop_attr}"
            else:
                key = f"var:{c.callee}"
            if key not in by_attr:
                by_attr[key] = []
                order.append(key)
            by_attr[key].append(c)
        if not order:
            return cands
        wanted = {c.idx for c in cands}
        in_cands = [a for a in order if any(c.idx in wanted for c in by_attr[a])]
        if len(in_cands) == 1:
            chosen = in_cands[0]
        elif len(order) == 1:
            chosen = order[0]
        else:
            ks = sorted(self.observed.get((path, scope, cls), ()))
            if len(ks) != len(order) or k not in ks:
                return []
            chosen = order[ks.index(k)]
            if in_cands and chosen not in in_cands:
                return []
        return [c for c in by_attr[chosen] if c.idx in wanted] or by_attr[chosen]

    def _select(self, index: SourceIndex, scope: str, cands: list[CallSite], ctx: OpContext,
                conf: Confidence, frame: Frame | None, note: str, path: str = "") -> Anchor:
        """Sites for the matching calls of one scope (execution order)."""
        path = path or index.path
        levels = len(ctx.modules)
        picked = self._module_pick(index, scope, cands, ctx, path) if ctx.modules else cands
        if not picked:
            return Anchor(note=f"{ctx.label}: cannot tell which of the {ctx.modules[0][0]} sub-modules "
                               f"called in {scope}() is {ctx.modules[0][0]}_{ctx.modules[0][1]}")
        # container element (nn.Sequential(...)[i]) when the profile names it
        if len(ctx.modules) > 1 and ctx.modules[0][0] in CONTAINER_CLASSES:
            element = self._element(index, scope, picked, ctx, path)
            if element is not None:
                owner, attr = element
                return Anchor((_attr_site(attr, owner, conf, frame, note, index),), levels_up=levels)
        picked.sort(key=lambda c: c.order)
        sites = tuple(call_site(c, conf, frame, note) for c in picked)
        if len(sites) == 1:
            return Anchor(sites, levels_up=levels)
        stmts = {c.stmt for c in picked}
        fallback = None
        if len(stmts) == 1:
            stmt = next(iter(stmts))
            text = index.lines.slice(stmt.line, stmt.col, stmt.end_line, stmt.end_col)
            fallback = Site(stmt, conf, scope, text, frame, _join(note, f"one of {len(sites)} {ctx.label} calls"),
                            kind=SiteKind.STATEMENT, occurrence=_stmt_occurrence_span(index, stmt, scope))
        return Anchor(sites, fallback=fallback, levels_up=levels,
                      note="" if fallback else f"{ctx.label}: {len(sites)} matching calls in {scope}()")

    def _element(self, index: SourceIndex, scope: str, picked: list[CallSite], ctx: OpContext,
                 path: str) -> tuple[str, ModuleAttr] | None:
        ccls, ck = ctx.modules[0]
        gcls, gk = ctx.modules[1]
        fn = index.functions.get(scope)
        if fn is None or not fn.cls:
            return None
        attrs = {c.self_attr or c.loop_attr for c in picked}
        if len(attrs) != 1:
            return None
        attr = index.module_attr(fn.cls, attrs.pop())
        if attr is None or not attr.elements:
            return None
        elems = [e for e in attr.elements if e.class_name == gcls]
        if not elems:
            return None
        if len(elems) == 1:
            return fn.cls, elems[0]
        ks = sorted(self.observed.get((path, scope, f"{ccls}_{ck}/{gcls}"), ()))
        if len(ks) == len(elems) and gk in ks:
            return fn.cls, elems[ks.index(gk)]
        return None

    def _in_function(self, index: SourceIndex, scope: str, ctx: OpContext, conf: Confidence,
                     frame: Frame | None, fn: FunctionInfo | None, note: str, since: int | None = None,
                     callee: str = "") -> Anchor:
        """Only the function is known (def-line frame, module event): search its body.

        Several matching calls split by execution order; when that fails, and for ops no call
        matches, the time stays on the function's ``def`` line (never on a guessed call).
        ``since``: the line where tracing began in this (already running) function: only calls
        after it, or in a loop around it, can be in the trace. ``callee``: the library function
        the stack shows this function calling (``backward`` for autograd-engine work such as
        AccumulateGrad or DDP's all-reduce): the one call of that name in the body holds the op.
        """
        path = index.path
        header = None
        if fn is not None:
            where = f"in {fn.qualname}(); the profile records the function, not the line"
            header = Site(fn.header, conf, fn.qualname, "", frame, _join(note, where), kind=SiteKind.FUNCTION)
        if "dataloader" in ctx.keys:
            loops = self._loader_loops(index, scope)
            if len(loops) == 1:
                return Anchor((loops[0] if conf is Confidence.STACK else replace(loops[0], confidence=conf,
                                                                                 frame=frame, note=note),),
                              scope=scope)
        # Only the function is known: "+", "-", "*", "/" are everywhere (ints too), so they are
        # not evidence of a tensor op here; "@" is.
        calls = [c for c in index.calls_in(scope) if not c.operator or c.name in ("@", "@=")]
        if since is not None:
            loops = [lp.span for lp in index.loops_in(scope) if lp.span.line <= since <= lp.span.end_line]
            calls = [c for c in calls if c.span.line > since or any(
                lp.line <= c.span.line <= lp.end_line for lp in loops)]
        cands = self._matching(index, calls, ctx.keys, ctx)
        if cands:
            anchor = self._select(index, scope, cands, ctx, conf, frame, note, path=path)
            if len(anchor.sites) > 1 and header is not None:
                n = len(anchor.sites)
                anchor = replace(anchor, fallback=anchor.fallback or replace(
                    header, note=_join(note, f"one of {n} {ctx.label} calls in {fn.qualname}()")))
            elif not anchor.sites and header is not None:
                anchor = Anchor((replace(header, note=_join(header.note, anchor.note)),))
            return replace(anchor, scope=scope)
        if callee and not callee.startswith("<"):
            named = [c for c in calls if c.name == callee and not c.operator]
            if len(named) == 1:
                site = call_site(named[0], conf, frame, _join(note, f"inside {callee}()"))
                return Anchor((site,), scope=scope)
        if header is None:
            return Anchor(note=f"{ctx.label}: module-level code, line not recorded; not mapped", scope=scope)
        return Anchor((header,), levels_up=len(ctx.modules), scope=scope)

    # -- module events without stacks ----------------------------------------------------------

    def find_classes(self, name: str) -> list[tuple[str, str]]:
        """(path, qualname) of workspace classes called ``name`` (indexes the workspace once)."""
        if self._classes is None:
            self._classes = {}
            for path in self.workspace.python_files():
                index = self.workspace.index(path)
                if index is None:
                    continue
                for c in index.classes.values():
                    self._classes.setdefault(c.name, []).append((path, c.qualname))
        return self._classes.get(name, [])

    def user_module(self, chain: tuple[ModuleInstance, ...]) -> tuple[int, str, ClassInfo] | None:
        """Innermost module of ``chain`` (outermost first) whose class is defined in the workspace."""
        for i in range(len(chain) - 1, -1, -1):
            found = self.find_classes(chain[i][0])
            if len(found) == 1:
                path, qual = found[0]
                index = self.workspace.index(path)
                if index is not None and qual in index.classes:
                    return i, path, index.classes[qual]
        return None

    def forward_of(self, index: SourceIndex, cls: ClassInfo) -> FunctionInfo | None:
        seen: set[str] = set()
        todo = [cls]
        while todo:
            c = todo.pop(0)
            if c.qualname in seen:
                continue
            seen.add(c.qualname)
            f = index.functions.get(f"{c.qualname}.forward")
            if f is not None:
                return f
            for b in c.bases:
                todo.extend(x for x in index.classes.values() if x.qualname == b or x.name == b)
        return None

    def module_scope(self, chain: tuple[ModuleInstance, ...]) -> tuple[str, str, tuple[ModuleInstance, ...]] | None:
        """(path, forward qualname, modules below it) for a module chain, or None."""
        um = self.user_module(chain)
        if um is None:
            return None
        i, path, cls = um
        index = self.workspace.index(path)
        if index is None:
            return None
        fwd = self.forward_of(index, cls)
        if fwd is None:
            return None
        return path, fwd.qualname, chain[i + 1:]

    def anchor_module(self, chain: tuple[ModuleInstance, ...], ctx: OpContext) -> Anchor:
        """No stack: the ``nn.Module`` chain of the op (outermost first)."""
        ms = self.module_scope(chain)
        if ms is None:
            return self._anchor_root(chain, ctx)
        path, scope, below = ms
        index = self.workspace.index(path)
        assert index is not None
        fn = index.functions[scope]
        mctx = replace(ctx, modules=below, modules_known=True)
        return self._in_function(index, scope, mctx, Confidence.MODULE, None, fn, note="")

    def _anchor_root(self, chain: tuple[ModuleInstance, ...], ctx: OpContext) -> Anchor:
        """Only library modules in the chain: the user's ``model = Cls(...)`` and ``model(x)``."""
        if not chain:
            return Anchor(note="no module")
        cls, _ = chain[0]
        hits = []
        for path in self.workspace.python_files():
            index = self.workspace.index(path)
            if index is None:
                continue
            for b in index.bindings:
                if b.ctor.rsplit(".", 1)[-1] != cls:
                    continue
                for c in index.calls_in(b.function):
                    if c.callee == b.name and c.span.line > b.span.line:
                        hits.append((index, c))
        if len(hits) == 1:
            index, c = hits[0]
            return Anchor((call_site(c, Confidence.MODULE, None, f"{cls} module called here"),))
        return Anchor(note=f"{ctx.label} in {cls}_{chain[0][1]}: no unique call of a {cls} in the workspace")

    # -- pattern search ------------------------------------------------------------------------

    def anchor_inferred(self, ctx: OpContext) -> Anchor:
        """Operator type -> the one construct in the workspace that can launch it, else nothing.

        Rule: the time goes to a call only when exactly one call (or ``nn.Sequential`` element) in
        the whole workspace can launch the op; with more candidates it stays unattributed (the
        count is reported), since splitting would invent per-line numbers.
        """
        keys = ctx.keys & SEARCHABLE_KEYS
        if not keys:
            return Anchor(note=f"{ctx.label}: no source construct known for this op")
        cands: list[Site] = []
        stmts: set[tuple[str, Span, str]] = set()  # (path, statement, function) of the call candidates
        for path in self.workspace.python_files():
            index = self.workspace.index(path)
            if index is None:
                continue
            for i, c in enumerate(index.calls):
                if c.operator or not keys & call_keys(index, i):
                    continue
                if is_constructor(index, c):
                    continue
                if (c.self_attr or c.loop_attr) and c.cls:
                    attr = index.module_attr(c.cls, c.self_attr or c.loop_attr)
                    if attr is not None and attr.is_container and c.element < 0:
                        owner = c.cls
                        for e in attr.elements:
                            if keys & class_keys(e.class_name):
                                cands.append(_attr_site(e, owner, Confidence.INFERRED, None, "", index))
                        continue
                cands.append(call_site(c, Confidence.INFERRED))
                stmts.add((path, c.stmt, c.function))
                if len(stmts) > 1:
                    break
            if len(stmts) > 1:
                break
        if len(cands) == 1:
            site = replace(cands[0], note=f"inferred from the op type ({ctx.label}); no call stack")
            return Anchor((site,))
        if len(cands) > 1 and len(stmts) == 1 and all(s.kind is SiteKind.CALL for s in cands):
            # several candidates, one statement (print(f"{loss.item()}")): the statement has it
            path, stmt, function = next(iter(stmts))
            index = self.workspace.index(path)
            if index is not None:
                text = index.lines.slice(stmt.line, stmt.col, stmt.end_line, stmt.end_col)
                return Anchor((Site(stmt, Confidence.INFERRED, function, text, None,
                                    f"inferred from the op type ({ctx.label}); no call stack", kind=SiteKind.STATEMENT,
                                    occurrence=index.statement_occurrence(stmt, function)),))
        if not cands:
            return Anchor(note=f"{ctx.label}: no matching construct in the workspace")
        named = "; ".join(f"{Path(c.span.path).name}:{c.span.line} {c.call_text}" for c in cands[:4])
        return Anchor(note=f"{ctx.label}: several constructs in the workspace could launch it ({named}"
                           f"{' …' if len(cands) > 4 else ''}); not attributed without a call stack")


def _stmt_occurrence(index: SourceIndex, stmt: Statement) -> int:
    return index.statement_occurrence(stmt.span, stmt.function)


def _stmt_occurrence_span(index: SourceIndex, span: Span, scope: str) -> int:
    return index.statement_occurrence(span, scope)


def _drop_note(frame: Frame, ctx: OpContext) -> str:
    return (f"{ctx.label} at {Path(frame.file).name}:{frame.line} ({frame.func}): the call is no longer "
            "there (file edited after profiling?); not mapped")
