"""Before/after comparison of two profiles of the same code (``--baseline``).

Both profiles are attributed against the *current* source, so a line's time in the baseline is
where that call is now (drift handling re-anchors old frames); lines are compared by position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from msprof_lsp.mapping.source.heat import SourceHeat
from msprof_lsp.mapping.profile.model import Profile


@dataclass(frozen=True, slots=True)
class Change:
    key: str  # "path:line" or an operator type
    before_us: float  # per step
    after_us: float  # per step

    @property
    def delta_us(self) -> float:
        return self.after_us - self.before_us

    @property
    def ratio(self) -> float | None:
        return self.after_us / self.before_us - 1.0 if self.before_us else None


@dataclass(frozen=True, slots=True)
class LineChange:
    path: str
    line: int
    before_us: float
    after_us: float

    @property
    def ratio(self) -> float | None:
        return self.after_us / self.before_us - 1.0 if self.before_us else None


@dataclass(slots=True)
class Comparison:
    baseline_path: str
    before_step_us: float
    after_step_us: float
    lines: list[LineChange] = field(default_factory=list)  # biggest absolute change first
    operators: list[Change] = field(default_factory=list)

    @property
    def step_ratio(self) -> float | None:
        return self.after_step_us / self.before_step_us - 1.0 if self.before_step_us else None

    def improved(self, min_us: float = 0.0) -> list[LineChange]:
        return [c for c in self.lines if c.after_us < c.before_us - min_us]

    def regressed(self, min_us: float = 0.0) -> list[LineChange]:
        return [c for c in self.lines if c.after_us > c.before_us + min_us]


def _per_step_by_type(profile: Profile) -> dict[str, float]:
    k = profile.kernels_in_steps()
    if not len(k):
        return {}
    steps = max(profile.num_steps, 1)
    types = k["type"].astype(str).where(k["type"].astype(str) != "", k["name"].astype(str))
    totals = k["dur_ns"].groupby(types.to_numpy()).sum()
    return {str(t): float(ns) / 1000 / steps for t, ns in totals.items()}


def compare(
    baseline_path: str,
    before: Profile,
    before_heat: SourceHeat,
    after: Profile,
    after_heat: SourceHeat,
    *,
    min_change_us: float = 1.0,
) -> Comparison:
    before_lines = {(h.path, h.line): h.per_step_ns / 1000 for h in before_heat.lines}
    after_lines = {(h.path, h.line): h.per_step_ns / 1000 for h in after_heat.lines}
    lines = []
    for key in before_lines.keys() | after_lines.keys():
        b, a = before_lines.get(key, 0.0), after_lines.get(key, 0.0)
        if abs(a - b) >= min_change_us:
            lines.append(LineChange(key[0], key[1], b, a))
    lines.sort(key=lambda c: (-abs(c.after_us - c.before_us), c.path, c.line))

    before_ops, after_ops = _per_step_by_type(before), _per_step_by_type(after)
    ops = []
    for t in before_ops.keys() | after_ops.keys():
        b, a = before_ops.get(t, 0.0), after_ops.get(t, 0.0)
        if abs(a - b) >= min_change_us:
            ops.append(Change(t, b, a))
    ops.sort(key=lambda c: (-abs(c.delta_us), c.key))
    return Comparison(
        baseline_path=baseline_path,
        before_step_us=before.step_time_ns / 1000,
        after_step_us=after.step_time_ns / 1000,
        lines=lines,
        operators=ops,
    )
