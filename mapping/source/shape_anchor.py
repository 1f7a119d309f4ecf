"""Shape anchoring: a stackless kernel -> the layer whose weight its shapes name -> its call.

Used where a profile carries no call stack for a kernel (msprof CLI ``PROF_*``, Level0,
``with_stack=False``, a DB export without call chains). The weight shapes of the model's layers
come from :mod:`mapping.sizes`; a kernel matches a layer when one of its tensors *is* that
weight, in one of the three forms a layer's matmul takes (``W`` is ``(out, in)`` for
``nn.Linear``):

* **forward** ``Y = X·Wᵀ``: an input is ``W`` (or ``Wᵀ``), the other input's last dim is ``in``;
* **input gradient** ``dX = dY·W``: an input is ``W``, the other input's last dim is ``out``;
* **weight gradient** ``dW = dYᵀ·X``: no input is ``W``; the output is ``W`` (or ``Wᵀ``) and the
  two inputs share their first dim (the batch).

Convolutions, embeddings and norms match when an input (forward, input gradient) or the output
(weight gradient) is the weight. The anchor is the layer's call in ``forward`` (``self.fc(x)``),
or the ``nn.Sequential`` element; its confidence is ``inferred`` and its note says what matched.
When the kernel's shapes fit layers called at two or more places, nothing is picked: the note
names the candidates (a square ``nn.Linear(512, 512)`` used in every block is the common case).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from msprof_lsp.mapping.source.constructs import call_keys
from msprof_lsp.mapping.source.heat import Site, SiteKind
from msprof_lsp.mapping.profile.shapes import Shape, numel, parse_shapes
from msprof_lsp.mapping.source.sizes import Construction, LayerKind, SizeResolver, SizeTable
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.source.workspace import SourceWorkspace


class Form(str, enum.Enum):
    FORWARD = "forward"
    INPUT_GRAD = "input gradient dX = dY·W"
    WEIGHT_GRAD = "weight gradient dW = dYᵀ·X"


@dataclass(frozen=True, slots=True)
class ShapeMatch:
    construction: Construction
    form: Form


# which kernel families can carry which layer's weight (mapping.constructs keys)
_FAMILIES: dict[LayerKind, frozenset[str]] = {
    LayerKind.LINEAR: frozenset({"matmul"}),
    LayerKind.ATTENTION: frozenset({"matmul"}),
    LayerKind.PARAMETER: frozenset({"matmul"}),
    LayerKind.CONV: frozenset({"conv"}),
    LayerKind.EMBEDDING: frozenset({"embedding"}),
    LayerKind.NORM: frozenset({"layer_norm", "rms_norm"}),
}
SHAPE_KEYS = frozenset().union(*_FAMILIES.values())


def _dims(s: Shape) -> str:
    return "×".join(str(d) for d in s)


def shapes_text(shapes: list[Shape | None]) -> str:
    """``8192×1000 · 4095×1000`` (absent inputs left out)."""
    return " · ".join(_dims(s) for s in shapes if s is not None)


def _matmul_form(c: Construction, w: Shape, ins: list[Shape], outs: list[Shape], backward: bool,
                 transposed: bool) -> Form | None:
    """How a matmul kernel's tensors name the 2-D weight ``w`` of ``c`` (as stored, or with
    ``transposed`` as ``Wᵀ``), or None."""
    # contract: the dim X·W sums over in the forward; produce: the dim it yields
    if c.kind is LayerKind.PARAMETER:
        contract, produce = w  # used as x @ W
    else:
        produce, contract = w  # stored (out, in)
    seen = (w[1], w[0]) if transposed else w
    mats = [s for s in ins if len(s) >= 2]
    weight_in = [i for i, s in enumerate(mats) if s == seen]
    if weight_in:
        others = [s for i, s in enumerate(mats) if i != weight_in[0]]
        if len(others) != 1:
            return None
        x = others[0]
        out = next((s for s in outs if len(s) >= 2), None)
        fwd = contract in (x[-1], x[0]) and (out is None or produce in (out[-1], out[0]))
        dx = produce in (x[-1], x[0]) and (out is None or contract in (out[-1], out[0]))
        if fwd and dx:
            return Form.INPUT_GRAD if backward else Form.FORWARD
        return Form.FORWARD if fwd else (Form.INPUT_GRAD if dx else None)
    if len(mats) == 2 and any(s == seen for s in outs):
        # dW = dYᵀ·X: dY carries `produce`, X `contract`, both over the same batch dim
        flat = [s if len(s) == 2 else (numel(s) // max(s[-1], 1), s[-1]) for s in mats]
        for a, b in ((flat[0], flat[1]), (flat[1], flat[0])):
            if produce in a and contract in b:
                rest_a = [d for d in a if d != produce] or [produce]
                rest_b = [d for d in b if d != contract] or [contract]
                if set(rest_a) & set(rest_b):
                    return Form.WEIGHT_GRAD
    return None


def match_layer(c: Construction, op_type: str, ins: list[Shape], outs: list[Shape], backward: bool,
                transposed: bool = False) -> Form | None:
    """The form in which a kernel's shapes name ``c``'s weight, or None.

    ``transposed``: a matmul weight seen as ``Wᵀ`` (a materialised transpose) instead of as
    stored; non-matmul layers only match as stored.
    """
    grad_type = "grad" in op_type.lower() or "backprop" in op_type.lower() or backward
    for w in c.weights:
        if c.kind in (LayerKind.LINEAR, LayerKind.ATTENTION, LayerKind.PARAMETER):
            if len(w) == 2:
                form = _matmul_form(c, w, ins, outs, backward, transposed)
                if form is not None:
                    return form
            continue
        if transposed:
            continue
        if c.kind is LayerKind.NORM:
            # a norm's gamma (d,) beside an activation (..., d); the grad kernel takes the same
            if any(s == w for s in ins) and any(len(s) >= 2 and s[-1] == w[0] for s in ins):
                return Form.INPUT_GRAD if grad_type else Form.FORWARD
            continue
        if any(s == w for s in ins):
            return Form.INPUT_GRAD if grad_type else Form.FORWARD
        if any(s == w for s in outs) and grad_type:
            return Form.WEIGHT_GRAD
    return None


@dataclass(frozen=True, slots=True)
class ShapeAnchor:
    """Sites for one kernel signature: one site, or none with a note (ambiguous / no match)."""

    site: Site | None
    note: str
    candidates: tuple[Site, ...] = ()
    form: Form | None = None  # how the kernel used the layer's weight (with ``site``)


class ShapeAnchorer:
    """Matches kernel shapes to the workspace's layers (sizes resolved once, on first use)."""

    def __init__(self, workspace: SourceWorkspace) -> None:
        self.workspace = workspace
        self._table: SizeTable | None = None

    @property
    def table(self) -> SizeTable:
        if self._table is None:
            indexes = [ix for p in self.workspace.python_files() if (ix := self.workspace.index(p)) is not None]
            self._table = SizeResolver(indexes).table
        return self._table

    def anchor(self, keys: frozenset[str], op_type: str, label: str, input_shapes: str, output_shapes: str,
               backward: bool) -> ShapeAnchor:
        if not keys & SHAPE_KEYS:
            return ShapeAnchor(None, "")
        ins = [s for s in parse_shapes(input_shapes) if s is not None]
        outs = [s for s in parse_shapes(output_shapes) if s is not None]
        if not ins:
            return ShapeAnchor(None, f"{label}: no shapes recorded")
        # tie-break: a tensor equal to a weight as stored beats one equal to its transpose (kernels
        # take parameters as stored, with a transpose flag): Linear(1000, 4095)'s forward and the
        # input gradient of a Linear(4095, 1000) differ only there
        matches: list[ShapeMatch] = []
        for transposed in (False, True):
            matches = [ShapeMatch(c, f) for c in self.table.constructions if keys & _FAMILIES[c.kind]
                       for f in [match_layer(c, op_type, ins, outs, backward, transposed)] if f is not None]
            if matches:
                break
        if not matches:
            return ShapeAnchor(None, f"{label}: shapes {shapes_text(ins)} match no layer built with static sizes")
        what = shapes_text(ins) + (f" → {shapes_text(outs)}" if outs else "")
        by_site: dict[tuple, tuple[Site, ShapeMatch]] = {}
        unplaced: list[str] = []
        for m in matches:
            site, why = self._site(m.construction)
            if site is None:
                unplaced.append(f"{m.construction.where} ({why})")
                continue
            by_site.setdefault((site.span, site.kind), (site, m))
        if len(by_site) == 1 and not unplaced:
            site, m = next(iter(by_site.values()))
            c = m.construction
            called = f", called at line {site.span.line}" if site.kind is SiteKind.CALL else ""
            note = f"by shape {what} to {c.where}{called} ({m.form.value}); no call stack"
            return ShapeAnchor(Site(site.span, Confidence.INFERRED, site.function, site.call_text, None, note,
                                    kind=site.kind, occurrence=site.occurrence), note, form=m.form)
        names = [f"{m.construction.where}" + (f" called at line {s.span.line}" if s.kind is SiteKind.CALL else "")
                 for s, m in by_site.values()] + unplaced
        return ShapeAnchor(None, f"{label}: shapes {what} fit {len(names)} layers ({'; '.join(names[:4])}"
                                 f"{' …' if len(names) > 4 else ''}); not attributed",
                           tuple(s for s, _ in by_site.values()))

    def _site(self, c: Construction) -> tuple[Site | None, str]:
        """Where a layer is called: ``self.<attr>(...)`` in a method of its class (one place)."""
        index = self.workspace.index(c.path)
        if index is None:
            return None, "file unreadable"
        info = index.classes.get(c.cls)
        if info is None:
            return None, "not a module attribute"
        if c.kind is LayerKind.PARAMETER or (c.kind is LayerKind.NORM and c.attr not in info.attr_calls):
            return self._param_site(index, c)
        calls = [index.calls[i] for i in info.attr_calls.get(c.attr, ())]
        loop = [x for x in index.calls if x.cls == c.cls and x.loop_attr == c.attr]
        calls = calls + loop
        if c.element >= 0:
            direct = [x for x in calls if x.element == c.element]
            if len(direct) == 1:
                calls = direct
            elif len([x for x in calls if x.element < 0]) == 1:
                attr = index.module_attr(c.cls, c.attr)
                elems = attr.elements if attr is not None else ()
                e = next((e for e in elems if e.index == c.element), None)
                if e is not None:
                    return Site(e.span, Confidence.INFERRED, f"{c.cls}.__init__", e.text, None, "",
                                kind=SiteKind.ELEMENT), ""
        if len(calls) == 1:
            x = calls[0]
            return Site(x.span, Confidence.INFERRED, x.function, x.text, None, "", kind=SiteKind.CALL,
                        occurrence=x.occurrence), ""
        if not calls:
            return None, f"self.{c.attr} is never called"
        return None, f"self.{c.attr} is called at {len(calls)} places"

    def _param_site(self, index: SourceIndex, c: Construction) -> tuple[Site | None, str]:
        """A parameter used in one matmul (``x @ self.W``) / one norm call of its class."""
        want = frozenset({"matmul"}) if c.kind is LayerKind.PARAMETER else frozenset({"layer_norm", "rms_norm", "mul"})
        uses = []
        for x in index.calls:
            if x.cls != c.cls or f".{c.attr}" not in x.text:
                continue
            if x.name in ("@", "@=") or call_keys(index, x.idx) & want:
                uses.append(x)
        # the outermost use: ``(x * self.weight)`` inside a larger expression keeps the inner one
        if len(uses) == 1:
            x = uses[0]
            return Site(x.span, Confidence.INFERRED, x.function, x.text, None, "", kind=SiteKind.CALL,
                        occurrence=x.occurrence), ""
        return None, (f"self.{c.attr} is used in {len(uses)} places" if uses else f"self.{c.attr} is not used "
                      "in a matmul")
