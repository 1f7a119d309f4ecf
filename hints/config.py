"""Rule configuration: selection, severities, minimum share, thresholds (hint-rules §0.2, §4).

The server's settings model builds a ``RuleConfig``; rules read only this object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .finding import Severity


@dataclass(frozen=True, slots=True)
class Threshold:
    key: str  # camelCase setting name
    default: float | int
    unit: str
    description: str
    integer: bool = False  # counts, alignments, sizes: a fraction means nothing (and 0 may divide)
    minimum: float = 0
    maximum: float | None = None  # percentages: 100


THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("smallKernelUs", 50, "µs", "A kernel shorter than this is 'small' (launch/dispatch-bound)."),
    Threshold("schedulingDelayUs", 5, "µs", "Mean kernel wait time above which a group is called dispatch-bound."),
    Threshold("freeMaxPercent", 15, "%", "Device idle (Free) share of the step above which NPU105 fires.", maximum=100),
    Threshold("computeMinPercent", 70, "%", "Computing share of the step below which NPU105 fires.", maximum=100),
    Threshold("commMaxPercent", 15, "%", "Not-overlapped communication share above which NPU102 fires.", maximum=100),
    Threshold("dataloaderMaxUs", 10000, "µs", "DataLoader time per step above which NPU104 fires."),
    Threshold("dataloaderMaxPercent", 5, "%", "DataLoader share of the step above which NPU104 fires.", maximum=100),
    Threshold("h2dMaxPercent", 25, "%", "Host-to-device copy share of the step above which NPU104 fires.", maximum=100),
    Threshold("transdataMinPercent", 1, "%", "TransData share of the step above which NPU103 fires.", maximum=100),
    Threshold("opCompileMaxCount", 20, "events", "Online op compilations per capture at which NPU107 fires.", integer=True, minimum=1),
    Threshold("aicpuMinUs", 20, "µs", "Longest AI_CPU kernel at which NPU201 fires."),
    Threshold("cubeAlign", 256, "elements", "Inner-axis alignment expected by the Cube unit (NPU106).", integer=True, minimum=1),
    Threshold("faAlign", 128, "elements", "Head-dim / sequence alignment for FlashAttention (NPU106).", integer=True, minimum=1),
    Threshold("cubeMinBytes", 100 * 1024 * 1024, "bytes", "MatMul input+output size from which NPU106 checks alignment.", integer=True),
    Threshold("allocMaxUs", 10000, "µs", "Memory allocate/free API time per capture at which NPU109 fires."),
    Threshold("gcMinUs", 1000, "µs", "GC pause length at which NPU230 fires."),
    Threshold("accumSteps", 4, "steps", "Micro-batches per optimizer step written by the NPU102 fix.", integer=True, minimum=1),
    Threshold("dataloaderWorkers", 4, "workers", "num_workers written by the NPU104 fix.", integer=True, minimum=1),
)

THRESHOLD_DEFAULTS: dict[str, float | int] = {t.key: t.default for t in THRESHOLDS}
THRESHOLD_BY_KEY: dict[str, Threshold] = {t.key: t for t in THRESHOLDS}

DEFAULT_MIN_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class RuleConfig:
    select: tuple[str, ...] = ()  # codes or prefixes; empty = all
    ignore: tuple[str, ...] = ()
    severity: dict[str, Severity] = field(default_factory=dict)  # per code or prefix
    min_share: float = DEFAULT_MIN_SHARE
    thresholds: dict[str, Any] = field(default_factory=lambda: dict(THRESHOLD_DEFAULTS))
    compile_backend: str = "auto"  # auto | npu | inductor: torch.compile backend the NPU101 fix uses
    third_party_roots: tuple[str, ...] = ()

    def enabled(self, code: str) -> bool:
        if self.select and not any(code.startswith(p) for p in self.select):
            return False
        return not any(code.startswith(p) for p in self.ignore)

    def threshold(self, key: str) -> Any:
        return self.thresholds.get(key, THRESHOLD_DEFAULTS[key])

    def severity_override(self, code: str) -> Severity | None:
        """The most specific configured severity for a code (longest matching prefix)."""
        best: tuple[int, Severity] | None = None
        for prefix, sev in self.severity.items():
            if code.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), sev)
        return best[1] if best else None

    def severity_for_share(self, code: str, share: float) -> Severity:
        """Advisor priority by share of step (>= 5 % warning, >= 3 % info, else hint)."""
        override = self.severity_override(code)
        if override is not None:
            return override
        if share >= 0.05:
            return Severity.WARNING
        if share >= 0.03:
            return Severity.INFO
        return Severity.HINT
