"""A small, conservative def-use view of plain names inside one function body.

Enough to answer the questions the fixes ask — "is this tensor read again after the call?",
"where was this name last bound?", "is this temporary used only once?" — without pretending to
be a full data-flow analysis: anything unusual (loops around the call, bindings in other
blocks, global/nonlocal names) makes the callers decline rather than guess.

A store in an assignment takes effect at the end of its statement, so in ``x = F.relu(x)`` the
load of ``x`` comes before the store, as Python evaluates it.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .cst_tools import Source

Pos = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Occurrence:
    name: str
    node: cst.Name
    pos: Pos  # effective position: where the read happens, or where the binding takes effect
    kind: str  # load | store | augstore (reads then writes) | param | other-store (for/with/except/import/...)
    statement: cst.BaseStatement | None  # innermost statement holding the name
    binder: cst.CSTNode | None = None  # the Assign / AnnAssign / AugAssign for stores

    @property
    def is_load(self) -> bool:
        return self.kind in ("load", "augstore")

    @property
    def is_store(self) -> bool:
        return self.kind != "load"


_LOOPS = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda)


class NameFlow:
    """Occurrences of plain names in one function (nested functions and lambdas included)."""

    def __init__(self, src: Source, func: cst.FunctionDef) -> None:
        self.src = src
        self.func = func
        self.by_name: dict[str, list[Occurrence]] = {}
        self.declared_outer: set[str] = set()  # global / nonlocal names: never reasoned about
        for node in src.within(func, (cst.Global, cst.Nonlocal)):
            self.declared_outer.update(n.name.value for n in node.names)
        for node in src.within(func, cst.Name):
            occ = self._classify(node)
            if occ is not None:
                self.by_name.setdefault(occ.name, []).append(occ)
        for lst in self.by_name.values():
            lst.sort(key=lambda o: o.pos)

    # -- classification -----------------------------------------------------------------------

    def _classify(self, node: cst.Name) -> Occurrence | None:
        src = self.src
        parent = src.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return None  # obj.name: an attribute, not a variable
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            return None  # f(name=...)
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is node:
            return None
        if isinstance(parent, (cst.ImportAlias, cst.Global, cst.Nonlocal, cst.NameItem)):
            return None
        stmt = src.statement(node)
        start = src.range(node).start
        here = (start.line, start.column)
        if isinstance(parent, cst.Param) and parent.name is node:
            return Occurrence(node.value, node, here, "param", stmt)
        target_root = self._store_root(node)
        if target_root is None:
            return Occurrence(node.value, node, here, "load", stmt)
        kind, binder = target_root
        if kind in ("store", "augstore"):
            small = binder
            end = src.range(small).end
            return Occurrence(node.value, node, (end.line, end.column), kind, stmt, binder)
        if kind == "walrus":
            end = src.range(binder).end
            return Occurrence(node.value, node, (end.line, end.column), "other-store", stmt, binder)
        return Occurrence(node.value, node, here, "other-store", stmt, binder)

    def _store_root(self, node: cst.Name) -> tuple[str, cst.CSTNode] | None:
        """('store'|'augstore'|'walrus'|'other', binder) when ``node`` is bound here, else None."""
        child: cst.CSTNode = node
        for p in self.src.ancestors(node):
            if isinstance(p, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)) and not isinstance(p, cst.Subscript):
                child = p
                continue
            if isinstance(p, cst.AssignTarget) and p.target is child:
                return "store", self.src.parent(p)  # the Assign
            if isinstance(p, cst.AugAssign) and p.target is child:
                return "augstore", p
            if isinstance(p, cst.AnnAssign) and p.target is child:
                return "store", p
            if isinstance(p, cst.NamedExpr) and p.target is child:
                return "walrus", p
            if isinstance(p, (cst.For, cst.CompFor)) and p.target is child:
                return "other", p
            if isinstance(p, cst.AsName) and p.name is child:
                return "other", p
            if isinstance(p, cst.Del):
                return "other", p
            return None
        return None

    # -- queries ------------------------------------------------------------------------------

    def occurrences(self, name: str) -> list[Occurrence]:
        return self.by_name.get(name, [])

    def occurrence_of(self, node: cst.Name) -> Occurrence | None:
        for o in self.occurrences(node.value):
            if o.node is node:
                return o
        return None

    def in_loop(self, node: cst.CSTNode) -> bool:
        """True when ``node`` can run more than once per call of the function (loop, comprehension, lambda)."""
        for p in self.src.ancestors(node):
            if p is self.func:
                return False
            if isinstance(p, _LOOPS):
                return True
        return False

    def last_store_before(self, name: str, pos: Pos) -> Occurrence | None:
        best = None
        for o in self.occurrences(name):
            if o.is_store and o.pos < pos:
                best = o
        return best

    def loads_between(self, name: str, start: Pos, end: Pos, *, exclude: cst.Name | None = None) -> list[Occurrence]:
        return [o for o in self.occurrences(name) if o.is_load and start < o.pos < end and o.node is not exclude]

    def first_after(self, name: str, pos: Pos, *, exclude: cst.Name | None = None) -> Occurrence | None:
        for o in self.occurrences(name):
            if o.pos > pos and o.node is not exclude:
                return o
        return None

    def loads(self, name: str) -> list[Occurrence]:
        return [o for o in self.occurrences(name) if o.is_load]

    def same_block(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        sa, sb = self.src.statement(a), self.src.statement(b)
        if sa is None or sb is None:
            return False
        return self.src.block_of(sa) is self.src.block_of(sb)

    def dead_after(self, name: cst.Name) -> bool:
        """True when the value ``name`` holds at this load is never read afterwards.

        The next occurrence of the name must be a plain assignment in the same block (or none at
        all), and the load must not sit in a loop.
        """
        if name.value in self.declared_outer or self.in_loop(name):
            return False
        occ = self.occurrence_of(name)
        if occ is None or occ.kind != "load":
            return False
        nxt = self.first_after(name.value, occ.pos, exclude=name)
        if nxt is None:
            return True
        if nxt.kind != "store":
            return False
        return nxt.statement is occ.statement or self.same_block(nxt.node, name)
