"""NPU230 gc-pauses fix (review): ``gc.freeze()`` after setup, right before the training loop.

Objects alive at that point (the model, the optimizer state, the dataset index) move to a
permanent generation the collector no longer scans, so full collections during training stop
walking them. ``import gc`` is added once. The statement goes before the outermost loop around the
anchor in its function (before the epoch loop, not inside it).
"""

from __future__ import annotations

from . import cst_tools as ct
from .result import Anchor, FixResult, Text, anchor_path, decline, result


def freeze_before_loop(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    found = ct.loops_at(source, anchor, why)
    if found is None:
        return None
    src, loops = found
    func = src.function_of(loops[0])
    candidates = [lp for lp in loops if src.function_of(lp) is func]
    loop = candidates[-1]
    block = src.block_of(loop)
    if block is None:
        return decline(why, "the loop is not a plain statement of a block")
    bound = ct.binds_module(src.module, "gc")
    if bound not in (None, "gc") or ("gc" in ct.module_level_names(src.module) and bound is None):
        return decline(why, "the name gc is bound to something else here")
    i = ct.statement_index(block, loop)
    if i > 0 and "gc.freeze()" in ct.code(block.body[i - 1]):
        return decline(why, "gc.freeze() already precedes the loop")
    new = ct.stmt("gc.freeze()  # setup objects leave the collector's scans (msprof-lsp NPU230)")
    module = src.rewrite({loop: ct.insert_before(loop, new)})
    module = ct.add_stdlib_import(module, "gc")
    return result(
        source,
        module.code,
        "Freeze setup objects with gc.freeze() before the loop",
        safe=False,
        path=anchor_path(anchor, path),
        notes=("objects created in the loop are still collected; reference cycles made there can still grow memory",),
    )
