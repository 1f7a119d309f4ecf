"""NPU109 alloc-churn fix (safe): delete ``empty_cache()`` calls inside a loop body.

``torch.npu.empty_cache()`` / ``torch_npu.npu.empty_cache()`` / ``torch.cuda.empty_cache()``
hand cached blocks back to the driver, so the next iteration allocates them again
(``aclrtMalloc``/``aclrtFree`` churn). Removing the call changes no numerics; reserved memory
simply stays higher. Calls outside loops (once after setup) are left alone.
"""

from __future__ import annotations

import libcst as cst

from . import cst_tools as ct
from .result import Anchor, FixResult, Text, anchor_path, decline, where

EMPTY_CACHE = ("torch.npu.empty_cache", "torch_npu.npu.empty_cache", "torch.cuda.empty_cache")


def remove_empty_cache(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    for line, _call in src.call_statements(where(anchor), *EMPTY_CACHE):
        if src.enclosing(line, (cst.For, cst.While)) is None:
            return decline(why, "empty_cache() is not inside a loop")
        return src.fixed(
            ct.removal(src, line),
            "Remove empty_cache() from the loop (keeps cached blocks for the next step)",
            safe=True,
            path=anchor_path(anchor, path),
            notes=("reserved device memory stays higher; no numerics change",),
        )
    return decline(why, "no empty_cache() statement here")
