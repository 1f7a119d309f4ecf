"""How a file gets torch_npu, and NPU-only code written so that every path the file runs keeps working.

A training script often runs on the Ascend box, on a laptop's CPU and in CI: it guards the import
(``try: import torch_npu`` / ``except ImportError: torch_npu = None``) and picks the device at run
time. Before a fix writes an NPU-only API it reads the file's ``NpuAccess``:

* ``PLAIN``: a top-level ``import torch_npu`` (or ``as`` alias): every path has torch_npu, the
  NPU code is written as it is.
* ``GUARDED``: the import inside a top-level ``try`` whose handler catches ``ImportError``: the NPU
  code goes behind ``if torch_npu is not None:`` with the original code in the ``else``, and the
  handler gets ``torch_npu = None`` when it does not bind the name yet.
* ``NONE``: the fix adds the guarded import (``torch_npu = None`` on failure), never a bare one,
  then writes as for ``GUARDED``.

This module is the one home of that question; ``fused_api``, ``optimizer``, ``npu_switches`` and
``profiling`` ask it.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Replacement, Source
from .result import decline

MODULE = "torch_npu"
_WHY = 'the NPU path; None where torch_npu is not installed'


class NpuImport(enum.Enum):
    PLAIN = "plain"  # import torch_npu at top level: every path has it
    GUARDED = "guarded"  # try: import torch_npu / except ImportError: ...
    NONE = "none"  # the file does not import torch_npu


@dataclass(frozen=True, slots=True)
class NpuAccess:
    how: NpuImport
    name: str  # the local name: "torch_npu" or the import's alias
    none_bound: bool  # GUARDED: the handler binds the name to None, so `name is not None` is the test

    @property
    def test(self) -> str:
        """The condition under which the NPU code may run."""
        return f"{self.name} is not None"


@functools.cache
def _matchers():  # noqa: ANN202 - the libcst.matchers module
    """libcst.matchers, imported on first use: its import is ~0.3 s, a tenth of a --check on a
    45 MB export, and only a file with a top-level ``try`` or a fix's edit asks for it."""
    import libcst.matchers

    return libcst.matchers


@functools.cache
def _guard_pattern():  # noqa: ANN202 - a libcst matcher
    """An ``except`` that catches a failed import (or everything)."""
    m = _matchers()
    return (m.ExceptHandler(type=m.Name("ImportError") | m.Name("ModuleNotFoundError") | m.Name("Exception")
                            | m.Tuple(elements=[m.ZeroOrMore(), m.Element(m.Name("ImportError") | m.Name("ModuleNotFoundError")),
                                               m.ZeroOrMore()]))
            | m.ExceptHandler(type=None))


def _import_alias(line: cst.CSTNode) -> str | None:
    """The name ``line`` binds torch_npu to, if it is an ``import torch_npu[.x] [as y]`` line."""
    if not isinstance(line, cst.SimpleStatementLine):
        return None
    for s in line.body:
        if isinstance(s, cst.Import):
            for a in s.names:
                full = ct.dotted(a.name) or ""
                if full == MODULE and a.asname is not None:
                    return ct.dotted(a.asname.name)
                if full == MODULE or full.startswith(MODULE + "."):
                    return MODULE
    return None


def _guard_handler(node: cst.Try) -> cst.ExceptHandler | None:
    return next((h for h in node.handlers if _matchers().matches(h, _guard_pattern())), None)


def _binds_none(handler: cst.ExceptHandler, name: str) -> bool:
    m = _matchers()
    return any(m.matches(s, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))], value=m.Name("None"))]))
               for s in handler.body.body)


def _find(module: cst.Module) -> tuple[NpuAccess, cst.Try | None, cst.SimpleStatementLine | None]:
    for node in module.body:
        name = _import_alias(node)
        if name is not None:
            return NpuAccess(NpuImport.PLAIN, name, False), None, node  # type: ignore[return-value]
        if isinstance(node, cst.Try):
            for line in node.body.body:
                name = _import_alias(line)
                handler = _guard_handler(node)
                if name is not None and handler is not None:
                    return NpuAccess(NpuImport.GUARDED, name, _binds_none(handler, name)), node, line  # type: ignore[return-value]
    return NpuAccess(NpuImport.NONE, MODULE, False), None, None


def npu_access(module: cst.Module) -> NpuAccess:
    """How this file gets torch_npu (top-level statements only: what every function sees)."""
    return _find(module)[0]


def optional_npu(module: cst.Module) -> tuple[NpuAccess, cst.Module]:
    """The file with torch_npu bound on every path (the module, or None where it is not installed):
    a guard's handler gets ``name = None``; a file without the import gets the guarded import after
    ``import torch``. A plain import stays as it is."""
    access, guard, _line = _find(module)
    if access.how is NpuImport.PLAIN or access.none_bound:
        return access, module
    if access.how is NpuImport.GUARDED and guard is not None:
        handler = _guard_handler(guard)
        assert handler is not None
        m = _matchers()
        kept = [s for s in handler.body.body if not m.matches(s, m.SimpleStatementLine(body=[m.Pass()]))]
        new_handler = handler.with_changes(body=handler.body.with_changes(body=[*kept, ct.stmt(f"{access.name} = None")]))
        module = ct.rewrite(module, {handler: new_handler})
        return NpuAccess(NpuImport.GUARDED, access.name, True), module
    guard_stmt = cst.parse_module(f"try:\n    import {MODULE}  # ({_WHY})\nexcept ImportError:\n    {MODULE} = None\n").body[0]
    idx = ct.import_statement_index(module, "torch")
    at = idx + 1 if idx is not None else ct.import_section_end(module)
    body = list(module.body)
    body.insert(at, guard_stmt)
    return NpuAccess(NpuImport.GUARDED, MODULE, True), module.with_changes(body=body)


def after_npu_import(module: cst.Module, statement: str) -> cst.Module:
    """``statement`` (``{npu}`` for the module's name) right after the import of torch_npu: inside
    the guard's ``try`` when there is one, so it runs only where the import succeeded; a file without
    the import gets the guarded import first."""
    access = npu_access(module)
    if access.how is NpuImport.NONE:
        access, module = optional_npu(module)
    line = _find(module)[2]
    assert line is not None  # optional_npu leaves an import of torch_npu
    return ct.rewrite(module, {line: cst.FlattenSentinel([line, ct.stmt(statement.format(npu=access.name))])})


def _statement_range(src: Source, nodes: list[cst.CSTNode]) -> tuple[cst.IndentedBlock | cst.Module, int, int] | None:
    """The block and the first and last index of its statements that hold ``nodes`` (one block)."""
    stmts = [src.statement(n) for n in nodes]
    if any(s is None for s in stmts):
        return None
    blocks = {id(b): b for b in (src.block_of(s) for s in stmts)}  # type: ignore[arg-type]
    if len(blocks) != 1 or None in blocks.values():
        return None
    (block,) = blocks.values()
    assert block is not None
    idx = [ct.statement_index(block, s) for s in stmts]  # type: ignore[arg-type]
    return block, min(idx), max(idx)


def _rewritten(stmt: cst.BaseStatement, replacements: Mapping[cst.CSTNode, Replacement]) -> list[cst.BaseStatement]:
    """``stmt`` after ``replacements``, as the statements that take its place (none when removed)."""
    return list(ct.rewrite(cst.Module(body=[stmt]), replacements).body)


def in_fallback(src: Source, node: cst.CSTNode) -> bool:
    """``node`` is in the ``else`` of an ``if torch_npu is not None:`` (a fix applied before)."""
    name = npu_access(src.module).name
    m = _matchers()
    test = m.Comparison(left=m.Name(name), comparisons=[m.ComparisonTarget(operator=m.IsNot(), comparator=m.Name("None"))])
    child: cst.CSTNode = node
    for parent in src.ancestors(node):
        if isinstance(parent, cst.If) and m.matches(parent.test, test) and child is parent.orelse:
            return True
        child = parent
    return False


def behind_npu(src: Source, replacements: Mapping[cst.CSTNode, Replacement], why: list[str] | None = None) -> cst.Module | None:
    """``replacements`` (NPU-only code) applied so that every path the file runs keeps working.

    A plain import: applied as they are. Otherwise the statements that hold them become
    ``if torch_npu is not None:`` (the new statements) ``else:`` (the original ones), and the file
    gets torch_npu or None on every path (``optional_npu``). None when the replaced nodes are not in
    one block (no one place to branch) or already in such an ``else`` (applied before).
    """
    access = npu_access(src.module)
    if access.how is NpuImport.PLAIN:
        return src.rewrite(replacements)
    if any(in_fallback(src, n) for n in replacements):
        return decline(why, f"already the fallback of `if {access.test}:` (the NPU code is in its if branch)")
    found = _statement_range(src, list(replacements))
    if found is None:
        return decline(why, "the rewritten statements are not in one block: no one place for `if torch_npu is not None:`")
    block, lo, hi = found
    old = list(block.body[lo:hi + 1])
    new = [s for stmt in old for s in _rewritten(stmt, replacements)]
    if not new:
        return None
    lead = old[0].leading_lines
    branch = cst.If(
        test=ct.expr(access.test),
        body=cst.IndentedBlock(body=[new[0].with_changes(leading_lines=()), *new[1:]]),
        orelse=cst.Else(body=cst.IndentedBlock(body=[old[0].with_changes(leading_lines=()), *old[1:]])),
        leading_lines=lead,
    )
    swap: dict[cst.CSTNode, Replacement] = {old[0]: branch, **{s: cst.RemovalSentinel.REMOVE for s in old[1:]}}
    return optional_npu(src.rewrite(swap))[1]
