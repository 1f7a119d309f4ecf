"""NPU205 copy-fragments: one source line that issues many host<->device copies per step.

Copies are the time model's memory-copy tasks whose direction is known
(``profile_query.copy_directions``: Kineto ``Memcpy HtoD``/``DtoH``, Ascend ``MEMCPY_ASYNC``
launched by a host-to-device / device-to-host op). They are grouped by the statement the
attribution maps them to; a statement fires when it issues at least ``copyFragmentsMin`` copies
per step. Each copy pays a launch and, from pageable memory, a staging copy on the host: one
batched, pinned, non-blocking copy (or keeping the tensor on the device) costs far less. The fix
is advice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq


@declare("NPU205", "copy-fragments", thresholds=("copyFragmentsMin",), backends=(Backend.ASCEND, Backend.CUDA),
         needs=(Data.KERNELS,))
class CopyFragments(Rule):
    """One line issues many small host-device copies per step.

    Every host-device copy is a separate DMA task with its own launch and synchronisation; from
    pageable memory the runtime stages it through a pinned buffer first. Many small copies from one
    line cost far more than one batched copy of the same bytes.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        prof = ctx.profile
        direction = pq.copy_directions(prof)
        rows = np.flatnonzero((direction != "") & pq.kernels_in_steps_mask(prof))
        if not len(rows):
            return
        least = int(ctx.thresholds.copy_fragments_min)
        for g in sq.kernels_by_statement(ctx, rows.tolist()):
            if len(g.rows) / ctx.num_steps >= least:
                yield self._finding(ctx, g, direction, least)

    def _finding(self, ctx: RuleContext, g: sq.KernelGroup, direction: np.ndarray, least: int) -> Finding:
        k = ctx.profile.kernels.iloc[g.rows]
        dur = k["dur_ns"].to_numpy(np.int64)
        total = int(dur.sum())
        dirs = Counter(str(d) for d in direction[g.rows])
        pageable = int(pq.mask(k["name"], pq.PAGEABLE.search).sum())
        per_step = len(g.rows) / ctx.num_steps
        evidence = {
            "copies": len(g.rows),
            "copies_per_step": round(per_step, 2),
            "directions": dict(dirs.most_common()),
            "mean_us": pq.format_ns_us(total / len(g.rows)),
            "longest_us": pq.format_ns_us(int(dur.max())),
            "pageable": pageable,
            "threshold": least,
        }
        kinds = "/".join(d for d, _ in dirs.most_common())
        fix = "Batch into one copy; pin_memory() and non_blocking=True" if pageable else "Batch into one copy, or keep the tensors on the device"
        msg = ctx.message(
            f"{kinds} copy fragments", total_ns=total, events=len(g.rows), unit=Unit.COPY,
            qualifier=f"mean {pq.format_ns_us(total / len(g.rows)):g} µs" + (", pageable" if pageable else ""),
            diagnosis="one line issues many separate host-device transfers", fix=fix,
        )
        return ctx.finding(self, span=g.span, message=msg, total_ns=total, confidence=g.confidence, evidence=evidence)
