"""Training iterations found in a profile that has no step markers, from its launch sequence.

An eager training loop launches the same device tasks in the same order every iteration. Each
task becomes a token (its name with per-run counters folded, plus its input shapes); a token that
occurs once per iteration recurs at a constant distance in the launch order: the period. The
period is the distance shared by the most such tokens (several must agree, so one accidental
regularity does not make steps); it is then checked by comparing the tokens of successive
periods. The cut between iterations goes where the device idles longest within the period --
the host work between iterations (data loading, logging, the sync on a loss value) -- so the
step windows hold whole iterations, like ProfilerStep ranges. The first iteration may carry extra
launches (compilation, warm-up) and the order may jitter across streams: each cut is placed
relative to its own anchor occurrence, near the expected place, and only the later periods must
match. See docs/numbers.md ("Steps without markers") for why this and not autocorrelation.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.profile.model import ProfileMeta, Step, StepsSource
from msprof_lsp.mapping.profile.step_windows import step_ids
from msprof_lsp.mapping.profile.timemodel import column_codes

_COUNTER = re.compile(r"\d+")

MIN_PERIOD = 4  # launches; shorter "periods" are one op repeated, not an iteration
MIN_AGREEING = 3  # once-per-iteration tokens that must share the period
GAP_TOLERANCE = 0.05  # a recurrence distance within 5 % of the period (launch order jitters across streams)
MATCH = 0.9  # share of a period's tokens the next period must repeat

NO_REPETITION = ("no step markers and no repeating launch sequence: the capture's span is the one step "
                 "window of every per-step figure")


@dataclass(frozen=True, slots=True)
class InferredSteps:
    """Steps found from the launch sequence, and how."""

    steps: list[Step]
    period: int  # launches per iteration
    repetitions: int  # iterations found (= len(steps))
    anchor: str  # the task each cut is placed from (a once-per-iteration task)
    first_extra: int  # launches the first iteration has beyond the period (warm-up), 0 if none
    trailing: int  # launches after the last whole iteration (outside every step)

    def note(self) -> str:
        """The profile notice saying where the steps came from."""
        extra = f"; the first has {self.first_extra} extra launches (warm-up)" if self.first_extra > 0 else ""
        tail = f"; {self.trailing} launches after the last one are in no step" if self.trailing else ""
        return (f"no step markers: {self.repetitions} steps inferred from a period of {self.period} launches, "
                f"{self.repetitions} repetitions (each cut at the period's longest device idle, counted from "
                f"{self.anchor}){extra}{tail}")


def tokens(kernels: pd.DataFrame) -> np.ndarray:
    """One integer per kernel row: its name with digit runs folded (``Conv2D12``, ``hcom_allReduce__417_0_1``
    count as the same task every iteration), plus its input shapes where the producer wrote them."""
    tok = _codes(kernels["name"], fold=True)
    if "input_shapes" in kernels:
        shapes = _codes(kernels["input_shapes"], fold=False)
        tok, _ = pd.factorize(tok * (int(shapes.max(initial=0)) + 2) + shapes + 1, sort=False)
    return tok.astype(np.int64)


def _codes(column: pd.Series, *, fold: bool) -> np.ndarray:
    """Integer codes of a (categorical) string column, equal where the (folded) text is equal; the
    regex runs once per distinct value, not per row."""
    row_codes, names = column_codes(column)
    values = pd.Series(names, dtype=object)
    if fold:
        values = values.str.replace(_COUNTER, "#", regex=True)
    folded, _ = pd.factorize(values, sort=False)
    return folded[row_codes].astype(np.int64)


def infer_steps(kernels: pd.DataFrame, *, start_ns: int | None = None) -> InferredSteps | None:
    """The training iterations of a capture without step markers, from its device tasks (KERNEL_SCHEMA
    rows; untimed rows are ignored); None when the launch sequence does not repeat. ``start_ns``:
    where the capture begins (the first step starts there; default: the first task)."""
    timed = kernels[kernels["start_ns"].to_numpy() >= 0]
    devices = timed["device"].to_numpy() if "device" in timed else np.zeros(0)
    if len(np.unique(devices[devices >= 0])) > 1:  # devices run the same iterations: read the first one's
        timed = timed[devices == devices[devices >= 0].min()]
    if len(timed) < 2 * MIN_PERIOD:
        return None
    timed = timed.sort_values("start_ns", kind="stable")
    tok = tokens(timed)
    start = timed["start_ns"].to_numpy(np.int64)
    end = start + timed["dur_ns"].to_numpy(np.int64)
    found = _period(tok)
    if found is None:
        return None
    period, anchor_tok, anchor_pos = found
    n = len(tok)
    reach = np.maximum.accumulate(end)  # device busy until here, whatever the stream
    idle = np.empty(n, dtype=np.int64)  # idle after launch i, before launch i + 1
    idle[:-1] = start[1:] - reach[:-1]
    idle[-1] = -1
    cuts = _cuts(anchor_pos, period, idle, n)
    if cuts is None:
        return None
    bounds = np.concatenate([[-1], cuts])
    pieces = [tok[bounds[j] + 1: bounds[j + 1] + 1] for j in range(len(cuts))]
    if not _periods_match(pieces):
        return None
    first = int(start[0]) if start_ns is None else min(int(start_ns), int(start[0]))
    steps = []
    lo = first
    for j, c in enumerate(cuts):
        hi = int(reach[c])
        steps.append(Step(j + 1, lo, hi))
        lo = hi
    name = str(timed["name"].iloc[int(anchor_pos[0])])
    return InferredSteps(steps, period, len(steps), name, max(0, len(pieces[0]) - period), n - 1 - int(cuts[-1]))


def _period(tok: np.ndarray) -> tuple[int, int, np.ndarray] | None:
    """(period, anchor token, its positions): the recurrence distance most once-per-iteration tokens
    share, and of those tokens the one seen most often (the earliest on a tie)."""
    order = np.argsort(tok, kind="stable")  # positions grouped by token, ascending within a token
    grouped = tok[order]
    splits = np.flatnonzero(np.diff(grouped)) + 1
    by_period: dict[int, list[np.ndarray]] = {}
    for pos in np.split(order, splits):
        if len(pos) < 2:
            continue
        gaps = np.diff(pos)
        # a warm-up iteration may stretch the first distance; the others must agree
        rest = gaps[1:] if len(gaps) > 2 else gaps
        g = int(np.median(rest))
        if g < MIN_PERIOD or np.abs(rest - g).max() > max(1, GAP_TOLERANCE * g):
            continue
        by_period.setdefault(g, []).append(pos)
    if not by_period:
        return None
    # periods within the tolerance of each other are one period
    merged: dict[int, list[np.ndarray]] = {}
    for g in sorted(by_period, key=lambda g: -len(by_period[g])):
        home = next((h for h in merged if abs(h - g) <= max(1, GAP_TOLERANCE * h)), g)
        merged.setdefault(home, []).extend(by_period[g])
    period, members = max(merged.items(), key=lambda kv: (len(kv[1]), kv[0]))
    if len(members) < MIN_AGREEING:
        return None
    anchor = max(members, key=lambda p: (len(p), -int(p[0])))
    if len(anchor) < 2:
        return None
    return period, int(tok[anchor[0]]), anchor


def _cuts(anchor_pos: np.ndarray, period: int, idle: np.ndarray, n: int) -> np.ndarray | None:
    """Per anchor occurrence, the launch its iteration ends with. The offset from the anchor with the
    longest median idle after it is where iterations end; each cut is placed from the *next*
    occurrence (``period - offset`` launches before it), so warm-up extras in an iteration move
    nothing, then refined to the longest idle within the tolerance around that place."""
    at = anchor_pos[:, None] + np.arange(period)[None, :]  # occurrences x offsets
    inside = at < n - 1
    gaps = np.full(at.shape, np.nan)
    gaps[inside] = idle[at[inside]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # offsets past the capture's end: all NaN
        med = np.nan_to_num(np.nanmedian(gaps, axis=0), nan=-1.0)
    best = int(np.argmax(med))
    if med[best] <= 0:
        return None  # the device never idles between periods: no iteration boundary to cut at
    w = max(1, int(GAP_TOLERANCE * period))
    expected = [int(q) - period + best for q in anchor_pos[1:]] + [int(anchor_pos[-1]) + best]
    cuts = []
    for centre in expected:
        if centre > n - 1 + w:
            break  # the capture ends inside this iteration: it is no step (its launches trail)
        if centre >= n - 1 - w:
            cuts.append(n - 1)  # the capture ends with this iteration
            continue
        lo, hi = max(centre - w, 0), min(centre + w, n - 2)
        cuts.append(lo + int(np.argmax(idle[lo: hi + 1])))
    out = np.array(sorted(set(cuts)), dtype=np.int64)
    return out if len(out) >= 2 else None


def _periods_match(pieces: list[np.ndarray]) -> bool:
    """Whether every iteration after the first repeats the tokens of the one before it (as
    multisets: launch order may jitter across streams); the first may hold warm-up extras."""
    if len(pieces) < 2:
        return False
    for a, b in zip(pieces[1:], pieces[2:]):
        if _similarity(a, b) < MATCH:
            return False
    # the first iteration: what the second does must be in it (it may do more)
    second = Counter(pieces[1].tolist())
    first = Counter(pieces[0].tolist())
    covered = sum(min(c, first[t]) for t, c in second.items())
    return covered >= MATCH * len(pieces[1])


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    ca, cb = Counter(a.tolist()), Counter(b.tolist())
    common = sum(min(c, cb[t]) for t, c in ca.items())
    return common / max(len(a), len(b), 1)


def steps_from_launches(kernels: pd.DataFrame, meta: ProfileMeta, issues: list[Issue], *,
                        start_ns: int | None = None, host: Sequence[pd.DataFrame] = (),
                        say_none: bool = False) -> list[Step]:
    """For a reader that found no step markers: the inferred steps, with ``meta.steps_source`` and
    ``meta.extra["steps_inferred"]`` set, the notice in ``issues`` and each kernel's ``step`` the
    window it ran in (the windows are cut on the device timeline); [] (and nothing said) when
    the launches do not repeat, for the reader to fall back to the capture span (``say_none``: with
    a notice saying so, for a reader that gives none of its own). The first step
    starts at ``start_ns``, else at the first timed row of ``host`` tables (host ops, CANN API
    events) or kernels."""
    if start_ns is None:
        firsts = [int(t["start_ns"][t["start_ns"] >= 0].min()) for t in host if len(t) and (t["start_ns"] >= 0).any()]
        start_ns = min(firsts) if firsts else None
    found = infer_steps(kernels, start_ns=start_ns)
    if found is None:
        if say_none and len(kernels):
            issues.append(Issue(meta.path, NO_REPETITION))
        return []
    meta.steps_source = StepsSource.INFERRED
    meta.extra["steps_inferred"] = {"period": found.period, "repetitions": found.repetitions,
                                    "anchor": found.anchor, "first_extra": found.first_extra,
                                    "trailing": found.trailing}
    issues.append(Issue(meta.path, found.note()))
    kernels["step"] = step_ids(kernels["start_ns"].to_numpy(np.int64), found.steps)
    return found.steps


def describe(meta: ProfileMeta, has_steps: bool) -> str:
    """``steps_source`` of the JSON report: markers, "inferred from a period of N launches, K
    repetitions", or capture span (no step ranges: the one step is the capture)."""
    if not has_steps:
        return StepsSource.CAPTURE.value
    info = meta.extra.get("steps_inferred")
    if meta.steps_source is StepsSource.INFERRED and info:
        return f"inferred from a period of {info['period']} launches, {info['repetitions']} repetitions"
    return meta.steps_source.value


__all__ = ["InferredSteps", "describe", "infer_steps", "steps_from_launches", "tokens"]
