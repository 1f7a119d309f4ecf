"""Sequence anchoring: stackless kernels placed by launch order between shape-anchored ones.

The kernels a step launches follow the order of the calls in the model's ``forward`` methods
(and, in backward, the reverse order). The model's forward is flattened statically into one
execution sequence: from each root module's ``forward`` (a workspace ``nn.Module`` no other
workspace module holds), every call in execution order, with the ``forward`` of a workspace
sub-module inlined where it is called (``self.block(x)``, ``for blk in self.blocks: blk(x)`` --
a loop body once; ``checkpoint(blk, x)``, which the index records as a call of ``blk``). Kernels
anchored by shape (mapping.shape_anchor) are landmarks: each is one
position in that sequence. A kernel launched between two landmarks of the same direction
(forward: the first landmark earlier in the sequence; backward: later) was produced by a call
between those two positions -- or, the two the other way round inside one loop body over a module
list, by a call from the first to the body's end or from its start to the second (one pass, then
the next):

1. per kernel family (mapping.constructs keys, arithmetic included: the slice is narrow), as many
   kernels as candidate calls -- or up to 4 per call (``F.dropout`` launches a mask and an apply
   kernel) -- are matched in order; one candidate call takes all of its family's kernels;
2. a kernel left over is narrowed to the calls between its already placed neighbours: one
   matching call takes it; several (or, for a kernel of no known family, any calls) all in one
   statement give that statement (``x * torch.rsqrt(x.pow(2).mean(-1) + eps) * w``);
3. otherwise nothing is picked.

Kernels that only convert or finish a layer's tensors -- ``TransData``/``Cast`` before a
convolution, the bias ``Axpy`` or ``ReduceSum`` after a matmul -- have no call of their own: a run
of them right before or right after a landmark kernel, each sharing a 2-D-or-more tensor shape
with it (a 2-D one also transposed), goes to the landmark's call (where a stack would have put
it: the same host op).

Limits: a module called at two places, or a layer inside a loop body run several times, is one
position, so a pass without a landmark of its own is not told from the next; intervals that
change direction (forward -> backward: the loss; backward -> forward:
the optimizer and the next step) are never aligned. Every site is ``inferred`` and its note
names the two landmark calls.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from msprof_lsp.mapping.source.constructs import call_keys, class_keys
from msprof_lsp.mapping.source.heat import Site, SiteKind
from msprof_lsp.mapping.profile.shapes import parse_shapes
from msprof_lsp.mapping.source.source_index import CallSite, ClassInfo, ModuleAttr, SourceIndex
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.source.workspace import SourceWorkspace

_MAX_DEPTH = 12  # sub-module forwards inlined
_MAX_PER_CALL = 4  # kernels of one family one call may launch
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


@dataclass(frozen=True, slots=True)
class Entry:
    """One call of the flattened forward."""

    index: SourceIndex
    call: CallSite
    inlined: bool  # a sub-module call whose forward (or Sequential elements) follows in the sequence
    element: ModuleAttr | None = None  # an nn.Sequential element the call runs, in order

    @property
    def span(self) -> Span:
        return self.element.span if self.element is not None else self.call.span

    @property
    def keys(self) -> frozenset[str]:
        return class_keys(self.element.class_name) if self.element is not None else call_keys(self.index, self.call.idx)

    @property
    def stmt(self) -> Span:
        """What one statement is: each element counts as its own."""
        return self.element.span if self.element is not None else self.call.stmt


class SequenceAnchorer:
    def __init__(self, workspace: SourceWorkspace) -> None:
        self.workspace = workspace
        self._flat: list[Entry] | None = None
        self._pos: dict[tuple[str, Span], list[int]] = {}
        self._passes: list[tuple[int, int]] = []  # [start, end) of each loop body over a module list
        self._cache: dict[tuple, tuple[Site | None, ...]] = {}

    # -- the flattened forward -----------------------------------------------------------------

    @property
    def flat(self) -> list[Entry]:
        if self._flat is None:
            self._flat = self._flatten_all()
            for i, e in enumerate(self._flat):
                self._pos.setdefault((e.index.path, e.span), []).append(i)
        return self._flat

    def _classes(self) -> dict[str, list[tuple[SourceIndex, ClassInfo]]]:
        out: dict[str, list[tuple[SourceIndex, ClassInfo]]] = {}
        for path in self.workspace.python_files():
            index = self.workspace.index(path)
            if index is None:
                continue
            for c in index.classes.values():
                out.setdefault(c.name, []).append((index, c))
        return out

    def _flatten_all(self) -> list[Entry]:
        classes = self._classes()
        held: set[str] = set()
        for found in classes.values():
            for index, c in found:
                for attr in c.attrs.values():
                    held |= self._held_classes(attr.class_name, attr.text, attr.elements, classes)
        out: list[Entry] = []
        for name, found in sorted(classes.items()):
            if name in held or len(found) != 1:
                continue
            index, c = found[0]
            if f"{c.qualname}.forward" in index.functions:
                self._flatten(index, f"{c.qualname}.forward", classes, out, 0, ())
        return out

    @staticmethod
    def _held_classes(class_name: str, text: str, elements: Sequence, classes: dict) -> set[str]:
        names = {class_name, *(e.class_name for e in elements)}
        names |= {w for w in _WORD.findall(text) if w in classes}  # ModuleList([Block(cfg) for ...])
        return {n for n in names if n in classes}

    def _sub_forward(self, index: SourceIndex, c: CallSite, classes: dict) -> tuple[SourceIndex, str] | None:
        """The workspace ``forward`` a sub-module call runs (unique class), or None."""
        name = c.self_attr or c.loop_attr
        if not name or not c.cls or c.operator:
            return None
        attr = index.module_attr(c.cls, name)
        if attr is None:
            return None
        if c.element >= 0 and attr.elements:
            elems = [e for e in attr.elements if e.index == c.element]
            held = {elems[0].class_name} & set(classes) if elems else set()
        else:
            held = self._held_classes(attr.class_name, attr.text, attr.elements, classes)
            if attr.is_container and len(attr.elements) > 1:
                return None  # a Sequential of several modules: not inlined (its call stays one entry)
        if len(held) != 1:
            return None
        found = classes[next(iter(held))]
        if len(found) != 1:
            return None
        sub_index, cls = found[0]
        fwd = f"{cls.qualname}.forward"
        return (sub_index, fwd) if fwd in sub_index.functions else None

    def _flatten(self, index: SourceIndex, function: str, classes: dict, out: list[Entry], depth: int,
                 active: tuple[str, ...]) -> None:
        # loops over a module list run their body once per element: where each body starts and ends
        bodies = [lp.calls for lp in index.loops_in(function)
                  if lp.calls and any(index.calls[j].loop_attr for j in lp.calls)]
        starts: dict[int, list[int]] = {}
        for i in index.functions[function].calls:
            for body in bodies:
                if i == body[0]:
                    starts.setdefault(body[-1], []).append(len(out))
            self._flatten_call(index, i, classes, out, depth, active)
            for start in starts.pop(i, ()):
                if len(out) - start > 1:
                    self._passes.append((start, len(out)))

    def _flatten_call(self, index: SourceIndex, i: int, classes: dict, out: list[Entry], depth: int,
                      active: tuple[str, ...]) -> None:
        c = index.calls[i]
        sub = self._sub_forward(index, c, classes) if depth < _MAX_DEPTH else None
        key = f"{sub[0].path}:{sub[1]}" if sub is not None else ""
        elements = self._sequential_elements(index, c) if sub is None else ()
        if sub is not None and key not in active:
            out.append(Entry(index, c, True))
            self._flatten(sub[0], sub[1], classes, out, depth + 1, (*active, key))
        elif elements:
            # self.features(x) on an nn.Sequential runs its elements in order: one position each
            out.append(Entry(index, c, True))
            out.extend(Entry(index, c, False, e) for e in elements)
        else:
            out.append(Entry(index, c, False))

    @staticmethod
    def _sequential_elements(index: SourceIndex, c: CallSite) -> tuple[ModuleAttr, ...]:
        """The elements, in order, of the ``nn.Sequential`` attribute a call runs (() otherwise)."""
        if not c.self_attr or not c.cls or c.element >= 0 or c.operator:
            return ()
        attr = index.module_attr(c.cls, c.self_attr)
        if attr is None or attr.class_name != "Sequential" or len(attr.elements) < 2:
            return ()
        return tuple(sorted(attr.elements, key=lambda e: e.index))

    def position(self, site: Site) -> int | None:
        """The one position of a landmark's call in the flattened forward (None: not there once)."""
        if site.kind not in (SiteKind.CALL, SiteKind.ELEMENT):
            return None
        _ = self.flat
        found = self._pos.get((site.span.path, site.span), [])
        return found[0] if len(found) == 1 else None

    # -- alignment -----------------------------------------------------------------------------

    def align(self, a: Site, b: Site, forward: bool, families: Sequence[frozenset[str]]) -> tuple[Site | None, ...]:
        """Sites for the kernels launched between landmarks ``a`` and ``b`` of one direction
        (their key sets, in launch order)."""
        key = (a, b, forward, tuple(families))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._align(a, b, forward, families)
        return hit

    def _align(self, a: Site, b: Site, forward: bool, families: Sequence[frozenset[str]]) -> tuple[Site | None, ...]:
        out: list[Site | None] = [None] * len(families)
        pa, pb = self.position(a), self.position(b)
        calls = self._between(pa, pb, forward) if pa is not None and pb is not None and pa != pb else []
        if not calls:
            return tuple(out)
        ckeys = [e.keys for e in calls]
        placed: list[int] = [-1] * len(families)  # position in ``calls`` of each placed kernel
        # 1. per family, in order
        by_family: dict[str, list[int]] = {}
        for i, keys in enumerate(families):
            if len(keys) == 1:
                by_family.setdefault(next(iter(keys)), []).append(i)
        for fam, items in by_family.items():
            cands = [j for j, k in enumerate(ckeys) if fam in k]
            if not cands or len(items) % len(cands) or len(items) // len(cands) > _MAX_PER_CALL:
                continue
            per = len(items) // len(cands)
            for n, i in enumerate(items):
                placed[i] = cands[n // per]
        # 2. leftovers, between their placed neighbours
        for i, keys in enumerate(families):
            if placed[i] >= 0:
                continue
            before = max((placed[j] for j in range(i) if placed[j] >= 0), default=-1)
            after = min((placed[j] for j in range(i + 1, len(families)) if placed[j] >= 0), default=len(calls))
            # strictly between the neighbours' calls, else including them (one call, two kernels)
            cands = [j for j in range(before + 1, min(after, len(calls))) if (keys & ckeys[j]) or not keys]
            if not cands:
                cands = [j for j in range(max(before, 0), min(after + 1, len(calls)))
                         if (keys & ckeys[j]) or not keys]
            if not cands:
                continue
            stmts = {(calls[j].index.path, calls[j].stmt) for j in cands}
            if len(cands) == 1 and keys:
                placed[i] = cands[0]
            elif len(stmts) == 1:
                e = calls[cands[0]]
                out[i] = self._statement(e, a, b)
        for i, j in enumerate(placed):
            if j >= 0:
                out[i] = self._site(calls[j], a, b)
        return tuple(out)

    def _between(self, pa: int, pb: int, forward: bool) -> list[Entry]:
        """The calls run after position ``pa`` and before ``pb``, in launch order: in between when
        the two are in the direction's order; else, both inside one loop body over a module list,
        from ``pa`` to the body's end and on from its start to ``pb`` (one pass to the next)."""
        flat = self.flat
        if (pa < pb) == forward:
            lo, hi = sorted((pa, pb))
            run = flat[lo + 1:hi]
        else:
            body = min(((s, e) for s, e in self._passes if s <= min(pa, pb) and max(pa, pb) < e),
                       key=lambda p: p[1] - p[0], default=None)
            if body is None:
                return []
            start, end = body
            # backward: the forward order of what runs, reversed below as a whole
            run = flat[pa + 1:end] + flat[start:pb] if forward else flat[pb + 1:end] + flat[start:pa]
        calls = [e for e in run if not e.inlined]
        return calls if forward else calls[::-1]

    @staticmethod
    def _note(a: Site, b: Site) -> str:
        return (f"by launch order: after {a.call_text} (line {a.span.line}), before {b.call_text} "
                f"(line {b.span.line}); no call stack")

    def _site(self, e: Entry, a: Site, b: Site) -> Site:
        c = e.call
        if e.element is not None:
            fn = f"{c.cls}.__init__"
            occ = next((x.occurrence for x in e.index.calls_in(fn) if x.span == e.element.span), 0)
            return Site(e.element.span, Confidence.INFERRED, fn, e.element.text, None,
                        f"{self._note(a, b)}; element of the nn.Sequential run by {c.text} (line {c.span.line})",
                        kind=SiteKind.ELEMENT, occurrence=occ)
        return Site(c.span, Confidence.INFERRED, c.function, c.text, None, self._note(a, b), kind=SiteKind.CALL,
                    occurrence=c.occurrence)

    def _statement(self, e: Entry, a: Site, b: Site) -> Site:
        if e.element is not None:
            return self._site(e, a, b)
        stmt = e.call.stmt
        text = e.index.lines.slice(stmt.line, stmt.col, stmt.end_line, stmt.end_col)
        return Site(stmt, Confidence.INFERRED, e.call.function, text, None, self._note(a, b), kind=SiteKind.STATEMENT,
                    occurrence=e.index.statement_occurrence(stmt, e.call.function))

    @staticmethod
    def beside(landmark: Site, shared: str) -> Site:
        """The landmark's call, for a kernel that converts or finishes its tensor ``shared``."""
        note = f"next to the kernel of {landmark.call_text} in launch order, sharing its tensor {shared}; no call stack"
        return Site(landmark.span, Confidence.INFERRED, landmark.function, landmark.call_text, None, note,
                    kind=landmark.kind, occurrence=landmark.occurrence)


# keys of kernels that convert or finish another op's tensors (format, dtype, bias, reductions)
_ATTACHED_KEYS = frozenset({"layout", "to", "add", "mul", "div"})


def attached(keys: frozenset[str]) -> bool:
    """Can a kernel with these keys belong to the layer op beside it?"""
    return keys <= _ATTACHED_KEYS


def shared_tensor(kernel: tuple[str, str], landmark: tuple[str, str]) -> str | None:
    """A tensor shape (2-D or more) that a kernel's inputs/outputs share with a landmark's, as
    ``64×3×32×32``, or None. Arguments are (input shapes, output shapes) texts."""
    mine = {s for text in kernel for s in parse_shapes(text) if s is not None and len(s) >= 2}
    for text in landmark:
        for s in parse_shapes(text):
            # a 2-D weight is also seen transposed (TransData of W before a matmul taking Wᵀ)
            if s is not None and (s in mine or (len(s) == 2 and (s[1], s[0]) in mine)):
                return "×".join(str(d) for d in s)
    return None
