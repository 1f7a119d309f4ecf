"""The time model: the task classifier, interval arithmetic and the step breakdown, on hand-made
tables whose figures are worked out in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from msprof_lsp.mapping.profile.model import (
    KERNEL_SCHEMA,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    StepBreakdown,
    make_table,
)
from msprof_lsp.mapping.profile.timemodel import (
    BreakdownSource,
    TaskClass,
    classify,
    collective_mask,
    compute_breakdown,
    device_time_per_step_ns,
    exclusive_ns,
    merge_intervals,
    profile_breakdown,
    task_classes,
    union_ns,
)

US = 1000


@pytest.mark.parametrize(
    ("name", "core", "op_type", "expected"),
    [
        # real task names / task types of the Ascend-msinsight exports (trace, kernel_details, DB)
        ("aclnnMm_MatMulCommon_MatMulV2", "AI_CORE", "MatMulV2", TaskClass.COMPUTE),
        ("trans_TransData_0", "AI_VECTOR_CORE", "TransData", TaskClass.COMPUTE),
        ("ReduceSum7", "MIX_AIV", "ReduceSum", TaskClass.COMPUTE),
        ("aclnnDropout_DSAGenBitMask", "DSA_SQE", "DSAGenBitMask", TaskClass.COMPUTE),
        ("hcom_allReduce__586_0_1", "HCCL", "hcom_allReduce_", TaskClass.COMMUNICATION),
        ("hcom_allReduce__428_0_1", "COMMUNICATION", "hcom_allReduce_", TaskClass.COMMUNICATION),
        ("SDMA", "", "", TaskClass.COMMUNICATION),
        ("allreduceAicpuKernel", "AI_CPU", "", TaskClass.COMMUNICATION),  # HCCL's AI CPU task, not a fallback
        ("Notify Wait", "", "", TaskClass.WAIT),
        ("Write Value", "", "", TaskClass.WAIT),
        ("EVENT_WAIT", "", "", TaskClass.WAIT),
        ("EVENT_RECORD", "EVENT_RECORD", "EVENT_RECORD", TaskClass.WAIT),  # msprof names runtime tasks so
        ("MEMCPY_ASYNC", "MEMCPY_ASYNC", "MEMCPY_ASYNC", TaskClass.MEMCPY),  # DB export's copies
        ("MEMCPY_ASYNC", "", "", TaskClass.MEMCPY),  # text export's trace
        ("PROFILING_ENABLE", "", "", TaskClass.OTHER),
        ("SOME_NEW_RUNTIME_TASK", "", "", TaskClass.OTHER),  # unknown runtime task: never compute
        # Kineto
        ("void at::native::vectorized_elementwise_kernel<4>", "GPU", "", TaskClass.COMPUTE),
        ("Memcpy HtoD (Pageable -> Device)", "MEMCPY", "", TaskClass.MEMCPY),
        ("Memset (Device)", "MEMSET", "", TaskClass.MEMCPY),
        ("ncclKernel_AllReduce_RING_LL_Sum_float", "GPU", "", TaskClass.COMMUNICATION),
    ],
)
def test_classify(name: str, core: str, op_type: str, expected: TaskClass) -> None:
    assert classify(name, core, op_type) is expected


def _kernels(rows: list[tuple]) -> "object":
    """(name, core, start µs, dur µs, step, stream) rows -> a kernel table."""
    cols = {c: [] for c in ("name", "core", "type", "start_ns", "dur_ns", "step", "stream", "device")}
    for name, core, start, dur, step, stream in rows:
        cols["name"].append(name)
        cols["core"].append(core)
        cols["type"].append("hcom_allReduce_" if name.startswith("hcom_") else "")
        cols["start_ns"].append(round(start * US))
        cols["dur_ns"].append(round(dur * US))
        cols["step"].append(step)
        cols["stream"].append(stream)
        cols["device"].append(0)
    return make_table(KERNEL_SCHEMA, cols, len(rows))


# One step, on a compute stream (2) and a communication stream (4):
#   compute    [0,10) [5,15) [30,40)           -> union 25
#   allreduce  [12,50)                         -> 38; overlapped with compute [12,15) + [30,40) = 13
#   SDMA       [20,25) inside the all-reduce   -> adds nothing to the union
#   Notify Wait [0,60) on stream 4             -> a wait: in no figure
#   MEMCPY     [-8,-2)                         -> before the stage: Preparing, not Computing
# Stage = first to last compute/communication task = [0,50) = 50
# Not overlapped = 38 - 13 = 25; Free = 50 - 25 - 25 = 0 ... made non-zero by a last kernel [70,72):
# stage [0,72) = 72, computing 27, free = 72 - 27 - 25 = 20.
ROWS = [
    ("aclnnAdd_AddAiCore_Add", "AI_VECTOR_CORE", 0, 10, 3, 2),
    ("aclnnMm_MatMulCommon_MatMulV2", "AI_CORE", 5, 10, 3, 2),
    ("aclnnMul_MulAiCore_Mul", "AI_VECTOR_CORE", 30, 10, 3, 2),
    ("aclnnRelu_ReluAiCore_Relu", "AI_VECTOR_CORE", 70, 2, 3, 2),
    ("hcom_allReduce__1_0_1", "HCCL", 12, 38, 3, 4),
    ("SDMA", "", 20, 5, 3, 4),
    ("Notify Wait", "", 0, 60, 3, 4),
    ("MEMCPY_ASYNC", "", -8, 6, 3, 2),
]


def test_compute_breakdown_hand_figures() -> None:
    k = _kernels(ROWS)
    host = [Step(3, -20 * US, 100 * US)]
    (s,) = compute_breakdown(k, host)
    assert (s.step, s.device) == (3, 0)
    assert s.computing_ns == 27 * US
    assert s.communication_ns == 38 * US
    assert s.overlapped_ns == 13 * US
    assert s.comm_not_overlapped_ns == 25 * US
    assert s.stage_ns == 72 * US
    assert s.free_ns == 20 * US
    assert s.computing_ns + s.comm_not_overlapped_ns + s.free_ns == s.stage_ns
    assert s.memcpy_ns == 6 * US
    assert s.host_wall_ns == 120 * US
    assert s.preparing_ns == 20 * US  # first compute/communication task (0) - ProfilerStep start (-20)


def test_tasks_without_step_ids_take_the_profiler_step_around_them() -> None:
    rows = [(n, c, st, d, -1, sm) for n, c, st, d, _, sm in ROWS] + [("aclnnAdd_AddAiCore_Add", "AI_CORE", 500, 4, -1, 2)]
    k = _kernels(rows)
    out = compute_breakdown(k, [Step(3, -20 * US, 100 * US), Step(4, 100 * US, 600 * US)])
    assert [s.step for s in out] == [3, 4]
    assert out[0].computing_ns == 27 * US and out[1].computing_ns == 4 * US and out[1].stage_ns == 4 * US


def test_no_steps_is_one_capture_step() -> None:
    rows = [(n, c, st, d, -1, sm) for n, c, st, d, _, sm in ROWS]
    (s,) = compute_breakdown(_kernels(rows), [])
    assert s.step == -1 and s.stage_ns == 72 * US and s.host_wall_ns == -1 and s.preparing_ns == -1


def test_device_time_is_work_only() -> None:
    k = _kernels(ROWS)
    p = Profile(meta=ProfileMeta(kind=ProfileKind.TORCH_NPU, path="/p"), kernels=k, steps=[Step(3, -20 * US, 100 * US)])
    # compute 10+10+10+2 and the copy 6; not the all-reduce, its SDMA task or the wait
    assert p.device_time_ns == 38 * US
    # per step, one stream runs one task at a time: the Add and the MatMul overlap 5 µs on stream 2
    # (as µs rounding makes neighbours overlap), counted once
    assert device_time_per_step_ns(p) == 33 * US
    classes = task_classes(k)
    assert [TaskClass(c) for c in classes] == [TaskClass.COMPUTE] * 4 + [
        TaskClass.COMMUNICATION, TaskClass.COMMUNICATION, TaskClass.WAIT, TaskClass.MEMCPY]
    assert collective_mask(k).tolist() == [False] * 4 + [True, False, False, False]


@pytest.mark.parametrize("categorical", [True, False])
def test_task_classes_is_classify_per_row(categorical: bool) -> None:
    """The integer-keyed grouping gives every row its own triple's class: rows repeat, interleave,
    share a name across cores and carry missing categories (code -1 -> "")."""
    import pandas as pd

    triples = [
        ("aclnnMm_MatMulCommon_MatMulV2", "AI_CORE", "MatMulV2"),
        ("hcom_allReduce__586_0_1", "HCCL", "hcom_allReduce_"),
        ("MEMCPY_ASYNC", "", ""),
        ("MEMCPY_ASYNC", "MEMCPY_ASYNC", "MEMCPY_ASYNC"),
        ("Notify Wait", "", ""),
        ("allreduceAicpuKernel", "AI_CPU", ""),
        ("PROFILING_ENABLE", "", ""),
    ]
    rng = np.random.default_rng(7)
    rows = [triples[i] for i in rng.integers(0, len(triples), 500)]
    frame = pd.DataFrame(rows, columns=["name", "core", "type"])
    if categorical:
        frame = frame.astype("category")
        frame.loc[::50, "core"] = None  # a missing category: code -1, classified as ""
    expected = [int(classify(n, "" if c is None or c != c else c, t)) for n, c, t in frame.itertuples(index=False)]
    assert task_classes(frame).tolist() == expected


def test_profile_breakdown_prefers_the_producers_figures() -> None:
    k = _kernels(ROWS)
    written = StepBreakdown(step=3, device=0, computing_ns=26 * US, comm_not_overlapped_ns=25 * US,
                            overlapped_ns=13 * US, comm_ns=38 * US, free_ns=21 * US, stage_ns=72 * US)
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU_DB, path="/p")
    p = Profile(meta=meta, kernels=k, steps=[Step(3, -20 * US, 100 * US)], step_breakdown=[written])
    b = profile_breakdown(p)
    assert b.source is BreakdownSource.ANALYSIS_DB
    assert b.steps[0].computing_ns == 26 * US and b.steps[0].stage_ns == 72 * US
    assert b.steps[0].memcpy_ns == 6 * US and b.steps[0].host_wall_ns == 120 * US  # what the producer does not write
    assert b.streams == 1  # the work ran on stream 2 only
    p.step_breakdown = []
    b = profile_breakdown(p)
    assert b.source is BreakdownSource.TASKS and b.steps[0].computing_ns == 27 * US
    assert b.mean("free_ns") == 20 * US and b.mean("preparing_ns") == 20 * US


def test_interval_helpers() -> None:
    s = np.array([0, 5, 20, 21], dtype=np.int64)
    e = np.array([10, 8, 30, 22], dtype=np.int64)
    ms, me = merge_intervals(s, e)
    assert ms.tolist() == [0, 20] and me.tolist() == [10, 30]
    assert union_ns(s, e) == 20
    b_s, b_e = np.array([2, 9, 25]), np.array([3, 22, 26])
    assert exclusive_ns(s, e, b_s, b_e) == 20 - (1 + 1 + 2 + 1)
    assert union_ns(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0


def test_device_work_behind_the_host_counts_in_its_launching_step() -> None:
    """A kernel launched at 90 µs in step 3 ([-20, 100)) but run at 120 µs belongs to step 3."""
    rows = [("aclnnAdd_AddAiCore_Add", "AI_CORE", 0, 10, -1, 2), ("aclnnMul_MulAiCore_Mul", "AI_CORE", 120, 5, -1, 2)]
    k = _kernels(rows)
    steps = [Step(3, -20 * US, 100 * US), Step(4, 100 * US, 300 * US)]
    by_own_start = compute_breakdown(k, steps)
    assert [s.step for s in by_own_start] == [3, 4]
    (s,) = compute_breakdown(k, steps, launch_ns=np.array([0, 90 * US]))
    assert s.step == 3 and s.computing_ns == 15 * US and s.stage_ns == 125 * US and s.free_ns == 110 * US


def test_kernel_step_span_is_the_stage_of_compute_and_communication() -> None:
    """Without step_trace_time or ProfilerStep ranges the step time is each Step Id's span of its
    compute and communication tasks -- the breakdown's Stage -- not of its waits or copies."""
    p = Profile(meta=ProfileMeta(kind=ProfileKind.TORCH_NPU, path="/p"), kernels=_kernels(ROWS))
    # ROWS: the Notify Wait [0, 60) and the copy [-8, -2) would stretch the span to [-8, 72) = 80 µs;
    # compute and communication alone span [0, 72)
    assert p.step_time() == (72 * US, "kernel step span")
    assert p.step_time_ns == profile_breakdown(p).mean("stage_ns")
    # a step of only waits and copies: no Stage, the whole capture of its tasks is the fallback
    waits = Profile(meta=ProfileMeta(kind=ProfileKind.TORCH_NPU, path="/p"),
                    kernels=_kernels([("Notify Wait", "", 0, 60, 3, 4), ("MEMCPY_ASYNC", "", -8, 6, 3, 2)]))
    assert waits.step_time() == (68 * US, "kernel step span")


def test_distinct_rows_groups_as_a_multiindex_factorize_does():
    """``distinct_rows`` groups by integer codes; the groups, their numbering and their keys are those
    of ``pd.factorize(pd.MultiIndex.from_arrays(...))`` over the text ("" for a missing category, one
    group with a "" category)."""
    import pandas as pd

    from msprof_lsp.mapping.profile.timemodel import distinct_rows

    rng = np.random.default_rng(7)
    n = 500
    values = rng.choice(["a", "b", "", "-"], n)
    codes_in = np.array([{"b": 0, "": 1, "a": 2, "-": -1}[v] for v in values])  # -1: missing
    cat = pd.Series(pd.Categorical.from_codes(codes_in, categories=["b", "", "a", "unused"]))
    assert cat.isna().any() and (cat == "").any()
    text = pd.Series(rng.choice(["x", "y", "zz"], n), dtype=object)
    flags = rng.random(n) < 0.3
    types = np.array(rng.choice(["MatMul", "Add"], n), dtype=object)
    groups, keys = distinct_rows([cat, text, flags, types])
    as_text = np.asarray(cat.astype(object).fillna(""), dtype=object)
    codes, uniques = pd.factorize(pd.MultiIndex.from_arrays([as_text, text.to_numpy(), flags, types]))
    assert np.array_equal(groups, codes) and keys == list(uniques)
    empty, none = distinct_rows([cat.iloc[:0], types[:0]])
    assert len(empty) == 0 and none == []


@pytest.mark.parametrize("many", [False, True])
def test_per_distinct_gives_each_row_its_own_answer(many):
    """``_per_distinct`` answers once per combination present (a dense table of the codes, or
    ``distinct_rows`` past its size): per row what ``fn`` gives on that row's text ("" missing)."""
    import pandas as pd

    from msprof_lsp.mapping.profile.timemodel import _per_distinct

    rng = np.random.default_rng(11)
    n = 3000
    names = [f"k{i}" for i in range(400 if many else 12)]  # many: 400 x 300 x 3 > rows, no dense table
    frame = pd.DataFrame({
        "name": pd.Categorical.from_codes(rng.integers(-1, len(names), n), categories=names),
        "core": pd.Series(rng.choice([f"c{i}" for i in range(300 if many else 3)], n), dtype=object),
        "type": pd.Categorical(rng.choice(["", "MatMul", "Add"], n)),
    })
    calls = []

    def fn(name, core, type_):
        calls.append((name, core, type_))
        return f"{name}/{core}/{type_}"

    got = _per_distinct(frame, ("name", "core", "type"), fn, object)
    text = frame.astype(object).fillna("")
    assert got.tolist() == [f"{a}/{b}/{c}" for a, b, c in zip(text["name"], text["core"], text["type"])]
    assert len(calls) == len(set(calls)) == len(set(zip(text["name"], text["core"], text["type"])))
