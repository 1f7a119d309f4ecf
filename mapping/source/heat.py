"""Result types of attribution: device (and host) time per source span, with the op evidence.

Produced by ``mapping.attribute.attribute(profile, workspace)``; consumed by hints (anchoring,
evidence), the server (lens, hover, inlay hints) and ``--check`` (hotspot table).
All times are totals over the profiled steps in ns, plus per-step figures derived from the
profile's step time; ``share`` = per-step time / step time.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from msprof_lsp.mapping.profile.frames import Frame
from msprof_lsp.mapping.spans import Confidence, Span


class SiteKind(str, enum.Enum):
    """What a site's span covers."""

    CALL = "call"  # the call expression that launched the ops
    STATEMENT = "statement"  # the whole statement: no call on the line matched
    ELEMENT = "element"  # one element of a module container (``nn.Sequential(..., nn.ReLU(), ...)``)
    FUNCTION = "function"  # the def header only: the call inside the function was ambiguous


class TimeSource(str, enum.Enum):
    """Which time attribution spreads over source lines."""

    DEVICE = "device"  # kernel time
    HOST = "host"  # host op self time: the profile has no kernels at all


@dataclass(frozen=True, slots=True)
class Site:
    """A place in local source that profile time was tied to."""

    span: Span  # the call expression (or the whole statement when no call matched)
    confidence: Confidence
    function: str  # qualified name of the enclosing function ("Net.forward", "<module>")
    call_text: str  # source text of the call, used to re-anchor after edits (drift)
    frame: Frame | None = None  # the profile frame it came from (None: module/inferred)
    note: str = ""  # e.g. "re-anchored after edit", "backward of aten::relu"
    kind: SiteKind = SiteKind.CALL
    occurrence: int = 0  # index among the same-text calls/statements of ``function`` (re-anchoring)
    # the innermost frame of an installed library outside the workspace that the call went into:
    # the hot code is there, the user's call site is where it can be changed (None: launched here)
    library: Frame | None = None


@dataclass(slots=True)
class OpHeat:
    """One device operator type behind a span (or a line/function)."""

    name: str  # kernel name (the one with the most time) or host op name when no kernels
    type: str  # OpType (MatMulV2)
    core: str  # AI_CORE, ...
    count: int  # kernels over the capture
    total_ns: int
    shapes: tuple[str, ...] = ()  # distinct input shapes, most time first (at most 3)
    backward: bool = False


MAX_SHAPES = 3


def merge_ops(ops: Iterable[OpHeat]) -> list[OpHeat]:
    """One row per (type, core, direction), most time first: the name of the row with the most
    time, distinct shapes in order (at most ``MAX_SHAPES``)."""
    merged: dict[tuple[str, str, bool], OpHeat] = {}
    for op in ops:
        key = (op.type, op.core, op.backward)
        cur = merged.get(key)
        if cur is None:
            merged[key] = OpHeat(op.name, op.type, op.core, op.count, op.total_ns, op.shapes, op.backward)
        else:
            name = cur.name if cur.total_ns >= op.total_ns else op.name
            shapes = tuple(dict.fromkeys(cur.shapes + op.shapes))[:MAX_SHAPES]
            merged[key] = OpHeat(name, cur.type, cur.core, cur.count + op.count, cur.total_ns + op.total_ns,
                                 shapes, cur.backward)
    return sorted(merged.values(), key=lambda o: (-o.total_ns, o.type, o.backward))


@dataclass(slots=True)
class SpanHeat:
    site: Site
    device_ns: int  # total device time over the capture
    fwd_ns: int
    bwd_ns: int
    host_ns: int  # host (framework) self time of the ops launched from here
    calls: int  # host op calls launched from this span
    per_step_ns: float
    share: float  # per_step_ns / step time
    ops: list[OpHeat] = field(default_factory=list)  # most time first
    # library lines (Site.library) behind this span with their device time, most time first
    libraries: list[tuple[Frame, int]] = field(default_factory=list)


@dataclass(slots=True)
class LineHeat:
    path: str
    line: int
    device_ns: int
    per_step_ns: float
    share: float
    fwd_ns: int = 0
    bwd_ns: int = 0
    ops: list[OpHeat] = field(default_factory=list)


@dataclass(slots=True)
class FunctionHeat:
    path: str
    function: str  # qualified name
    span: Span  # the def (whole function)
    device_ns: int
    per_step_ns: float
    share: float
    fwd_ns: int = 0
    bwd_ns: int = 0


@dataclass(slots=True)
class SourceHeat:
    step_time_ns: float
    num_steps: int
    spans: list[SpanHeat]  # most time first
    lines: list[LineHeat]
    functions: list[FunctionHeat]
    total_device_ns: int
    attributed_ns: int  # device time that reached a local span
    unattributed_ns: int  # no stack / no user frame / frame maps to no local file
    unmapped_files: list[str] = field(default_factory=list)  # profile paths with no local match, reported once
    notes: list[str] = field(default_factory=list)  # e.g. drift drops
    time_source: TimeSource = TimeSource.DEVICE
    fwd_ns: int = 0  # attributed forward / backward time
    bwd_ns: int = 0

    @property
    def mapped_share(self) -> float:
        return self.attributed_ns / self.total_device_ns if self.total_device_ns else 0.0


@dataclass(slots=True)
class Attribution:
    """Per-kernel and per-host-op sites plus the aggregated heat."""

    sites: list[Site]
    kernel_site: np.ndarray  # int64 per kernels row: index into sites, -1 none
    op_site: np.ndarray  # int64 per host_ops row: index into sites, -1 none
    heat: SourceHeat
    state: object | None = field(default=None, repr=False, compare=False)  # the Attributor (re-anchoring)

    def line_now(self, path: str, line: int) -> int | None:
        """Where a profile frame's ``line`` of ``path`` is in the current text (the same line when
        nothing was edited; None when its statement is gone). Needs the re-anchoring state."""
        follow = getattr(self.state, "line_now", None)
        return follow(path, line) if follow is not None else line

    def site_of_kernel(self, row: int) -> Site | None:
        i = int(self.kernel_site[row])
        return self.sites[i] if i >= 0 else None

    def site_of_op(self, row: int) -> Site | None:
        i = int(self.op_site[row])
        return self.sites[i] if i >= 0 else None
