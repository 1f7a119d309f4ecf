"""The sizes a model is built with, found statically (libcst; workspace code is never imported).

For each layer construction -- ``nn.Linear``, ``nn.Conv{1,2,3}d``, ``nn.Embedding``,
``nn.LayerNorm``/``nn.RMSNorm`` and RMSNorm-style ``nn.Parameter(torch.ones(d))``,
``nn.MultiheadAttention``, and ``nn.Parameter(torch.randn(a, b))`` weights used with
``torch.matmul``/``@`` -- the resolver computes the weight shapes from what the source says:

* literal arguments, module-level constants (assigned once), simple integer arithmetic;
* default arguments of ``__init__`` and the arguments each construction site passes
  (``Block(d_model, 4 * d_model)`` inside another ``__init__``, ``Net(hidden=512)`` in ``main``);
* attributes of configuration objects: a dataclass (or plain class) with class-level defaults,
  constructed with literal keyword overrides (``cfg = Config(hidden=1024)``), read as
  ``cfg.hidden`` or through ``self.cfg.hidden``; ``self.x = <static>`` assigned earlier in ``__init__``.

It **refuses** everything else -- a value read from the command line, a file, a function call, a
name assigned more than once, a parameter no call passes -- and keeps the reason
(:class:`Refusal`), so the anchoring never guesses a size. A class constructed in several places
with different sizes yields one construction per distinct size set (same source span).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from msprof_lsp.mapping.numbers import int_literal
from msprof_lsp.mapping.profile.shapes import Shape
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.spans import Span


class LayerKind(str, enum.Enum):
    LINEAR = "linear"
    CONV = "conv"
    EMBEDDING = "embedding"
    NORM = "norm"
    ATTENTION = "attention"  # nn.MultiheadAttention
    PARAMETER = "parameter"  # an nn.Parameter weight used in torch.matmul / @


@dataclass(frozen=True, slots=True)
class Construction:
    """One layer with statically known weight shapes."""

    kind: LayerKind
    path: str
    cls: str  # qualname of the class whose ``__init__`` builds it ("" at function / module level)
    attr: str  # ``self.<attr>`` it is stored in ("" for a bare element of a container)
    element: int  # index inside an ``nn.Sequential``/``nn.ModuleList`` attribute, else -1
    span: Span  # the constructor call
    text: str  # the call as written
    label: str  # the call with resolved sizes: "nn.Linear(1000, 4095)"
    weights: tuple[Shape, ...]  # weight tensors (for Linear: (out, in)); bias left out

    @property
    def where(self) -> str:
        return f"{self.label} at line {self.span.line}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A layer construction whose sizes are not statically known, and why."""

    path: str
    span: Span
    text: str
    reason: str


@dataclass(slots=True)
class SizeTable:
    constructions: list[Construction] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)

    def of_class(self, cls: str, attr: str) -> list[Construction]:
        return [c for c in self.constructions if c.cls == cls and c.attr == attr]


# ---------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class Unknown:
    reason: str


@dataclass(frozen=True, slots=True)
class ConfigObject:
    """An instance of a configuration class: its attribute values."""

    cls: str
    values: tuple[tuple[str, object], ...]

    def get(self, name: str) -> object:
        for k, v in self.values:
            if k == name:
                return v
        return Unknown(f"{self.cls} has no static attribute `{name}`")


Value = object  # int | float | bool | str | None | tuple | ConfigObject | Unknown

_LAYERS: dict[str, LayerKind] = {
    "torch.nn.Linear": LayerKind.LINEAR,
    "torch.nn.Conv1d": LayerKind.CONV,
    "torch.nn.Conv2d": LayerKind.CONV,
    "torch.nn.Conv3d": LayerKind.CONV,
    "torch.nn.Embedding": LayerKind.EMBEDDING,
    "torch.nn.EmbeddingBag": LayerKind.EMBEDDING,
    "torch.nn.LayerNorm": LayerKind.NORM,
    "torch.nn.RMSNorm": LayerKind.NORM,
    "torch.nn.MultiheadAttention": LayerKind.ATTENTION,
}
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList"})
_PARAM_CTORS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_TENSOR_FACTORIES = frozenset({"torch.ones", "torch.zeros", "torch.randn", "torch.rand", "torch.empty"})
# positional parameter names of the layer constructors (torch's own signatures)
_PARAMS: dict[str, tuple[str, ...]] = {
    "Linear": ("in_features", "out_features", "bias"),
    "Conv1d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups"),
    "Conv2d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups"),
    "Conv3d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups"),
    "Embedding": ("num_embeddings", "embedding_dim"),
    "EmbeddingBag": ("num_embeddings", "embedding_dim"),
    "LayerNorm": ("normalized_shape", "eps", "elementwise_affine"),
    "RMSNorm": ("normalized_shape", "eps", "elementwise_affine"),
    "MultiheadAttention": ("embed_dim", "num_heads"),
}
# the two size arguments every kind but NORM needs, read (or refused) before its weights are built
_SIZE_ARGS: dict[LayerKind, tuple[str, str]] = {
    LayerKind.LINEAR: ("in_features", "out_features"),
    LayerKind.CONV: ("in_channels", "out_channels"),
    LayerKind.EMBEDDING: ("num_embeddings", "embedding_dim"),
    LayerKind.ATTENTION: ("embed_dim", "num_heads"),
}
_MAX_DEPTH = 8  # nested sub-module constructions followed
_MAX_INSTANCES = 64  # distinct size sets kept per class


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


# ---------------------------------------------------------------------------------------------
# Per-file syntax facts


@dataclass(slots=True)
class _ClassDef:
    qualname: str
    name: str
    path: str
    node: cst.ClassDef
    init: cst.FunctionDef | None
    fields: dict[str, cst.BaseExpression]  # class-level ``name[: T] = value``
    is_config: bool  # a dataclass, or a class with class-level values and no __init__ of its own


@dataclass(slots=True)
class _File:
    path: str
    index: SourceIndex
    module: cst.Module
    positions: dict[cst.CSTNode, CodeRange]
    assigns: dict[str, list[cst.BaseExpression]]  # module-level name -> assigned values
    classes: dict[str, _ClassDef]  # by name (top-level classes)
    functions: list[cst.FunctionDef]  # top-level functions (construction sites for roots)

    def span(self, node: cst.CSTNode) -> Span:
        r = self.positions[node]
        return Span(self.path, r.start.line, r.start.column, r.end.line, r.end.column)


def _is_dataclass(node: cst.ClassDef) -> bool:
    for d in node.decorators:
        expr = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        name = _code(expr)
        if name.rsplit(".", 1)[-1] == "dataclass":
            return True
    return False


def _read_file(index: SourceIndex) -> _File | None:
    try:
        wrapper = MetadataWrapper(cst.parse_module(index.text), unsafe_skip_copy=True)
    except (cst.ParserSyntaxError, RecursionError):
        return None
    positions = dict(wrapper.resolve(PositionProvider))
    module = wrapper.module
    assigns: dict[str, list[cst.BaseExpression]] = {}
    classes: dict[str, _ClassDef] = {}
    functions: list[cst.FunctionDef] = []
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                for name, value in _assigned(small):
                    assigns.setdefault(name, []).append(value)
        elif isinstance(stmt, cst.ClassDef):
            fields: dict[str, cst.BaseExpression] = {}
            init = None
            body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
            for item in body:
                if isinstance(item, cst.FunctionDef) and item.name.value == "__init__":
                    init = item
                elif isinstance(item, cst.SimpleStatementLine):
                    for small in item.body:
                        for name, value in _assigned(small):
                            fields[name] = value
            is_config = _is_dataclass(stmt) or (init is None and bool(fields))
            classes[stmt.name.value] = _ClassDef(stmt.name.value, stmt.name.value, index.path, stmt, init,
                                                 fields, is_config)
        elif isinstance(stmt, cst.FunctionDef):
            functions.append(stmt)
    return _File(index.path, index, module, positions, assigns, classes, functions)


def _assigned(small: cst.BaseSmallStatement) -> list[tuple[str, cst.BaseExpression]]:
    """``name = value`` / ``name: T = value`` (single names only)."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return [(small.targets[0].target.value, small.value)]
    if isinstance(small, cst.AnnAssign) and small.value is not None and isinstance(small.target, cst.Name):
        return [(small.target.value, small.value)]
    return []


# ---------------------------------------------------------------------------------------------
# Evaluation


class _Env:
    """Names visible to an expression: locals (parameters, earlier assignments), ``self.x``
    values, then the file's module-level constants."""

    def __init__(self, resolver: "SizeResolver", file: _File, names: dict[str, Value] | None = None,
                 self_values: dict[str, Value] | None = None, self_name: str = "") -> None:
        self.resolver = resolver
        self.file = file
        self.names = names or {}
        self.self_values = self_values if self_values is not None else {}
        self.self_name = self_name

    def lookup(self, name: str) -> Value:
        if name in self.names:
            return self.names[name]
        return self.resolver.module_value(self.file, name)


def _evaluate(node: cst.BaseExpression, env: _Env, depth: int = 0) -> Value:
    if depth > 32:
        return Unknown("expression too deep")
    if isinstance(node, cst.Integer):
        value = int_literal(node.value)  # evaluated_value raises past 4,300 digits
        return Unknown("integer literal too long") if value is None else value
    if isinstance(node, cst.Float):
        return node.evaluated_value
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.Name):
        if node.value in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.value]
        return env.lookup(node.value)
    if isinstance(node, cst.Attribute):
        if isinstance(node.value, cst.Name) and env.self_name and node.value.value == env.self_name:
            v = env.self_values.get(node.attr.value)
            return v if v is not None else Unknown(f"`{_code(node)}` is not assigned a static value before use")
        base = _evaluate(node.value, env, depth + 1)
        if isinstance(base, ConfigObject):
            return base.get(node.attr.value)
        if isinstance(base, Unknown):
            return Unknown(f"`{_code(node)}`: {base.reason}")
        return Unknown(f"`{_code(node)}` is not a static value")
    if isinstance(node, (cst.Tuple, cst.List)):
        vals = tuple(_evaluate(e.value, env, depth + 1) for e in node.elements if isinstance(e, cst.Element))
        bad = next((v for v in vals if isinstance(v, Unknown)), None)
        return bad if bad is not None else vals
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = _evaluate(node.expression, env, depth + 1)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else _unknown(v, node)
    if isinstance(node, cst.BinaryOperation):
        a = _evaluate(node.left, env, depth + 1)
        b = _evaluate(node.right, env, depth + 1)
        return _arith(node, a, b)
    if isinstance(node, cst.Call):
        return env.resolver.call_value(node, env, depth)
    return Unknown(f"`{_code(node)}` is not a static value")


def _unknown(v: Value, node: cst.CSTNode) -> Unknown:
    return v if isinstance(v, Unknown) else Unknown(f"`{_code(node)}` is not a static number")


def _arith(node: cst.BinaryOperation, a: Value, b: Value) -> Value:
    if isinstance(a, Unknown):
        return a
    if isinstance(b, Unknown):
        return b
    num = (int, float)
    if not (isinstance(a, num) and isinstance(b, num)) or isinstance(a, bool) or isinstance(b, bool):
        return Unknown(f"`{_code(node)}` is not integer arithmetic")
    op = node.operator
    try:
        if isinstance(op, cst.Add):
            return a + b
        if isinstance(op, cst.Subtract):
            return a - b
        if isinstance(op, cst.Multiply):
            return a * b
        if isinstance(op, cst.FloorDivide):
            return a // b
        if isinstance(op, cst.Divide):
            q = a / b
            return int(q) if q == int(q) else q
        if isinstance(op, cst.Modulo):
            return a % b
        if isinstance(op, cst.Power) and 0 <= b <= 64:
            return a ** b
    except (ZeroDivisionError, OverflowError):
        pass
    return Unknown(f"`{_code(node)}` is not integer arithmetic")


def _as_int(v: Value) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and v > 0:
        return v
    if isinstance(v, float) and v > 0 and v == int(v):
        return int(v)
    return None


def _ints(v: Value, n: int) -> tuple[int, ...] | None:
    """``3`` -> (3, 3, ...) or a tuple of n positive ints."""
    one = _as_int(v)
    if one is not None:
        return (one,) * n
    if isinstance(v, tuple) and len(v) == n and all(_as_int(x) is not None for x in v):
        return tuple(int(x) for x in v)  # type: ignore[arg-type]
    return None


# ---------------------------------------------------------------------------------------------
# The resolver


@dataclass(slots=True)
class _Bound:
    """A call's arguments bound to a callee's parameter names (unknown ones keep their reason)."""

    values: dict[str, Value]


class SizeResolver:
    """Resolves the layer sizes of the files of one workspace (each file parsed once)."""

    def __init__(self, indexes: Iterable[SourceIndex]) -> None:
        self.files: list[_File] = []
        for index in indexes:
            f = _read_file(index)
            if f is not None:
                self.files.append(f)
        self.classes: dict[str, list[_ClassDef]] = {}
        for f in self.files:
            for c in f.classes.values():
                self.classes.setdefault(c.name, []).append(c)
        self._module_cache: dict[tuple[str, str], Value] = {}
        self._file_of = {f.path: f for f in self.files}
        self.table = SizeTable()
        self._seen: set[tuple[Span, tuple[Shape, ...]]] = set()
        self._refused: set[tuple[Span, str]] = set()
        self._instances: dict[str, set[tuple]] = {}
        self._run()

    # -- values --------------------------------------------------------------------------------

    def module_value(self, file: _File, name: str) -> Value:
        key = (file.path, name)
        if key in self._module_cache:
            return self._module_cache[key]
        self._module_cache[key] = Unknown(f"`{name}` is defined in terms of itself")
        values = file.assigns.get(name)
        if values is None:
            v: Value = Unknown(f"`{name}` is not a module-level constant of {file.index.path.rsplit('/', 1)[-1]}")
        elif len(values) > 1:
            v = Unknown(f"`{name}` is assigned {len(values)} times")
        else:
            v = _evaluate(values[0], _Env(self, file))
        self._module_cache[key] = v
        return v

    def _class(self, env: _Env, callee: cst.BaseExpression) -> _ClassDef | None:
        """The workspace class a call constructs (a bare name, or ``module.Name``)."""
        name = _code(callee).rsplit(".", 1)[-1]
        local = env.file.classes.get(name)
        if local is not None:
            return local
        found = self.classes.get(name, [])
        return found[0] if len(found) == 1 else None

    def call_value(self, node: cst.Call, env: _Env, depth: int) -> Value:
        cls = self._class(env, node.func)
        if cls is not None and cls.is_config:
            return self._config(cls, node, env)
        if _code(node.func) in ("int", "round") and len(node.args) == 1:
            v = _evaluate(node.args[0].value, env, depth + 1)
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _unknown(v, node)
        return Unknown(f"`{_code(node)}` is computed by a call")

    def _config(self, cls: _ClassDef, node: cst.Call | None, env: _Env | None) -> Value:
        file = self._file_of[cls.path]
        values: dict[str, Value] = {}
        for name, expr in cls.fields.items():
            values[name] = _evaluate(expr, _Env(self, file)) if not _is_field_call(expr) else _field_default(expr, file, self)
        if node is not None and env is not None:
            for arg in node.args:
                if arg.keyword is None or arg.star:
                    return Unknown(f"`{_code(node)}`: positional configuration arguments are not followed")
                values[arg.keyword.value] = _evaluate(arg.value, env)
        return ConfigObject(cls.name, tuple(values.items()))

    # -- walking constructions -------------------------------------------------------------------

    def _run(self) -> None:
        for f in self.files:
            # construction sites outside classes: module level and top-level functions
            scopes: list[tuple[Sequence[cst.BaseStatement], dict[str, Value] | None]] = [(f.module.body, None)]
            scopes += [(fn.body.body, {}) for fn in f.functions if isinstance(fn.body, cst.IndentedBlock)]
            for body, local in scopes:
                env = _Env(self, f, local if local is not None else None)
                for call in _calls_in(body, env if local is not None else None):
                    cls = self._class(env, call.func)
                    if cls is None or cls.is_config or cls.init is None:
                        continue
                    self._instantiate(cls, call, env, 0)
        # classes no code above constructs: their defaults, outermost first (a class built inside
        # another __init__ is reached from there)
        inner = {_code(c.func).rsplit(".", 1)[-1] for cs in self.classes.values() for cls in cs
                 if cls.init is not None and isinstance(cls.init.body, cst.IndentedBlock)
                 for c in _calls_in(cls.init.body.body, None)}
        for outer_first in (True, False):
            for cs in self.classes.values():
                for cls in cs:
                    if cls.init is None or cls.is_config or cls.qualname in self._instances:
                        continue
                    if outer_first and cls.name in inner:
                        continue
                    self._instantiate(cls, None, None, 0)

    def _bind(self, cls: _ClassDef, call: cst.Call | None, env: _Env | None) -> _Bound:
        """``__init__``'s parameters from the call's arguments, else their defaults."""
        init = cls.init
        assert init is not None
        file = self._file_of[cls.path]
        params = list(init.params.params)
        if params and not params[0].default:
            params = params[1:]  # self
        values: dict[str, Value] = {}
        passed: dict[str, cst.BaseExpression] = {}
        if call is not None:
            positional = [a for a in call.args if a.keyword is None and not a.star]
            for p, a in zip(params, positional):
                passed[p.name.value] = a.value
            for a in call.args:
                if a.keyword is not None:
                    passed[a.keyword.value] = a.value
            if any(a.star for a in call.args):
                values["*"] = Unknown(f"`{_code(call)}` passes *args/**kwargs")
        for p in [*params, *init.params.kwonly_params]:
            name = p.name.value
            if name in passed and env is not None:
                values[name] = _evaluate(passed[name], env)
            elif p.default is not None:
                values[name] = _evaluate(p.default, _Env(self, file))
            else:
                values[name] = Unknown(f"parameter `{name}` of {cls.name}.__init__ has no default"
                                       + (" and the call does not pass it" if call is not None else
                                          " and no construction of it passes one"))
        return _Bound(values)

    def _instantiate(self, cls: _ClassDef, call: cst.Call | None, env: _Env | None, depth: int) -> None:
        if depth > _MAX_DEPTH or cls.init is None:
            return
        bound = self._bind(cls, call, env)
        key = tuple(sorted((k, repr(v)) for k, v in bound.values.items()))
        seen = self._instances.setdefault(cls.qualname, set())
        if key in seen or len(seen) >= _MAX_INSTANCES:
            return
        seen.add(key)
        file = self._file_of[cls.path]
        init = cls.init
        self_name = init.params.params[0].name.value if init.params.params else "self"
        ienv = _Env(self, file, dict(bound.values), {}, self_name)
        if not isinstance(init.body, cst.IndentedBlock):
            return
        for stmt in init.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue  # branches and loops: their assignments are not followed
            for small in stmt.body:
                self._statement(cls, small, ienv, depth)

    def _statement(self, cls: _ClassDef, small: cst.BaseSmallStatement, env: _Env, depth: int) -> None:
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            target = small.targets[0].target if isinstance(small, cst.Assign) else small.target
            value = small.value
            if value is None:
                return
            if isinstance(small, cst.Assign) and len(small.targets) != 1:
                return
            if isinstance(target, cst.Name):
                env.names[target.value] = (Unknown(f"`{target.value}` is assigned more than once")
                                           if target.value in env.names and isinstance(small, cst.Assign)
                                           and _is_static(env.names[target.value]) else _evaluate(value, env))
                return
            if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and \
                    target.value.value == env.self_name:
                attr = target.attr.value
                if isinstance(value, cst.Call):
                    if self._layer_or_module(cls, attr, -1, value, env, depth):
                        return
                env.self_values[attr] = _evaluate(value, env)

    def _layer_or_module(self, cls: _ClassDef, attr: str, element: int, call: cst.Call, env: _Env,
                         depth: int) -> bool:
        """Record a layer / follow a sub-module construction; False when the call is neither."""
        qual = env.file.index.resolve(_code(call.func), f"{cls.qualname}.__init__")
        kind = _LAYERS.get(qual)
        if kind is not None:
            self._layer(kind, qual, cls, attr, element, call, env)
            return True
        if qual in _CONTAINERS:
            elems = _container_elements(call)
            for i, e in enumerate(elems):
                if isinstance(e, cst.Call):
                    self._layer_or_module(cls, attr, i if qual.endswith("Sequential") else -1, e, env, depth)
            return True
        if qual in _PARAM_CTORS:
            self._parameter(cls, attr, call, env)
            return True
        sub = self._class(env, call.func)
        if sub is not None and not sub.is_config and sub.init is not None:
            self._instantiate(sub, call, env, depth + 1)
            return True
        return False

    def _layer(self, kind: LayerKind, qual: str, cls: _ClassDef, attr: str, element: int, call: cst.Call,
               env: _Env) -> None:
        short = qual.rsplit(".", 1)[-1]
        names = _PARAMS[short]
        args: dict[str, Value] = {}
        positional = [a for a in call.args if a.keyword is None and not a.star]
        for n, a in zip(names, positional):
            args[n] = _evaluate(a.value, env)
        for a in call.args:
            if a.keyword is not None:
                args[a.keyword.value] = _evaluate(a.value, env)
        span = env.file.span(call)
        text = _code(call)

        def need(*ns: str) -> list[int] | None:
            out = []
            for n in ns:
                v = args.get(n, Unknown(f"`{n}` is not given"))
                iv = _as_int(v)
                if iv is None:
                    why = v.reason if isinstance(v, Unknown) else f"`{n}` = {v!r} is not a positive integer"
                    self._refuse(env.file, span, text, why)
                    return None
                out.append(iv)
            return out

        dims: list[int] = []
        if kind in _SIZE_ARGS:
            found = need(*_SIZE_ARGS[kind])
            if found is None:
                return
            dims = found
        weights: tuple[Shape, ...]
        if kind is LayerKind.LINEAR:
            weights = ((dims[1], dims[0]),)
            label = f"nn.Linear({dims[0]}, {dims[1]})"
        elif kind is LayerKind.CONV:
            nd = int(short[-2])
            ks = _ints(args.get("kernel_size", Unknown("`kernel_size` is not given")), nd)
            groups = _as_int(args.get("groups", 1))
            if ks is None or groups is None or dims[0] % groups:
                self._refuse(env.file, span, text, "kernel size or groups not static")
                return
            weights = ((dims[1], dims[0] // groups, *ks),)
            label = f"nn.{short}({dims[0]}, {dims[1]}, kernel_size={ks[0] if len(set(ks)) == 1 else ks})"
        elif kind is LayerKind.EMBEDDING:
            weights = ((dims[0], dims[1]),)
            label = f"nn.{short}({dims[0]}, {dims[1]})"
        elif kind is LayerKind.NORM:
            v = args.get("normalized_shape", Unknown("`normalized_shape` is not given"))
            shape = (_as_int(v),) if _as_int(v) is not None else (
                tuple(int(x) for x in v) if isinstance(v, tuple) and v and all(_as_int(x) for x in v) else None)
            if shape is None:
                self._refuse(env.file, span, text, v.reason if isinstance(v, Unknown) else "normalized_shape not static")
                return
            if args.get("elementwise_affine") is False:
                return  # no weight: nothing a kernel's shapes could name
            weights = (shape,)  # type: ignore[assignment]
            label = f"nn.{short}({', '.join(str(d) for d in shape)})"  # type: ignore[union-attr]
        else:  # ATTENTION
            e = dims[0]
            weights = ((3 * e, e), (e, e))
            label = f"nn.MultiheadAttention({e}, {dims[1]})"
        self._add(Construction(kind, env.file.path, cls.qualname, attr, element, span, text, label, weights))

    def _parameter(self, cls: _ClassDef, attr: str, call: cst.Call, env: _Env) -> None:
        """``nn.Parameter(torch.ones(d))``: a norm weight when 1-D, a matmul weight when 2-D."""
        span = env.file.span(call)
        text = _code(call)
        if not call.args or not isinstance(call.args[0].value, cst.Call):
            self._refuse(env.file, span, text, "the parameter's tensor is not built by a torch factory")
            return
        inner = call.args[0].value
        qual = env.file.index.resolve(_code(inner.func), f"{cls.qualname}.__init__")
        if qual not in _TENSOR_FACTORIES:
            self._refuse(env.file, span, text, f"`{_code(inner.func)}` is not a torch tensor factory")
            return
        dims_args = [a for a in inner.args if a.keyword is None and not a.star]
        vals = [_evaluate(a.value, env) for a in dims_args]
        if len(vals) == 1 and isinstance(vals[0], tuple):
            vals = list(vals[0])
        dims = [_as_int(v) for v in vals]
        if not dims or any(d is None for d in dims):
            bad = next((v for v in vals if isinstance(v, Unknown)), None)
            self._refuse(env.file, span, text, bad.reason if bad else "tensor sizes not static")
            return
        shape = tuple(int(d) for d in dims)  # type: ignore[arg-type]
        if len(shape) == 1:
            kind, label = LayerKind.NORM, f"nn.Parameter({shape[0]})"
        elif len(shape) == 2:
            kind, label = LayerKind.PARAMETER, f"nn.Parameter({shape[0]}, {shape[1]})"
        else:
            return
        self._add(Construction(kind, env.file.path, cls.qualname, attr, -1, span, text, label, (shape,)))

    def _add(self, c: Construction) -> None:
        key = (c.span, c.weights)
        if key not in self._seen:
            self._seen.add(key)
            self.table.constructions.append(c)

    def _refuse(self, file: _File, span: Span, text: str, reason: str) -> None:
        if (span, reason) not in self._refused:
            self._refused.add((span, reason))
            self.table.refusals.append(Refusal(file.path, span, text, reason))


def _is_static(v: Value) -> bool:
    return not isinstance(v, Unknown)


def _is_field_call(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and _code(expr.func).rsplit(".", 1)[-1] == "field"


def _field_default(expr: cst.BaseExpression, file: _File, resolver: SizeResolver) -> Value:
    assert isinstance(expr, cst.Call)
    for a in expr.args:
        if a.keyword is not None and a.keyword.value == "default":
            return _evaluate(a.value, _Env(resolver, file))
    return Unknown(f"`{_code(expr)}` has no static default")


def _container_elements(call: cst.Call) -> list[cst.BaseExpression]:
    """``nn.Sequential(a, b)`` / ``nn.ModuleList([a, b])`` / ``nn.ModuleList([Blk(d) for _ in ...])``."""
    if len(call.args) == 1 and isinstance(call.args[0].value, (cst.List, cst.Tuple)):
        return [e.value for e in call.args[0].value.elements if isinstance(e, cst.Element)]
    if len(call.args) == 1 and isinstance(call.args[0].value, (cst.ListComp, cst.GeneratorExp)):
        return [call.args[0].value.elt]
    return [a.value for a in call.args if a.keyword is None and not a.star]


def _calls_in(body: Sequence[cst.BaseStatement], env: _Env | None) -> list[cst.Call]:
    """Calls in a statement list, in order; ``env`` (a function's locals) learns its simple
    ``name = <static>`` assignments on the way (assigned twice: unknown)."""
    out: list[cst.Call] = []

    class _V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            out.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

    for stmt in body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        if env is not None and isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                for name, value in _assigned(small):
                    if name in env.names:
                        env.names[name] = Unknown(f"`{name}` is assigned more than once")
                    elif not (isinstance(value, cst.Call) and env.resolver._class(env, value.func) is not None
                              and not env.resolver._class(env, value.func).is_config):  # type: ignore[union-attr]
                        env.names[name] = _evaluate(value, env)
        stmt.visit(_V())
    return out


def resolve_sizes(indexes: Iterable[SourceIndex]) -> SizeTable:
    """Constructions with static sizes, and the refused ones, over the given files."""
    return SizeResolver(indexes).table
