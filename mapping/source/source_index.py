"""The libcst index of one Python source file: every call with its exact span, and the structure
attribution and the rules need around it (functions, classes and their sub-module attributes,
imports, loops, statements, the entry point).

Positions come from libcst's ``PositionProvider``: 1-based lines, 0-based code-point columns.

Speed. libcst parses a 3,000-line file in a few hundred ms, and computing positions costs about
twice that again, too slow to redo on every keystroke. So a file is cut into *top-level statement
chunks* (a cheap string scan that tracks strings, comments and brackets); each chunk is parsed and
indexed on its own and cached by its text, and the file index is composed from the chunk indexes by
shifting line numbers. An edit inside one function re-parses only that chunk. A chunk that does not
parse on its own (the scan cut in a wrong place, or a real syntax error) makes the whole file parse
in one piece, so the result is always what a whole-file parse gives. Qualified names are resolved
from the file's own imports when composing (``QualifiedNameProvider`` would need a scope analysis
of the whole file, several times the cost of parsing; see docs/performance.md).

The user's code is parsed, never imported or executed.
"""

from __future__ import annotations

import builtins
import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from msprof_lsp.mapping.numbers import int_literal
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.source import positions
from msprof_lsp.mapping.source.positions import LineIndex
from msprof_lsp.mapping.spans import Span

MODULE_SCOPE = "<module>"
CONTAINER_CLASSES = frozenset({"Sequential", "ModuleList", "ModuleDict"})
# functions that run the module given as their first positional argument on the other arguments
# (gradient checkpointing): a call of one is indexed as a call of that module (``self_attr`` ...)
RUNS_FIRST_ARGUMENT = frozenset({
    "torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential",
    "deepspeed.checkpointing.checkpoint",
})
_BUILTIN_NAMES = frozenset(dir(builtins))


class SourceSyntaxError(Exception):
    """The file does not parse; the workspace keeps serving its last good index."""

    def __init__(self, path: str, line: int, col: int, message: str) -> None:
        self.path = path
        self.line = line
        self.col = col
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col + 1}: syntax error: {self.message}"

    @property
    def reason(self) -> str:
        """Why the file has no index, as a location note says it."""
        return f"syntax error at line {self.line}"


class SourceTooComplex(SourceSyntaxError):
    """The file is over a source limit of mapping.safe_io: refused before libcst could crash on it."""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"

    @property
    def reason(self) -> str:
        return f"{self.message} at line {self.line}"


def _refuse_complex(path: str, text: str) -> None:
    rejected = safe_io.check_source(text)
    if rejected is not None:
        raise SourceTooComplex(path, rejected.line, 0, rejected.message())


# ---------------------------------------------------------------------------------------------
# Records


@dataclass(slots=True)  # not frozen: thousands are made per keystroke (frozen init is ~20x slower)
class CallSite:
    """A call (or an operator that launches a tensor op: ``@ + - * /`` and their ``=`` forms).

    Treat as read-only; indexes share them."""

    span: Span
    text: str  # source text of the call
    callee: str  # dotted callee text ("F.relu", "self.drop", "x.to"); "" if not dotted; operator symbol
    qualname: str  # resolved through the file's imports ("torch.nn.functional.relu"); "" if unknown
    name: str  # last component of the callee ("relu", "drop", "to", "@"); "" if none
    receiver: str  # callee without its last component ("F", "self", "x"), "" if none / not dotted
    function: str  # qualname of the enclosing function, class body, or "<module>"
    cls: str  # qualname of the enclosing class of the method ("" outside methods)
    stmt: Span  # enclosing simple statement, or compound-statement header (``for x in loader:``)
    order: int  # execution order within ``function`` (post-order: arguments run first)
    depth: int  # number of enclosing calls (0 = not an argument of another call)
    occurrence: int = 0  # index among calls of ``function`` with the same ``text``
    operator: bool = False
    # "drop" for ``self.drop(x)`` / "layers" for ``self.layers[0](x)``; for a RUNS_FIRST_ARGUMENT call
    # (``checkpoint(self.block, x)``) these three name the module it runs
    self_attr: str = ""
    element: int = -1  # the literal index of ``self.layers[0](x)``
    loop_attr: str = ""  # callee is a loop variable of ``for v in self.<attr>:``
    in_loop: bool = False  # inside a for/while of its own function
    idx: int = -1  # position in SourceIndex.calls


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    qualname: str  # "Net.forward", "main", "outer.<locals>.inner"
    name: str
    cls: str  # enclosing class qualname for methods, else ""
    parent: str  # enclosing function qualname ("" at module level / directly in a class)
    span: Span  # the whole definition, decorators included
    def_line: int  # line of ``def``
    first_line: int  # first decorator line, else def line (what ``co_firstlineno`` says)
    header: Span  # ``def name(...):`` up to the body
    body: Span
    self_name: str = ""  # first parameter of a method ("self")
    calls: tuple[int, ...] = ()  # indices into SourceIndex.calls, execution order


@dataclass(frozen=True, slots=True)
class ModuleAttr:
    """``self.<attr> = <Call>`` in ``__init__`` (or one element of an ``nn.Sequential``)."""

    attr: str  # attribute name; for elements the index as text
    span: Span  # the constructor call
    ctor: str  # callee text ("nn.Linear")
    ctor_qualname: str  # "torch.nn.Linear" ("" if not resolvable)
    class_name: str  # last component ("Linear")
    text: str
    index: int = -1  # element index inside a container
    elements: tuple["ModuleAttr", ...] = ()

    @property
    def is_container(self) -> bool:
        return self.class_name in CONTAINER_CLASSES


@dataclass(frozen=True, slots=True)
class ClassInfo:
    qualname: str
    name: str
    span: Span
    bases: tuple[str, ...]  # resolved qualnames, or dotted text when not resolvable
    methods: tuple[str, ...]  # function qualnames
    attrs: Mapping[str, ModuleAttr] = field(default_factory=dict)
    attr_calls: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # attr -> call indices, source order


@dataclass(frozen=True, slots=True)
class ImportInfo:
    module: str  # "torch.nn.functional" / "torch" (``from torch import nn``); leading dots kept
    name: str  # imported name for ``from`` imports ("nn"), "" for ``import x``
    asname: str
    bound: str  # the local name it binds ("F", "nn", "torch")
    target: str  # what the bound name refers to ("torch.nn.functional", "torch.nn", "torch")
    span: Span
    function: str  # scope the import is in ("<module>" or a function qualname)


@dataclass(frozen=True, slots=True)
class LoopInfo:
    kind: str  # "for" | "while"
    span: Span
    header: Span
    function: str
    target: str  # loop target text ("" for while)
    iter_text: str  # iterable (for) or condition (while) text
    calls: tuple[int, ...] = ()  # calls of the body, execution order


@dataclass(frozen=True, slots=True)
class Statement:
    span: Span
    text: str
    function: str


@dataclass(frozen=True, slots=True)
class Binding:
    """``name = Ctor(...)`` (method chains unwrapped: ``Net(...).to(dev)`` -> ``Net``)."""

    function: str
    name: str
    ctor: str
    ctor_qualname: str
    span: Span


# ---------------------------------------------------------------------------------------------
# Chunking: cut the text at top-level statement starts


_TOKEN_RE = re.compile(
    r"""(?P<str>(?:[rRbBuUfF]{0,2})(?:'''|\"\"\"|'|"))|(?P<comment>\#[^\r\n]*)|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<nl>\r\n|\r|\n)|(?P<cont>\\(?:\r\n|\r|\n))"""
)
_CONTINUATION_KW = re.compile(r"(?:else|elif|except|finally)\b")


def _split_chunks(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each top-level statement chunk; one chunk when unsure.

    A line starts a chunk when it starts at column 0 outside any string or bracket, is not a
    comment, a continuation keyword (``else``/``elif``/``except``/``finally``) or a closing bracket,
    and the previous statement was not a decorator. The scan may still cut wrongly in exotic cases
    (nested f-string quotes); then some chunk fails to parse and the caller parses the whole file.
    """
    starts: list[int] = []  # character offsets of chunk starts
    line_starts = positions.line_starts(text)
    # Offsets of line starts that are "clean" (outside strings, brackets, continuations).
    unclean: set[int] = set()
    depth = 0
    pos = 0
    n = len(text)
    search = _TOKEN_RE.search
    while pos < n:
        m = search(text, pos)
        if m is None:
            break
        kind = m.lastgroup
        if kind == "str":
            quote = m.group()[-3:] if m.group().endswith(("'''", '"""')) else m.group()[-1]
            raw = "r" in m.group()[: -len(quote)].lower()
            end = _string_end(text, m.end(), quote, raw)
            if end < 0:
                return [(1, text)]  # unterminated string: let the parser report it
            # every line start inside the string is unclean
            i = bisect.bisect_right(line_starts, m.start())
            while i < len(line_starts) and line_starts[i] < end:
                unclean.add(line_starts[i])
                i += 1
            pos = end
        elif kind == "comment":
            pos = m.end()
        elif kind == "open":
            depth += 1
            pos = m.end()
        elif kind == "close":
            depth = max(0, depth - 1)
            pos = m.end()
        elif kind == "cont":
            unclean.add(m.end())
            pos = m.end()
        else:  # newline
            if depth:
                unclean.add(m.end())
            pos = m.end()
    decorator_open = False
    for off in line_starts:
        if off >= n or off in unclean:
            continue
        ch = text[off]
        if ch in " \t\r\n#\f)]}":
            continue
        if _CONTINUATION_KW.match(text, off):
            continue
        if decorator_open:
            # a decorator's function/class (or the next decorator) stays in its chunk
            if ch != "@":
                decorator_open = False
            continue
        if ch == "@":
            decorator_open = True
        starts.append(off)
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    chunks = []
    for i, off in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else n
        line = bisect.bisect_right(line_starts, off)
        chunks.append((line, text[off:end]))
    return chunks


def _string_end(text: str, pos: int, quote: str, raw: bool) -> int:
    """Offset just past the closing ``quote`` of a string whose body starts at ``pos``; -1 if none."""
    n = len(text)
    single = len(quote) == 1
    while pos < n:
        ch = text[pos]
        if ch == "\\":
            pos += 2
            continue
        if single and ch in "\r\n":
            return pos  # unterminated single-quoted string: stop at the line end
        if text.startswith(quote, pos):
            return pos + len(quote)
        pos += 1
    return -1 if not single else n


# ---------------------------------------------------------------------------------------------
# Indexing one chunk


_OPERATORS: dict[type, str] = {
    cst.MatrixMultiply: "@",
    cst.Add: "+",
    cst.Subtract: "-",
    cst.Multiply: "*",
    cst.Divide: "/",
}
_AUG_OPERATORS: dict[type, str] = {
    cst.MatrixMultiplyAssign: "@=",
    cst.AddAssign: "+=",
    cst.SubtractAssign: "-=",
    cst.MultiplyAssign: "*=",
    cst.DivideAssign: "/=",
}



def _tuple_name(target: cst.BaseExpression, k: int) -> str:
    """The ``k``-th name of a tuple target (``i, v``), or ""."""
    if isinstance(target, cst.Tuple) and len(target.elements) > k and isinstance(target.elements[k].value, cst.Name):
        return target.elements[k].value.value
    return ""

def _dotted(node: cst.BaseExpression) -> str | None:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _import_module_name(node: cst.BaseExpression | None) -> str:
    if node is None:
        return ""
    return _dotted(node) or ""


@dataclass(slots=True)
class _RawCall:
    span: Span
    text: str
    callee: str
    name: str
    receiver: str
    function: str
    cls: str
    stmt: Span
    order: int
    depth: int
    operator: bool
    self_attr: str
    element: int
    loop_attr: str
    in_loop: bool
    arg_ref: tuple[str, int, str] = ("", -1, "")  # (self_attr, element, loop_attr) of the first positional argument


@dataclass(slots=True)
class _RawAttr:
    cls: str
    attr: str
    span: Span
    ctor: str
    text: str
    elements: list[tuple[int, Span, str, str]]  # (index, span, ctor, text)


@dataclass(slots=True)
class _Fragment:
    """The index of one chunk, lines relative to the chunk (line 1 = its first line)."""

    calls: list[_RawCall] = field(default_factory=list)
    functions: list[FunctionInfo] = field(default_factory=list)  # calls=() until composed
    classes: list[tuple[str, str, Span, tuple[str, ...], list[str]]] = field(default_factory=list)
    attrs: list[_RawAttr] = field(default_factory=list)
    imports: list[tuple[str, str, str, str, str, Span, str]] = field(default_factory=list)
    loops: list[tuple[str, Span, Span, str, str, str, int, int]] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    bindings: list[tuple[str, str, str, Span]] = field(default_factory=list)
    main_guard: Span | None = None
    module_names: set[str] = field(default_factory=set)  # names bound at module level
    line_count: int = 0
    # (path, line delta) -> the call spans/statements moved there: typing inside a line leaves
    # every other chunk where it was, so the next build reuses these instead of making new spans
    placed: dict[tuple[str, int], tuple[list[tuple[Span, Span]], list[Statement]]] = field(default_factory=dict)


@dataclass(slots=True)
class _Placed:
    """All fragments' rows at absolute lines, before the file's tables are built from them."""

    calls: list[_RawCall] = field(default_factory=list)
    spans: list[tuple[Span, Span]] = field(default_factory=list)  # (call span, statement span) per call
    functions: list[FunctionInfo] = field(default_factory=list)
    classes: list[tuple[str, str, Span, tuple[str, ...], list[str]]] = field(default_factory=list)
    attrs: list[tuple[_RawAttr, int]] = field(default_factory=list)  # with the chunk's line delta
    imports: list[ImportInfo] = field(default_factory=list)
    loops: list[tuple[str, Span, Span, str, str, str, int, int]] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    bindings: list[tuple[str, str, str, Span]] = field(default_factory=list)
    module_names: set[str] = field(default_factory=set)
    main_guard: Span | None = None


class _Scope:
    __slots__ = ("kind", "qualname", "name", "self_name", "loop_depth", "methods")

    def __init__(self, kind: str, qualname: str, name: str, self_name: str = "") -> None:
        self.kind = kind
        self.qualname = qualname
        self.name = name
        self.self_name = self_name
        self.loop_depth = 0
        self.methods: list[str] = []


class _Collector(cst.CSTVisitor):
    def __init__(self, pos: Mapping[cst.CSTNode, Any], lines: LineIndex) -> None:
        super().__init__()
        self.pos = pos
        self.lines = lines
        self.f = _Fragment()
        self.scopes: list[_Scope] = []
        self.order: dict[str, int] = {}
        self.stmts: list[Span] = []
        self.call_depth = 0
        self.loop_vars: list[dict[str, str]] = []
        self.loop_open: list[int] = []  # index into f.loops of loops being filled
        self.module_loop_depth = 0

    # -- helpers -------------------------------------------------------------------------------

    def span(self, node: cst.CSTNode) -> Span:
        r = self.pos[node]
        return Span("", r.start.line, r.start.column, r.end.line, r.end.column)

    def text_of(self, s: Span) -> str:
        return self.lines.slice(s.line, s.col, s.end_line, s.end_col)

    def function(self) -> str:
        return self.scopes[-1].qualname if self.scopes else MODULE_SCOPE

    def method_class(self) -> tuple[str, str]:
        """(class qualname, self name) when inside a method (or a function nested in one)."""
        for i in range(len(self.scopes) - 1, -1, -1):
            s = self.scopes[i]
            if s.kind == "function" and i > 0 and self.scopes[i - 1].kind == "class":
                return self.scopes[i - 1].qualname, s.self_name
        return "", ""

    def child_qualname(self, name: str) -> str:
        if not self.scopes:
            return name
        top = self.scopes[-1]
        return f"{top.qualname}.<locals>.{name}" if top.kind == "function" else f"{top.qualname}.{name}"

    def next_order(self, fn: str) -> int:
        o = self.order.get(fn, 0)
        self.order[fn] = o + 1
        return o

    # -- scopes --------------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        qual = self.child_qualname(node.name.value)
        bases = tuple(_dotted(a.value) or "" for a in node.bases)
        if not self.scopes:
            self.f.module_names.add(node.name.value)
        self.f.classes.append((qual, node.name.value, self.span(node), bases, []))
        self.scopes.append(_Scope("class", qual, node.name.value))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        scope = self.scopes.pop()
        for i in range(len(self.f.classes) - 1, -1, -1):
            if self.f.classes[i][0] == scope.qualname:
                self.f.classes[i][4].extend(scope.methods)
                break

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        qual = self.child_qualname(node.name.value)
        if not self.scopes:
            self.f.module_names.add(node.name.value)
        span = self.span(node)
        first = self.pos[node.decorators[0]].start.line if node.decorators else span.line
        body = self.span(node.body)
        header = Span("", span.line, span.col, body.line, body.col)
        parent = ""
        cls = ""
        self_name = ""
        if self.scopes:
            top = self.scopes[-1]
            if top.kind == "class":
                cls = top.qualname
                top.methods.append(qual)
                params = node.params.params or node.params.posonly_params
                if params:
                    self_name = params[0].name.value
            else:
                parent = top.qualname
        whole = Span("", first, self.pos[node.decorators[0]].start.column if node.decorators else span.col,
                     span.end_line, span.end_col)
        self.f.functions.append(
            FunctionInfo(qual, node.name.value, cls, parent, whole, span.line, first, header, body, self_name)
        )
        self.scopes.append(_Scope("function-pending", qual, node.name.value, self_name))

    # Decorators and defaults run in the enclosing scope; only the body belongs to the function.
    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.scopes[-1].kind = "function"
        self.order[self.scopes[-1].qualname] = 0  # a redefinition counts afresh

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.scopes[-1].kind = "function-done"

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def _fn_scope(self) -> str:
        # calls in decorators/defaults of a pending def belong to the scope around it
        for s in reversed(self.scopes):
            if s.kind in ("function", "class"):
                return s.qualname
        return MODULE_SCOPE

    # -- statements ----------------------------------------------------------------------------

    def _push_stmt(self, node: cst.CSTNode) -> None:
        s = self.span(node)
        self.stmts.append(s)
        self.f.statements.append(Statement(s, self.text_of(s), self._fn_scope()))

    def _pop_stmt(self, node: cst.CSTNode) -> None:
        self.stmts.pop()

    visit_Expr = _push_stmt
    leave_Expr = _pop_stmt
    visit_Return = _push_stmt
    leave_Return = _pop_stmt
    visit_Raise = _push_stmt
    leave_Raise = _pop_stmt
    visit_Assert = _push_stmt
    leave_Assert = _pop_stmt
    visit_Del = _push_stmt
    leave_Del = _pop_stmt
    visit_AnnAssign = _push_stmt

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.stmts.pop()
        if isinstance(node.target, cst.Attribute) and node.value is not None:
            self._record_attr(node.target, node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        self._push_stmt(node)

    def leave_Assign(self, node: cst.Assign) -> None:
        self.stmts.pop()
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        if isinstance(target, cst.Attribute):
            self._record_attr(target, node.value)
        elif isinstance(target, cst.Name):
            if not self.scopes:
                self.f.module_names.add(target.value)
            ctor = node.value
            while isinstance(ctor, cst.Call) and isinstance(ctor.func, cst.Attribute) and isinstance(
                ctor.func.value, cst.Call
            ):
                ctor = ctor.func.value
            if isinstance(ctor, cst.Call):
                dotted = _dotted(ctor.func)
                if dotted:
                    self.f.bindings.append((self._fn_scope(), target.value, dotted, self.span(ctor)))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._push_stmt(node)

    def leave_AugAssign(self, node: cst.AugAssign) -> None:
        sym = _AUG_OPERATORS.get(type(node.operator))
        if sym:
            self._add_call(self.span(node), sym, sym, "", operator=True)
        self.stmts.pop()

    def _header(self, node: cst.CSTNode, expr: cst.CSTNode) -> None:
        a, b = self.pos[node], self.pos[expr]
        s = Span("", a.start.line, a.start.column, b.end.line, b.end.column)
        self.stmts.append(s)
        self.f.statements.append(Statement(s, self.text_of(s), self._fn_scope()))

    def visit_For_iter(self, node: cst.For) -> None:
        self._header(node, node.iter)

    def leave_For_iter(self, node: cst.For) -> None:
        self.stmts.pop()

    def visit_While_test(self, node: cst.While) -> None:
        self._header(node, node.test)

    def leave_While_test(self, node: cst.While) -> None:
        self.stmts.pop()

    def visit_If_test(self, node: cst.If) -> None:
        self._header(node, node.test)

    def leave_If_test(self, node: cst.If) -> None:
        self.stmts.pop()

    def visit_With_items(self, node: cst.With) -> None:
        if node.items:
            self._header(node, node.items[-1])
        else:
            self.stmts.append(self.span(node))

    def leave_With_items(self, node: cst.With) -> None:
        self.stmts.pop()

    def visit_If(self, node: cst.If) -> None:
        if self.scopes or not isinstance(node.test, cst.Comparison):
            return
        t = node.test
        if len(t.comparisons) != 1 or not isinstance(t.comparisons[0].operator, cst.Equal):
            return
        sides = [t.left, t.comparisons[0].comparator]
        names = [s.value for s in sides if isinstance(s, cst.Name)]
        strings = [s.evaluated_value for s in sides if isinstance(s, cst.SimpleString)]
        if names == ["__name__"] and strings == ["__main__"] and self.f.main_guard is None:
            self.f.main_guard = self.span(node)

    # -- loops ---------------------------------------------------------------------------------

    def _body_scope(self) -> _Scope | None:
        for s in reversed(self.scopes):
            if s.kind in ("function", "class"):
                return s
        return None

    def _loop_body_start(self, kind: str, node: cst.For | cst.While) -> None:
        scope = self._body_scope()
        if scope is not None:
            scope.loop_depth += 1
        else:
            self.module_loop_depth += 1
        span = self.span(node)
        if kind == "for":
            head_end = self.pos[node.iter]
            target = self.text_of(self.span(node.target))
            iter_text = self.text_of(self.span(node.iter))
        else:
            head_end = self.pos[node.test]
            target = ""
            iter_text = self.text_of(self.span(node.test))
        header = Span("", span.line, span.col, head_end.end.line, head_end.end.column)
        self.f.loops.append((kind, span, header, self._fn_scope(), target, iter_text, len(self.f.calls), -1))
        self.loop_open.append(len(self.f.loops) - 1)

    def _loop_body_end(self) -> None:
        scope = self._body_scope()
        if scope is not None:
            scope.loop_depth -= 1
        else:
            self.module_loop_depth -= 1
        i = self.loop_open.pop()
        loop = self.f.loops[i]
        self.f.loops[i] = loop[:7] + (len(self.f.calls),)

    def _bound_modules(self, target: cst.BaseExpression, it: cst.BaseExpression) -> dict[str, str]:
        """Loop variables bound to the elements of a module attribute: ``for v in self.X``,
        ``for i, v in enumerate(self.X)``, ``for k, v in self.X.items()``, ``for v in self.X.values()``."""
        _, self_name = self.method_class()
        if not self_name:
            return {}
        name = target.value if isinstance(target, cst.Name) else ""
        if isinstance(it, cst.Call) and len(it.args) == 1 and _dotted(it.func) == "enumerate":
            it, name = it.args[0].value, _tuple_name(target, 1)
        elif isinstance(it, cst.Call) and not it.args and isinstance(it.func, cst.Attribute) \
                and it.func.attr.value in ("items", "values"):
            if it.func.attr.value == "items":
                name = _tuple_name(target, 1)
            it = it.func.value
        dotted = _dotted(it)
        if name and dotted and dotted.startswith(self_name + ".") and dotted.count(".") == 1:
            return {name: dotted.split(".", 1)[1]}
        return {}

    def visit_For_body(self, node: cst.For) -> None:
        self._loop_body_start("for", node)
        self.loop_vars.append(self._bound_modules(node.target, node.iter))

    def _visit_comprehension(self, node: cst.ListComp | cst.GeneratorExp | cst.SetComp | cst.DictComp) -> None:
        # the element is visited before ``for_in``: bind the comprehension's variables up front
        bound: dict[str, str] = {}
        comp: cst.CompFor | None = node.for_in
        while comp is not None:
            bound.update(self._bound_modules(comp.target, comp.iter))
            comp = comp.inner_for_in
        self.loop_vars.append(bound)

    def _leave_comprehension(self, original_node: cst.CSTNode) -> None:
        self.loop_vars.pop()

    visit_ListComp = visit_GeneratorExp = visit_SetComp = visit_DictComp = _visit_comprehension
    leave_ListComp = leave_GeneratorExp = leave_SetComp = leave_DictComp = _leave_comprehension

    def leave_For_body(self, node: cst.For) -> None:
        self.loop_vars.pop()
        self._loop_body_end()

    def visit_While_body(self, node: cst.While) -> None:
        self._loop_body_start("while", node)
        self.loop_vars.append({})

    def leave_While_body(self, node: cst.While) -> None:
        self.loop_vars.pop()
        self._loop_body_end()

    # -- imports -------------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> None:
        span = self.span(node)
        fn = self._fn_scope()
        for alias in node.names:
            mod = _import_module_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                bound = alias.asname.name.value
                target = mod
                asname = bound
            else:
                bound = mod.split(".", 1)[0]
                target = bound
                asname = ""
            self.f.imports.append((mod, "", asname, bound, target, span, fn))
            if not self.scopes:
                self.f.module_names.add(bound)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        span = self.span(node)
        fn = self._fn_scope()
        mod = "." * len(node.relative) + _import_module_name(node.module)
        if isinstance(node.names, cst.ImportStar):
            self.f.imports.append((mod, "*", "", "", mod, span, fn))
            return
        for alias in node.names:
            name = _import_module_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                bound = alias.asname.name.value
                asname = bound
            else:
                bound = name
                asname = ""
            sep = "" if mod.endswith(".") else "."
            self.f.imports.append((mod, name, asname, bound, f"{mod}{sep}{name}", span, fn))
            if not self.scopes:
                self.f.module_names.add(bound)

    # -- calls ---------------------------------------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        self.call_depth += 1

    def _module_ref(self, expr: cst.BaseExpression) -> tuple[str, int, str]:
        """(self_attr, element, loop_attr) of an expression that names a sub-module: ``self.fc``,
        ``self.layers[0]``, a loop variable bound to ``self.layers``; empty parts otherwise."""
        _, self_name = self.method_class()
        dotted = _dotted(expr)
        if dotted is not None:
            receiver, _, name = dotted.rpartition(".")
            if self_name and receiver == self_name:
                return name, -1, ""
            if not receiver:
                for bound in reversed(self.loop_vars):
                    if name in bound:
                        return "", -1, bound[name]
        elif isinstance(expr, cst.Subscript):
            base = _dotted(expr.value)
            if base and self_name and base.startswith(self_name + ".") and base.count(".") == 1:
                element = -1
                if len(expr.slice) == 1:
                    idx = expr.slice[0].slice
                    if isinstance(idx, cst.Index) and isinstance(idx.value, cst.Integer):
                        literal = int_literal(idx.value.value)  # 0x1, 1_0; None past 64 characters
                        element = literal if literal is not None else -1
                return base.split(".", 1)[1], element, ""
        return "", -1, ""

    def leave_Call(self, node: cst.Call) -> None:
        self.call_depth -= 1
        func = node.func
        dotted = _dotted(func)
        self_attr, element, loop_attr = self._module_ref(func)
        if dotted is not None:
            callee = dotted
            receiver, _, name = dotted.rpartition(".")
        else:
            callee = ""
            receiver = ""
            name = func.attr.value if isinstance(func, cst.Attribute) else ""
        first = node.args[0] if node.args else None
        arg_ref = self._module_ref(first.value) if first is not None and not first.star and first.keyword is None \
            else ("", -1, "")
        self._add_call(self.span(node), callee, name, receiver, self_attr=self_attr, element=element,
                       loop_attr=loop_attr, arg_ref=arg_ref)

    def leave_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        # ``-x`` launches aten::neg; ``-1`` (a literal) launches nothing.
        if isinstance(node.operator, cst.Minus) and not isinstance(
            node.expression, (cst.Integer, cst.Float, cst.Imaginary)
        ):
            self._add_call(self.span(node), "u-", "u-", "", operator=True)

    def leave_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        sym = _OPERATORS.get(type(node.operator))
        if sym:
            self._add_call(self.span(node), sym, sym, "", operator=True)

    def _add_call(self, span: Span, callee: str, name: str, receiver: str, *, operator: bool = False,
                  self_attr: str = "", element: int = -1, loop_attr: str = "",
                  arg_ref: tuple[str, int, str] = ("", -1, "")) -> None:
        fn = self._fn_scope()
        cls, _ = self.method_class()
        stmt = self.stmts[-1] if self.stmts else span
        scope = self._body_scope()
        in_loop = (scope.loop_depth if scope is not None else self.module_loop_depth) > 0
        self.f.calls.append(
            _RawCall(span, self.text_of(span), callee, name, receiver, fn, cls, stmt, self.next_order(fn),
                     max(0, self.call_depth), operator, self_attr, element, loop_attr, in_loop, arg_ref)
        )

    # -- sub-module attributes -----------------------------------------------------------------

    def _record_attr(self, target: cst.Attribute, value: cst.BaseExpression) -> None:
        if not self.scopes or self.scopes[-1].kind != "function" or self.scopes[-1].name != "__init__":
            return
        cls, self_name = self.method_class()
        if not cls or not isinstance(target.value, cst.Name) or target.value.value != self_name:
            return
        if not isinstance(value, cst.Call):
            return
        ctor = _dotted(value.func)
        if not ctor:
            return
        span = self.span(value)
        elements: list[tuple[int, Span, str, str]] = []
        last = ctor.rsplit(".", 1)[-1]
        if last in CONTAINER_CLASSES:
            items: list[cst.BaseExpression] = []
            if last == "Sequential":
                items = [a.value for a in value.args if not a.star and a.keyword is None]
            elif value.args and isinstance(value.args[0].value, (cst.List, cst.Tuple)):
                items = [e.value for e in value.args[0].value.elements if isinstance(e, cst.Element)]
            for i, item in enumerate(items):
                if isinstance(item, cst.Call) and _dotted(item.func):
                    es = self.span(item)
                    elements.append((i, es, _dotted(item.func) or "", self.text_of(es)))
            comp = value.args[0].value if last != "Sequential" and value.args else None
            if isinstance(comp, (cst.ListComp, cst.GeneratorExp)) and isinstance(comp.elt, cst.Call) \
                    and _dotted(comp.elt.func):
                # ModuleList([Block(cfg) for _ in range(n)]): every element is one construction;
                # index -1, as no element has a position of its own
                es = self.span(comp.elt)
                elements.append((-1, es, _dotted(comp.elt.func) or "", self.text_of(es)))
        self.f.attrs.append(_RawAttr(cls, target.attr.value, span, ctor, self.text_of(span), elements))


def _index_chunk(text: str) -> _Fragment:
    """Parse and index one chunk; raises libcst.ParserSyntaxError."""
    module = cst.parse_module(text)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    pos = wrapper.resolve(PositionProvider)
    lines = LineIndex(text)
    collector = _Collector(pos, lines)
    wrapper.visit(collector)
    frag = collector.f
    frag.line_count = lines.line_count
    return frag


# ---------------------------------------------------------------------------------------------
# The composed file index


def _shift(s: Span, path: str, delta: int) -> Span:
    return Span(path, s.line + delta, s.col, s.end_line + delta, s.end_col)


class SourceIndex:
    """Everything the mapping and the rules look up in one file. Build with :meth:`build`."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = LineIndex(text)
        self.calls: tuple[CallSite, ...] = ()
        self.functions: dict[str, FunctionInfo] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.imports: tuple[ImportInfo, ...] = ()
        self.loops: tuple[LoopInfo, ...] = ()
        self.statements: tuple[Statement, ...] = ()
        self.bindings: tuple[Binding, ...] = ()
        self.main_guard: Span | None = None
        self.torch_npu_import: ImportInfo | None = None
        self.module_names: frozenset[str] = frozenset()
        self._chunks: dict[str, _Fragment] = {}
        self._by_line: dict[int, list[int]] | None = None
        self._stmt_by_line: dict[int, list[Statement]] | None = None
        self._stmt_occ: dict[tuple[Span, str], int] | None = None
        self._fn_at: list[FunctionInfo | None] | None = None
        self._cls_at: list[ClassInfo | None] | None = None
        self._fn_starts: dict[int, list[FunctionInfo]] | None = None
        self._bindings_by: dict[tuple[str, str], Binding] | None = None
        self._text_maps: dict[bool, dict[tuple[str, str], list[Span]]] = {}
        self.keys_cache: dict[int, frozenset[str]] = {}  # used by mapping.constructs

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def build(cls, path: str, text: str, *, previous: "SourceIndex | None" = None,
              chunked: bool = True) -> "SourceIndex":
        """Index ``text`` (the content of ``path``).

        ``previous``: an earlier index of the same file; its chunks are reused when their text is
        unchanged, so re-indexing after a small edit parses only the edited statement.
        ``chunked=False`` parses the file in one piece (the reference the chunked build must equal).
        Raises :class:`SourceSyntaxError` when the text does not parse.
        """
        cache = previous._chunks if previous is not None else {}
        if len(text) > safe_io.LIMITS.source_bytes:
            _refuse_complex(path, text)
        chunks = _split_chunks(text) if chunked else []
        frags: list[tuple[int, str, _Fragment]] = []
        try:
            for line, chunk in chunks:
                frag = cache.get(chunk)
                if frag is None:
                    _refuse_complex(path, chunk)  # only what is parsed now: an edit re-checks one chunk
                    frag = _index_chunk(chunk)
                frags.append((line, chunk, frag))
        except SourceTooComplex as e:
            raise SourceTooComplex(path, e.line + line - 1, 0, e.message) from None
        except cst.ParserSyntaxError:
            frags = []
        if not frags:
            if text not in cache:
                _refuse_complex(path, text)
            try:
                frags = [(1, text, cache.get(text) or _index_chunk(text))]
            except cst.ParserSyntaxError as e:
                raise SourceSyntaxError(path, e.raw_line, e.raw_column, e.message) from None
            except RecursionError:
                raise SourceSyntaxError(path, 1, 0, "nesting too deep to parse") from None
        index = cls(path, text)
        index._compose(frags)
        return index

    def _compose(self, frags: list[tuple[int, str, _Fragment]]) -> None:
        """Join the chunks' fragments into the file's tables, in named phases."""
        raw = self._place_fragments(frags)
        self._compose_imports(raw)
        calls = self._compose_calls(raw)
        self._compose_functions(raw, calls)
        self._compose_classes(raw, calls)

    def _place_fragments(self, frags: list[tuple[int, str, _Fragment]]) -> "_Placed":
        """Every fragment's rows moved to absolute lines (call spans reused per chunk and shift)."""
        path = self.path
        raw = _Placed()
        module_order = 0
        chunk_map: dict[str, _Fragment] = {}
        for line, chunk, frag in frags:
            chunk_map[chunk] = frag
            d = line - 1
            base = len(raw.calls)
            placed = frag.placed.get((path, d))
            if placed is None:
                placed = ([(_shift(c.span, path, d), _shift(c.stmt, path, d)) for c in frag.calls],
                          [Statement(_shift(st.span, path, d), st.text, st.function) for st in frag.statements])
                frag.placed = {(path, d): placed}
            raw.spans.extend(placed[0])
            raw.statements.extend(placed[1])
            raw.calls.extend(frag.calls)
            # module-level execution order continues across chunks
            n_mod = sum(1 for c in frag.calls if c.function == MODULE_SCOPE)
            call_delta_mod = module_order
            module_order += n_mod
            if n_mod:
                for i in range(base, len(raw.calls)):
                    c = raw.calls[i]
                    if c.function == MODULE_SCOPE and call_delta_mod:
                        raw.calls[i] = _RawCall(c.span, c.text, c.callee, c.name, c.receiver, c.function, c.cls,
                                                c.stmt, c.order + call_delta_mod, c.depth, c.operator,
                                                c.self_attr, c.element, c.loop_attr, c.in_loop, c.arg_ref)
            for f in frag.functions:
                raw.functions.append(FunctionInfo(f.qualname, f.name, f.cls, f.parent, _shift(f.span, path, d),
                                                  f.def_line + d, f.first_line + d, _shift(f.header, path, d),
                                                  _shift(f.body, path, d), f.self_name))
            for row in frag.classes:
                raw.classes.append((row[0], row[1], _shift(row[2], path, d), row[3], row[4]))
            for a in frag.attrs:
                raw.attrs.append((a, d))
            for (mod, name, asname, bound, target, span, fn) in frag.imports:
                raw.imports.append(ImportInfo(mod, name, asname, bound, target, _shift(span, path, d), fn))
            for (kind, span, header, fn, target, iter_text, start, end) in frag.loops:
                raw.loops.append((kind, _shift(span, path, d), _shift(header, path, d), fn, target, iter_text,
                                  base + start, base + end))
            for (fn, name, ctor, span) in frag.bindings:
                raw.bindings.append((fn, name, ctor, _shift(span, path, d)))
            raw.module_names |= frag.module_names
            if frag.main_guard is not None and raw.main_guard is None:
                raw.main_guard = _shift(frag.main_guard, path, d)
        self._chunks = chunk_map
        self.module_names = frozenset(raw.module_names)
        self.statements = tuple(raw.statements)
        self.main_guard = raw.main_guard
        return raw

    def _compose_imports(self, raw: "_Placed") -> None:
        """Imports, and the per-scope import tables :meth:`resolve` reads."""
        imports = raw.imports
        self.imports = tuple(imports)
        self.torch_npu_import = next(
            (i for i in imports if i.module == "torch_npu" or i.module.startswith("torch_npu.")), None
        )
        scope_imports: dict[str, dict[str, str]] = {}
        for imp in imports:
            if imp.bound:
                scope_imports.setdefault(imp.function, {}).setdefault(imp.bound, imp.target)
        self._scope_imports = scope_imports
        self._parents = {f.qualname: f.parent for f in raw.functions}

    def _compose_calls(self, raw: "_Placed") -> list[CallSite]:
        """Calls with absolute spans, qualified names and occurrences, indexed per function."""
        resolve = self.resolve
        occ: dict[tuple[str, str], int] = {}
        calls: list[CallSite] = []
        resolved: dict[tuple[str, str], str] = {}
        for c, (span, stmt) in zip(raw.calls, raw.spans):
            key = (c.function, c.text)
            k = occ.get(key, 0)
            occ[key] = k + 1
            self_attr, element, loop_attr = c.self_attr, c.element, c.loop_attr
            if c.operator or c.self_attr or c.loop_attr:
                qual = ""
            else:
                rkey = (c.callee, c.function)
                qual = resolved.get(rkey)
                if qual is None:
                    qual = resolved[rkey] = resolve(c.callee, c.function)
                if qual in RUNS_FIRST_ARGUMENT:  # checkpoint(self.block, x): a call of self.block
                    self_attr, element, loop_attr = c.arg_ref
            calls.append(CallSite(span, c.text, c.callee, qual, c.name, c.receiver, c.function,
                                  c.cls, stmt, c.order, c.depth, k, c.operator, self_attr,
                                  element, loop_attr, c.in_loop, len(calls)))
        self.calls = tuple(calls)
        # calls are collected in post-order, so each function's list is already in execution order
        by_fn: dict[str, list[int]] = {}
        for i, c in enumerate(calls):
            by_fn.setdefault(c.function, []).append(i)
        self._calls_by_fn = by_fn
        return calls

    def _compose_functions(self, raw: "_Placed", calls: list[CallSite]) -> None:
        """Functions with their calls, loops with their body's calls, ``name = Ctor(...)`` bindings."""
        by_fn = self._calls_by_fn
        self.functions = {}
        for f in raw.functions:
            if f.qualname in self.functions:
                continue  # a redefinition (if/else variants): the first one wins
            self.functions[f.qualname] = FunctionInfo(f.qualname, f.name, f.cls, f.parent, f.span, f.def_line,
                                                      f.first_line, f.header, f.body, f.self_name,
                                                      tuple(by_fn.get(f.qualname, ())))
        self.loops = tuple(
            LoopInfo(kind, span, header, fn, target, iter_text,
                     tuple(i for i in range(start, end) if calls[i].function == fn))
            for (kind, span, header, fn, target, iter_text, start, end) in raw.loops
        )
        self.bindings = tuple(
            Binding(fn, name, ctor, self.resolve(ctor, fn), span) for (fn, name, ctor, span) in raw.bindings
        )

    def _compose_classes(self, raw: "_Placed", calls: list[CallSite]) -> None:
        """Classes with their sub-module attributes and where each is called."""
        path = self.path
        resolve = self.resolve
        attrs_by_cls: dict[str, dict[str, ModuleAttr]] = {}
        for a, d in raw.attrs:
            fn = f"{a.cls}.__init__"
            elements = tuple(
                ModuleAttr(str(i), _shift(s, path, d), ctor, resolve(ctor, fn), ctor.rsplit(".", 1)[-1], text, i)
                for (i, s, ctor, text) in a.elements
            )
            attrs_by_cls.setdefault(a.cls, {})[a.attr] = ModuleAttr(
                a.attr, _shift(a.span, path, d), a.ctor, resolve(a.ctor, fn), a.ctor.rsplit(".", 1)[-1], a.text,
                -1, elements,
            )
        attr_calls: dict[str, dict[str, list[int]]] = {}
        for i, c in enumerate(calls):
            if c.self_attr and c.cls:
                attr_calls.setdefault(c.cls, {}).setdefault(c.self_attr, []).append(i)
        self.classes = {}
        for (qual, name, span, bases, methods) in raw.classes:
            if qual in self.classes:
                continue
            self.classes[qual] = ClassInfo(
                qual, name, span, tuple(resolve(b, MODULE_SCOPE) or b for b in bases), tuple(methods),
                attrs_by_cls.get(qual, {}),
                {k: tuple(v) for k, v in attr_calls.get(qual, {}).items()},
            )

    def resolve(self, dotted: str, function: str = MODULE_SCOPE) -> str:
        """Qualified name of a dotted name used in ``function``, through the imports in scope.

        ``F.relu`` -> ``torch.nn.functional.relu`` after ``import torch.nn.functional as F``; names
        defined in this file resolve to themselves, unbound builtins to ``builtins.<name>``,
        anything else (locals, attributes of objects) to "".
        """
        if not dotted:
            return ""
        head, _, rest = dotted.partition(".")
        scope = function
        for _ in range(64):  # nested function scopes, innermost first
            if not scope or scope == MODULE_SCOPE:
                break
            table = self._scope_imports.get(scope)
            if table and head in table:
                return table[head] + ("." + rest if rest else "")
            scope = self._parents.get(scope, "")
        table = self._scope_imports.get(MODULE_SCOPE)
        if table and head in table:
            return table[head] + ("." + rest if rest else "")
        if head in self.module_names:
            return dotted
        if not rest and head in _BUILTIN_NAMES:
            return f"builtins.{head}"
        return ""

    # -- lookups -------------------------------------------------------------------------------

    def calls_in(self, function: str) -> list[CallSite]:
        """Calls of ``function`` (not of functions nested in it), in execution order."""
        return [self.calls[i] for i in self._calls_by_fn.get(function, ())]

    def call_indices_in(self, function: str) -> tuple[int, ...]:
        return tuple(self._calls_by_fn.get(function, ()))

    def calls_on_line(self, line: int) -> list[CallSite]:
        """Calls whose span covers ``line``, innermost (deepest, shortest) first."""
        if self._by_line is None:
            by_line: dict[int, list[int]] = {}
            for i, c in enumerate(self.calls):
                for ln in range(c.span.line, c.span.end_line + 1):
                    by_line.setdefault(ln, []).append(i)
            self._by_line = by_line
        found = [self.calls[i] for i in self._by_line.get(line, ())]
        found.sort(key=lambda c: (-c.depth, c.span.end_line - c.span.line, c.span.end_col - c.span.col))
        return found

    def _line_tables(self) -> None:
        """Innermost function and class per line (later starts are nested deeper)."""
        n = self.lines.line_count + 2
        fn_at: list[FunctionInfo | None] = [None] * n
        for f in sorted(self.functions.values(), key=lambda f: (f.span.line, -f.span.end_line)):
            for ln in range(f.span.line, min(f.span.end_line, n - 1) + 1):
                fn_at[ln] = f
        cls_at: list[ClassInfo | None] = [None] * n
        for c in sorted(self.classes.values(), key=lambda c: (c.span.line, -c.span.end_line)):
            for ln in range(c.span.line, min(c.span.end_line, n - 1) + 1):
                cls_at[ln] = c
        starts: dict[int, list[FunctionInfo]] = {}
        for f in self.functions.values():
            starts.setdefault(f.def_line, []).append(f)
            if f.first_line != f.def_line:
                starts.setdefault(f.first_line, []).append(f)
        self._fn_at, self._cls_at, self._fn_starts = fn_at, cls_at, starts

    def function_at(self, line: int) -> FunctionInfo | None:
        """The innermost function whose definition (decorators to end) contains ``line``."""
        if self._fn_at is None:
            self._line_tables()
        assert self._fn_at is not None
        return self._fn_at[line] if 0 <= line < len(self._fn_at) else None

    def scope_at(self, line: int) -> str:
        """Qualname of the function or class body executing ``line`` ("<module>" at top level)."""
        f = self.function_at(line)
        c = self.class_at(line)
        if f is not None and (line >= f.body.line or f.body.line == f.def_line == line):
            if c is not None and c.span.line > f.span.line:
                return c.qualname  # a class body nested in the function
            return f.qualname
        if f is not None:  # decorator / header lines run in the enclosing scope
            return f.cls or f.parent or MODULE_SCOPE
        return c.qualname if c is not None else MODULE_SCOPE

    def class_at(self, line: int) -> ClassInfo | None:
        if self._cls_at is None:
            self._line_tables()
        assert self._cls_at is not None
        return self._cls_at[line] if 0 <= line < len(self._cls_at) else None

    def functions_named(self, name: str) -> list[FunctionInfo]:
        return [f for f in self.functions.values() if f.name == name]

    def functions_starting_at(self, line: int) -> list[FunctionInfo]:
        """Functions whose ``def`` or first decorator is on ``line`` (Kineto's def-line frames)."""
        if self._fn_starts is None:
            self._line_tables()
        assert self._fn_starts is not None
        return list(self._fn_starts.get(line, ()))

    def statement_at(self, line: int) -> Statement | None:
        """The innermost statement (or compound header) covering ``line``."""
        if self._stmt_by_line is None:
            by_line: dict[int, list[Statement]] = {}
            for st in self.statements:
                for ln in range(st.span.line, st.span.end_line + 1):
                    by_line.setdefault(ln, []).append(st)
            self._stmt_by_line = by_line
        best = None
        for st in self._stmt_by_line.get(line, ()):
            if best is None or (st.span.end_line - st.span.line, st.span.line) <= (
                best.span.end_line - best.span.line, best.span.line
            ):
                best = st
        return best

    def spans_of_text(self, function: str, text: str, *, statements: bool = False) -> list[Span]:
        """Spans of the calls (or statements) of ``function`` whose source text is ``text``."""
        table = self._text_maps.get(statements)
        if table is None:
            table = self._text_maps[statements] = {}
            for item in (self.statements if statements else self.calls):
                table.setdefault((item.function, item.text), []).append(item.span)
        return list(table.get((function, text), ()))

    def statement_occurrence(self, span: Span, function: str) -> int:
        """Index of the statement at ``span`` among the same-text statements of ``function``."""
        if self._stmt_occ is None:
            occ: dict[tuple[Span, str], int] = {}
            counts: dict[tuple[str, str], int] = {}
            for st in self.statements:
                key = (st.function, st.text)
                occ[(st.span, st.function)] = counts.get(key, 0)
                counts[key] = counts.get(key, 0) + 1
            self._stmt_occ = occ
        return self._stmt_occ.get((span, function), 0)

    def statements_in(self, function: str) -> list[Statement]:
        return [s for s in self.statements if s.function == function]

    def class_named(self, name: str) -> list[ClassInfo]:
        return [c for c in self.classes.values() if c.name == name]

    def module_attr(self, cls_qualname: str, attr: str) -> ModuleAttr | None:
        """``self.<attr>`` of a class, looking through base classes defined in this file."""
        seen: set[str] = set()
        todo = [cls_qualname]
        while todo:
            q = todo.pop(0)
            if q in seen:
                continue
            seen.add(q)
            info = self.classes.get(q)
            if info is None:
                continue
            if attr in info.attrs:
                return info.attrs[attr]
            for b in info.bases:
                todo.extend(c.qualname for c in self.classes.values() if c.qualname == b or c.name == b)
        return None

    def binding_for(self, function: str, name: str) -> Binding | None:
        """``name = Ctor(...)`` in ``function`` (else at module level), the last one."""
        if self._bindings_by is None:
            self._bindings_by = {(b.function, b.name): b for b in self.bindings}
        found = self._bindings_by.get((function, name))
        if found is None and function != MODULE_SCOPE:
            return self._bindings_by.get((MODULE_SCOPE, name))
        return found

    def loops_in(self, function: str) -> list[LoopInfo]:
        return [lp for lp in self.loops if lp.function == function]

    def loop_at(self, line: int) -> LoopInfo | None:
        best = None
        for lp in self.loops:
            if lp.span.line <= line <= lp.span.end_line and (best is None or lp.span.line >= best.span.line):
                best = lp
        return best

    def function_span(self, function: str) -> Span:
        f = self.functions.get(function)
        if f is not None:
            return f.span
        c = self.classes.get(function)
        if c is not None:
            return c.span
        n = self.lines.line_count
        return Span(self.path, 1, 0, n, len(self.lines.line_text(n)))
