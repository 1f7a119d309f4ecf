"""Before/after re-recordings on the CPU, interleaved A B B A: what the CPU loop benchmarks share
(``loop_npu104.py``, ``loop_cpu.py``; docs/savings.md "The CPU loop").

A is a workspace whose script carries the record block (``insert_profiler``), B the same with a
rule's fix applied. Each recording runs the script with the block on (``MSPROF_LSP_PROFILE=1``)
and one intra-op thread (``OMP_NUM_THREADS=1``: the training thread takes one core, as a host
thread feeding a device does). The truth of a round is the mean recorded step (``ProfilerStep``,
what ``--check --baseline`` compares) of its A recordings minus its B recordings; A B B A cancels a
drift of the machine's speed linear over the round, and the medians over rounds are compared with
the median estimate (the rule's saving on each A recording). Needs torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from msprof_lsp.hints.fixes.profiling import PROFILE_ENV, PROFILE_FOLDER, SKIP_FIRST  # noqa: E402
from msprof_lsp.mapping.profile.load import load_location, locate  # noqa: E402
from tests.hints.fixes.fixkit import line_of  # noqa: E402,F401  (the loop benchmarks' one line finder)
from tests.loop.gauge import run_gauged  # noqa: E402
from tests.synth.savings_cases import within_bar  # noqa: E402

STEPS = SKIP_FIRST + 6  # skipped, wait 1, warm up 1, record 3, one to spare


@dataclass(frozen=True, slots=True)
class Recording:
    trace: Path
    step_us: float  # the mean recorded step
    other_cores: float | None  # cores the rest of the machine kept busy meanwhile (None: unknown)
    scope_us: float | None = None  # the mean time per step of the ops named by ``scope`` (None: no scope)
    ops_outside: float | None = None  # host ops per step outside those


def record(ws: Path, argv: Sequence[str], who: str = "loop", scope: str = "") -> Recording:
    """Run ``python <argv>`` in ``ws`` with the record block on; keep its trace beside ``ws``
    (``<ws>-<n>.pt.trace.json``). The other load is the machine's busy time less the run's own
    CPU (its joined workers roll into RUSAGE_CHILDREN), per second of the run."""
    shutil.rmtree(ws / PROFILE_FOLDER, ignore_errors=True)
    env = {**os.environ, PROFILE_ENV: "1", "OMP_NUM_THREADS": "1"}
    out, other = run_gauged([sys.executable, "-W", "ignore", *argv], ws, env, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{who}: the recording in {ws} failed: {out.stderr.strip().splitlines()[-1:]}")
    (trace,) = (ws / PROFILE_FOLDER).glob("*.pt.trace.json*")
    kept = ws.parent / f"{ws.name}-{len(list(ws.parent.glob(ws.name + '-*')))}.pt.trace.json"
    shutil.move(trace, kept)
    if not scope:
        return Recording(kept, step_us(kept), other)
    step, scope_us, outside = measure(kept, scope)
    return Recording(kept, step, other, scope_us, outside)


def step_us(trace: Path) -> float:
    profile = load_location(locate(trace), use_cache=False)
    return statistics.fmean(s.dur_ns for s in profile.steps) / 1000


def measure(trace: Path, scope: str) -> tuple[float, float, float]:
    """(mean step, median over steps of the time of the host ops whose name matches ``scope`` (not
    nested), host ops per step outside them), µs. What a fix changes lies inside its scope
    (NPU220's: ``Optimizer.step#``); the rest of the step is the same work before and after the fix
    (the ops outside are counted to check it), so A's scope time minus B's is the saving without
    the rest's noise on a loaded machine, where the step's own difference is mostly that noise. The
    median over the steps drops a step where the thread was preempted inside the scope (+3-4 ms in
    one of three steps of the CNN's 0.8 ms optimizer step, on both sides)."""
    from msprof_lsp.hints import profile_query as pq

    profile = load_location(locate(trace), use_cache=False)
    h = profile.host_ops
    names = pq.strs(h["name"])
    starts = h["start_ns"].to_numpy("int64")
    durs = h["dur_ns"].to_numpy("int64")
    inside = pq.in_steps(profile, starts)
    hit = inside & [bool(re.search(scope, n)) for n in names]
    sub = pq.descendants(profile, [int(r) for r in hit.nonzero()[0]])
    per_step = [float(durs[hit & (starts >= s.start_ns) & (starts < s.end_ns)].sum()) / 1000 for s in profile.steps]
    return (statistics.fmean(s.dur_ns for s in profile.steps) / 1000, statistics.median(per_step),
            float((inside & ~sub).sum()) / len(profile.steps))


def check(ws: Path, trace: Path, cache: Path, select: str = "", who: str = "loop") -> list[dict]:
    """``--check ws --profile trace --format json`` (every finding, ``min-share`` as the workspace's
    pyproject.toml sets it); ``select``: only those codes."""
    cmd = [sys.executable, "-m", "msprof_lsp.server", "--check", str(ws), "--profile", str(trace), "--format", "json",
           "--fail-on", "never", "--cache-dir", str(cache)]
    if select:
        cmd += ["--select", select]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{who}: --check on {trace} failed: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)["findings"]


def estimate_us(ws: Path, trace: Path, code: str, cache: Path, who: str = "loop") -> float:
    """The one ``code`` finding's saving (µs/step) on this recording."""
    found = [f for f in check(ws, trace, cache, code, who) if f["code"] == code]
    if len(found) != 1:
        sys.exit(f"{who}: {len(found)} {code} findings on {trace}, expected one")
    us = found[0]["saving"]["us_per_step"]
    if us is None:
        sys.exit(f"{who}: {code}'s saving is unknown on {trace}: {found[0]['saving']['basis']}")
    return float(us)


@dataclass
class Result:
    label: str
    estimates: list[float] = field(default_factory=list)
    truths: list[float] = field(default_factory=list)
    steps_a: list[float] = field(default_factory=list)
    steps_b: list[float] = field(default_factory=list)
    other: list[float] = field(default_factory=list)
    scope_truths: list[float] = field(default_factory=list)  # A's scope time minus B's, per round
    outside_a: list[float] = field(default_factory=list)  # host ops per step outside the scope
    outside_b: list[float] = field(default_factory=list)

    @property
    def estimate(self) -> float:
        return statistics.median(self.estimates)

    @property
    def truth(self) -> float:
        return statistics.median(self.truths)

    @property
    def within(self) -> bool:
        return within_bar(self.estimate, self.truth)

    def summary(self) -> str:
        ratio = f"{self.estimate / self.truth:.2f}" if self.truth else "—"
        load = (f"; other load {min(self.other):.2f}-{max(self.other):.2f} cores (median "
                f"{statistics.median(self.other):.2f})") if self.other else ""
        return (f"{self.label}, {len(self.truths)} rounds: estimate {self.estimate:,.0f} µs/step (median of "
                f"{min(self.estimates):,.0f}-{max(self.estimates):,.0f}), truth {self.truth:,.0f} µs/step (median of "
                f"{min(self.truths):,.0f}-{max(self.truths):,.0f}); step A {statistics.median(self.steps_a):,.0f}, "
                f"B {statistics.median(self.steps_b):,.0f} µs; estimate / truth {ratio}; "
                f"within 35 % or 0.5 ms: {'yes' if self.within else 'no'}{self._scope()}{load}")

    def _scope(self) -> str:
        if not self.scope_truths:
            return ""
        truth = statistics.median(self.scope_truths)
        ratio = f"{self.estimate / truth:.2f}" if truth else "—"
        ops = (f", host ops per step outside it A {min(self.outside_a):,.0f}-{max(self.outside_a):,.0f}, "
               f"B {min(self.outside_b):,.0f}-{max(self.outside_b):,.0f}")
        return (f"; truth from the fixed scope {truth:,.0f} µs/step (median of {min(self.scope_truths):,.0f}-"
                f"{max(self.scope_truths):,.0f}), estimate / that {ratio}, within: "
                f"{'yes' if within_bar(self.estimate, truth) else 'no'}{ops}")


def interleave(a: Path, b: Path, rounds: int, rec: Callable[[Path], Recording],
               estimate: Callable[[Path, Path], float], label: str, tag: str = "") -> Result:
    """``rounds`` rounds of A B B A: ``rec(ws)`` records one side, ``estimate(ws, trace)`` is the
    rule's saving on an A recording. Prints each recording and each round (prefixed ``tag``)."""
    res = Result(label)
    for r in range(1, rounds + 1):
        steps: dict[str, list[float]] = {"A": [], "B": []}
        scopes: dict[str, list[float]] = {"A": [], "B": []}
        est: list[float] = []
        for ws, side in ((a, "A"), (b, "B"), (b, "B"), (a, "A")):
            got = rec(ws)
            steps[side].append(got.step_us)
            if got.scope_us is not None:
                scopes[side].append(got.scope_us)
                (res.outside_a if side == "A" else res.outside_b).append(got.ops_outside or 0.0)
            if got.other_cores is not None:
                res.other.append(got.other_cores)
            if side == "A":
                est.append(estimate(ws, got.trace))
            load = f" (other load {got.other_cores:.2f} cores)" if got.other_cores is not None else ""
            scope = f", scope {got.scope_us:,.0f} µs" if got.scope_us is not None else ""
            print(f"{tag}round {r} {side}: step {got.step_us:,.0f} µs{scope}{load}", flush=True)
        res.estimates += est
        res.steps_a += steps["A"]
        res.steps_b += steps["B"]
        res.truths.append(statistics.fmean(steps["A"]) - statistics.fmean(steps["B"]))
        if scopes["A"]:
            res.scope_truths.append(statistics.fmean(scopes["A"]) - statistics.fmean(scopes["B"]))
        print(f"{tag}round {r}: saved {res.truths[-1]:,.0f} µs/step; estimates {est[0]:,.0f}, {est[1]:,.0f}",
              flush=True)
    return res
