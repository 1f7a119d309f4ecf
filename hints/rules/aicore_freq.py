"""NPU218 aicore-freq-drop: kernels that ran while the AI Core clock was below its rated frequency
(the advisor's ``AICoreFreqChecker``).

The clock samples are trace_view.json's ``AI Core Freq`` counter or the DB's ``AICORE_FREQ``
(``ProfileMeta.extra[AICORE_FREQ_KEY]``; each value holds until the next sample). Per kernel name,
the samples in effect while its kernels ran (the one at each kernel's start and any inside it)
give the drop ratio ``sum(rated - f) / (rated * samples)``; the rated clock is the larger of
1800 MHz and msprof's ``aic_frequency``. A ratio of at least ``aicoreFreqDropPercent`` fires. The
cause is the machine (temperature, power cap), so the fix is advice; the finding sits on the lines
whose kernels ran slow.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.profile.model import AICORE_FREQ_KEY, Backend

from .. import profile_query as pq, source_query as sq

RATED_MHZ = 1800  # the advisor's DEFAULT_FREQ
EVIDENCE_KERNELS = 8


def freq_samples(ctx: RuleContext) -> tuple[np.ndarray, np.ndarray] | None:
    raw = ctx.profile.meta.extra.get(AICORE_FREQ_KEY)
    if not isinstance(raw, list) or not raw:
        return None
    pairs = sorted((int(t), float(f)) for t, f in raw)
    return np.array([t for t, _ in pairs], dtype=np.int64), np.array([f for _, f in pairs], dtype=np.float64)


def rated_mhz(ctx: RuleContext) -> float:
    aic = ctx.profile.meta.extra.get("aic_frequency_mhz")
    return max(float(RATED_MHZ), float(aic) if isinstance(aic, (int, float)) else 0.0)


def kernel_freqs(ts: np.ndarray, mhz: np.ndarray, start: int, end: int) -> np.ndarray:
    """The clock values in effect during [start, end): the sample at or before the start (none
    before the first sample) and every sample inside."""
    first = int(np.searchsorted(ts, start, side="right")) - 1
    last = int(np.searchsorted(ts, end, side="left"))
    return mhz[max(first, 0):last] if first >= 0 else mhz[0:last]


@declare("NPU218", "aicore-freq-drop", thresholds=("aicoreFreqDropPercent",), backends=(Backend.ASCEND,),
         needs=(Data.KERNELS,))
class AicoreFreqDrop(Rule):
    """Kernels that ran while the AI Core clock was below its rated frequency.

    The AI Core lowers its clock when the chip runs hot or hits its power cap; every kernel then
    takes longer for the same work, however well it is written. The fix is on the machine: cooling,
    power settings, or fewer jobs per node.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        samples = freq_samples(ctx)
        k = ctx.profile.kernels_in_steps()
        if samples is None:
            return
        ts, mhz = samples
        rated = rated_mhz(ctx)
        limit = ctx.thresholds.aicore_freq_drop_percent / 100
        compute = timemodel.is_class(k, timemodel.TaskClass.COMPUTE)
        names = pq.strs(k["name"])
        start = k["start_ns"].to_numpy(np.int64)
        end = start + k["dur_ns"].to_numpy(np.int64)
        per_name: dict[str, list[int]] = {}
        for p in np.flatnonzero(compute & (start >= 0)).tolist():
            per_name.setdefault(str(names[p]), []).append(p)
        dropped: dict[str, dict] = {}
        for name, ps in per_name.items():
            freqs = np.concatenate([kernel_freqs(ts, mhz, int(start[p]), int(end[p])) for p in ps])
            if not len(freqs):
                continue
            ratio = float((rated - freqs).sum() / (rated * len(freqs)))
            if round(ratio, 9) >= limit:
                dropped[name] = {"rows": ps, "ratio": ratio, "mean": float(freqs.mean()), "min": float(freqs.min()),
                                 "max": float(freqs.max())}
        if not dropped:
            return
        positions = sorted(p for d in dropped.values() for p in d["rows"])
        dur = k["dur_ns"].to_numpy(np.int64)
        for g in sq.kernels_by_statement_in(ctx, k, positions):
            mine = g.positions
            total = int(dur[mine].sum())
            here = sorted({str(names[p]) for p in mine}, key=lambda n: -int(dur[dropped[n]["rows"]].sum()))
            worst = max(here, key=lambda n: dropped[n]["ratio"])
            d = dropped[worst]
            message = ctx.message(
                "AI Core clock drop", total_ns=total, events=len(mine), unit=Unit.KERNEL,
                qualifier=f"{d['ratio']:.0%} below {rated:.0f} MHz (min {d['min']:.0f} MHz)",
                diagnosis="the chip throttled its clock while these kernels ran",
                fix="Check the machine's temperature and power cap",
            )
            evidence = {
                "kernels": {n: {"count": len(dropped[n]["rows"]), "total_us": pq.format_ns_us(int(dur[dropped[n]["rows"]].sum())),
                                "drop_ratio": round(dropped[n]["ratio"], 4), "mean_mhz": round(dropped[n]["mean"], 1),
                                "min_mhz": dropped[n]["min"], "max_mhz": dropped[n]["max"]} for n in here[:EVIDENCE_KERNELS]},
                "rated_mhz": rated, "samples": len(ts), "threshold_ratio": limit,
            }
            yield ctx.finding(self, span=g.span, message=message, total_ns=total, confidence=g.confidence, evidence=evidence)
