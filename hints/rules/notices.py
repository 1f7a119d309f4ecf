"""NPU900-NPU903: notices about the profile itself (fixed severity Information).

* NPU900 no call stacks: every anchor is approximate; the capture advice below.
* NPU901 Level0 capture: the rules that needed Level1 data (CANN API events, statistics) and were
  skipped, by name -- they recorded the skip through ``ctx.needs_level1``.
* NPU902 a source file changed after the profile was captured (``end_info.collectionTimeEnd``) and
  a recorded line in it no longer holds the call it recorded (an anchor re-found elsewhere or
  dropped, and the recorded line now holds no call of the recorded function): a newer mtime alone,
  or an anchoring miss on an unedited line, stays quiet.
* NPU903 hot device time that reached no user frame: how much and which kernels.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.hints.registry import Data, Rule, declared_level1, declare, rule
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.units import format_us
from msprof_lsp.mapping.profile.timemodel import device_time_per_step_ns, work_mask
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq

ASCEND_CAPTURE = (
    "torch_npu.profiler.profile(activities=[torch_npu.profiler.ProfilerActivity.CPU, "
    "torch_npu.profiler.ProfilerActivity.NPU], with_stack=True, record_shapes=True, "
    "experimental_config=torch_npu.profiler._ExperimentalConfig(profiler_level=torch_npu.profiler.ProfilerLevel.Level1, "
    "aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization), "
    "schedule=torch_npu.profiler.schedule(wait=1, warmup=1, active=2), "
    "on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(\"./prof\"))"
)
"""How to capture call stacks (docs/rules/NPU900.md)."""

KINETO_CAPTURE = (
    "torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA], "
    "with_stack=True, record_shapes=True, with_modules=True, "
    "schedule=torch.profiler.schedule(wait=1, warmup=1, active=2), "
    "on_trace_ready=torch.profiler.tensorboard_trace_handler(\"./prof\"))"
)
LEVEL1 = "experimental_config=torch_npu.profiler._ExperimentalConfig(profiler_level=torch_npu.profiler.ProfilerLevel.Level1)"
HOT_SHARE = 0.05  # NPU903: unattributed device time per step worth a notice (the warning share)
TOP_KERNELS = 5


@dataclass(frozen=True, eq=False, repr=False)
class Notice(Rule):
    default_severity: Severity | None = field(default=Severity.INFO, kw_only=True)


# pytorch_only: the capture it advises is torch_npu.profiler / torch.profiler
@declare("NPU900", "no-call-stacks", pytorch_only=True)
class NoCallStacks(Notice):
    """The profile has no Python call stacks: findings are anchored by op type and module names only.

    Without with_stack=True the profiler does not record which line launched an op; hints are then
    placed by pattern search (inferred confidence) or not at all.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        p = ctx.profile
        if not len(p.host_ops) and not len(p.kernels):
            return
        if p.has_call_stacks and p.meta.with_stack is not False:
            return
        kineto = p.meta.kind is ProfileKind.KINETO
        advice = KINETO_CAPTURE if kineto else ASCEND_CAPTURE
        why = "with_stack=False" if p.meta.with_stack is False else "no Call stack in the trace"
        msg = f"No call stacks ({why}): findings are approximate; capture with `with_stack=True`: {advice}"
        yield ctx.finding(self, span=None, message=msg, confidence=Confidence.MODULE,
                          evidence={"with_stack": p.meta.with_stack, "stacks": len(p.stacks), "capture": advice})


# pytorch_only: the capture it advises is torch_npu.profiler's
# after_others: it names the skips the other rules recorded
@declare("NPU901", "needs-level1", backends=(Backend.ASCEND,), pytorch_only=True, after_others=True)
class NeedsLevel1(Notice):
    """Captured at profiler level Level0: the rules that need Level1 data were skipped (named).

    Level0 drops the CANN layer (AscendCL/Runtime API events) and the op/api statistics; rules built
    on them cannot tell a clean run from a missing record, so they skip and this notice says which.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        gap = ctx.level1_gap
        skipped = dict(ctx.level1_skips)
        if gap is None or not skipped:
            return
        named = []
        for code in sorted(skipped):
            try:
                named.append(f"{code} {rule(code).name}")
            except KeyError:
                named.append(code)
        needs = "; ".join(f"{c}: {skipped[c]}" for c in sorted(skipped))
        msg = (f"Profile {gap}: {', '.join(named)} skipped, they need Level1 data ({needs}). "
               f"Capture with {LEVEL1}.")
        yield ctx.finding(self, span=None, message=msg, confidence=Confidence.MODULE,
                          evidence={"level": ctx.profile.meta.level, "reason": gap, "skipped": skipped, "capture": LEVEL1,
                                    "may_need_level1": declared_level1()})


def _iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@declare("NPU902", "stale-source")
class StaleSource(Notice):
    """A source file changed after the profile was captured: recorded lines may have moved.

    Stacks record line numbers; an edit after the capture shifts them. The mapping re-anchors by
    call text where it can, but a re-profile gives exact lines.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        end = ctx.profile.meta.collection_end_ns
        a = ctx.attribution
        if end is None or end <= 0 or a is None:
            return
        per_file: dict[str, list] = {}
        for site in a.sites:
            if site.frame is not None:
                per_file.setdefault(site.span.path, []).append(site)
        for path in _files_with_drops(ctx, a.heat.notes):  # every anchor of a file may be dropped
            per_file.setdefault(path, [])
        for path in sorted(per_file):
            try:
                mtime = os.stat(path).st_mtime_ns
            except OSError:
                continue
            index = sq.index_of(ctx, path)
            if mtime <= end or index is None:
                continue
            sites = per_file[path]
            # Anchors that did not land on their recorded line: re-found elsewhere, or dropped.
            # Anchoring misses on unedited files too (a multi-line statement, an op name no call
            # on the line spells), so a newer mtime and a miss are not enough: the file changed
            # only where the recorded line itself no longer holds a call of the recorded function.
            moved = [(s.frame.line, s.frame.func) for s in sites if "re-anchored" in s.note]
            dropped = _dropped_frames(a.heat.notes, os.path.basename(path))
            changed = sorted({line for line, func in moved + dropped if not _holds_call(index, line, func)})
            if not changed:
                continue
            shown = ", ".join(str(n) for n in changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            msg = (f"{sq.path_name(path)} changed after the profile was captured "
                   f"(profile ended {_iso(end)}, file saved {_iso(mtime)}): recorded line"
                   f"{'s' if len(changed) > 1 else ''} {shown} no longer hold{'' if len(changed) > 1 else 's'} "
                   f"the recorded call, lines may have moved"
                   f"{f'; {len(moved)} of {len(sites)} anchors re-found by their call text' if moved else ''}"
                   f"{f'; {len(dropped)} dropped' if dropped else ''}. Re-profile for exact lines.")
            yield ctx.finding(self, span=sq.file_start(path), message=msg, confidence=Confidence.MODULE,
                              evidence={"collection_end": _iso(end), "file_modified": _iso(mtime),
                                        "collection_end_ns": end, "file_mtime_ns": mtime,
                                        "anchors": len(sites), "re_anchored": len(moved), "dropped": len(dropped),
                                        "changed_lines": changed})


# The anchoring's notes for a frame it could not map (mapping/source/anchor.py): the recorded line
# holds no matching call, or several calls of the function match.
_DROP_NOTES = (r"at {name}:(\d+) \(([^)]*)\): the call is no longer there",
               r"at {name}:(\d+) matches \d+ calls in ([^\s(]+)\(\) and the line changed")


def _dropped_frames(notes, name: str) -> list[tuple[int, str]]:
    """(recorded line, function) of the frames in file ``name`` that the anchoring dropped."""
    out = []
    for pattern in _DROP_NOTES:
        rx = re.compile(pattern.format(name=re.escape(name)))
        for note in notes:
            out += [(int(m.group(1)), m.group(2)) for m in rx.finditer(note)]
    return out


def _files_with_drops(ctx: RuleContext, notes) -> list[str]:  # noqa: ANN001 - Iterable[str]
    """Workspace files named by a drop note (the notes name the recorded file's base name)."""
    names = {m.group(1) for n in notes for m in re.finditer(r"at ([^\s:/\\]+\.py):\d+", n)}
    if not names or ctx.workspace is None:
        return []
    return [f for f in ctx.workspace.python_files() if os.path.basename(f) in names]


def _holds_call(index, line: int, func: str) -> bool:  # noqa: ANN001 - SourceIndex
    """The recorded line still holds a call that may have launched the recorded op, inside a
    function of the recorded name (the frame's ``func`` is a bare name; ``<module>`` at top
    level). The anchoring found no call there that names the op, so only an opaque call counts:
    one into user or library code (``helper(x)``, ``self.block(x)``, ``x.view(...)``), not an
    operator (``x * 2`` launches a mul) nor a ``torch.*`` function named otherwise."""
    if index.scope_at(line).rsplit(".", 1)[-1] != func.rsplit(".", 1)[-1]:
        return False
    return any(not c.operator and not c.qualname.startswith("torch.") for c in index.calls_on_line(line))


# needs: no stacks at all: NPU900 says so
@declare("NPU903", "unattributed-time", needs=(Data.ATTRIBUTION, Data.CALL_STACKS, Data.KERNELS))
class UnattributedTime(Notice):
    """Hot device time that reached no line of the workspace: how much, and which kernels.

    Kernels whose call stack has no frame in the workspace (library-only stacks, files that are not
    checked out here, ops outside any recorded stack) cannot be shown on a line; their total says
    how much of the step the line hints do not cover.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        p = ctx.profile
        a = ctx.attribution
        assert a is not None  # declared: Data.ATTRIBUTION
        k = p.kernels_in_steps()
        rows = p.kernels.index.get_indexer(k.index)
        site = a.kernel_site[rows] if len(a.kernel_site) else np.full(len(k), -1)
        lost = (site < 0) & work_mask(k)  # waits and communication are no line's work
        if not lost.any():
            return
        sub = k[lost]
        total = int(sub["dur_ns"].sum())
        per = ctx.per_step_ns(total)
        # of the step, or of the device work time per step where concurrent streams make that
        # longer: it holds every lost kernel, so the share stays at most 1
        device_ns = max(ctx.step_time_ns, device_time_per_step_ns(p))
        share = ctx.share(per, step_ns=device_ns)
        if share < max(HOT_SHARE, ctx.config.min_share):
            return
        with_stack = sub["stack"].to_numpy(np.int64) >= 0
        names = pq.strs(sub["name"])
        by = sub.groupby(names, observed=True)["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(TOP_KERNELS)
        top = {str(n): {"count": int(r["count"]), "us_per_step": pq.format_ns_us(ctx.per_step_ns(int(r["sum"])))} for n, r in by.iterrows()}
        shown = ", ".join(f"{n} ({format_us(v['us_per_step'])})" for n, v in list(top.items())[:3])
        unmapped = list(a.heat.unmapped_files)[:5]
        tail = f"; frames in files not found locally ({', '.join(unmapped)}): use pathMappings" if unmapped else ""
        refused = sorted(n.removesuffix("; not mapped") for n in a.heat.notes if ": not parsed: " in n)[:3]
        if refused:  # a source file over a safety limit is said, not silently lost
            tail += "; " + "; ".join(refused)
        msg = (f"Unattributed device time: {format_us(per / 1000)}/step ({share * 100:.1f}% of the device time) in "
               f"{len(sub)} kernels reached no workspace line, mostly {shown}{tail}.")
        yield ctx.finding(self, span=None, message=msg, total_ns=total, step_ns=device_ns, confidence=Confidence.MODULE,
                          evidence={
            "time_us_per_step": pq.format_ns_us(per),
            "share": round(share, 4),
            "kernels": len(sub),
            "with_stack_no_user_frame": int(with_stack.sum()),
            "without_stack": int((~with_stack).sum()),
            "top_kernels": top,
            "unmapped_files": unmapped,
            "refused_files": refused,
        })
