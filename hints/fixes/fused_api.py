"""NPU210-NPU217 fused-API swaps (all review): only exactly recognised expressions are rewritten.

Everything not matched exactly gets no edit; the rule shows ``SNIPPETS[code]`` in the hover
instead. Signatures follow torch_npu 2.14.0 (the catalog in hints/rules/fused_api.py):

* NPU210 ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`` ->
  ``torch_npu.npu_rms_norm(x, w, epsilon=eps)[0]``
* NPU211 ``a, b = x.chunk(2, dim=-1)`` + ``F.silu(a) * b`` -> ``torch_npu.npu_swiglu(x, dim=-1)``
* NPU212 ``q * cos + rotate_half(q) * sin`` (``rotate_half`` defined in the file, half-split form) ->
  ``torch_npu.npu_rotary_mul(q, cos, sin)``
* NPU213 ``softmax(q @ k.transpose(-2, -1) * s [+ mask | .masked_fill(m, -inf)], dim=-1) [dropout] @ v``,
  possibly spread over consecutive single-use assignments, the fill possibly an in-place
  ``scores.masked_fill_(m, -inf)`` statement right before the softmax's (taken only where that
  read of ``scores`` is its last) -> Ascend
  ``torch_npu.npu_fusion_attention(q, k, v, q.shape[1], "BNSD", atten_mask=m, scale=s, keep_prob=...)[0]``
  (boolean masks only: True = masked out, as in ``masked_fill``), CUDA/CPU
  ``F.scaled_dot_product_attention(q, k, v, attn_mask=..., dropout_p=..., scale=...)``
* NPU214 ``F.gelu(x)`` -> ``torch_npu.fast_gelu(x)`` (Ascend) / ``F.gelu(x, approximate="tanh")``
* NPU215 ``x.permute(<literal perm>)[.contiguous()].view(shape)`` ->
  ``torch_npu.npu_confusion_transpose(x, perm, shape, True)``; ``x.view(shape).permute(perm)`` -> ``..., False)``
* NPU216 ``F.softmax((x * s).masked_fill(mask, -inf), dim=-1)``, or the fill an in-place
  ``t.masked_fill_(mask, -inf)`` statement right before the softmax's, taken as NPU213's (the
  softmax's read of t its last) and with ``t = x * s`` (x a name) right before it (t then a tensor of its own;
  the three statements consumed) -> ``torch_npu.npu_scaled_masked_softmax(x, mask, scale=s)``
  (the mask as it is: True = masked out, as in ``masked_fill``)
* NPU217 ``h = x + r`` then ``y = self.norm(h)`` (affine ``nn.LayerNorm`` over the last dim) ->
  ``y, _, _, h = torch_npu.npu_add_layer_norm(x, r, self.norm.weight, self.norm.bias, self.norm.eps, additional_output=True)``

Every path the file runs keeps working (``npu_access.behind_npu``): unless the file imports
torch_npu unconditionally, the rewritten statements go behind ``if torch_npu is not None:`` with
the original ones in the ``else``, and the file gets the guarded import, never a bare one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .dataflow import NameFlow
from .npu_access import behind_npu, npu_access
from .result import Anchor, FixResult, Text, Where, anchor_path, decline, result, where

SNIPPETS: dict[str, str] = {
    "NPU210": "y = torch_npu.npu_rms_norm(x, weight, epsilon=eps)[0]  # returns (y, rstd); weight dtype = x dtype",
    "NPU211": "y = torch_npu.npu_swiglu(x, dim=-1)  # silu(first half) * second half; separate projections: torch.cat([gate, up], -1)",
    "NPU212": "q = torch_npu.npu_rotary_mul(q, cos, sin)  # 4-D q, cos/sin broadcast over the full head dim ('half' mode)",
    "NPU213": (
        "out = torch_npu.npu_fusion_attention(q, k, v, n_heads, input_layout=\"BNSD\", atten_mask=mask_bool, "
        "scale=s, keep_prob=1 - p)[0]  # atten_mask True = masked OUT (inverse of SDPA)"
    ),
    "NPU214": "y = torch_npu.fast_gelu(x)  # approximation (opt in)",
    "NPU215": "y = torch_npu.npu_confusion_transpose(x, [0, 2, 1, 3], [b, s, h], True)  # literal full perm; no bf16",
    "NPU216": "p = torch_npu.npu_scaled_masked_softmax(x, mask, scale=s)  # bool mask True = masked; H, W in [32, 4096], % 32",
    "NPU217": "y, _, _, h = torch_npu.npu_add_layer_norm(x, r, norm.weight, norm.bias, norm.eps, additional_output=True)",
}

SOFTMAX = ("torch.nn.functional.softmax", "torch.softmax")
RSQRT = ("torch.rsqrt",)
SILU = ("torch.nn.functional.silu",)
GELU = ("torch.nn.functional.gelu",)
LAYER_NORM = "torch.nn.LayerNorm"
NEG_INF = ("-inf", "-float('inf')", '-float("inf")', "float('-inf')", 'float("-inf")', "-math.inf", "-torch.inf", "-np.inf", "-numpy.inf")


def _n(node: cst.CSTNode) -> str:
    return "".join(ct.code(node).split())


def _plain(node: cst.CSTNode) -> bool:
    """A side-effect-free operand we may repeat or reorder: a name or attribute chain."""
    return ct.dotted(node) is not None


def _mul(node: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return node.left, node.right
    return None


def _strip(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def _last_dim(call: cst.Call, index: int, name: str = "dim") -> bool:
    arg = ct.argument(call, index, name)
    return arg is not None and ct.literal(arg.value) == -1


@dataclass(frozen=True, slots=True)
class _Edit:
    """What a recognised expression becomes: the node replacements, the fix's title and notes;
    ``npu``: NPU-only code."""

    replacements: dict[cst.CSTNode, ct.Replacement]
    title: str
    notes: tuple[str, ...]
    npu: bool = True


# (parsed file, candidate node at the anchor, the file's name for torch_npu) -> the edit, None (try
# the next node) or why there is no edit (stop)
Matcher = Callable[[Source, Any, str], "_Edit | str | None"]
Nodes = Callable[[Source, Where], Iterable[Any]]


def _nodes(kind: type[cst.CSTNode], *more: type[cst.CSTNode], outer_first: bool = False) -> Nodes:
    """The nodes of ``kind`` (then of each of ``more``) covering the anchor, innermost first."""
    def at(src: Source, w: Where) -> list[cst.CSTNode]:
        found = [n for k in (kind, *more) for n in src.at(w, k)]
        return found[::-1] if outer_first else found
    return at


def _swap(source: Text, anchor: Anchor, path: str | None, why: list[str] | None, nodes: Nodes, match: Matcher,
          missing: str) -> FixResult | None:
    """The one driver of the swaps: parse once, try ``match`` on each candidate node, write the first
    edit -- NPU-only code behind ``if torch_npu is not None:`` unless every path imports torch_npu
    (the name ``match`` got is then bound on every path)."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    npu = npu_access(src.module).name
    for node in nodes(src, where(anchor)):
        found = match(src, node, npu)
        if isinstance(found, str):
            return decline(why, found)
        if found is not None:
            module = behind_npu(src, found.replacements, why) if found.npu else src.rewrite(found.replacements)
            if module is None:
                return None
            return result(source, module.code, found.title, safe=False, path=anchor_path(anchor, path), notes=found.notes)
    return decline(why, missing)


# -- NPU210 rms_norm ---------------------------------------------------------------------------------


def _mean_of_square(src: Source, node: cst.BaseExpression, x: cst.BaseExpression) -> bool:
    node = _strip(node)
    if not isinstance(node, cst.Call):
        return False
    if isinstance(node.func, cst.Attribute) and node.func.attr.value == "mean":
        inner = node.func.value
        dim_ok = _last_dim(node, 0) and ct.literal((ct.keyword(node, "keepdim") or ct.argument(node, 1, "keepdim") or cst.Arg(cst.Name("False"))).value) is True
    elif src.is_api(node.func, "torch.mean"):
        pos = ct.positional(node)
        if not pos:
            return False
        inner = pos[0].value
        dim_ok = _last_dim(node, 1) and ct.literal((ct.argument(node, 2, "keepdim") or cst.Arg(cst.Name("False"))).value) is True
    else:
        return False
    if not dim_ok:
        return False
    inner = _strip(inner)
    if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute):
        if inner.func.attr.value == "pow" and len(inner.args) == 1 and ct.literal(inner.args[0].value) == 2:
            return ct.same(inner.func.value, x)
        if inner.func.attr.value == "square" and not inner.args:
            return ct.same(inner.func.value, x)
    if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Power) and ct.literal(inner.right) == 2:
        return ct.same(inner.left, x)
    return False


def _rsqrt_of(src: Source, node: cst.BaseExpression, x: cst.BaseExpression) -> cst.BaseExpression | None:
    """eps when ``node`` is ``rsqrt(mean(x^2, -1, keepdim=True) + eps)``."""
    node = _strip(node)
    if not isinstance(node, cst.Call):
        return None
    if src.is_api(node.func, *RSQRT) and len(node.args) == 1:
        arg = _strip(node.args[0].value)
    elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "rsqrt" and not node.args:
        arg = _strip(node.func.value)
    else:
        return None
    if isinstance(arg, cst.BinaryOperation) and isinstance(arg.operator, cst.Add) and _mean_of_square(src, arg.left, x):
        return arg.right
    return None


def _match_rms(src: Source, node: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression, cst.BaseExpression] | None:
    """(x, weight, eps)."""
    outer = _mul(node)
    if outer is None:
        return None
    for inner_side, w in ((outer[0], outer[1]), (outer[1], outer[0])):
        inner = _mul(_strip(inner_side))
        if inner is None or not _plain(w):
            continue
        for x, r in ((inner[0], inner[1]), (inner[1], inner[0])):
            if _plain(x):
                eps = _rsqrt_of(src, r, x)
                if eps is not None:
                    return x, w, eps
    return None


def _rms_edit(src: Source, node: cst.BinaryOperation, npu: str) -> _Edit | None:
    m = _match_rms(src, node)
    if m is None:
        return None
    x, w, eps = m
    new = ct.expr(f"{npu}.npu_rms_norm({ct.code(x)}, {ct.code(w)}, epsilon={ct.code(eps)})[0]")
    return _Edit({node: new}, "Use torch_npu.npu_rms_norm",
                 ("the weight must have x's dtype; an fp32 upcast in the original rounds differently",))


def rms_norm(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    return _swap(source, anchor, path, why, _nodes(cst.BinaryOperation, outer_first=True), _rms_edit,
                 "no exactly recognised RMSNorm expression here")


# -- NPU211 swiglu ----------------------------------------------------------------------------------------


def _chunk_source(src: Source, value: cst.BaseExpression) -> cst.BaseExpression | None:
    """x for ``x.chunk(2, dim=-1)`` / ``torch.chunk(x, 2, dim=-1)``."""
    if not isinstance(value, cst.Call):
        return None
    if isinstance(value.func, cst.Attribute) and value.func.attr.value == "chunk" and not src.is_api(value.func, "torch.chunk"):
        chunks, dim_i, x = ct.argument(value, 0, "chunks"), 1, value.func.value
        ok = chunks is not None and ct.literal(chunks.value) == 2 and _last_dim(value, dim_i)
    elif src.is_api(value.func, "torch.chunk"):
        pos = ct.positional(value)
        x = pos[0].value if pos else None
        chunks = ct.argument(value, 1, "chunks")
        ok = x is not None and chunks is not None and ct.literal(chunks.value) == 2 and _last_dim(value, 2)
    else:
        return None
    return x if ok else None


def _swiglu_edit(src: Source, node: cst.BinaryOperation, npu: str) -> _Edit | str | None:
    m = _mul(node)
    if m is None:
        return None
    gate, up = m
    if not (isinstance(gate, cst.Call) and src.is_api(gate.func, *SILU) and len(gate.args) == 1 and isinstance(gate.args[0].value, cst.Name) and isinstance(up, cst.Name)):
        return None
    a, b = gate.args[0].value.value, up.value
    stmt = src.statement(node)
    block = src.block_of(stmt) if stmt is not None else None
    if block is None:
        return None
    i = ct.statement_index(block, stmt)
    prev = block.body[i - 1] if i > 0 else None
    assign = prev.body[0] if isinstance(prev, cst.SimpleStatementLine) and len(prev.body) == 1 and isinstance(prev.body[0], cst.Assign) else None
    if assign is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Tuple):
        return "the halves are not split by the statement right before"
    names = [e.value.value if isinstance(e.value, cst.Name) else None for e in assign.targets[0].target.elements]
    x = _chunk_source(src, assign.value)
    if names != [a, b] or x is None:
        return "not `a, b = x.chunk(2, dim=-1)` followed by `F.silu(a) * b`"
    func = src.function_of(node)
    flow = NameFlow(src, func) if func is not None else None
    used_elsewhere = flow is None or any(len(flow.loads(n)) != 1 for n in (a, b))
    if used_elsewhere and not _plain(x):
        return "the halves are used elsewhere and the input is not a plain name"
    new_expr = ct.expr(f"{npu}.npu_swiglu({ct.code(x)}, dim=-1)")
    if used_elsewhere:
        module_repl: dict[cst.CSTNode, ct.Replacement] = {node: new_expr}
    else:  # the split goes; comments above it stay
        new_stmt = ct.rewrite(stmt, {node: new_expr})  # type: ignore[arg-type]
        module_repl = {
            prev: cst.RemovalSentinel.REMOVE,
            stmt: new_stmt.with_changes(leading_lines=[*prev.leading_lines, *stmt.leading_lines]),  # type: ignore[union-attr]
        }
    return _Edit(module_repl, "Use torch_npu.npu_swiglu", ("the first half must be the gated one (silu(first) * second)",))


def swiglu(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    return _swap(source, anchor, path, why, _nodes(cst.BinaryOperation), _swiglu_edit,
                 "no exactly recognised SwiGLU expression here")


# -- NPU212 rotary -----------------------------------------------------------------------------------------

_CAT = r"returntorch\.cat\([\(\[]-(?P=b),(?P=a)[\)\]],dim=-1\)$"
_ROTATE_FORMS = (
    re.compile(r"^(?P<a>\w+)=(?P<x>\w+)\[\.\.\.,:(?P=x)\.shape\[-1\]//2\];(?P<b>\w+)=(?P=x)\[\.\.\.,(?P=x)\.shape\[-1\]//2:\];" + _CAT),
    re.compile(r"^(?P<a>\w+),(?P<b>\w+)=(?P<x>\w+)\.chunk\(2,dim=-1\);" + _CAT),
    re.compile(r"^(?P<a>\w+),(?P<b>\w+)=torch\.chunk\((?P<x>\w+),2,dim=-1\);" + _CAT),
)


def _is_rotate_half(src: Source, name: str) -> bool:
    """Is ``name`` a module-level function computing ``cat(-x2, x1)`` of the two halves of its input?"""
    for f in src.module.body:
        if not (isinstance(f, cst.FunctionDef) and f.name.value == name and len(f.params.params) == 1):
            continue
        if not isinstance(f.body, cst.IndentedBlock):
            return False
        parts = []
        for s in f.body.body:
            if not isinstance(s, cst.SimpleStatementLine):
                return False
            if len(s.body) == 1 and isinstance(s.body[0], cst.Expr) and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
                continue  # docstring
            parts.append(_n(s.with_changes(leading_lines=(), trailing_whitespace=cst.TrailingWhitespace())))
        text = ";".join(parts)
        param = f.params.params[0].name.value
        return any((m := form.match(text)) is not None and m.group("x") == param for form in _ROTATE_FORMS)
    return False


def _rotary_edit(src: Source, node: cst.BinaryOperation, npu: str) -> _Edit | None:
    if not (isinstance(node.operator, cst.Add)):
        return None
    left, right = _mul(_strip(node.left)), _mul(_strip(node.right))
    if left is None or right is None:
        return None
    for (q, cos) in (left, left[::-1]):
        for (rot, sin) in (right, right[::-1]):
            if (
                _plain(q) and _plain(cos) and _plain(sin)
                and isinstance(rot, cst.Call) and isinstance(rot.func, cst.Name) and len(rot.args) == 1
                and ct.same(rot.args[0].value, q) and _is_rotate_half(src, rot.func.value)
            ):
                new = ct.expr(f"{npu}.npu_rotary_mul({ct.code(q)}, {ct.code(cos)}, {ct.code(sin)})")
                return _Edit({node: new}, "Use torch_npu.npu_rotary_mul",
                             ("q must be 4-D (BNSD/BSND/SBND, D even, < 896); cos/sin over the full head dim",))
    return None


def rotary_mul(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    return _swap(source, anchor, path, why, _nodes(cst.BinaryOperation, outer_first=True), _rotary_edit,
                 "no exactly recognised rotary embedding here (q * cos + rotate_half(q) * sin)")


# -- NPU213 attention ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Attn:
    q: cst.BaseExpression
    k: cst.BaseExpression
    v: cst.BaseExpression
    scale: str = "1.0"
    add_mask: str | None = None  # additive float mask
    bool_mask: str | None = None  # masked_fill condition: True = masked out
    dropout_p: str | None = None  # probability expression (already guarded by training)
    consumed: list[cst.BaseStatement] = field(default_factory=list)


def _fill_in_place(stmt: cst.BaseStatement, name: str) -> cst.Call | None:
    """The call when ``stmt`` is the statement ``name.masked_fill_(mask, value)``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return None
    call = stmt.body[0].value
    if (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "masked_fill_"
            and isinstance(call.func.value, cst.Name) and call.func.value.value == name):
        return call
    return None


class _Inliner:
    """Follows single-use temporaries assigned by the statements right before one statement, and
    an in-place ``t.masked_fill_(mask, value)`` statement right before the read of ``t`` (read as
    ``t.masked_fill(mask, value)``, the statement consumed like an assignment). ``refused``: why
    such a fill was not taken, for the decline."""

    def __init__(self, src: Source, stmt: cst.BaseStatement) -> None:
        self.src = src
        self.stmt = stmt
        self.block = src.block_of(stmt)
        func = src.function_of(stmt)
        self.flow = NameFlow(src, func) if func is not None else None
        self.consumed: list[cst.BaseStatement] = []
        self.refused: str | None = None
        # a fill's read of t -> the later read it stands for (its value flows there): the read
        # that must be t's last
        self._stands_for: dict[int, cst.Name] = {}

    def _before(self, node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseStatement | None]:
        """``node`` unparenthesised and, where it is a name, the statement right before the
        statement reached so far (the last consumed one, else the one we started from)."""
        node = _strip(node)
        if not isinstance(node, cst.Name) or self.block is None or self.flow is None:
            return node, None
        at = self.consumed[-1] if self.consumed else self.stmt
        i = ct.statement_index(self.block, at)
        return node, (self.block.body[i - 1] if i > 0 else None)

    def unfill(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """Only the in-place fill: ``t.masked_fill(mask, value)`` for a read of t right after the
        statement ``t.masked_fill_(mask, value)``, else ``node`` (``refused`` says why where the
        fill was there but could not go)."""
        node, prev = self._before(node)
        fill = _fill_in_place(prev, node.value) if prev is not None else None  # type: ignore[attr-defined]
        return self._filled(node, prev, fill) if fill is not None else node  # type: ignore[arg-type]

    def resolve(self, node: cst.BaseExpression) -> cst.BaseExpression:
        node, prev = self._before(node)
        if prev is None:
            return node
        fill = _fill_in_place(prev, node.value)  # type: ignore[attr-defined]
        if fill is not None:
            return self._filled(node, prev, fill)  # type: ignore[arg-type]
        if not (isinstance(prev, cst.SimpleStatementLine) and len(prev.body) == 1 and isinstance(prev.body[0], cst.Assign)):
            return node
        assign = prev.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) or assign.targets[0].target.value != node.value:
            return node
        last = self._stands_for.get(id(node), node)
        occ = self.flow.occurrence_of(last)
        store = self.flow.occurrence_of(assign.targets[0].target)
        if occ is None or store is None:
            return node
        nxt = self.flow.first_after(node.value, store.pos)
        after = self.flow.first_after(node.value, occ.pos, exclude=last)
        if nxt is None or nxt.node is not node:
            return node  # another read between
        if after is not None and after.kind != "store":
            return node  # the temporary is read again later
        self.consumed.append(prev)
        return _strip(assign.value)

    def _filled(self, node: cst.Name, prev: cst.BaseStatement, fill: cst.Call) -> cst.BaseExpression:
        """``t.masked_fill(mask, value)`` for the read ``node`` of t right after ``t.masked_fill_(mask,
        value)``: the fused call replaces the fill only where this read is t's last and the fill's
        own read is the one before it (the fill's effect reaches nothing else)."""
        assert self.flow is not None
        name, own = node.value, fill.func.value  # type: ignore[attr-defined]
        last = self._stands_for.get(id(node), node)  # the read the fill's value reaches last
        fill_occ, last_occ = self.flow.occurrence_of(own), self.flow.occurrence_of(last)
        if fill_occ is None or last_occ is None:
            return node
        if len(fill.args) != 2 or any(a.keyword or a.star for a in fill.args) or not _neg_inf(fill.args[1].value):
            self.refused = f"the in-place fill `{ct.code(fill)}` is not `{name}.masked_fill_(mask, -inf)`"
            return node
        nxt = self.flow.first_after(name, fill_occ.pos, exclude=own)
        if nxt is None or nxt.node is not node:
            return node  # another read between (a statement between is no fill right before)
        after = self.flow.first_after(name, last_occ.pos, exclude=last)
        if after is not None and after.kind != "store":
            self.refused = (f"`{name}` is read again after the softmax (line {self.src.range(after.node).start.line}): "
                            "its in-place masked_fill_ cannot go")
            return node
        self.consumed.append(prev)
        self._stands_for[id(own)] = last
        return fill.with_changes(func=fill.func.with_changes(attr=cst.Name("masked_fill")))  # type: ignore[attr-defined]


def _is_transpose_last2(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """k for ``k.transpose(-2, -1)`` / ``k.transpose(-1, -2)`` / ``k.mT``."""
    if isinstance(node, cst.Attribute) and node.attr.value == "mT":
        return node.value
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "transpose" and len(node.args) == 2:
        dims = {ct.literal(a.value) for a in node.args}
        if dims == {-2, -1}:
            return node.func.value
    return None


def _matmul(src: Source, node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    node = _strip(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return node.left, node.right
    if isinstance(node, cst.Call) and src.is_api(node.func, "torch.matmul") and len(node.args) == 2 and not any(a.keyword for a in node.args):
        return node.args[0].value, node.args[1].value
    return None


def _softmax_arg(src: Source, node: cst.BaseExpression) -> cst.BaseExpression | None:
    node = _strip(node)
    if not isinstance(node, cst.Call):
        return None
    if src.is_api(node.func, *SOFTMAX):
        pos = ct.positional(node)
        if pos and _last_dim(node, 1) and len(node.args) == 2:
            return pos[0].value
    elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "softmax" and len(node.args) == 1 and _last_dim(node, 0):
        return node.func.value
    return None


def _dropout_of(src: Source, node: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """(input, guarded probability) for ``F.dropout(x, p=.., training=..)`` or ``self.drop(x)``."""
    node = _strip(node)
    if not isinstance(node, cst.Call):
        return None
    if src.is_api(node.func, "torch.nn.functional.dropout") and ct.positional(node):
        p = ct.argument(node, 1, "p")
        t = ct.argument(node, 2, "training")
        pc = ct.code(p.value) if p else "0.5"
        tc = ct.code(t.value) if t else "True"
        return ct.positional(node)[0].value, (pc if tc == "True" else f"{pc} if {tc} else 0.0")
    attr = ct.self_attr(node.func)
    cls = src.class_of(node)
    if attr and cls is not None and len(node.args) == 1:
        ctor = ct.init_assignments(cls).get(attr)
        if isinstance(ctor, cst.Call) and src.is_api(ctor.func, "torch.nn.Dropout"):
            return node.args[0].value, f"self.{attr}.p if self.training else 0.0"
    return None


def _neg_inf(node: cst.BaseExpression) -> bool:
    return _n(node) in NEG_INF


def _match_attention(src: Source, node: cst.BaseExpression, stmt: cst.BaseStatement) -> _Attn | str | None:
    """The attention ending at ``node``; why not, where an in-place fill on the way was refused."""
    inl = _Inliner(src, stmt)
    found = _attention_of(src, node, inl)
    return inl.refused if found is None else found


def _attention_of(src: Source, node: cst.BaseExpression, inl: _Inliner) -> _Attn | None:
    mm = _matmul(src, node)
    if mm is None:
        return None
    probs, v = inl.resolve(mm[0]), mm[1]
    dropout_p = None
    d = _dropout_of(src, probs)
    if d is not None:
        probs, dropout_p = inl.resolve(d[0]), d[1]
    scores = _softmax_arg(src, probs)
    if scores is None:
        return None
    scores = inl.resolve(scores)
    add_mask = bool_mask = None
    # masked_fill(cond, -inf)
    if isinstance(scores, cst.Call) and isinstance(scores.func, cst.Attribute) and scores.func.attr.value == "masked_fill" and len(scores.args) == 2:
        if not _neg_inf(scores.args[1].value):
            return None
        bool_mask = ct.code(scores.args[0].value)
        scores = inl.resolve(scores.func.value)
    elif isinstance(scores, cst.BinaryOperation) and isinstance(scores.operator, cst.Add):
        add_mask = ct.code(scores.right)
        scores = inl.resolve(scores.left)
    scale = "1.0"
    if isinstance(scores, cst.BinaryOperation) and isinstance(scores.operator, (cst.Multiply, cst.Divide)) and _matmul(src, scores.left):
        s = scores.right
        scale = ct.code(s) if isinstance(scores.operator, cst.Multiply) else (
            f"1 / {ct.code(s)}" if isinstance(s, (cst.Name, cst.Attribute, cst.Call, cst.Integer, cst.Float)) else f"1 / ({ct.code(s)})"
        )
        scores = scores.left
    qk = _matmul(src, scores)
    if qk is None:
        return None
    q, kt = qk
    k = _is_transpose_last2(_strip(kt))
    if k is None or not (_plain(q) and _plain(k) and _plain(v)):
        return None
    return _Attn(q, k, v, scale, add_mask, bool_mask, dropout_p, inl.consumed)


def _attention_edit(src: Source, node: cst.CSTNode, npu: str, backend: str) -> _Edit | str | None:
    stmt = src.statement(node)
    m = _match_attention(src, node, stmt) if stmt is not None else None
    if m is None or isinstance(m, str):
        return m
    q, k, v = ct.code(m.q), ct.code(m.k), ct.code(m.v)
    if backend == "ascend":
        if m.add_mask is not None:
            return "additive float mask: npu_fusion_attention takes a boolean mask (True = masked out)"
        args = [q, k, v, f"{q}.shape[1]", '"BNSD"']
        if m.bool_mask:
            args.append(f"atten_mask={m.bool_mask}")
        args.append(f"scale={m.scale}")
        if m.dropout_p:
            args.append(f"keep_prob=1 - ({m.dropout_p})")
        new = ct.expr(f"{npu}.npu_fusion_attention({', '.join(args)})[0]")
        return _Edit(ct.remove_statements(src, m.consumed, keep={node: new}), "Use torch_npu.npu_fusion_attention", (
            "q, k, v must be [batch, heads, seq, head_dim] (BNSD)",
            "atten_mask True = masked out (the inverse of SDPA's boolean mask)",
        ))
    functional = ct.local_name_for(src.module, "torch.nn.functional") or "torch.nn.functional"
    args = [q, k, v]
    if m.add_mask:
        args.append(f"attn_mask={m.add_mask}")
    if m.bool_mask:
        args.append(f"attn_mask=~({m.bool_mask})")
    if m.dropout_p:
        args.append(f"dropout_p={m.dropout_p}")
    args.append(f"scale={m.scale}")
    new = ct.expr(f"{functional}.scaled_dot_product_attention({', '.join(args)})")
    return _Edit(ct.remove_statements(src, m.consumed, keep={node: new}), "Use F.scaled_dot_product_attention", (
        "a boolean attn_mask is True where attention is allowed",
        "dropout draws a different random stream",
    ), npu=False)


def attention(source: Text, anchor: Anchor, *, backend: str = "ascend", path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Fuse a hand-written scaled-dot-product attention (``backend``: ascend | cuda | cpu)."""
    return _swap(source, anchor, path, why, _nodes(cst.BinaryOperation, cst.Call), partial(_attention_edit, backend=backend),
                 "no exactly recognised attention expression here")


# -- NPU214 gelu -------------------------------------------------------------------------------------------


def _gelu_edit(src: Source, call: cst.Call, npu: str, backend: str) -> _Edit | str | None:
    if not src.is_api(call.func, *GELU) or ct.has_star(call) or len(ct.positional(call)) != 1:
        return None
    approx = ct.keyword(call, "approximate")
    if approx is not None and ct.literal(approx.value) != "none":
        return "gelu already uses an approximation"
    if len(call.args) != (1 if approx is None else 2):
        return None
    x = ct.code(ct.positional(call)[0].value)
    notes = ("an approximation of GELU: outputs change slightly",)
    if backend == "ascend":
        return _Edit({call: ct.expr(f"{npu}.fast_gelu({x})")}, "Use torch_npu.fast_gelu (approximation)", notes)
    new = ct.append_args(call, [ct.kwarg("approximate", '"tanh"')]) if approx is None else ct.set_kwarg(call, "approximate", '"tanh"')
    return _Edit({call: new}, "Use the tanh approximation of GELU", notes, npu=False)


def fast_gelu(source: Text, anchor: Anchor, *, backend: str = "ascend", path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    return _swap(source, anchor, path, why, _nodes(cst.Call), partial(_gelu_edit, backend=backend), "no F.gelu(x) here")


# -- NPU215 confusion_transpose ------------------------------------------------------------------------------


def _literal_perm(call: cst.Call) -> list[int] | None:
    args = [ct.literal(a.value) for a in call.args]
    if len(call.args) == 1 and isinstance(call.args[0].value, (cst.Tuple, cst.List)):
        args = [ct.literal(e.value) for e in call.args[0].value.elements]
    if all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in args) and sorted(args) == list(range(len(args))) and len(args) >= 2:
        return args  # type: ignore[return-value]
    return None


def _shape(call: cst.Call) -> str | None:
    if any(a.keyword or a.star for a in call.args):
        return None
    elems = call.args[0].value.elements if len(call.args) == 1 and isinstance(call.args[0].value, (cst.Tuple, cst.List)) else call.args
    parts = [ct.code(e.value) for e in elems]
    if not parts or any(ct.literal(e.value) == -1 for e in elems):
        return None  # -1 is not documented for the fused op
    return "[" + ", ".join(parts) + "]"


def _method_call(node: cst.CSTNode, *names: str) -> cst.Call | None:
    node = _strip(node) if isinstance(node, cst.BaseExpression) else node
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names:
        return node
    return None


def _transpose_edit(src: Source, call: cst.Call, npu: str) -> _Edit | str | None:
    outer = _method_call(call, "view", "reshape", "permute")
    if outer is None:
        return None
    inner = outer.func.value  # type: ignore[union-attr]
    if outer.func.attr.value in ("view", "reshape"):  # type: ignore[union-attr]
        c = _method_call(inner, "contiguous")
        if c is not None and not c.args:
            inner = c.func.value  # type: ignore[union-attr]
        perm_call = _method_call(inner, "permute")
        if perm_call is None:
            return None
        perm, shape, x, first = _literal_perm(perm_call), _shape(outer), perm_call.func.value, "True"  # type: ignore[union-attr]
    else:
        view_call = _method_call(inner, "view", "reshape")
        if view_call is None:
            return None
        perm, shape, x, first = _literal_perm(outer), _shape(view_call), view_call.func.value, "False"  # type: ignore[union-attr]
    if perm is None or shape is None:
        return "the permutation is not a literal full perm or the shape uses -1"
    new = ct.expr(f"{npu}.npu_confusion_transpose({ct.code(x)}, {perm}, {shape}, {first})")
    return _Edit({call: new}, "Use torch_npu.npu_confusion_transpose", ("documented dtypes exclude bfloat16",))


def confusion_transpose(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    return _swap(source, anchor, path, why, _nodes(cst.Call, outer_first=True), _transpose_edit, "no permute/view pair here")


# -- NPU216 scaled masked softmax ------------------------------------------------------------------------------


def _masked_softmax_edit(src: Source, call: cst.Call, npu: str) -> _Edit | str | None:
    arg = _softmax_arg(src, call)
    stmt = src.statement(call)
    if arg is None or stmt is None:
        return None
    inl = _Inliner(src, stmt)
    # the fill in the softmax's argument, or a statement of its own right before (``t.masked_fill_(m,
    # -inf)``, taken as NPU213's is: only where the softmax's read of t is its last)
    filled = _method_call(inl.unfill(arg), "masked_fill")
    if filled is None or len(filled.args) != 2 or not _neg_inf(filled.args[1].value):
        return inl.refused
    base = _strip(filled.func.value)  # type: ignore[union-attr]
    if inl.consumed:
        # the fill was in place: it goes only with t's ``t = x * s`` right before (a new tensor; t
        # assigned otherwise may share memory with one read elsewhere, which the fill changes too)
        scaled = inl.resolve(base)
        m = _mul(scaled)
        if scaled is base or m is None or not _plain(m[0]):
            return (f"`{ct.code(base)}` is not assigned `x * s` (x a name) right before its in-place masked_fill_: "
                    "only then is the filled tensor known to share memory with no other")
        base = scaled
    scale = None
    m = _mul(base)
    if m is not None and _plain(m[0]):
        base, scale = m[0], m[1]
    if not _plain(base):
        return "the scores are not a plain name"
    mask = ct.code(filled.args[0].value)
    extra = f", scale={ct.code(scale)}" if scale is not None else ""
    new = ct.expr(f"{npu}.npu_scaled_masked_softmax({ct.code(base)}, {mask}{extra})")
    return _Edit(ct.remove_statements(src, inl.consumed, keep={call: new}), "Use torch_npu.npu_scaled_masked_softmax",
                 ("x as NCHW with H and W in [32, 4096] and multiples of 32; bool mask True = masked",))


def scaled_masked_softmax(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    return _swap(source, anchor, path, why, _nodes(cst.Call), _masked_softmax_edit, "no softmax of masked_fill(mask, -inf) here")


# -- NPU217 add + layer_norm ------------------------------------------------------------------------------------


def add_layer_norm(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    return _swap(source, anchor, path, why, lambda src, w: src.adjacent_pairs(w), _add_norm_edit,
                 "no `h = x + r` followed by `y = self.norm(h)` here")


def _add_norm_edit(src: Source, pair: tuple[cst.CSTNode, cst.CSTNode], npu: str) -> _Edit | str | None:
    s1, s2 = pair
    a1, a2 = ct.single_assign(s1), ct.single_assign(s2)
    if a1 is None or a2 is None:
        return None
    add = _strip(a1.value)
    if not (isinstance(add, cst.BinaryOperation) and isinstance(add.operator, cst.Add)):
        return None
    h = a1.targets[0].target.value  # type: ignore[union-attr]
    call = a2.value
    if not (isinstance(call, cst.Call) and len(call.args) == 1 and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == h):
        return None
    attr = ct.self_attr(call.func)
    cls = src.class_of(s2)
    ctor = ct.init_assignments(cls).get(attr) if attr and cls is not None else None
    if not (isinstance(ctor, cst.Call) and src.is_api(ctor.func, LAYER_NORM)):
        return None
    for flag in ("elementwise_affine", "bias"):
        arg = ct.keyword(ctor, flag)
        if arg is not None and ct.literal(arg.value) is not True:
            return f"LayerNorm with {flag}={ct.code(arg.value)}"
    shape = ct.argument(ctor, 0, "normalized_shape")
    if shape is None or (isinstance(shape.value, (cst.Tuple, cst.List)) and len(shape.value.elements) != 1):
        return "LayerNorm over more than the last dim"
    func = src.function_of(s2)
    flow = NameFlow(src, func) if func is not None else None
    h_later = flow is None or not flow.dead_after(call.args[0].value)
    y = a2.targets[0].target.value  # type: ignore[union-attr]
    norm = f"self.{attr}"
    args = f"{ct.code(add.left)}, {ct.code(add.right)}, {norm}.weight, {norm}.bias, {norm}.eps"
    if h_later:
        text = f"{y}, _, _, {h} = {npu}.npu_add_layer_norm({args}, additional_output=True)"
    else:
        text = f"{y}, _, _, _ = {npu}.npu_add_layer_norm({args})"
    new = ct.stmt(text).with_changes(leading_lines=[*s1.leading_lines, *s2.leading_lines], trailing_whitespace=s2.trailing_whitespace)  # type: ignore[union-attr]
    return _Edit({s1: new, s2: cst.RemovalSentinel.REMOVE}, "Use torch_npu.npu_add_layer_norm",
                 ("affine LayerNorm over the last dim only",))
