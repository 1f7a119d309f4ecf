"""Global torch_npu switches set right after ``import torch_npu``.

* NPU103 ``disable_internal_format`` (review): ``torch_npu.npu.config.allow_internal_format = False``;
  an existing assignment is flipped from True instead of adding a second one.
* NPU107 ``disable_jit_compile``: an explicit ``set_compile_mode(jit_compile=True)`` becomes
  ``False`` (safe: it only selects prebuilt operator binaries over online compilation); with no
  call, ``torch_npu.npu.set_compile_mode(jit_compile=False)`` is inserted (review: the default
  differs per chip, and old chips may lack binaries).

The statement goes right after the import of torch_npu, inside the guard's ``try`` where the
file guards it (so it runs only where torch_npu imported); an entry script without the import gets
``try: import torch_npu`` / ``except ImportError: torch_npu = None`` after ``import torch``
(``npu_access``), never a bare import.
"""

from __future__ import annotations

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .npu_access import NpuImport, after_npu_import, npu_access
from .result import Anchor, FixResult, Text, anchor_path, decline, result

INTERNAL_FORMAT = "npu.config.allow_internal_format"
COMPILE_MODE = "npu.set_compile_mode"
INTERNAL_FORMAT_TITLE = "Disable internal formats: torch_npu.npu.config.allow_internal_format = False (A/B test)"
INTERNAL_FORMAT_NOTES = ("global switch: it can also slow Cube ops; already the default on Atlas A3", "re-profile to compare")


def _add_after_import(src: Source, statement: str, why: list[str] | None) -> cst.Module | None:
    """Insert ``statement`` (with ``{npu}`` for the module's name) after ``import torch_npu``: in
    the guard's ``try`` where the file guards it; a file without the import must be the entry
    script (it imports torch) and gets the guarded import."""
    if npu_access(src.module).how is NpuImport.NONE and ct.binds_module(src.module, "torch") is None:
        return decline(why, "no `import torch` in this file: not the entry script")
    return after_npu_import(src.module, statement)


def _switch_added(src: Source, statement: str, title: str, notes: tuple[str, ...], anchor: Anchor,
                  path: str | None, why: list[str] | None) -> FixResult | None:
    """The review fix that adds ``statement`` after ``import torch_npu`` (``_add_after_import``): a
    switch set where there was none, whose default differs per chip, always wants a second look."""
    module = _add_after_import(src, statement, why)
    if module is None:
        return None
    return result(src, module.code, title, safe=False, path=anchor_path(anchor, path), notes=notes)


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
        return result(source, module.code, INTERNAL_FORMAT_TITLE, safe=False, path=anchor_path(anchor, path),
                      notes=INTERNAL_FORMAT_NOTES)
    return _switch_added(src, "{npu}.npu.config.allow_internal_format = False", INTERNAL_FORMAT_TITLE,
                         INTERNAL_FORMAT_NOTES, anchor, path, why)


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
    return _switch_added(src, "{npu}.npu.set_compile_mode(jit_compile=False)",
                         "Use prebuilt binaries: torch_npu.npu.set_compile_mode(jit_compile=False)",
                         ("default is already False on Atlas A2/A3; old chips may lack prebuilt binaries",), anchor, path, why)
