"""What time a finding charges: the recorded work and waits its share counts (docs/rules/README.md
"One finding per cause"). ``hints.consolidate`` makes findings that charge the same time one.

A charge is a key with the ns of the capture it stands for:

* ``("kernel", row)`` a ``Profile.kernels`` row, ``("host-op", row)`` a ``Profile.host_ops`` row,
  ``("sync", row)`` a ``Profile.host_events`` row of a blocking call: from ``Finding.effect`` where
  the rule filled it (its rows are what the fix acts on);
* ``("idle", i)`` the i-th stretch of device idle: the time between the step windows' device
  tasks (compute, copies, collectives) when none runs, weighted by how much of it the finding
  covers. Host time (host-op and sync charges, a data fetch, a line's host ops) charges the idle
  it overlaps: the device waits while the host does that;
* ``("cause", ...)`` a cause with no rows, e.g. ``("cause", "sync", path, line)``.

Where a finding has no effect, the rule family's helper in ``FAMILIES`` reads what its evidence
names (kernel OpTypes or names on the finding's lines, a fetch scope, a sync, a bound). A rule
with neither charges nothing and is never merged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cached_property
from itertools import repeat

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile import step_windows, timemodel
from msprof_lsp.mapping.profile.model import Profile

from . import profile_query as pq
from .context import RuleContext
from .finding import Finding, Target

Charges = dict[tuple, float]  # key -> ns over the capture

_ROW_KIND = {Target.KERNELS: "kernel", Target.HOST_OPS: "host-op", Target.SYNC_CALLS: "sync"}
TRANSDATA_TYPES = frozenset({"TransData", "Cast"})


def device_busy(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """The device's busy stretches (compute, copies, communication), merged: (starts, ends)."""
    k = profile.kernels
    sel = timemodel.is_class(k, timemodel.TaskClass.COMPUTE, timemodel.TaskClass.MEMCPY,
                             timemodel.TaskClass.COMMUNICATION)
    start = k["start_ns"].to_numpy(np.int64)
    sel &= start >= 0
    return step_windows.merge_intervals(start[sel], start[sel] + k["dur_ns"].to_numpy(np.int64)[sel])


def idle_gaps(profile: Profile, busy: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Device idle: between consecutive ``busy`` stretches, inside the first step window's start
    and the last one's end (across step boundaries: the wait from one step's last task to the
    next one's first is one stretch). Empty without device tasks."""
    bs, be = busy
    wins = step_windows.windows(profile)
    if not len(bs) or not wins:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = wins[0].start_ns, wins[-1].end_ns
    gs = np.concatenate([[lo], be])
    ge = np.concatenate([bs, [hi]])
    gs, ge = np.maximum(gs, lo), np.minimum(ge, hi)
    keep = ge > gs
    return gs[keep], ge[keep]


class Timeline:
    """The profile's device idle stretches and the row tables the family helpers read, computed
    once per rule run."""

    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx
        self.profile = ctx.profile

    @cached_property
    def _types(self) -> tuple[np.ndarray, pd.Index]:
        """Per kernel a code, and per code the OpType (one per distinct name and type column)."""
        k = self.profile.kernels
        codes, keys = timemodel.distinct_rows([k["name"], k["type"]])
        return codes, pd.Index([timemodel.op_type(name, type_) for name, type_ in keys], dtype=object)

    @cached_property
    def _names(self) -> tuple[np.ndarray, pd.Index]:
        codes, names = timemodel.column_codes(self.profile.kernels["name"])
        return codes, pd.Index(names, dtype=object)

    @staticmethod
    def _coded(codes_values: tuple[np.ndarray, pd.Index], wanted: frozenset[str]) -> np.ndarray:
        codes, values = codes_values
        return np.isin(codes, np.flatnonzero(values.isin(list(wanted))))

    @cached_property
    def in_steps(self) -> np.ndarray:
        return pq.kernels_in_steps_mask(self.profile)

    # the busy and idle stretches depend on the profile alone: once per loaded profile, since the
    # editor consolidates again on every edit (profile.derived.memo)
    @property
    def _busy(self) -> tuple[np.ndarray, np.ndarray]:
        p = self.profile
        return p.derived.memo("charges/busy", p.fields(), lambda: device_busy(p))

    @property
    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """Device idle stretches (``idle_gaps``)."""
        p = self.profile
        return p.derived.memo("charges/idle_gaps", p.fields(), lambda: idle_gaps(p, self._busy))

    def idle_covered(self, starts: np.ndarray, ends: np.ndarray) -> Charges:
        """Per idle stretch, the ns of it the union of [starts, ends) covers."""
        gs, ge = self.gaps
        if not len(gs) or not len(starts):
            return {}
        us, ue = step_windows.merge_intervals(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        before = np.concatenate([[0], np.cumsum(ue - us)])

        def until(t: np.ndarray) -> np.ndarray:
            i = np.searchsorted(us, t, side="right")
            j = np.maximum(i - 1, 0)
            part = np.clip(np.minimum(ue[j], t) - us[j], 0, None)
            return np.where(i > 0, before[j] + part, 0)

        covered = until(ge) - until(gs)
        return {("idle", int(i)): float(covered[i]) for i in np.flatnonzero(covered > 0)}

    def idle_starting_in(self, starts: np.ndarray, ends: np.ndarray) -> Charges:
        """The whole idle stretches that begin inside one of [starts, ends]: the device ran out of
        work while the host was held there (a sync), and stayed idle until the next launch."""
        gs, ge = self.gaps
        out: Charges = {}
        for s, e in zip(np.asarray(starts, np.int64).tolist(), np.asarray(ends, np.int64).tolist()):
            a, b = np.searchsorted(gs, s, side="left"), np.searchsorted(gs, e, side="right")
            out.update({("idle", int(i)): float(ge[i] - gs[i]) for i in range(a, b)})
        return out

    def in_step_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Per step window, first device task start to last end: where the step's Free lies."""
        bs, be = self._busy
        wins = step_windows.windows(self.profile)
        out_s, out_e = [], []
        for w in wins:
            a, b = np.searchsorted(be, w.start_ns, side="right"), np.searchsorted(bs, w.end_ns, side="left")
            if b > a:
                out_s.append(max(int(bs[a]), w.start_ns))
                out_e.append(min(int(be[b - 1]), w.end_ns))
        return np.array(out_s, np.int64), np.array(out_e, np.int64)

    def preparing_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Per step window, its start to its first device task: the Preparing phase."""
        bs, be = self._busy
        out_s, out_e = [], []
        for w in step_windows.windows(self.profile):
            a = np.searchsorted(be, w.start_ns, side="right")
            if a < len(bs) and bs[a] > w.start_ns:
                out_s.append(w.start_ns)
                out_e.append(min(int(bs[a]), w.end_ns))
        return np.array(out_s, np.int64), np.array(out_e, np.int64)

    # -- rows ----------------------------------------------------------------------------------

    def kernel_rows_at(self, f: Finding, types: Iterable[str] = (), names: Iterable[str] = ()) -> np.ndarray:
        """Kernel rows in the steps of the given OpTypes or names, launched from the finding's
        lines (every such row for a finding with no place, or no attribution)."""
        types, names = frozenset(types), frozenset(names)
        if not types and not names:
            return np.zeros(0, np.int64)
        sel = self.in_steps & (self._coded(self._types, types) | self._coded(self._names, names))
        at = self.rows_on_lines(f, kernels=True)
        return np.flatnonzero(sel if at is None else sel & at)

    def rows_on_lines(self, f: Finding, *, kernels: bool) -> np.ndarray | None:
        """Mask of kernel (or host op) rows attributed to the finding's lines; None: no place or
        no attribution (the rule then charges the rows wherever they ran)."""
        att, span = self.ctx.attribution, f.span
        if att is None or span is None:
            return None
        ids = [i for i, s in enumerate(att.sites) if s.span.path == span.path
               and span.line <= s.span.line <= span.end_line]
        return np.isin(att.kernel_site if kernels else att.op_site, ids)

    def kernel_charges(self, rows: np.ndarray) -> Charges:
        rows = np.asarray(rows, np.int64)
        return row_charges("kernel", rows, self.profile.kernels["dur_ns"].to_numpy(np.int64)[rows])

    def host_intervals(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = self.profile.host_ops
        s = h["start_ns"].to_numpy(np.int64)[rows]
        return s, s + h["dur_ns"].to_numpy(np.int64)[rows]


# ---------------------------------------------------------------------------------------------
# The rule families' helpers: what a finding charges, read from its evidence


def _evidence_ops(f: Finding) -> tuple[set[str], set[str]]:
    """OpTypes and kernel names the evidence names (its ``kernels``, ``kernel_types``, ``shapes``)."""
    ev = f.evidence
    types: set[str] = set()
    names: set[str] = set()
    kernels = ev.get("kernels")
    items = kernels.items() if isinstance(kernels, dict) else ((None, k) for k in kernels) if isinstance(kernels, list) else ()
    for name, k in items:
        if isinstance(k, dict):
            types.update(str(k[x]) for x in ("type", "op_type") if k.get(x))
            names.update(str(x) for x in (name, k.get("name")) if x)
    if isinstance(ev.get("kernel_types"), dict):
        types.update(str(t) for t in ev["kernel_types"])
    if isinstance(ev.get("shapes"), list):
        types.update(str(s["op_type"]) for s in ev["shapes"] if isinstance(s, dict) and s.get("op_type"))
    return types, names


def kernels_named(t: Timeline, f: Finding) -> Charges:
    """Kernel rules (fusions, shapes, bound verdicts, AI CPU): the kernels of the OpTypes and names
    the evidence lists, on the finding's lines."""
    types, names = _evidence_ops(f)
    return t.kernel_charges(t.kernel_rows_at(f, types, names))


def transdata(t: Timeline, f: Finding) -> Charges:
    return t.kernel_charges(t.kernel_rows_at(f, TRANSDATA_TYPES))


def communication(t: Timeline, f: Finding) -> Charges:
    """Collective rules: the communication tasks of the steps (one gradient all-reduce is what the
    not-overlapped time, its byte alignment and its packets all describe)."""
    k = t.profile.kernels
    rows = np.flatnonzero(t.in_steps & timemodel.is_class(k, timemodel.TaskClass.COMMUNICATION))
    return t.kernel_charges(rows)


def _host_rows_named(t: Timeline, names: Iterable[str]) -> np.ndarray:
    h = t.profile.host_ops
    wanted = list(names)
    if not len(h) or not wanted:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.isin(pq.strs(h["name"]), wanted) & pq.in_steps(t.profile, h["start_ns"].to_numpy(np.int64)))


def dataloader(t: Timeline, f: Finding) -> Charges:
    """NPU104: the fetch scopes (host ops) and the device idle they overlap (the device waits for
    the batch)."""
    if "dataloader" not in f.evidence.get("crossed", ("dataloader",)):
        return {("cause", "h2d-copies"): f.time_per_step_us * 1e3}
    rows = _host_rows_named(t, f.evidence.get("fetch_scopes", ()))
    dur = t.profile.host_ops["dur_ns"].to_numpy(np.int64)
    out: Charges = {("host-op", int(r)): float(dur[r]) for r in rows}
    out.update(t.idle_covered(*t.host_intervals(rows)))
    return out


def device_idle(t: Timeline, f: Finding) -> Charges:
    """NPU105: the idle stretches inside the steps' device span (its Free) and, where it counts the
    Preparing part (``evidence.parts.preparing``), the idle before each step's first device task."""
    s, e = t.in_step_spans()
    parts = f.evidence.get("parts")
    preparing = parts.get("preparing", {}).get("us_per_step", 0) if isinstance(parts, dict) else 0
    if preparing and preparing > 0:
        ps, pe = t.preparing_spans()
        s, e = np.concatenate([s, ps]), np.concatenate([e, pe])
    return t.idle_covered(s, e)


def _sync_cause(f: Finding) -> Charges:
    s = f.span
    return {("cause", "sync", s.path, s.line): f.time_per_step_us * 1e3} if s is not None else {}


def host_sync(t: Timeline, f: Finding) -> Charges:
    """NPU108: the sync on its line, and the device idle that begins while the host is held in it
    (the host cannot queue the next work until the sync returns)."""
    names = [str(s.get("op")) for s in f.evidence.get("syncs", ()) if isinstance(s, dict)]
    rows = _host_rows_named(t, names)
    at = t.rows_on_lines(f, kernels=False)
    if at is not None:
        rows = rows[at[rows]]  # this call site's syncs, not every .item() of the steps
    out = _sync_cause(f)
    out.update(t.idle_starting_in(*t.host_intervals(rows)))
    ev = t.profile.host_events
    if len(ev) and names:
        e = np.flatnonzero(np.isin(pq.strs(ev["name"]), names))
        s = ev["start_ns"].to_numpy(np.int64)[e]
        out.update(t.idle_starting_in(s, s + ev["dur_ns"].to_numpy(np.int64)[e]))
    return out


def critical_path(t: Timeline, f: Finding) -> Charges:
    """NPU251: by its bound. Host: the idle its line's host ops overlap (the device waits for the
    launch); sync: the sync on its line and the idle after it; bandwidth: its copies and
    collectives."""
    bound = f.evidence.get("bound")
    if bound == "bandwidth":
        at = t.rows_on_lines(f, kernels=True)
        k = t.profile.kernels
        sel = t.in_steps & timemodel.is_class(k, timemodel.TaskClass.MEMCPY, timemodel.TaskClass.COMMUNICATION)
        return t.kernel_charges(np.flatnonzero(sel if at is None else sel & at))
    at = t.rows_on_lines(f, kernels=False)
    if at is None:
        return {}
    s, e = t.host_intervals(np.flatnonzero(at))
    if bound == "sync":
        return {**_sync_cause(f), **t.idle_starting_in(s, e)}
    return t.idle_covered(s, e)


def optimizer(t: Timeline, f: Finding) -> Charges:
    """NPU220: the optimizer step's host scope and the device idle it overlaps."""
    rows = _host_rows_named(t, [f.evidence["scope"]] if f.evidence.get("scope") else [])
    dur = t.profile.host_ops["dur_ns"].to_numpy(np.int64)
    out: Charges = {("host-op", int(r)): float(dur[r]) for r in rows}
    out.update(t.idle_covered(*t.host_intervals(rows)))
    return out


FAMILIES: dict[str, Callable[[Timeline, Finding], Charges]] = {
    "NPU101": kernels_named, "NPU106": kernels_named, "NPU201": kernels_named, "NPU202": kernels_named,
    "NPU206": kernels_named, "NPU209": kernels_named, "NPU221": kernels_named,
    **{f"NPU{n}": kernels_named for n in range(210, 218)},
    "NPU103": transdata,
    "NPU102": communication, "NPU203": communication, "NPU204": communication, "NPU219": communication,
    "NPU104": dataloader,
    "NPU105": device_idle,
    "NPU108": host_sync,
    "NPU220": optimizer,
    "NPU251": critical_path,
}


def from_effect(t: Timeline, f: Finding) -> Charges:
    """The rows the finding's effect acts on, and the device idle its host rows overlap; also
    where its saving is unknown (the fused-API rules on a CPU-only trace name the matched ops)."""
    out: Charges = {}
    if f.effect is None:
        return out
    p = t.profile
    tables = {Target.KERNELS: p.kernels, Target.HOST_OPS: p.host_ops, Target.SYNC_CALLS: p.host_events}
    for target, kind in _ROW_KIND.items():
        rows = np.array(sorted(f.effect.rows(target)), np.int64)
        table = tables[target]
        rows = rows[(rows >= 0) & (rows < len(table))]
        if not len(rows):
            continue
        s = table["start_ns"].to_numpy(np.int64)[rows]
        d = table["dur_ns"].to_numpy(np.int64)[rows]
        out.update(row_charges(kind, rows, d))
        if target is not Target.KERNELS:
            out.update(t.idle_covered(s, s + d))
    return out


def row_charges(kind: str, rows: np.ndarray, ns: np.ndarray) -> Charges:
    """``{(kind, row): ns}`` for rows of one table (built in C: a rule charges thousands of kernels)."""
    return dict(zip(zip(repeat(kind), rows.tolist()), np.asarray(ns, np.float64).tolist()))


def charges(t: Timeline, f: Finding) -> Charges:
    """Everything the finding charges: its effect's rows, and its family's reading of the evidence
    (a key both charge: the larger)."""
    out = from_effect(t, f)
    family = FAMILIES.get(f.code)
    if family is not None:
        more = family(t, f)
        both = out.keys() & more.keys()
        larger = dict(zip(both, map(max, map(out.__getitem__, both), map(more.__getitem__, both))))  # in C
        out.update(more)
        out.update(larger)
    if min(out.values(), default=1.0) > 0:
        return out
    return {k: v for k, v in out.items() if v > 0}
