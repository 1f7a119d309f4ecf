"""Global torch_npu switches set right after ``import torch_npu``.

* NPU103 ``disable_internal_format`` (review): ``torch_npu.npu.config.allow_internal_format = False``;
  an existing assignment is flipped from True instead of adding a second one.
* NPU107 ``disable_jit_compile``: an explicit ``set_compile_mode(jit_compile=True)`` becomes
  ``False`` (safe: it only selects prebuilt operator binaries over online compilation); with no
  call, ``torch_npu.npu.set_compile_mode(jit_compile=False)`` is inserted (review: the default
  differs per chip, and old chips may lack binaries).

``import torch_npu`` is added after ``import torch`` when the entry script lacks it.
"""

from __future__ import annotations

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .result import Anchor, FixResult, Text, anchor_path, decline, result

INTERNAL_FORMAT = "npu.config.allow_internal_format"
COMPILE_MODE = "npu.set_compile_mode"


def _import_line(src: Source) -> cst.SimpleStatementLine | None:
    """The top-level statement (or one inside a top-level ``try``) that imports torch_npu."""
    for node in src.module.body:
        lines = [node] if isinstance(node, cst.SimpleStatementLine) else (
            list(node.body.body) if isinstance(node, cst.Try) else []
        )
        for line in lines:
            if isinstance(line, cst.SimpleStatementLine):
                for s in line.body:
                    if isinstance(s, cst.Import) and any((ct.dotted(a.name) or "").split(".")[0] == "torch_npu" for a in s.names):
                        return line
    return None


def _add_after_import(src: Source, statement: str, why: list[str] | None) -> cst.Module | None:
    """Insert ``statement`` (with ``{npu}`` for the module's name) after ``import torch_npu``."""
    npu = ct.binds_module(src.module, "torch_npu")
    line = _import_line(src)
    if npu is not None and line is not None:
        new = ct.stmt(statement.format(npu=npu))
        return src.rewrite({line: cst.FlattenSentinel([line, new])})
    if ct.binds_module(src.module, "torch") is None:
        return decline(why, "no `import torch` in this file: not the entry script")
    idx = ct.import_statement_index(src.module, "torch")
    module = ct.add_import_after(src.module, "torch_npu", after="torch")
    at = (idx + 1) if idx is not None else ct.import_section_end(src.module)
    return ct.insert_after_statement(module, at, [ct.stmt(statement.format(npu="torch_npu"))])


def _assignments(src: Source, suffix: str) -> list[cst.Assign]:
    out = []
    for a in src.walk(cst.Assign, hint=suffix.rsplit(".", 1)[-1]):
        for t in a.targets:
            d = ct.dotted(t.target) or ""
            if d.endswith("." + suffix) or src.api_suffix(t.target, suffix):
                out.append(a)
                break
    return out


def disable_internal_format(source: Text, anchor: Anchor = 1, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Turn off private (NZ/5HD) formats so TransData conversions around Cube ops disappear (review)."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    existing = _assignments(src, INTERNAL_FORMAT)
    if existing:
        live = [a for a in existing if ct.literal(a.value) is not False]
        if not live:
            return decline(why, "allow_internal_format is already False")
        module = src.rewrite({a: a.with_changes(value=cst.Name("False")) for a in live})
    else:
        module = _add_after_import(src, "{npu}.npu.config.allow_internal_format = False", why)
        if module is None:
            return None
    return result(
        source,
        module.code,
        "Disable internal formats: torch_npu.npu.config.allow_internal_format = False (A/B test)",
        safe=False,
        path=anchor_path(anchor, path),
        notes=("global switch: it can also slow Cube ops; already the default on Atlas A3", "re-profile to compare"),
    )


def disable_jit_compile(source: Text, anchor: Anchor = 1, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    """Use prebuilt operator binaries instead of online compilation."""
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    calls = [c for c in src.walk(cst.Call, hint="set_compile_mode") if src.api_suffix(c.func, COMPILE_MODE)]
    if calls:
        flips = {}
        for c in calls:
            arg = ct.argument(c, 0, "jit_compile")
            if arg is not None and ct.literal(arg.value) is True:
                flips[arg] = arg.with_changes(value=cst.Name("False"))
        if not flips:
            return decline(why, "set_compile_mode already passes jit_compile=False (or a non-literal)")
        module = src.rewrite(flips)
        return result(source, module.code, "Use prebuilt binaries: set_compile_mode(jit_compile=False)", safe=True, path=anchor_path(anchor, path))
    module = _add_after_import(src, "{npu}.npu.set_compile_mode(jit_compile=False)", why)
    if module is None:
        return None
    return result(
        source,
        module.code,
        "Use prebuilt binaries: torch_npu.npu.set_compile_mode(jit_compile=False)",
        safe=False,
        path=anchor_path(anchor, path),
        notes=("default is already False on Atlas A2/A3; old chips may lack prebuilt binaries",),
    )
