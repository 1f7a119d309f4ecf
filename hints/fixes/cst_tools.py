"""libcst plumbing the fix transforms share: parse once with metadata, find nodes at an anchor,
resolve names, rewrite nodes by identity, and add imports / module-level helpers once.

Everything works on source text; nothing here imports or executes the user's code.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from msprof_lsp.mapping.source.positions import line_starts
from msprof_lsp.mapping.numbers import int_literal
from msprof_lsp.mapping.profile import safe_io

from .result import Anchor, FixResult, Text, Where, decline, result, where

N = TypeVar("N", bound=cst.CSTNode)

_EMPTY = cst.Module(body=[])
NOT_LITERAL = object()


class Source:
    """One parsed document with positions, parents and import-resolved names.

    Metadata is computed lazily per top-level statement: libcst's PositionProvider and
    ParentNodeProvider over a whole 5,000-line module cost seconds, while a fix only looks at
    the statement around its anchor plus a few module-wide scans (benchmarks/bench_fixes.py).
    Names are resolved through the file's imports (``F.relu`` -> ``torch.nn.functional.relu``,
    ``DDP`` -> ``torch.nn.parallel.DistributedDataParallel``) rather than full scope analysis.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.module: cst.Module = cst.parse_module(text)
        # (first line, last line) of each top-level statement, leading blank/comment lines included
        self.tops: list[tuple[int, int, cst.BaseStatement]] = []
        line = 1 + len(self.module.header)
        for stmt in self.module.body:
            n = self.module.code_for_node(stmt).count("\n") or 1
            self.tops.append((line, line + n - 1, stmt))
            line += n
        self._top_of: dict[int, int] = {}  # id(node) -> index into tops
        self._pos_done: set[int] = set()
        self._positions: dict[int, CodeRange] = {}
        self._parents: dict[int, cst.CSTNode] = {}
        self._by_type: dict[type, list[cst.CSTNode]] | None = None
        self._order: dict[int, int] = {}
        self._line_starts: list[int] | None = None
        self._aliases: dict[str, set[str]] | None = None
        # id(node) -> (node, its children): libcst builds ``children`` anew on every access (a
        # visit of the node), and the offers on one file walk the same statements again and again
        self._kids: dict[int, tuple[cst.CSTNode, Sequence[cst.CSTNode]]] = {}

    def children(self, node: cst.CSTNode) -> Sequence[cst.CSTNode]:
        """``node.children``, computed once per node of this Source."""
        held = self._kids.get(id(node))
        if held is not None and held[0] is node:
            return held[1]
        kids = node.children
        self._kids[id(node)] = (node, kids)
        return kids

    # -- names --------------------------------------------------------------------------------

    def _alias_table(self) -> dict[str, set[str]]:
        if self._aliases is None:
            table: dict[str, set[str]] = {}
            for node in self.walk((cst.Import, cst.ImportFrom), hint="import"):
                if isinstance(node, cst.Import):
                    for a in node.names:
                        full = dotted(a.name) or ""
                        if a.asname is not None:
                            table.setdefault(dotted(a.asname.name) or "", set()).add(full)
                        else:
                            root = full.split(".")[0]
                            table.setdefault(root, set()).add(root)
                elif node.module is not None and not node.relative and not isinstance(node.names, cst.ImportStar):
                    base = dotted(node.module) or ""
                    for a in node.names:
                        name = dotted(a.name) or ""
                        local = dotted(a.asname.name) if a.asname is not None else name
                        table.setdefault(local or "", set()).add(f"{base}.{name}")
            self._aliases = table
        return self._aliases

    def qnames(self, node: cst.CSTNode) -> set[str]:
        """Import-resolved full names of an expression (``F.relu`` -> ``torch.nn.functional.relu``).

        Empty for expressions that are not a dotted name or whose head is not imported.
        """
        d = dotted(node)
        if d is None:
            return set()
        head, _, rest = d.partition(".")
        fulls = self._alias_table().get(head)
        if not fulls:
            return set()
        return {f"{f}.{rest}" if rest else f for f in fulls}

    def is_api(self, node: cst.CSTNode, *names: str) -> bool:
        """True when ``node`` resolves to one of the fully qualified ``names``.

        Falls back to the dotted text for names whose head is not imported in this module (a
        script that calls ``torch.relu`` without ``import torch`` is broken anyway, but the
        dotted text still says what was meant).
        """
        q = self.qnames(node)
        if q:
            return bool(q & set(names))
        d = dotted(node)
        return d is not None and d in names

    def api_suffix(self, node: cst.CSTNode, *suffixes: str) -> bool:
        """True when a qualified (or dotted) name of ``node`` ends with one of ``suffixes``."""
        names = self.qnames(node) or ({dotted(node)} - {None})
        return any(n == s or n.endswith("." + s) for n in names for s in suffixes)

    # -- per-statement metadata ---------------------------------------------------------------

    def _index_top(self, i: int) -> None:
        """Parents and positions of every node in top-level statement ``i``."""
        if i in self._pos_done:
            return
        first, _last, stmt = self.tops[i]
        self._parents[id(stmt)] = self.module
        self._top_of[id(stmt)] = i
        stack: list[cst.CSTNode] = [stmt]
        while stack:
            n = stack.pop()
            for c in self.children(n):
                self._parents[id(c)] = n
                self._top_of[id(c)] = i
                stack.append(c)
        mini = cst.Module(
            body=[stmt],
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
        )
        offset = first - 1
        for node, r in MetadataWrapper(mini, unsafe_skip_copy=True).resolve(PositionProvider).items():
            self._positions[id(node)] = CodeRange(
                CodePosition(r.start.line + offset, r.start.column), CodePosition(r.end.line + offset, r.end.column)
            )
        self._pos_done.add(i)

    def _top_index(self, node: cst.CSTNode) -> int:
        i = self._top_of.get(id(node))
        if i is None:
            for k, (_a, _b, top) in enumerate(self.tops):  # a node met outside walk()/at(): find its statement
                if k not in self._pos_done:
                    self._index_top(k)
                    if id(node) in self._top_of:
                        return self._top_of[id(node)]
            raise KeyError("node is not part of this module")
        return i

    # -- positions ----------------------------------------------------------------------------

    def range(self, node: cst.CSTNode) -> CodeRange:
        self._index_top(self._top_index(node))
        return self._positions[id(node)]

    def lines(self, node: cst.CSTNode) -> tuple[int, int]:
        r = self.range(node)
        return r.start.line, r.end.line

    def at(self, anchor: Where, kind: type[N] | tuple[type, ...], pred: Callable[[N], bool] = lambda n: True) -> list[N]:
        """Nodes of ``kind`` covering the anchor's line, innermost (smallest) first.

        With a column, nodes that also contain the column on the anchor line come first.
        """
        found: list[N] = []
        for i, (first, last, top) in enumerate(self.tops):
            if not first <= anchor.line <= last:
                continue
            self._index_top(i)
            for node in self.within(top, kind):
                r = self._positions.get(id(node))
                if r is not None and r.start.line <= anchor.line <= r.end.line and pred(node):
                    found.append(node)

        def key(n: cst.CSTNode) -> tuple:
            r = self._positions[id(n)]
            size = (r.end.line - r.start.line, r.end.column - r.start.column if r.end.line == r.start.line else 10**6)
            col_hit = 0
            if anchor.col is not None:
                after_start = (r.start.line, r.start.column) <= (anchor.line, anchor.col)
                before_end = (anchor.line, anchor.col) < (r.end.line, r.end.column)
                col_hit = 0 if after_start and before_end else 1
            return (col_hit, size)

        found.sort(key=key)
        return found

    def call_statements(self, anchor: Where, *apis: str) -> Iterator[tuple[cst.SimpleStatementLine, cst.Call]]:
        """Statements at the anchor that are one bare call to one of ``apis``
        (``torch.npu.synchronize()``), innermost first, with their call: what a fix deletes."""
        for line in self.at(anchor, cst.SimpleStatementLine):
            if len(line.body) != 1 or not isinstance(line.body[0], cst.Expr):
                continue
            call = line.body[0].value
            if isinstance(call, cst.Call) and self.is_api(call.func, *apis):
                yield line, call

    def adjacent_pairs(self, anchor: Where) -> Iterator[tuple[cst.BaseStatement, cst.BaseStatement]]:
        """Two consecutive statements of a block, one of them at the anchor: (it, the next), then
        (the previous, it), innermost statements first -- where a two-statement construct
        (``h = x + r`` then ``y = norm(h)``) can be anchored on either line."""
        for line in self.at(anchor, cst.SimpleStatementLine):
            block = self.block_of(line)
            if block is None:
                continue
            i = statement_index(block, line)
            for a, b in ((i, i + 1), (i - 1, i)):
                if 0 <= a and b < len(block.body):
                    yield block.body[a], block.body[b]

    def top_text(self, i: int) -> str:
        first, last, _ = self.tops[i]
        if self._line_starts is None:
            self._line_starts = line_starts(self.text)
        starts = self._line_starts
        a = starts[first - 1] if first - 1 < len(starts) else len(self.text)
        b = starts[last] if last < len(starts) else len(self.text)
        return self.text[a:b]

    def walk(self, kind: type[N] | tuple[type, ...], hint: str | tuple[str, ...] | None = None) -> Iterator[N]:
        """All nodes of a kind in the module, in source order.

        ``hint``: only top-level statements whose text contains one of these strings are
        traversed (a cheap text test that skips most of a large file); without it the whole
        module is traversed once and cached by node type.
        """
        if hint is not None:
            hints = (hint,) if isinstance(hint, str) else hint
            for i, (_a, _b, top) in enumerate(self.tops):
                text = self.top_text(i)
                if any(h in text for h in hints):
                    for n in self.within(top, kind):
                        self._top_of[id(n)] = i
                        yield n
            return
        if self._by_type is None:
            by_type: dict[type, list[cst.CSTNode]] = {}
            order: dict[int, int] = {}
            for i, (_a, _b, top) in enumerate(self.tops):
                stack: list[cst.CSTNode] = [top]
                while stack:
                    n = stack.pop()
                    self._top_of[id(n)] = i
                    order[id(n)] = len(order)
                    by_type.setdefault(type(n), []).append(n)
                    stack.extend(reversed(self.children(n)))
            self._by_type, self._order = by_type, order
        kinds = kind if isinstance(kind, tuple) else (kind,)
        chosen = [t for t in self._by_type if issubclass(t, kinds)]
        if len(chosen) == 1:
            yield from self._by_type[chosen[0]]  # type: ignore[misc]
            return
        merged = [n for t in chosen for n in self._by_type[t]]
        merged.sort(key=lambda n: self._order[id(n)])
        yield from merged  # type: ignore[misc]

    def within(self, root: cst.CSTNode, kind: type[N] | tuple[type, ...]) -> Iterator[N]:
        stack: list[cst.CSTNode] = [root]
        while stack:
            node = stack.pop()
            if isinstance(node, kind):
                yield node  # type: ignore[misc]
            stack.extend(reversed(self.children(node)))

    # -- structure ----------------------------------------------------------------------------

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        if node is self.module:
            return None
        p = self._parents.get(id(node))
        if p is None:
            self._index_top(self._top_index(node))
            p = self._parents.get(id(node))
        return p

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        p = self.parent(node)
        while p is not None:
            yield p
            p = self.parent(p)

    def enclosing(self, node: cst.CSTNode, kind: type[N] | tuple[type, ...]) -> N | None:
        for p in self.ancestors(node):
            if isinstance(p, kind):
                return p  # type: ignore[return-value]
        return None

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement (simple line or compound) that directly holds ``node``."""
        if isinstance(node, cst.BaseStatement):
            return node
        for p in self.ancestors(node):
            if isinstance(p, cst.BaseStatement):
                return p
        return None

    def block_of(self, stmt: cst.BaseStatement) -> cst.IndentedBlock | cst.Module | None:
        p = self.parent(stmt)
        return p if isinstance(p, (cst.IndentedBlock, cst.Module)) else None

    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        return self.enclosing(node, cst.FunctionDef)

    def class_of(self, node: cst.CSTNode) -> cst.ClassDef | None:
        return self.enclosing(node, cst.ClassDef)

    def code(self, node: cst.CSTNode) -> str:
        return code(node)

    def fixed(
        self, replacements: Mapping[cst.CSTNode, Replacement], title: str, *, safe: bool, path: str, notes: tuple[str, ...] = ()
    ) -> "FixResult | None":
        """The fix that applies ``replacements`` to this file (None when it changes nothing)."""
        return result(self, self.rewrite(replacements).code, title, safe=safe, path=path, notes=notes)

    def rewrite(self, replacements: Mapping[cst.CSTNode, Replacement]) -> cst.Module:
        """``rewrite`` applied only to the top-level statements that hold a replaced node.

        Visiting a whole large module with a transformer costs as much as parsing it; the
        statements without replacements are reused as they are.
        """
        if not replacements:
            return self.module
        by_top: dict[int, dict[cst.CSTNode, Replacement]] = {}
        for node, new in replacements.items():
            by_top.setdefault(self._top_index(node), {})[node] = new
        body: list[cst.BaseStatement] = []
        for i, (_a, _b, top) in enumerate(self.tops):
            if i not in by_top:
                body.append(top)
                continue
            out = top.visit(_Rewriter(by_top[i]))
            if isinstance(out, cst.FlattenSentinel):
                body.extend(out.nodes)  # type: ignore[arg-type]
            elif isinstance(out, cst.BaseStatement):
                body.append(out)
            # RemovalSentinel: the statement goes
        return self.module.with_changes(body=body)


def parse(text: str | Source) -> Source | None:
    """Parse a document; None when it does not parse (mid-edit code gets no quick fix), or is
    over a source limit (libcst would crash or take minutes on it). An already parsed Source is
    returned as it is: the fixes of one file share one parse (``offers.expand``)."""
    if isinstance(text, Source):
        return text
    return _parse(text)


def loops_at(source: Text, anchor: Anchor, why: list[str] | None) -> tuple[Source, list[cst.For | cst.While]] | None:
    """The parsed file and the loops around the anchor, innermost first: where the fixes that act
    before or around a loop start. None (the reason in ``why``) when the file does not parse or
    no loop holds the anchor (one on a call inside a loop body is held: ``at`` covers it)."""
    src = parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    loops = src.at(where(anchor), (cst.For, cst.While))  # type: ignore[arg-type]
    if not loops:
        return decline(why, "no loop around this line")
    return src, loops


@functools.lru_cache(maxsize=4)
def _parse(text: str) -> Source | None:
    # Every fix of one check parses the same file text again; a Source only caches lazily, so
    # one parsed copy serves them all (22 parses of one 5,000-line file were most of a check).
    if safe_io.check_source(text) is not None:
        return None
    try:
        return Source(text)
    except (cst.ParserSyntaxError, RecursionError, ValueError):
        return None


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def same(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Structural equality ignoring formatting (``x`` vs ``x``, ``a.b`` vs ``a . b``)."""
    return a.deep_equals(b) or _norm(a) == _norm(b)


def _norm(node: cst.CSTNode) -> str:
    return "".join(code(node).split())


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def stmt(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text if text.endswith("\n") else text + "\n")


# -- calls and arguments ----------------------------------------------------------------------


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


def has_star(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def argument(call: cst.Call, index: int, name: str) -> cst.Arg | None:
    """The argument bound to parameter ``name`` at position ``index`` (keyword or positional)."""
    kw = keyword(call, name)
    if kw is not None:
        return kw
    pos = positional(call)
    return pos[index] if index < len(pos) else None


def literal(node: cst.BaseExpression | None) -> Any:
    """The Python value of a plain literal (numbers, True/False/None, simple strings), else NOT_LITERAL."""
    if node is None:
        return NOT_LITERAL
    if isinstance(node, cst.Integer):
        value = int_literal(node.value)
        return NOT_LITERAL if value is None else value
    if isinstance(node, cst.Float):
        return float(node.value.replace("_", ""))
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        inner = literal(node.expression)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner if isinstance(node.operator, cst.Minus) else inner
        return NOT_LITERAL
    if isinstance(node, cst.SimpleString):
        try:
            return node.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes: not a literal we reason about
            return NOT_LITERAL
    return NOT_LITERAL


def kwarg(name: str, value: str | cst.BaseExpression) -> cst.Arg:
    """``name=value`` formatted the PEP 8 way (no spaces around ``=``)."""
    v = expr(value) if isinstance(value, str) else value
    return cst.Arg(
        value=v,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def _clean_sep(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """A separator like ``ws`` without the comment it may carry (so it can be reused)."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), empty_lines=(), indent=ws.indent, last_line=ws.last_line
        )
    return cst.SimpleWhitespace(" ")


def append_args(call: cst.Call, new_args: Sequence[cst.Arg]) -> cst.Call:
    """Add arguments at the end, in the call's own layout (one line, or one argument per line).

    A comment after the old last argument stays on its line; a trailing comma stays trailing.
    """
    if not new_args:
        return call
    args = list(call.args)
    if not args:
        out = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in new_args[:-1]]
        return call.with_changes(args=[*out, new_args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        sep = _clean_sep(args[-2].comma.whitespace_after)
    elif isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        sep = _clean_sep(call.whitespace_before_args)
    else:
        sep = cst.SimpleWhitespace(" ")
    last = args[-1]
    tail_ws = last.whitespace_after_arg
    trailing: cst.Comma | cst.MaybeSentinel = last.comma
    if isinstance(last.comma, cst.Comma):
        ws = last.comma.whitespace_after
        if isinstance(ws, cst.ParenthesizedWhitespace) and isinstance(sep, cst.ParenthesizedWhitespace):
            # Keep the comment on the old line; the closing layout moves to the new last argument.
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=ws.with_changes(indent=sep.indent, last_line=sep.last_line)))
            trailing = cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
                first_line=cst.TrailingWhitespace(), empty_lines=(), indent=ws.indent, last_line=ws.last_line))
        else:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=sep))
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=sep), whitespace_after_arg=cst.SimpleWhitespace(""))
    added = [a.with_changes(comma=cst.Comma(whitespace_after=sep)) for a in new_args[:-1]]
    added.append(new_args[-1].with_changes(comma=trailing, whitespace_after_arg=tail_ws))
    return call.with_changes(args=[*args, *added])


def set_kwarg(call: cst.Call, name: str, value: str | cst.BaseExpression) -> cst.Call:
    """Replace the value of keyword ``name`` (must exist)."""
    v = expr(value) if isinstance(value, str) else value
    return call.with_changes(
        args=[a.with_changes(value=v) if a.keyword is not None and a.keyword.value == name else a for a in call.args]
    )


# -- rewriting --------------------------------------------------------------------------------

class Prepend:
    """A replacement that keeps the (updated) statement and adds leading lines above it."""

    def __init__(self, lines: Sequence[cst.EmptyLine]) -> None:
        self.lines = list(lines)


Replacement = cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel | Prepend


class _Rewriter(cst.CSTTransformer):
    def __init__(self, replacements: Mapping[cst.CSTNode, Replacement]) -> None:
        super().__init__()
        self.replacements = dict(replacements)

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        if original_node in self.replacements:
            new = self.replacements[original_node]
            if isinstance(new, Prepend):
                return updated_node.with_changes(leading_lines=[*new.lines, *updated_node.leading_lines])
            return new
        return updated_node


def rewrite(module: N, replacements: Mapping[cst.CSTNode, Replacement]) -> N:
    """Replace nodes (by identity) anywhere in the tree (a module or one statement); a replaced
    node's subtree is not revisited."""
    if not replacements:
        return module
    return module.visit(_Rewriter(replacements))  # type: ignore[return-value]


# -- imports and module-level helpers ---------------------------------------------------------

STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


def _is_import_stmt(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body)
    if isinstance(node, cst.Try):  # try: import torch_npu / except ImportError: ...
        return all(_is_import_stmt(s) for s in node.body.body)
    return False


def _is_docstring(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.SimpleStatementLine)
        and len(node.body) == 1
        and isinstance(node.body[0], cst.Expr)
        and isinstance(node.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _import_roots(node: cst.CSTNode) -> list[str]:
    roots: list[str] = []
    if isinstance(node, cst.SimpleStatementLine):
        for s in node.body:
            if isinstance(s, cst.Import):
                roots += [(dotted(a.name) or "").split(".")[0] for a in s.names]
            elif isinstance(s, cst.ImportFrom) and s.module is not None and not s.relative:
                roots.append((dotted(s.module) or "").split(".")[0])
    return roots


def import_section_end(module: cst.Module) -> int:
    """Index in ``module.body`` just after the leading imports.

    The leading section may mix imports with simple statements (``os.environ[...] = ...``,
    ``sys.path.insert(...)``); it ends at the first def, class or compound statement that is not
    an import guard.
    """
    end = 0
    for i, node in enumerate(module.body):
        if i == 0 and _is_docstring(node):
            end = 1
            continue
        if _is_import_stmt(node):
            end = i + 1
            continue
        if isinstance(node, cst.SimpleStatementLine):
            continue
        break
    return end


def binds_module(module: cst.Module, name: str) -> str | None:
    """The local name under which a top-level import makes module ``name`` reachable, if any.

    ``import torch_npu`` -> "torch_npu"; ``import torch_npu as tnpu`` -> "tnpu";
    ``import torch_npu.contrib`` -> "torch_npu"; ``import torch.nn.functional`` binds
    "torch.nn.functional" (and "torch").
    """
    for node in _top_level_imports(module):
        for s in node.body:
            if not isinstance(s, cst.Import):
                continue
            for a in s.names:
                full = dotted(a.name) or ""
                if a.asname is not None:
                    if full == name:
                        return dotted(a.asname.name)
                elif full == name or full.startswith(name + "."):
                    return name
    return None


def _top_level_imports(module: cst.Module) -> Iterator[cst.SimpleStatementLine]:
    for node in module.body:
        if isinstance(node, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body):
            yield node
        elif isinstance(node, cst.Try):
            for s in node.body.body:
                if isinstance(s, cst.SimpleStatementLine):
                    yield s


def import_statement_index(module: cst.Module, name: str) -> int | None:
    """Index in ``module.body`` of the top-level statement that imports module ``name``."""
    for i, node in enumerate(module.body):
        lines = [node] if isinstance(node, cst.SimpleStatementLine) else (
            [s for s in node.body.body if isinstance(s, cst.SimpleStatementLine)] if isinstance(node, cst.Try) else []
        )
        for line in lines:
            for s in line.body:
                if isinstance(s, cst.Import) and any(
                    (dotted(a.name) or "") == name or (dotted(a.name) or "").startswith(name + ".") for a in s.names
                ):
                    return i
    return None


def module_level_names(module: cst.Module) -> set[str]:
    """Names assigned, defined or imported at module level."""
    names: set[str] = set()
    for node in module.body:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            names.add(node.name.value)
        elif isinstance(node, cst.SimpleStatementLine):
            for s in node.body:
                if isinstance(s, cst.Assign):
                    for t in s.targets:
                        if isinstance(t.target, cst.Name):
                            names.add(t.target.value)
                elif isinstance(s, cst.AnnAssign) and isinstance(s.target, cst.Name):
                    names.add(s.target.value)
                elif isinstance(s, cst.Import):
                    for a in s.names:
                        names.add(dotted(a.asname.name) if a.asname else (dotted(a.name) or "").split(".")[0])  # type: ignore[arg-type]
                elif isinstance(s, cst.ImportFrom) and not isinstance(s.names, cst.ImportStar):
                    for a in s.names:
                        names.add(dotted(a.asname.name) if a.asname else dotted(a.name))  # type: ignore[arg-type]
    names.discard(None)  # type: ignore[arg-type]
    return names


def _import_into_head(module: cst.Module, name: str, upto: int, *, above_next: bool = False) -> cst.Module:
    """``import name`` placed by libcst's AddImportsVisitor among the first ``upto`` statements.

    The visitor puts a new import after the last import of the module it is given (after a
    docstring and ``__future__`` imports when there is none), so handing it only the head of the
    module places the line, and the rest of a large module is not visited at all.
    ``above_next``: the blank lines and comments above the statement that follows move above the
    new import (a comment heading the imports stays the heading).
    """
    # Imported here: libcst.codemod pulls in libcst.matchers (~0.3 s of imports), and only a fix
    # that adds an import needs it -- not the language server's start, nor a check without one.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    head = module.with_changes(body=module.body[:upto])
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, name)
    new_head = list(AddImportsVisitor(context).transform_module(head).body)
    rest = list(module.body[upto:])
    old = {id(n) for n in head.body}
    added = [i for i, n in enumerate(new_head) if id(n) not in old]
    if above_next and rest and len(added) == 1 and rest[0].leading_lines:
        i = added[0]
        new_head[i] = new_head[i].with_changes(leading_lines=rest[0].leading_lines)
        rest[0] = rest[0].with_changes(leading_lines=())
    return module.with_changes(body=[*new_head, *rest])


def add_stdlib_import(module: cst.Module, name: str) -> cst.Module:
    """``import name`` once: after the last leading stdlib import, else before the first import."""
    if binds_module(module, name) == name:
        return module
    body = module.body
    end = import_section_end(module)
    last_std = None
    first_import = None
    for i in range(end):
        if _is_import_stmt(body[i]):
            first_import = i if first_import is None else first_import
            roots = _import_roots(body[i])
            if roots and all(r in STDLIB or r == "__future__" for r in roots):
                last_std = i
    if last_std is not None:
        return _import_into_head(module, name, last_std + 1)
    if first_import is not None:
        return _import_into_head(module, name, first_import, above_next=True)
    return _import_into_head(module, name, end)


def add_import_after(module: cst.Module, name: str, after: str) -> cst.Module:
    """``import name`` once, right after the top-level import of ``after`` (else after the imports)."""
    if binds_module(module, name):
        return module
    idx = import_statement_index(module, after)
    return _import_into_head(module, name, idx + 1 if idx is not None else import_section_end(module))


def insert_after_imports(module: cst.Module, statements: Sequence[cst.BaseStatement], *, blank_line: bool = True) -> cst.Module:
    """Module-level statements placed after the leading imports, separated by one blank line."""
    if not statements:
        return module
    body = list(module.body)
    at = import_section_end(module)
    first = statements[0]
    if blank_line and at > 0:
        first = first.with_changes(leading_lines=[cst.EmptyLine()])
    body[at:at] = [first, *statements[1:]]
    if at < len(body) - len(statements):
        nxt = body[at + len(statements)]
        # The next statement keeps its own spacing; give it one blank line if it had none.
        if not nxt.leading_lines and blank_line:
            body[at + len(statements)] = nxt.with_changes(leading_lines=[cst.EmptyLine()])
    return module.with_changes(body=body)


def insert_after_statement(module: cst.Module, index: int, statements: Sequence[cst.BaseStatement]) -> cst.Module:
    body = list(module.body)
    body[index + 1 : index + 1] = list(statements)
    return module.with_changes(body=body)


def all_names(module: cst.CSTNode) -> set[str]:
    """Variable-like names used anywhere (attribute names and keyword-argument names excluded)."""
    out: set[str] = set()
    stack = [module]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            out.add(n.value)
        elif isinstance(n, cst.Attribute):
            stack.append(n.value)
            continue
        elif isinstance(n, cst.Arg):
            stack.append(n.value)
            continue
        stack.extend(n.children)
    return out


def fresh_name(module: cst.CSTNode, base: str) -> str:
    used = all_names(module)
    if base not in used:
        return base
    i = 2
    while f"{base}_{i}" in used:
        i += 1
    return f"{base}_{i}"


def local_name_for(module: cst.Module, target: str) -> str | None:
    """How this module spells the importable ``target`` (``torch.nn.functional`` -> ``F``), or None.

    Looks at top-level ``import a.b as c`` / ``from a import b as c`` / ``import a``.
    """
    best: str | None = None
    for node in _top_level_imports(module):
        for s in node.body:
            if isinstance(s, cst.ImportFrom) and s.module is not None and not s.relative and not isinstance(s.names, cst.ImportStar):
                base = dotted(s.module) or ""
                for a in s.names:
                    full = f"{base}.{dotted(a.name)}"
                    local = dotted(a.asname.name) if a.asname else dotted(a.name)
                    if full == target:
                        return local
                    if target.startswith(full + "."):
                        best = best or f"{local}{target[len(full):]}"
            elif isinstance(s, cst.Import):
                for a in s.names:
                    full = dotted(a.name) or ""
                    if a.asname is not None:
                        local = dotted(a.asname.name)
                        if full == target:
                            return local
                        if target.startswith(full + "."):
                            best = best or f"{local}{target[len(full):]}"
                    elif full.split(".")[0] == target.split(".")[0]:
                        best = best or target
    return best


def self_attr(node: cst.CSTNode) -> str | None:
    """``X`` for an expression ``self.X``."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def init_assignments(cls: cst.ClassDef) -> dict[str, cst.BaseExpression]:
    """``self.<attr> = <value>`` in the class's ``__init__`` (the last assignment wins)."""
    out: dict[str, cst.BaseExpression] = {}
    for item in cls.body.body:
        if isinstance(item, cst.FunctionDef) and item.name.value == "__init__":
            stack: list[cst.CSTNode] = [item.body]
            while stack:
                n = stack.pop()
                if isinstance(n, cst.Assign):
                    for t in n.targets:
                        attr = self_attr(t.target)
                        if attr:
                            out[attr] = n.value
                stack.extend(reversed(n.children))
    return out


def statement_index(block: cst.IndentedBlock | cst.Module, statement: cst.BaseStatement) -> int:
    for i, s in enumerate(block.body):
        if s is statement:
            return i
    raise ValueError("statement not in block")


def module_assignment_index(module: cst.Module, name: str) -> int | None:
    for i, node in enumerate(module.body):
        if isinstance(node, cst.SimpleStatementLine):
            for s in node.body:
                if isinstance(s, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == name for t in s.targets):
                    return i
        if isinstance(node, (cst.ClassDef, cst.FunctionDef)) and node.name.value == name:
            return i
    return None


def single_assign(s: cst.CSTNode) -> cst.Assign | None:
    """The assignment of a statement that is only ``name = <value>``."""
    if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign):
        a = s.body[0]
        if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name):
            return a
    return None


def insert_before(statement: cst.BaseStatement, new: cst.BaseStatement) -> cst.FlattenSentinel:
    """The replacement for ``statement`` that puts ``new`` right above it; the blank lines and
    comments that were above ``statement`` stay above both."""
    return cst.FlattenSentinel([new.with_changes(leading_lines=statement.leading_lines), statement.with_changes(leading_lines=())])


_PURE_EXPRS = (cst.Name, cst.Attribute, cst.SimpleString, cst.Integer, cst.Float, cst.Comparison, cst.BooleanOperation,
               cst.UnaryOperation, cst.ConcatenatedString)


def side_effect_free(expr: cst.BaseExpression) -> bool:
    """True for names, attributes, literals and comparisons/``and``/``or``/``not`` of them: no call,
    subscript, walrus or f-string (dropping such a condition cannot skip a side effect)."""
    stack: list[cst.CSTNode] = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.BaseExpression) and not isinstance(n, _PURE_EXPRS):
            return False
        stack.extend(n.children)
    return True


def _comment_lines(node: cst.CSTNode) -> list[cst.EmptyLine]:
    """Every comment inside a statement, as own-line comments (in source order)."""
    out: list[cst.EmptyLine] = []
    stack: list[cst.CSTNode] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Comment):
            out.append(cst.EmptyLine(indent=True, comment=n))
        stack.extend(reversed(n.children))
    return out


def removal(src: Source, line: cst.BaseStatement) -> dict[cst.CSTNode, Replacement]:
    """Replacements that delete one statement and keep every comment in and above it.

    An ``if`` (no ``else``, not an ``elif``) left empty goes as well when its condition has no
    side effects; any other block left empty gets ``pass`` carrying the statement's comment.
    The comments move above the next statement of the block that stays.
    """
    target = line
    while True:
        block = src.block_of(target)
        owner = src.parent(block) if isinstance(block, cst.IndentedBlock) else None
        if not (
            isinstance(owner, cst.If)
            and len(block.body) == 1  # type: ignore[union-attr]
            and owner.orelse is None
            and not isinstance(src.parent(owner), cst.If)
            and src.block_of(owner) is not None
            and side_effect_free(owner.test)
        ):
            break
        target = owner
    block = src.block_of(target)
    body = list(block.body) if block is not None else [target]
    i = next(k for k, s in enumerate(body) if s is target)
    own_lines = {id(ln.comment) for ln in target.leading_lines if ln.comment is not None}
    comments = [c for c in _comment_lines(target) if id(c.comment) not in own_lines]
    if len(body) == 1 and isinstance(block, cst.IndentedBlock):
        # the block would be empty: `pass`, with the statement's own comment as its trailing one
        trailing = target.trailing_whitespace if isinstance(target, cst.SimpleStatementLine) else cst.TrailingWhitespace()
        own = trailing.comment
        above = [c for c in comments if c.comment is not own]
        return {target: stmt("pass").with_changes(leading_lines=[*target.leading_lines, *above], trailing_whitespace=trailing)}
    carried = [*target.leading_lines, *comments]
    out: dict[cst.CSTNode, Replacement] = {target: cst.RemovalSentinel.REMOVE}
    if i + 1 < len(body):
        if carried:
            out[body[i + 1]] = Prepend(carried)
    elif isinstance(block, cst.IndentedBlock) and any(c.comment is not None for c in carried):
        # the last statement of its block: its comments become the block's closing comments
        kept = [c for c in carried if c.comment is not None]
        return {block: block.with_changes(body=body[:i], footer=[*kept, *block.footer])}
    return out


def remove_statements(
    src: Source, lines: Sequence[cst.BaseStatement], keep: Mapping[cst.CSTNode, Replacement] | None = None
) -> dict[cst.CSTNode, Replacement]:
    """Replacements deleting statements while keeping the blank lines and comments above them.

    Those lines move onto the next statement that stays in the block (merged with any
    replacement already planned for it in ``keep``), so only the deleted lines change; a block
    left empty gets ``pass``.
    """
    out: dict[cst.CSTNode, Replacement] = dict(keep or {})
    gone = {id(s) for s in lines}
    for line in lines:
        block = src.block_of(line)
        body = list(block.body) if block is not None else [line]
        i = next(k for k, s in enumerate(body) if s is line)
        if i > 0 and id(body[i - 1]) in gone:
            continue  # handled with the first statement of this run
        run = [line]
        j = i + 1
        while j < len(body) and id(body[j]) in gone:
            run.append(body[j])
            j += 1
        carried = [ln for s in run for ln in s.leading_lines]
        for s in run:
            out[s] = cst.RemovalSentinel.REMOVE
        if j < len(body) and carried:
            nxt = body[j]
            planned = out.get(nxt)
            if planned is None:
                out[nxt] = Prepend(carried)  # keeps replacements planned inside that statement
            elif isinstance(planned, Prepend):
                out[nxt] = Prepend([*carried, *planned.lines])
            elif isinstance(planned, cst.BaseStatement):
                out[nxt] = planned.with_changes(leading_lines=[*carried, *planned.leading_lines])
        elif all(id(s) in gone for s in body) and not isinstance(block, cst.Module):
            out[run[0]] = stmt("pass").with_changes(leading_lines=carried)
    return out
