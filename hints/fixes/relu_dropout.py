"""NPU101 relu-dropout-fusion fixes (hint-rules NPU101 **Fixes**).

No fused relu+dropout API exists in torch or torch_npu, so the fixes are:

* ``compile_pair`` (review): one compiled helper added once after the imports,
  ``_relu_dropout = torch.compile(lambda x, p, training: F.dropout(F.relu(x), p=p, training=training), backend=...)``,
  and the recognised call sites rewritten to ``_relu_dropout(x, p, training)``:
  ``F.dropout(F.relu(x), p=..., training=...)``, ``self.drop(self.act(x))`` (p from ``self.drop.p``),
  consecutive ``x = F.relu(x)`` / ``x = F.dropout(x, ...)``, and adjacent ``nn.ReLU(), nn.Dropout(p)``
  inside ``nn.Sequential(...)``. The Sequential pair becomes ``ReLUDropout(p), nn.Identity()``:
  ``ReLUDropout`` (added once) calls the compiled helper, and the ``Identity`` keeps the indices
  (so the ``state_dict`` keys) of all later layers unchanged.
* ``inplace_relu`` (review): ``inplace=True`` on ``nn.ReLU()`` / ``F.relu(x)`` only when the ReLU's
  input is a fresh tensor that nothing reads again (see ``_input_is_dead``).
* ``drop_zero_dropout`` (safe): a dropout with literal ``p=0`` is a no-op: the call is replaced by
  its input, the module by ``nn.Identity()``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from msprof_lsp.hints.finding import Construct

from . import cst_tools as ct
from .cst_tools import Source
from .dataflow import NameFlow
from .result import Anchor, FixResult, Text, anchor_path, decline, result, where

# What counts as a ReLU and a dropout, for the NPU101 rule (on the source index) and these fixes
# (on libcst) alike, so that the construct the rule reports is the one the fix rewrites.
RELU_FUNCS = ("torch.nn.functional.relu", "torch.relu", "torch.nn.functional.relu_", "torch.relu_")
INPLACE_RELU_FUNCS = ("torch.nn.functional.relu_", "torch.relu_")
DROPOUT_FUNCS = ("torch.nn.functional.dropout", "torch.dropout")
RELU_MODULE = "torch.nn.ReLU"
DROPOUT_MODULE = "torch.nn.Dropout"


class PairKind(str, enum.Enum):
    """The shape of a recognised ReLU->Dropout pair (``Construct.kind`` of an NPU101 offer)."""

    NESTED = "nested"  # dropout(relu(x)), functional or through self.<module>
    STATEMENTS = "statements"  # y = relu(x) then z = dropout(y)
    SEQUENTIAL = "sequential"  # nn.ReLU(), nn.Dropout(p) adjacent in nn.Sequential
    CALL = "call"  # the profile points at a call the source shapes above do not cover


def is_relu_module(qualname: str, class_name: str) -> bool:
    """A module constructor that builds a ReLU: by its resolved name, or by its class name when
    the name does not resolve (an import the file does not show)."""
    return qualname == RELU_MODULE if qualname else class_name == "ReLU"


def is_dropout_module(qualname: str, class_name: str) -> bool:
    return qualname == DROPOUT_MODULE if qualname else class_name == "Dropout"
SEQUENTIAL = "torch.nn.Sequential"
HELPER = "_relu_dropout"
LAZY = "_relu_dropout_fn"  # the "npu" form: compiles on the first call, where the backend exists
MODULE_CLASS = "ReLUDropout"
BACKENDS = ("npu", "inductor")

# Producers whose output is a fresh tensor that their backward does not need: an in-place ReLU
# right after them is what torchvision does (Conv-BN-ReLU(inplace=True)).
SAFE_LAYERS = frozenset(
    f"torch.nn.{n}"
    for n in (
        "Linear LazyLinear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d "
        "LazyConv1d LazyConv2d LazyConv3d BatchNorm1d BatchNorm2d BatchNorm3d SyncBatchNorm LayerNorm "
        "GroupNorm InstanceNorm1d InstanceNorm2d InstanceNorm3d Embedding"
    ).split()
)
SAFE_FUNCS = frozenset(
    [f"torch.nn.functional.{n}" for n in "linear bilinear conv1d conv2d conv3d batch_norm layer_norm group_norm instance_norm embedding".split()]
    + [f"torch.{n}" for n in "matmul mm bmm addmm add sub mul cat".split()]
)
_FRESH_BINOPS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.MatrixMultiply)


@dataclass(slots=True)
class _Op:
    """One ReLU or dropout application at a call site."""

    call: cst.Call
    input: cst.BaseExpression
    p: str = ""  # dropout probability (code)
    training: str = ""  # dropout training flag (code)
    inplace: bool = False
    attr: str | None = None  # self.<attr> module, when called through one


def _ctor_is(src: Source, value: cst.BaseExpression | None, kind: Callable[[str, str], bool]) -> bool:
    """``value`` constructs a module of ``kind`` (is_relu_module / is_dropout_module)."""
    if not isinstance(value, cst.Call):
        return False
    class_name = (ct.dotted(value.func) or "").rsplit(".", 1)[-1]
    return any(kind(q, class_name) for q in src.qnames(value.func) or {""})


def _attrs(src: Source, node: cst.CSTNode) -> dict[str, cst.BaseExpression]:
    cls = src.class_of(node)
    return ct.init_assignments(cls) if cls is not None else {}


def _inplace_flag(call: cst.Call, index: int) -> bool:
    arg = ct.argument(call, index, "inplace")
    return arg is not None and ct.literal(arg.value) is True


def _as_relu(src: Source, call: cst.BaseExpression, attrs: dict[str, cst.BaseExpression]) -> _Op | None:
    if not isinstance(call, cst.Call) or ct.has_star(call):
        return None
    pos = ct.positional(call)
    if src.is_api(call.func, *RELU_FUNCS):
        if len(pos) != 1 or any(a.keyword and a.keyword.value != "inplace" for a in call.args):
            return None
        return _Op(call, pos[0].value, inplace=src.is_api(call.func, *INPLACE_RELU_FUNCS) or _inplace_flag(call, 1))
    attr = ct.self_attr(call.func)
    if attr and _ctor_is(src, attrs.get(attr), is_relu_module) and len(pos) == 1 and len(call.args) == 1:
        ctor = attrs[attr]
        return _Op(call, pos[0].value, inplace=_inplace_flag(ctor, 0), attr=attr)  # type: ignore[arg-type]
    return None


def _as_dropout(src: Source, call: cst.BaseExpression, attrs: dict[str, cst.BaseExpression]) -> _Op | None:
    if not isinstance(call, cst.Call) or ct.has_star(call):
        return None
    pos = ct.positional(call)
    if src.is_api(call.func, "torch.nn.functional.dropout"):
        if not pos or any(a.keyword and a.keyword.value not in ("input", "p", "training", "inplace") for a in call.args):
            return None
        p = ct.argument(call, 1, "p")
        training = ct.argument(call, 2, "training")
        return _Op(call, pos[0].value, ct.code(p.value) if p else "0.5", ct.code(training.value) if training else "True")
    if src.is_api(call.func, "torch.dropout"):
        if len(pos) != 3 or len(call.args) != 3:
            return None
        return _Op(call, pos[0].value, ct.code(pos[1].value), ct.code(pos[2].value))
    attr = ct.self_attr(call.func)
    if attr and _ctor_is(src, attrs.get(attr), is_dropout_module) and len(pos) == 1 and len(call.args) == 1:
        return _Op(call, pos[0].value, f"self.{attr}.p", "self.training", attr=attr)
    return None


# -- fresh-input analysis (shared by the in-place fix and the compile fix) ----------------------


def _fresh(src: Source, value: cst.BaseExpression, attrs: dict[str, cst.BaseExpression]) -> bool:
    """True when ``value`` makes a new tensor whose producer's backward does not need it."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, _FRESH_BINOPS):
        return True
    if isinstance(value, cst.Call):
        if src.is_api(value.func, *SAFE_FUNCS):
            return True
        attr = ct.self_attr(value.func)
        if attr and isinstance(attrs.get(attr), cst.Call) and src.is_api(attrs[attr].func, *SAFE_LAYERS):  # type: ignore[union-attr]
            return True
    return False


def _input_is_dead(src: Source, call: cst.Call, arg: cst.BaseExpression, attrs: dict[str, cst.BaseExpression], why: list[str] | None) -> bool:
    """May the ReLU at ``call`` overwrite ``arg``?

    Yes when ``arg`` is itself a fresh expression (``F.relu(self.fc(x))``), or a name that was last
    bound, in the same block, to a fresh expression, is not read between that binding and the
    call, and is not read again afterwards (not a residual operand). The call must not sit in a
    loop. Anything else: no.
    """
    if _fresh(src, arg, attrs):
        return True
    if not isinstance(arg, cst.Name):
        decline(why, "the ReLU input is neither a name nor a known fresh expression")
        return False
    func = src.function_of(call)
    if func is None:
        decline(why, "the ReLU is not inside a function")
        return False
    flow = NameFlow(src, func)
    occ = flow.occurrence_of(arg)
    if occ is None or arg.value in flow.declared_outer or flow.in_loop(call):
        decline(why, f"'{arg.value}' is global/nonlocal or the call runs in a loop")
        return False
    bind = flow.last_store_before(arg.value, occ.pos)
    if bind is None or bind.kind != "store" or not isinstance(bind.binder, cst.Assign):
        decline(why, f"'{arg.value}' is a parameter or not bound by a plain assignment: the caller may still use it")
        return False
    if len(bind.binder.targets) != 1 or bind.binder.targets[0].target is not bind.node:
        decline(why, f"'{arg.value}' is bound together with other names")
        return False
    if not flow.same_block(bind.node, call):
        decline(why, f"'{arg.value}' is bound in another block")
        return False
    if not _fresh(src, bind.binder.value, attrs):
        decline(why, f"'{arg.value}' may alias another tensor or be needed by its producer's backward")
        return False
    if flow.loads_between(arg.value, bind.pos, occ.pos):
        decline(why, f"'{arg.value}' is read before the ReLU (it may be aliased or used as a residual)")
        return False
    if not flow.dead_after(arg):
        decline(why, f"'{arg.value}' is read again after the ReLU")
        return False
    return True


# -- helper and module text ---------------------------------------------------------------------


def _names(module: cst.Module) -> tuple[str, str, str, list[str]]:
    """(torch, functional, nn) spellings in this module plus the imports to add for them."""
    add: list[str] = []
    torch = ct.binds_module(module, "torch")
    if torch is None:
        torch = "torch"
        add.append("torch")
    functional = ct.local_name_for(module, "torch.nn.functional") or f"{torch}.nn.functional"
    nn = ct.local_name_for(module, "torch.nn") or f"{torch}.nn"
    return torch, functional, nn, add


def _helper_stmts(torch: str, functional: str, backend: str) -> list[cst.BaseStatement]:
    """The compiled helper. Inductor ships with torch: ``torch.compile`` at import is lazy enough
    (it compiles on the first call). The "npu" backend exists only after ``import torch_npu`` and
    fuses only with torchair, so that helper decides on its first call: compiled where both are
    there, the eager pair elsewhere (a CPU or CUDA run of the same script, or no torchair)."""
    pair = f"{functional}.dropout({functional}.relu(x), p=p, training=training)"
    if backend != "npu":
        return [ct.stmt(f"{HELPER} = {torch}.compile(lambda x, p, training: {pair}, backend=\"{backend}\")")]
    text = (
        "@functools.cache\n"
        f"def {LAZY}():\n"
        '    """ReLU then dropout, compiled on the first call with torch_npu\'s "npu" backend where torchair\n'
        '    lets it fuse them; elsewhere (CPU, CUDA, no torchair) the eager pair (msprof-lsp NPU101)."""\n'
        "\n"
        "    def pair(x, p, training):\n"
        f"        return {pair}\n"
        "\n"
        "    try:\n"
        "        import torchair  # noqa: F401  (without it the npu backend runs the graph eagerly)\n"
        "    except ImportError:\n"
        "        return pair\n"
        f"    if \"npu\" not in {torch}.compiler.list_backends(exclude_tags=()):  # torch_npu registers it on import\n"
        "        return pair\n"
        f"    return {torch}.compile(pair, backend=\"npu\")\n"
        "\n"
        "\n"
        f"def {HELPER}(x, p, training):\n"
        f"    return {LAZY}()(x, p, training)\n"
    )
    body = list(cst.parse_module(text).body)
    return [body[0], body[1].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])]


def _class_stmt(nn: str) -> cst.BaseStatement:
    text = (
        f"class {MODULE_CLASS}({nn}.Module):\n"
        f'    """ReLU then dropout as one compiled kernel (msprof-lsp NPU101); holds no parameters."""\n'
        "\n"
        "    def __init__(self, p: float = 0.5) -> None:\n"
        "        super().__init__()\n"
        "        self.p = p\n"
        "\n"
        "    def forward(self, x):\n"
        f"        return {HELPER}(x, self.p, self.training)\n"
    )
    return cst.parse_module(text).body[0]


def _with_helpers(module: cst.Module, *, backend: str, need_class: bool) -> cst.Module:
    torch, functional, nn, add = _names(module)
    for name in add:
        module = ct.add_import_after(module, name, after="__none__")
    if backend == "npu":
        module = ct.add_stdlib_import(module, "functools")  # the helper compiles once, on its first call
    defined = ct.module_level_names(module)
    blank2 = [cst.EmptyLine(), cst.EmptyLine()]
    if HELPER not in defined:
        new: list[cst.BaseStatement] = _helper_stmts(torch, functional, backend)
        if need_class and MODULE_CLASS not in defined:
            new.append(_class_stmt(nn).with_changes(leading_lines=blank2))
        module = ct.insert_after_imports(module, new)
        if need_class:
            module = _space_after(module, ct.module_assignment_index(module, MODULE_CLASS))
    elif need_class and MODULE_CLASS not in defined:
        idx = ct.module_assignment_index(module, HELPER)
        module = ct.insert_after_statement(module, idx, [_class_stmt(nn).with_changes(leading_lines=blank2)])  # type: ignore[arg-type]
        module = _space_after(module, idx + 1)  # type: ignore[operator]
    return module


def _space_after(module: cst.Module, idx: int | None) -> cst.Module:
    """Two blank lines after an inserted class when the next statement has fewer (PEP 8)."""
    if idx is None or idx + 1 >= len(module.body):
        return module
    body = list(module.body)
    nxt = body[idx + 1]
    blanks = sum(1 for ln in nxt.leading_lines if ln.comment is None)
    if blanks < 2:
        body[idx + 1] = nxt.with_changes(leading_lines=[*[cst.EmptyLine()] * (2 - blanks), *nxt.leading_lines])
    return module.with_changes(body=body)


def _helper_call(x: cst.BaseExpression, p: str, training: str) -> cst.Call:
    return cst.Call(
        func=cst.Name(HELPER),
        args=[
            cst.Arg(x, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(ct.expr(p), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(ct.expr(training)),
        ],
    )


def _backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    return backend


# -- compile the pair -----------------------------------------------------------------------------


def _nested_pairs(src: Source, anchor_line: int) -> list[tuple[cst.Call, _Op, _Op]]:
    """``dropout(relu(x))`` calls on the anchor line (functional or through self.<module>)."""
    out = []
    for call in src.at(where(anchor_line), cst.Call):
        attrs = _attrs(src, call)
        d = _as_dropout(src, call, attrs)
        if d is None:
            continue
        r = _as_relu(src, d.input, attrs)
        if r is not None:
            out.append((call, d, r))
    return out


def _consecutive_pair(src: Source, line: int) -> tuple[cst.SimpleStatementLine, cst.SimpleStatementLine, _Op, _Op] | None:
    """``y = relu(x)`` directly followed by ``z = dropout(y, ...)``, either statement on ``line``."""
    for s1, s2 in src.adjacent_pairs(where(line)):
        pair = _assign_pair(src, s1, s2)
        if pair is not None:
            return (s1, s2, *pair)  # type: ignore[return-value]
    return None


def _assign_pair(src: Source, s1: cst.CSTNode, s2: cst.CSTNode) -> tuple[_Op, _Op] | None:
    a1, a2 = ct.single_assign(s1), ct.single_assign(s2)
    if a1 is None or a2 is None:
        return None
    attrs = _attrs(src, s1)
    r = _as_relu(src, a1.value, attrs)
    d = _as_dropout(src, a2.value, attrs)
    if r is None or d is None:
        return None
    y = a1.targets[0].target
    if not (isinstance(d.input, cst.Name) and d.input.value == y.value):  # type: ignore[union-attr]
        return None
    z = a2.targets[0].target
    if z.value != y.value:  # type: ignore[union-attr]
        func = src.function_of(s2)
        if func is None or not NameFlow(src, func).dead_after(d.input):
            return None  # the ReLU output is used again on its own
    return r, d


def _relu_input_ok(src: Source, r: _Op, why: list[str] | None) -> bool:
    """An in-place ReLU writes its input; the compiled helper does not, so that write must not matter."""
    if not r.inplace or not isinstance(r.input, cst.Name):
        return True
    func = src.function_of(r.call)
    if func is not None and NameFlow(src, func).dead_after(r.input):
        return True
    decline(why, "the ReLU is in-place and its input is read again; compiling it would change that")
    return False


def _sequential_pairs(src: Source, seq: cst.Call) -> list[tuple[cst.Arg, cst.Arg]]:
    args = list(seq.args)
    pairs = []
    for a, b in zip(args, args[1:]):
        if a.keyword or b.keyword or a.star or b.star:
            continue
        if not (_ctor_is(src, a.value, is_relu_module) and _ctor_is(src, b.value, is_dropout_module)):
            continue
        drop: cst.Call = b.value  # type: ignore[assignment]
        if _inplace_flag(drop, 1) or ct.has_star(drop) or any(x.keyword and x.keyword.value not in ("p", "inplace") for x in drop.args):
            continue
        pairs.append((a, b))
    return pairs


def _sequentials_at(src: Source, line: int) -> list[cst.Call]:
    """``nn.Sequential(...)`` calls covering the line, or the Sequential behind ``self.X(...)`` there."""
    seqs = [c for c in src.at(where(line), cst.Call) if src.is_api(c.func, SEQUENTIAL)]
    for call in src.at(where(line), cst.Call):
        attr = ct.self_attr(call.func)
        if attr:
            value = _attrs(src, call).get(attr)
            if isinstance(value, cst.Call) and src.is_api(value.func, SEQUENTIAL):
                seqs.append(value)
    return seqs


def compile_pair(
    source: Text,
    anchor: Anchor,
    *,
    backend: str = "inductor",
    construct: Construct | None = None,
    path: str | None = None,
    why: list[str] | None = None,
) -> FixResult | None:
    """Route the ReLU->Dropout pair at the anchor through one ``torch.compile``d helper (review).

    ``backend``: ``"npu"`` for Ascend profiles (torch_npu registers it; without torchair it runs
    eager), ``"inductor"`` for CUDA/CPU. ``construct``: the pair the rule recognised; only that
    shape is rewritten (without it, or for ``PairKind.CALL``, the shapes are tried in turn).
    """
    backend = _backend(backend)
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    kind = PairKind(construct.kind) if construct is not None else PairKind.CALL
    line = where(anchor).line
    replacements: dict[cst.CSTNode, ct.Replacement] = {}
    need_class = False
    nested = _nested_pairs(src, line) if kind in (PairKind.NESTED, PairKind.CALL) else []
    consecutive = None if nested or kind not in (PairKind.STATEMENTS, PairKind.CALL) else _consecutive_pair(src, line)
    if nested:
        call, d, r = nested[-1]  # the outermost pair on the line
        if not _relu_input_ok(src, r, why):
            return None
        replacements[call] = _helper_call(r.input, d.p, d.training)
        shape = "dropout(relu(x))"
    elif consecutive is not None:
        s1, s2, r, d = consecutive
        if not _relu_input_ok(src, r, why):
            return None
        a2 = ct.single_assign(s2)
        merged = cst.Assign(targets=a2.targets, value=_helper_call(r.input, d.p, d.training))  # type: ignore[union-attr]
        replacements[s1] = s1.with_changes(body=[merged], leading_lines=[*s1.leading_lines, *s2.leading_lines])
        replacements[s2] = cst.RemovalSentinel.REMOVE
        shape = "relu/dropout statements"
    elif kind in (PairKind.SEQUENTIAL, PairKind.CALL):
        for seq in _sequentials_at(src, line):
            for relu_arg, drop_arg in _sequential_pairs(src, seq):
                drop: cst.Call = drop_arg.value  # type: ignore[assignment]
                p = ct.argument(drop, 0, "p")
                prefix = (ct.dotted(drop.func) or "nn.Dropout").rsplit(".", 1)[0] if "." in (ct.dotted(drop.func) or "") else None
                identity = f"{prefix}.Identity()" if prefix else None
                if identity is None:
                    continue  # `Dropout` imported bare: spell Identity the same way below
                replacements[relu_arg.value] = ct.expr(f"{MODULE_CLASS}({ct.code(p.value) if p else '0.5'})")
                replacements[drop_arg.value] = ct.expr(identity)
                need_class = True
        shape = "nn.Sequential pair"
    if not replacements:
        shown = f" ({kind.value})" if construct is not None else ""
        return decline(why, f"no recognised ReLU->Dropout pair{shown} at this line")
    module = src.rewrite(replacements)
    module = _with_helpers(module, backend=backend, need_class=need_class)
    title = (f'Compile ReLU+Dropout into one kernel with torch.compile (backend="{backend}")' if backend != "npu" else
             'Compile ReLU+Dropout with torch.compile (backend="npu") where torchair can fuse them')
    notes = [
        "compiled dropout draws a different random stream (same distribution); new shapes recompile",
        "re-profile: fusion of the pair is not guaranteed",
    ]
    if backend == "npu":
        notes.append('compiled on the first call, only where torch_npu registered the "npu" backend and torchair is '
                     'installed (without torchair that backend fuses nothing); elsewhere the eager pair runs')
    if need_class:
        notes.append("ReLU, Dropout become ReLUDropout, Identity: later layer indices and state_dict keys stay the same")
    notes.append(f"matched: {shape}" + (f" ({', '.join(construct.names)})" if construct is not None and construct.names else ""))
    return result(source, module.code, title, safe=False, path=anchor_path(anchor, path), notes=tuple(notes))


# -- in-place ReLU --------------------------------------------------------------------------------


def _relu_module_uses(src: Source, cls: cst.ClassDef, attr: str) -> list[cst.Attribute] | None:
    """Every ``self.<attr>`` in the class outside ``__init__``, or None if one is not a plain call."""
    uses = []
    for item in cls.body.body:
        if not isinstance(item, cst.FunctionDef) or item.name.value == "__init__":
            continue
        for node in src.within(item, cst.Attribute):
            if ct.self_attr(node) == attr:
                parent = src.parent(node)
                if not (isinstance(parent, cst.Call) and parent.func is node):
                    return None
                uses.append(node)
    return uses


def _inplace_call(call: cst.Call) -> cst.Call:
    existing = ct.keyword(call, "inplace")
    if existing is not None:
        return ct.set_kwarg(call, "inplace", "True")
    return ct.append_args(call, [ct.kwarg("inplace", "True")])


def _module_relu_ok(src: Source, ctor: cst.Call, why: list[str] | None) -> bool:
    """``nn.ReLU()``: inside a Sequential after a safe layer, or ``self.X = nn.ReLU()`` whose calls all pass."""
    parent = src.parent(ctor)
    if isinstance(parent, cst.Arg):
        seq = src.parent(parent)
        if isinstance(seq, cst.Call) and src.is_api(seq.func, SEQUENTIAL):
            args = list(seq.args)
            i = next(k for k, a in enumerate(args) if a is parent)
            if i == 0:
                return bool(decline(why, "the ReLU is the first layer of the Sequential: its input belongs to the caller"))
            prev = args[i - 1].value
            if isinstance(prev, cst.Call) and src.is_api(prev.func, *SAFE_LAYERS):
                return True
            return bool(decline(why, "the layer before the ReLU may return a view or need its output for backward"))
        return bool(decline(why, "the ReLU module is not built in a recognised place"))
    assign = src.parent(parent) if isinstance(parent, cst.AssignTarget) else parent
    if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
        attr = ct.self_attr(assign.targets[0].target)
        cls = src.class_of(assign)
        if attr and cls is not None:
            uses = _relu_module_uses(src, cls, attr)
            if not uses:
                return bool(decline(why, f"self.{attr} is used other than by calling it, or never called"))
            attrs = ct.init_assignments(cls)
            for use in uses:
                call: cst.Call = src.parent(use)  # type: ignore[assignment]
                pos = ct.positional(call)
                if len(pos) != 1 or len(call.args) != 1 or not _input_is_dead(src, call, pos[0].value, attrs, why):
                    return False
            return True
    return bool(decline(why, "the ReLU module is not assigned to self.<attr> or placed in nn.Sequential"))


def inplace_relu(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """``nn.ReLU()`` -> ``nn.ReLU(inplace=True)`` / ``F.relu(x)`` -> ``F.relu(x, inplace=True)`` (review).

    The anchor may be the ReLU call, its construction, or a ``self.X(...)`` call of a module that
    is a ReLU or an ``nn.Sequential`` holding ReLUs.
    """
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    line = where(anchor).line
    targets: list[cst.Call] = []
    for call in src.at(where(line), cst.Call):
        if src.is_api(call.func, "torch.nn.functional.relu"):
            if ct.has_star(call) or len(ct.positional(call)) != 1 or _inplace_flag(call, 1):
                continue
            if _input_is_dead(src, call, ct.positional(call)[0].value, _attrs(src, call), why):
                targets.append(call)
            break
        if _ctor_is(src, call, is_relu_module):
            if not ct.positional(call) and not _inplace_flag(call, 0) and _module_relu_ok(src, call, why):
                targets.append(call)
            break
        attr = ct.self_attr(call.func)
        value = _attrs(src, call).get(attr) if attr else None
        if _ctor_is(src, value, is_relu_module):
            if not ct.positional(value) and not _inplace_flag(value, 0) and _module_relu_ok(src, value, why):
                targets.append(value)
            break
        if isinstance(value, cst.Call) and src.is_api(value.func, SEQUENTIAL):
            for a in value.args:
                v = a.value
                if _ctor_is(src, v, is_relu_module) and not ct.positional(v) and not _inplace_flag(v, 0):
                    if _module_relu_ok(src, v, why):
                        targets.append(v)
            break
    if not targets:
        return decline(why, "no ReLU here whose input is safe to overwrite")
    return src.fixed(
        {t: _inplace_call(t) for t in targets},
        "Use an in-place ReLU (saves one allocation; removes no kernel)",
        safe=False,
        path=anchor_path(anchor, path),
        notes=("the ReLU's input is not read again, so overwriting it is safe",),
    )


# -- dropout with p = 0 ---------------------------------------------------------------------------


def _zero(expr: cst.BaseExpression | None) -> bool:
    v = ct.literal(expr)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0


def drop_zero_dropout(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Delete a dropout whose ``p`` is a literal 0: it only copies its input (safe)."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    line = where(anchor).line
    replacements: dict[cst.CSTNode, ct.Replacement] = {}
    for call in src.at(where(line), cst.Call):
        attrs = _attrs(src, call)
        if src.is_api(call.func, *DROPOUT_FUNCS):
            op = _as_dropout(src, call, attrs)
            if op is None or not _zero(ct.argument(call, 1, "p").value if ct.argument(call, 1, "p") else None):
                continue
            stmt = src.statement(call)
            assign = ct.single_assign(stmt) if stmt is not None else None
            if assign is not None and assign.value is call and isinstance(op.input, cst.Name) and op.input.value == assign.targets[0].target.value:  # type: ignore[union-attr]
                replacements.update(ct.removal(src, stmt))  # x = F.dropout(x, p=0.0): the whole line goes
            else:
                replacements[call] = op.input
            break
        ctor = call
        attr = ct.self_attr(call.func)
        if attr:
            value = attrs.get(attr)
            ctor = value if isinstance(value, cst.Call) else None  # type: ignore[assignment]
        if ctor is not None and _ctor_is(src, ctor, is_dropout_module):
            p = ct.argument(ctor, 0, "p")
            if p is None or not _zero(p.value):
                continue
            name = ct.dotted(ctor.func) or ""
            prefix = name.rsplit(".", 1)[0] if "." in name else None
            if prefix is None:
                return decline(why, "Dropout is imported bare; cannot spell nn.Identity reliably")
            replacements[ctor] = ct.expr(f"{prefix}.Identity()")
            break
    if not replacements:
        return decline(why, "no dropout with a literal p=0 here")
    module = src.rewrite(replacements)
    return result(source, module.code, "Remove the dropout with p=0 (it only copies its input)", safe=True, path=anchor_path(anchor, path))


def compile_backend(setting: str, profile_backend: str) -> str:
    """The ``backend=`` for ``compile_pair`` from the ``compileBackend`` setting.

    ``auto`` follows the profile: ``npu`` for Ascend captures, ``inductor`` for CUDA/CPU ones.
    """
    if setting in BACKENDS:
        return setting
    if setting != "auto":
        raise ValueError(f"compileBackend must be auto, npu or inductor, not {setting!r}")
    return "npu" if profile_backend == "ascend" else "inductor"
