"""Step inference (mapping/profile/step_infer.py): iterations found from the launch sequence of a profile
without step markers.

The tables here are built launch by launch from a described iteration, so where each iteration
starts and ends is known independently of the algorithm; the msprof CLI case is the synthetic
writer's PROF_* of an eager job, checked against tests.synth.truth.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.synth import truth, write_msprof_cli
from tests.synth.examples import small_run

from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.model import KERNEL_SCHEMA, ProfileKind, ProfileMeta, StepsSource, make_table
from msprof_lsp.mapping.profile.step_infer import NO_REPETITION, describe, infer_steps, steps_from_launches
from msprof_lsp.mapping.profile.timemodel import TaskClass, is_class

# One training iteration as launched: (name, input shapes, duration µs). The names carry the
# per-run counters real acl_op names have ({n}); the last op closes the iteration.
ITERATION = (
    ("MEMCPY_ASYNC", "", 30), ("trans_TransData_{n}", "64,3,32,32", 12), ("Conv2D{n}", "64,3,32,32;32,3,3,3", 60),
    ("aclnnBatchNorm_BNTrainingReduce_BNTrainingReduce", "64,32,32,32", 8), ("aclnnRelu_ReluAiCore_Relu", "64,32,32,32", 9),
    ("aclnnMaxPool_MaxPool_MaxPool", "64,32,32,32", 7), ("aclnnAddmm_MatMulCommon_MatMulV2", "64,4096;4096,512", 55),
    ("aclnnRelu_ReluAiCore_Relu", "64,512", 3), ("aclnnAddmm_MatMulCommon_MatMulV2", "64,512;512,1000", 40),
    ("aclnnCrossEntropyLoss_CrossEntropy_CrossEntropy", "64,1000", 6),
    ("aclnnAddmm_MatMulCommon_MatMulV2", "64,1000;1000,512", 80), ("aclnnReluGrad_ReluGrad_ReluGrad", "64,512", 4),
    ("hcom_allReduce__{n}_0_1", "2250000", 900),
    *((f"aclnnMul_MulAiCore_Mul", f"{s}", 2) for s in ("512,4096", "512", "1000,512", "1000")),
    *((f"aclnnAdd_AddAiCore_Add", f"{s}", 2) for s in ("512,4096", "512", "1000,512", "1000")),
)
IDLE_US = 400  # host time between iterations (data loading, logging): the device waits


def launches(n_iter: int, *, first_extra: tuple = (), swap_every: int = 0, jitter_us: float = 0.0,
             seed: int = 7) -> tuple[dict[str, list], list[tuple[int, int]]]:
    """Kernel columns of ``n_iter`` iterations laid end to end on one device, and each iteration's
    (first, last) row. ``first_extra`` launches go in the middle of the first iteration (warm-up);
    ``swap_every``: every that many launches two neighbours change order (streams racing);
    ``jitter_us``: uniform noise on every duration and gap."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {"name": [], "input_shapes": [], "start_ns": [], "dur_ns": [], "type": []}
    spans = []
    t = 1_000_000_000
    counter = 0
    for it in range(n_iter):
        ops = list(ITERATION)
        if it == 0 and first_extra:
            ops[6:6] = first_extra
        if swap_every:
            for i in range(1 + it % 3, len(ops) - 1, swap_every):
                ops[i], ops[i + 1] = ops[i + 1], ops[i]
        first = len(cols["name"])
        for name, shapes, dur in ops:
            counter += 1
            d = int((dur + (rng.uniform(-jitter_us, jitter_us) if jitter_us else 0)) * 1000)
            cols["name"].append(name.replace("{n}", str(counter)))
            cols["input_shapes"].append(shapes)
            cols["type"].append(name.split("_")[-1] if "hcom" not in name else "hcom_allReduce_")
            cols["start_ns"].append(t)
            cols["dur_ns"].append(max(d, 1000))
            t += max(d, 1000) + 1500 + (int(rng.uniform(0, jitter_us) * 1000) if jitter_us else 0)
        spans.append((first, len(cols["name"]) - 1))
        t += IDLE_US * 1000
    return cols, spans


def table(cols: dict[str, list]):
    return make_table(KERNEL_SCHEMA, cols, len(cols["name"]))


def assert_iterations(found, cols, spans) -> None:
    """Each inferred step holds exactly the launches of one iteration, and ends as it does."""
    start = np.array(cols["start_ns"])
    end = start + np.array(cols["dur_ns"])
    assert [s.id for s in found.steps] == list(range(1, len(spans) + 1))
    for step, (a, b) in zip(found.steps, spans):
        inside = np.flatnonzero((start >= step.start_ns) & (start < step.end_ns))
        assert (inside.min(), inside.max()) == (a, b)
        assert step.end_ns == end[a: b + 1].max()
    assert found.steps[0].start_ns == start[0]
    for prev, nxt in zip(found.steps, found.steps[1:]):
        assert prev.end_ns == nxt.start_ns  # contiguous windows: the idle between belongs to the next


def test_clean_periods() -> None:
    cols, spans = launches(5)
    found = infer_steps(table(cols))
    assert found is not None
    assert (found.period, found.repetitions, found.first_extra, found.trailing) == (len(ITERATION), 5, 0, 0)
    assert_iterations(found, cols, spans)
    assert found.note() == (f"no step markers: 5 steps inferred from a period of {len(ITERATION)} launches, "
                            f"5 repetitions (each cut at the period's longest device idle, counted from "
                            f"{found.anchor})")


def test_noisy_first_step() -> None:
    warmup = tuple((f"trans_TransData_{{n}}", "512,4096", 20) for _ in range(5)) + (
        ("aclnnCast_CastAiCore_Cast", "512,4096", 9), ("aclnnInplaceCopy_ViewCopy_ViewCopy", "512,4096", 6))
    cols, spans = launches(5, first_extra=warmup)
    found = infer_steps(table(cols))
    assert found is not None
    assert (found.period, found.repetitions, found.first_extra) == (len(ITERATION), 5, len(warmup))
    assert_iterations(found, cols, spans)
    assert f"the first has {len(warmup)} extra launches (warm-up)" in found.note()


def test_jitter_in_durations_and_launch_order() -> None:
    cols, spans = launches(6, swap_every=7, jitter_us=1.0)
    found = infer_steps(table(cols))
    assert found is not None
    assert (found.period, found.repetitions) == (len(ITERATION), 6)
    assert_iterations(found, cols, spans)


def test_a_capture_ending_inside_an_iteration() -> None:
    cols, spans = launches(5)
    cut = spans[-1][0] + 6  # the last iteration only half captured
    partial = {k: v[:cut] for k, v in cols.items()}
    found = infer_steps(table(partial))
    assert found is not None and found.repetitions == 4
    assert_iterations(found, partial, spans[:4])
    assert found.trailing == 6 and "6 launches after the last one are in no step" in found.note()


def test_two_devices_in_one_capture_read_as_one() -> None:
    """Two devices' launches interleave in time; the iterations are the first device's."""
    a, spans = launches(5)
    b, _ = launches(5, seed=11)
    cols = {k: a[k] + b[k] for k in a}
    cols["start_ns"] = a["start_ns"] + [t + 700 for t in b["start_ns"]]
    cols["device"] = [0] * len(a["name"]) + [1] * len(b["name"])
    found = infer_steps(table(cols))
    assert found is not None and (found.period, found.repetitions) == (len(ITERATION), 5)
    assert_iterations(found, a, spans)


def test_no_repetition() -> None:
    rng = np.random.default_rng(3)
    n = 200
    names = [f"aclnnOp{int(x)}_Impl_Op" for x in rng.integers(0, 60, n)]
    # letters only: the digits fold away, so tokens differ by their shapes
    shapes = [",".join(str(int(d)) for d in rng.integers(1, 9, 3)) for _ in range(n)]
    start = np.cumsum(rng.integers(2000, 90000, n)) + 10**9
    cols = {"name": names, "input_shapes": shapes, "start_ns": start.tolist(), "dur_ns": [1000] * n}
    assert infer_steps(table(cols)) is None
    meta, issues = ProfileMeta(kind=ProfileKind.MSPROF, path="/x"), []
    assert steps_from_launches(table(cols), meta, issues) == [] and issues == []
    assert meta.steps_source is StepsSource.MARKERS  # untouched: the reader falls back to the span


def test_one_op_repeated_is_not_an_iteration() -> None:
    n = 100
    cols = {"name": ["aclnnMul_MulAiCore_Mul"] * n, "input_shapes": ["8,8"] * n,
            "start_ns": [10**9 + 5000 * i for i in range(n)], "dur_ns": [1000] * n}
    assert infer_steps(table(cols)) is None


def test_reader_helper_sets_steps_source_notice_and_kernel_steps() -> None:
    cols, spans = launches(4)
    kernels = table(cols)
    meta, issues = ProfileMeta(kind=ProfileKind.MSPROF, path="/prof"), []
    steps = steps_from_launches(kernels, meta, issues, start_ns=cols["start_ns"][0] - 5000)
    assert len(steps) == 4 and steps[0].start_ns == cols["start_ns"][0] - 5000
    assert meta.steps_source is StepsSource.INFERRED
    assert describe(meta, True) == f"inferred from a period of {len(ITERATION)} launches, 4 repetitions"
    assert [str(i) for i in issues] == [str(Issue("/prof", issues[0].message))]
    for j, (a, b) in enumerate(spans, 1):
        assert set(kernels["step"].to_numpy()[a: b + 1]) == {j}


# -- the msprof CLI form of an eager job: no step_trace, so no markers at all ----------------------------


@pytest.fixture(scope="module")
def eager_prof(tmp_path_factory):
    run = small_run(steps=5, world_size=2)
    root = write_msprof_cli(run, tmp_path_factory.mktemp("prof"), step_trace=False)
    return run, root, load_location(locate(root), use_cache=False)


def test_msprof_cli_eager_job_counts_its_five_steps(eager_prof) -> None:
    run, root, p = eager_prof
    assert not list(root.rglob("step_trace_*.csv"))
    t = truth(run)
    assert p.num_steps == len(t.steps) == 5  # one, the capture, before step inference
    assert p.meta.steps_source is StepsSource.INFERRED
    assert [i.message for i in p.issues if "steps inferred" in i.message] == [
        f"no step markers: 5 steps inferred from a period of {p.meta.extra['steps_inferred']['period']} launches, "
        f"5 repetitions (each cut at the period's longest device idle, counted from "
        f"{p.meta.extra['steps_inferred']['anchor']})"]
    # each step holds its iteration's device tasks: the same first and last task as the truth's
    k = p.kernels
    staged = k[is_class(k, TaskClass.COMPUTE, TaskClass.COMMUNICATION)]
    for st in t.steps:
        mine = staged[staged["step"] == st.number]
        assert int(mine["start_ns"].min()) == st.first_task_ns
        assert int((mine["start_ns"] + mine["dur_ns"]).max()) == st.last_task_ns


def test_msprof_cli_eager_job_per_step_figures(eager_prof) -> None:
    run, _, p = eager_prof
    t = truth(run)
    step_ns, source = p.step_time()
    # the steps' device figures (Overlap Analysis per inferred window), as step_trace_time has them
    assert source == "Overlap Analysis"
    assert step_ns == pytest.approx(sum(s.step_time_ns for s in t.steps) / 5, abs=1.0)
    got = sorted((b.step, b.comm_not_overlapped_ns) for b in p.step_breakdown)
    assert got == [(s.number, s.comm_not_overlapped_ns) for s in t.steps]


def test_msprof_cli_with_iteration_table_keeps_its_markers(tmp_path: Path) -> None:
    p = load_location(locate(write_msprof_cli(small_run(steps=3), tmp_path)), use_cache=False)
    assert p.meta.steps_source is StepsSource.MARKERS and p.num_steps == 3
    assert not [i for i in p.issues if "inferred" in i.message]


def test_kineto_trace_without_markers_gets_its_iterations(tmp_path: Path) -> None:
    """A stock-PyTorch trace captured without a schedule (no prof.step(): no ProfilerStep#N)."""
    import json

    from tests.synth.write_kineto import write_kineto

    run = small_run(steps=4, world_size=1)
    (tmp_path / "marked").mkdir()
    path = write_kineto(run, tmp_path / "marked" / "job.pt.trace.json")
    marked = load_location(locate(path), use_cache=False)
    trace = json.loads(path.read_text(encoding="utf-8"))
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e not in steps]
    bare = tmp_path / "bare" / "job.pt.trace.json"
    bare.parent.mkdir()
    bare.write_text(json.dumps(trace), encoding="utf-8")
    p = load_location(locate(bare), use_cache=False)
    assert len(steps) == 4 and marked.meta.steps_source is StepsSource.MARKERS
    assert p.meta.steps_source is StepsSource.INFERRED and p.num_steps == 4
    # every kernel lands in the same iteration as under the markers (kernels in steps 1..4 alike)
    assert p.kernels["step"].tolist() == [s - min(marked.kernels["step"]) + 1 for s in marked.kernels["step"]]
    assert p.step_time()[1] == "kernel step span"


def test_msprof_cli_eager_job_of_one_iteration_says_nothing_repeats(tmp_path: Path) -> None:
    p = load_location(locate(write_msprof_cli(small_run(steps=1), tmp_path, step_trace=False)), use_cache=False)
    assert p.steps == [] and p.num_steps == 1
    assert describe(p.meta, False) == "capture span"
    assert [i.message for i in p.issues if "step markers" in i.message] == [NO_REPETITION]
