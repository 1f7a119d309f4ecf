"""What a rule sees (``RuleContext``) and the small helpers every rule shares.

Rules normalise evidence per step, express impact as a share of the step time, write messages
in the one format of docs/rules/README.md ("Message") and build findings with a severity from that share. Doing it
here keeps the numbers and wording consistent across the catalog.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from msprof_lsp.mapping.profile.frames import Frame
from msprof_lsp.mapping.source.critical_path import CriticalPath, critical_path
from msprof_lsp.mapping.source.heat import Attribution
from msprof_lsp.mapping.profile.model import Backend, ClusterSummary, Profile
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.units import NS_PER_US, format_share, format_us
from msprof_lsp.mapping.source.workspace import library_label

from . import gating, suppress
from .config import RuleConfig, Thresholds
from .finding import Effect, Finding, Fix, FixOffer, Related, Severity, ShareOf

if TYPE_CHECKING:  # built in parallel (branch `source`); only its text access is used here
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    from .registry import Rule

T = TypeVar("T")
MAX_FIX_WORDS = 12
MAX_LIBRARY_LINES = 3  # library lines named in relatedInformation and evidence


class Unit(enum.Enum):
    """What a message counts, singular and plural: the one place that writes "1 kernel" but
    "3 kernels" (a unit given as a plain string is printed as it is, whatever the count)."""

    KERNEL = ("kernel", "kernels")
    COPY = ("copy", "copies")
    PAUSE = ("pause", "pauses")
    IDLE_GAP = ("idle gap", "idle gaps")
    TRANSFER = ("transfer", "transfers")
    PACKET = ("packet", "packets")
    COLLECTIVE = ("collective", "collectives")
    SYNC = ("sync", "syncs")
    FETCH = ("fetch", "fetches")
    DROPOUT_CALL = ("dropout call", "dropout calls")
    CALL = ("call", "calls")
    GRAPH = ("graph", "graphs")
    MALLOC_FREE = ("malloc/free call", "malloc/free calls")
    FOREACH_KERNEL = ("_foreach_ kernel", "_foreach_ kernels")
    NORM_KERNEL = ("norm kernel", "norm kernels")
    CLIP = ("clip", "clips")
    PAIR = ("pair", "pairs")

    def of(self, count: int) -> str:
        one, many = self.value
        return one if count == 1 else many


def denominator(of: ShareOf) -> str:
    """How a share's denominator is printed: "the wall step" / "the device step"."""
    return "the wall step" if of is ShareOf.WALL_STEP else "the device step"


def format_message(
    short: str,
    *,
    per_step_us: float,
    share: float | None,
    diagnosis: str,
    fix: str,
    count: int | None = None,
    unit: str = "",
    qualifier: str = "",
    of: ShareOf = ShareOf.DEVICE_STEP,
) -> str:
    """``<Short name>: <count> <unit>, <time>/step (<share> of the <wall|device> step)[, <qualifier>]: <diagnosis>. <fix>.``

    ``of``: the share's denominator, always printed with it; ``share`` None leaves the share out
    (blocked time, time summed over links: no part of the step). ``fix`` must be at most 12 words;
    longer advice belongs in the rule's doc page, so a longer one raises ValueError (a
    programming error the rule's tests catch).
    """
    if len(fix.split()) > MAX_FIX_WORDS:
        raise ValueError(f"fix text longer than {MAX_FIX_WORDS} words: {fix!r}")
    head = f"{count} {unit}, " if count is not None else ""
    qual = f", {qualifier}" if qualifier else ""
    diagnosis = diagnosis.rstrip(".")
    fix = fix.rstrip(".")
    part = f" ({format_share(share)} of {denominator(of)})" if share is not None else ""
    return f"{short}: {head}{format_us(per_step_us)}/step{part}{qual}: {diagnosis}. {fix}."


class RuleContext:
    """Everything a rule may read, plus shared helpers. Rules never mutate it."""

    def __init__(
        self,
        profile: Profile,
        attribution: Attribution | None,
        workspace: SourceWorkspace | None,
        config: RuleConfig,
        backend: Backend | str | None = None,
        cluster: ClusterSummary | None = None,
    ) -> None:
        self.profile = profile
        self.cluster = cluster  # the job's ranks compared (None: one rank, or not loaded as a job)
        self.attribution = attribution
        self.workspace = workspace
        self.config = config
        self.thresholds: Thresholds = config.thresholds  # typed fields: a misspelt name fails the type check
        b = backend if backend is not None else profile.meta.backend
        self.backend: Backend = Backend(b)  # a plain string from a caller is parsed once here
        # values of this context (its profile, attribution, source and settings), computed once
        # for all rules: the one memo of a rules run (``derived``)
        self._derived: dict[tuple[Any, ...], Any] = {}
        self.level1_skips: dict[str, str] = {}  # rule code -> the Level1 data it went without (NPU901)

    def derived(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """``compute()`` once per ``key`` for this context: what depends on more than the profile
        (the attribution, the source, the settings); a figure of the profile alone goes through
        ``profile.derived.memo`` instead, which outlives the context."""
        try:
            return self._derived[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._derived[key] = compute()
            return value

    # -- numbers ------------------------------------------------------------------------------

    @property
    def step_time_ns(self) -> float:
        def step() -> float:
            if self.attribution is not None and self.attribution.heat.step_time_ns > 0:
                return float(self.attribution.heat.step_time_ns)
            return float(self.profile.step_time_ns)
        return self.derived(("step_time_ns",), step)

    @property
    def num_steps(self) -> int:
        if self.attribution is not None and self.attribution.heat.num_steps > 0:
            return self.attribution.heat.num_steps
        return max(self.profile.num_steps, 1)

    @property
    def critical_path(self) -> CriticalPath:
        """The steps' critical path (computed once per loaded profile) and its per-line figures."""
        return self.derived(("critical_path",), lambda: critical_path(self.profile, self.attribution))

    def per_step_count(self, n: float) -> int:
        """How many of something happen per step, for a message: at least 1 when any happened, 0
        when none did."""
        return max(1, round(n / self.num_steps)) if n > 0 else 0

    def per_step_ns(self, total_ns: float) -> float:
        """A total over the capture, per profiled step."""
        return total_ns / self.num_steps

    def per_step_us(self, total_ns: float) -> float:
        return self.per_step_ns(total_ns) / NS_PER_US

    def share(self, per_step_ns: float, *, wall: bool = False, step_ns: float | None = None) -> float:
        """Per-step time as a share of the step (0 when the step time is unknown).

        ``wall``: of the wall-clock step instead (host-side costs: DataLoader, host syncs, API time);
        ``step_ns``: of a step time the rule corrected itself (e.g. without a one-off init collective).
        """
        st = step_ns if step_ns is not None else (self.wall_step_time_ns if wall else self.step_time_ns)
        return per_step_ns / st if st > 0 else 0.0

    @property
    def wall_step_time_ns(self) -> float:
        """Mean ``ProfilerStep#N`` duration (``Profile.wall_step_ns``): the step as the host lives it.

        The step time (docs/numbers.md) is the device's Computing + Communication(Not Overlapped) + Free;
        it leaves out the Preparing phase before a step's first device task, which is exactly where
        a slow DataLoader spends its time. Host-side costs are therefore measured against the
        ProfilerStep range (the step time itself when the profile has no ranges, or a shorter one).
        """
        return max(self.profile.wall_step_ns() or 0.0, self.step_time_ns)

    def severity(self, code: str, share: float) -> Severity:
        """Severity by share (docs/rules/README.md): the time at stake, never how well the line was
        anchored -- adding the profiled source must not turn a warning into a hint (the finding's
        confidence is shown beside it)."""
        return self.config.severity_for_share(code, share)

    # -- capture gating -------------------------------------------------------------------------

    @property
    def level1_gap(self) -> str | None:
        """Why this profile has no Level1 data (CANN API events, statistics), None if it has."""
        return self.derived(("level1_gap",), lambda: gating.level1_missing(self.profile))

    def needs_level1(self, rule: Rule, *, also: str = "") -> bool:
        """True when the profile lacks the Level1 data the rule declares (``Rule.level1``, plus
        ``also``: what else the rule went without): the rule must then yield nothing (absence of
        data is not absence of the problem); NPU901 reports the skip."""
        if self.level1_gap is None:
            return False
        self.level1_skips.setdefault(rule.code, ", ".join(filter(None, (rule.level1, also))))
        return True

    # -- findings -----------------------------------------------------------------------------

    def message(self, short: str, *, total_ns: float, diagnosis: str, fix: str, count: int | None = None, unit: str | Unit = "", qualifier: str = "", wall: bool = False, step_ns: float | None = None, show_share: bool = True, events: int | None = None) -> str:
        """``format_message`` with the time and share computed from a capture total; the share is
        of the wall step with ``wall``, else of the device step. ``show_share=False``: the time is
        no part of the step to print as a share of it (time the host is blocked, summed link time).
        ``events``: how many ``unit`` the whole capture holds, printed per step (``per_step_count``)
        in place of ``count``; a :class:`Unit` is printed singular or plural by the count."""
        per = self.per_step_ns(total_ns)
        if events is not None:
            count = self.per_step_count(events)
        if isinstance(unit, Unit):
            unit = unit.of(count if count is not None else 0)
        return format_message(
            short,
            per_step_us=per / NS_PER_US,
            share=self.share(per, wall=wall, step_ns=step_ns) if show_share else None,
            diagnosis=diagnosis,
            fix=fix,
            count=count,
            unit=unit,
            qualifier=qualifier,
            of=ShareOf.WALL_STEP if wall else ShareOf.DEVICE_STEP,
        )

    def finding(
        self,
        rule: Rule,
        *,
        span: Span | None,
        message: str,
        total_ns: float = 0.0,
        confidence: Confidence = Confidence.STACK,
        evidence: dict[str, Any] | None = None,
        fixes: Sequence[FixOffer | Fix] = (),
        related: Iterable[Related] = (),
        severity: Severity | None = None,
        wall: bool = False,
        step_ns: float | None = None,
        effect: Effect | None = None,
    ) -> Finding:
        """A finding with per-step time and share filled in; its severity is decided by the engine.

        ``severity`` caps the one the share gives (e.g. a weak variant of a rule); fixed-severity
        rules get their ``default_severity``. ``wall``: the share is of the wall-clock step
        (``wall_step_time_ns``), for costs the host pays; ``step_ns``: of a step time the rule
        corrected (see ``share``). ``fixes``: what the finding offers; the edits of a ``FixOffer``
        are computed later, from one parse per file (``hints.fixes.offers``); a ``Fix`` made
        without parsing (a comment line) is kept as it is.
        """
        per = self.per_step_ns(total_ns)
        share = self.share(per, wall=wall, step_ns=step_ns)
        # the rule's cap; the final severity is decided once, by the engine (hints.engine._settle)
        sev = severity if severity is not None else Severity.ERROR
        evidence = dict(evidence or {})
        related = list(related)
        libs = self.library_lines(span)
        if libs:
            # the call site is the user's; the time is spent in a library the workspace lacks
            more = f" and {len(libs) - 1} more" if len(libs) > 1 else ""
            message = f"{message} Hot code in an installed library: {library_label(libs[0][0])}{more}."
            related += [Related(span, f"calls into {library_label(f)} ({format_us(self.per_step_us(ns))}/step), "
                                      "an installed library outside the workspace")
                        for f, ns in libs[:MAX_LIBRARY_LINES]]
            evidence["library_lines"] = [
                {"path": f.file, "line": f.line, "function": f.func, "time_per_step_us": self.per_step_us(ns)}
                for f, ns in libs[:MAX_LIBRARY_LINES]
            ]
        return Finding(
            code=rule.code,
            name=rule.name,
            severity=sev,
            message=message,
            span=span,
            share=share,
            time_per_step_us=per / NS_PER_US,
            confidence=confidence,
            evidence=evidence,
            fixes=[f for f in fixes if isinstance(f, Fix)],
            offers=[f for f in fixes if isinstance(f, FixOffer)],
            related=related,
            share_of=ShareOf.WALL_STEP if wall else ShareOf.DEVICE_STEP,
            effect=effect,
        )

    def library_lines(self, span: Span | None) -> list[tuple[Frame, int]]:
        """Library lines (outside the workspace) behind the mapped spans on ``span``'s lines, with
        their device time over the capture, most time first."""
        if span is None or self.attribution is None:
            return []
        found: dict[Frame, int] = {}
        for line, libs in self.derived(("library_lines",), self._library_lines).get(span.path, ()):
            if span.line <= line <= span.end_line:
                for f, ns in libs:
                    found[f] = found.get(f, 0) + ns
        return sorted(found.items(), key=lambda kv: (-kv[1], kv[0].raw))

    def _library_lines(self) -> dict[str, list[tuple[int, list[tuple[Frame, int]]]]]:
        """Per path: (line, the library lines behind it) of every mapped span that has some."""
        out: dict[str, list[tuple[int, list[tuple[Frame, int]]]]] = {}
        assert self.attribution is not None
        for sh in self.attribution.heat.spans:
            if sh.libraries:
                out.setdefault(sh.site.span.path, []).append((sh.site.span.line, sh.libraries))
        return out

    # -- source ------------------------------------------------------------------------------------

    def frame_now(self, frame: Frame, local: str) -> Frame | None:
        """``frame`` (a profile frame of workspace file ``local``) with its line where that code
        is in the text being analysed: edits since the attribution move it; None when its
        statement was edited away. Rules read frames only through this."""
        if self.attribution is None or frame.line <= 0:
            return frame
        line = self.attribution.line_now(local, frame.line)
        if line is None:
            return None
        return frame if line == frame.line else replace(frame, line=line)

    def source_text(self, path: str) -> str | None:
        """The current text of a source file (the editor's buffer when the workspace has one)."""
        def read() -> str | None:
            # only the workspace reads source files: it refuses files outside its roots
            if self.workspace is None:
                return None
            try:
                return self.workspace.text(path)
            except (OSError, KeyError, ValueError):
                return None
        return self.derived(("text", path), read)

    def suppressions(self, path: str) -> dict[int, frozenset[str]]:
        def table() -> dict[int, frozenset[str]]:
            text = self.source_text(path)
            return suppress.suppressions(text) if text is not None else {}
        return self.derived(("suppressions", path), table)

    def is_suppressed(self, finding: Finding) -> bool:
        span = finding.span
        if span is None:
            return False
        table = self.suppressions(span.path)
        return suppress.span_suppressed(table, span.line, span.end_line, finding.code)
