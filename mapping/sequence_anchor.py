"""Sequence anchoring: stackless kernels placed by launch order between shape-anchored ones.

The kernels a step launches follow the order of the calls in the model's ``forward`` methods
(and, in backward, the reverse order). Kernels anchored by shape (mapping.shape_anchor) are
landmarks: each sits on a known call of a known function. A kernel launched between two
landmarks was produced by a call that runs between those two calls:

* both landmarks in one function: the calls strictly between them in execution order;
* one function calls into the other through a sub-module attribute (``self.block(x)`` runs
  ``Block.forward``): the calls of the outer function between its landmark and that call, plus
  the calls of the inner function before (forward) or after (backward) its landmark;
* anything else (unrelated functions): no decision.

Among those calls, only the ones that can launch the kernel (mapping.constructs keys; arithmetic
operators never count, ``@`` does) are candidates. Per kernel family in one interval: one
candidate call takes every kernel of that family; as many kernels as calls (or a whole multiple:
``F.dropout`` launches a mask and an apply kernel) are matched in order; otherwise nothing is
picked. The site's confidence is ``inferred`` and its note names the two landmark calls.

Kernels that only convert or finish a layer's tensors -- ``TransData``/``Cast`` before a
convolution, the bias ``Axpy`` or ``ReduceSum`` after a matmul -- have no call of their own: a run
of them right before or right after a landmark kernel, each sharing a 2-D-or-more tensor shape
with it (a 2-D one also transposed), goes to the landmark's call (where a stack would have put it: the same host op).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .constructs import SEARCHABLE_KEYS, call_keys, module_class_called
from .heat import Site
from .shapes import parse_shapes
from .source_index import CallSite, SourceIndex
from .spans import Confidence
from .workspace import SourceWorkspace


@dataclass(frozen=True, slots=True)
class _Place:
    index: SourceIndex
    call: CallSite


class SequenceAnchorer:
    def __init__(self, workspace: SourceWorkspace) -> None:
        self.workspace = workspace
        self._places: dict[Site, _Place | None] = {}
        self._cache: dict[tuple, tuple[Site | None, ...]] = {}

    def place(self, site: Site) -> _Place | None:
        """The call a landmark site is (None for elements, statements, unknown files)."""
        if site in self._places:
            return self._places[site]
        found = None
        index = self.workspace.index(site.span.path) if site.kind == "call" else None
        if index is not None:
            for c in index.calls_in(site.function):
                if c.span == site.span:
                    found = _Place(index, c)
                    break
        self._places[site] = found
        return found

    def between(self, a: Site, b: Site) -> list[CallSite] | None:
        """Calls that run between landmark calls ``a`` and ``b`` in launch order (None: unknown)."""
        pa, pb = self.place(a), self.place(b)
        if pa is None or pb is None or pa.index.path != pb.index.path and not _related(pa, pb):
            return None
        ca, cb = pa.call, pb.call
        if ca.function == cb.function and pa.index is pb.index:
            lo, hi = sorted((ca.order, cb.order))
            calls = [c for c in pa.index.calls_in(ca.function) if lo < c.order < hi]
            return calls if ca.order <= cb.order else calls[::-1]
        for outer, inner, forward in ((pa, pb, True), (pb, pa, False)):
            link = _link(outer, inner)
            if link is None:
                continue
            oo, io = outer.call.order, inner.call.order
            if link.order > oo:  # outer's landmark runs before it calls into inner
                outer_part = [c for c in outer.index.calls_in(outer.call.function) if oo < c.order < link.order]
                inner_part = [c for c in inner.index.calls_in(inner.call.function) if c.order < io]
            else:
                outer_part = [c for c in outer.index.calls_in(outer.call.function) if link.order < c.order < oo]
                inner_part = [c for c in inner.index.calls_in(inner.call.function) if c.order > io]
            seq = outer_part + inner_part if link.order > oo else inner_part + outer_part
            return seq if forward else seq[::-1]
        return None

    def align(self, a: Site, b: Site, families: Sequence[frozenset[str]]) -> tuple[Site | None, ...]:
        """Sites for the kernels launched between landmarks ``a`` and ``b`` (their key sets, in
        launch order)."""
        key = (a, b, tuple(families))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        out: list[Site | None] = [None] * len(families)
        calls = self.between(a, b)
        if calls:
            by_family: dict[str, list[int]] = {}
            for i, keys in enumerate(families):
                k = keys & SEARCHABLE_KEYS
                if len(k) == 1:
                    by_family.setdefault(next(iter(k)), []).append(i)
            for fam, items in by_family.items():
                cands = [c for c in calls if (not c.operator or c.name in ("@", "@="))
                         and fam in self._keys(c)]
                if not cands:
                    continue
                if len(items) % len(cands) == 0:
                    per = len(items) // len(cands)
                    for j, i in enumerate(items):
                        out[i] = self._site(cands[j // per], a, b)
        res = tuple(out)
        self._cache[key] = res
        return res

    def _keys(self, c: CallSite) -> frozenset[str]:
        index = self.workspace.index(c.span.path)
        return call_keys(index, c.idx) if index is not None else frozenset()

    @staticmethod
    def beside(landmark: Site, shared: str) -> Site:
        """The landmark's call, for a kernel that converts or finishes its tensor ``shared``."""
        note = f"next to the kernel of {landmark.call_text} in launch order, sharing its tensor {shared}; no call stack"
        return Site(landmark.span, Confidence.INFERRED, landmark.function, landmark.call_text, None, note,
                    kind=landmark.kind, occurrence=landmark.occurrence)

    @staticmethod
    def _site(c: CallSite, a: Site, b: Site) -> Site:
        note = (f"by launch order: after {a.call_text} (line {a.span.line}), before {b.call_text} "
                f"(line {b.span.line}); no call stack")
        return Site(c.span, Confidence.INFERRED, c.function, c.text, None, note, kind="call",
                    occurrence=c.occurrence)


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


def _related(pa: _Place, pb: _Place) -> bool:
    return _link(pa, pb) is not None or _link(pb, pa) is not None


def _link(outer: _Place, inner: _Place) -> CallSite | None:
    """The one call in ``outer``'s function that runs ``inner``'s function (a sub-module
    attribute whose class owns it: ``self.block(x)`` -> ``Block.forward``)."""
    fn = inner.index.functions.get(inner.call.function)
    if fn is None or not fn.cls or fn.name != "forward":
        return None
    cls_name = fn.cls.rsplit(".", 1)[-1]
    found = [c for c in outer.index.calls_in(outer.call.function)
             if (classes := module_class_called(outer.index, c)) and cls_name in classes]
    return found[0] if len(found) == 1 else None
