"""The time model against the real Ascend-msinsight exports (a 2-rank DDP AlexNet job, Level1) and
the msprof-analyze advisor trace.

Each test computes its reference figures with a few lines of its own (csv / json / sqlite3 on the
files, not the product's readers), states them, and compares the product's figures with them: the
producer's own breakdown, interval unions of the tasks by class, task counts, step spans.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.discover import discover
from msprof_lsp.mapping.profile.load import load_location
from msprof_lsp.mapping.profile.timemodel import (
    BreakdownSource,
    TaskClass,
    compute_breakdown,
    device_time_per_step_ns,
    profile_breakdown,
    task_classes,
)
from tests.conftest import shared_fixture

TEXT = "Ascend-msinsight/text/level1/rank{}_ascend_pt"
DB = "Ascend-msinsight/db/level1/rank{}_ascend_pt"
ADVISOR_TRACE = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"

# step_trace_time.csv of each text rank (µs): Computing, Communication(Not Overlapped), Overlapped,
# Communication, Free, Stage, Preparing
TEXT_STEP_TRACE = {
    0: (8873.756, 101963.203, 4028.675, 105991.878, 25744.050, 136581.0, 17902.5),
    1: (8878.295, 96359.047, 4016.239, 100375.286, 26675.274, 131912.5, 20433.25),
}
# analysis.db StepTraceTime of each DB rank (µs), same columns
DB_STEP_TRACE = {
    0: (8903.431, 98071.947, 4036.153, 102108.1, 25258.144, 132233.522, 18055.693),
    1: (8915.634, 94556.05, 4034.14, 98590.19, 25840.499, 129312.183, 17512.827),
}


def _load(relative: str):
    path = shared_fixture(relative)
    (loc,) = discover([path])
    return load_location(loc)


def _union_us(intervals: list[tuple[Decimal, Decimal]]) -> Decimal:
    total, reach = Decimal(0), None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


def _intersection_us(a: list[tuple[Decimal, Decimal]], b: list[tuple[Decimal, Decimal]]) -> Decimal:
    return _union_us(a) + _union_us(b) - _union_us(a + b)


def _us(ns: float) -> float:
    return ns / 1000


# -- the files themselves, read by the test ------------------------------------------------------


def _kernel_details(rank: int) -> list[dict[str, str]]:
    path = shared_fixture(TEXT.format(rank)) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _interval(row: dict[str, str]) -> tuple[Decimal, Decimal]:
    start = Decimal(row["Start Time(us)"].strip())
    return start, start + Decimal(row["Duration(us)"])


def _hardware_tasks(rank: int) -> list[dict]:
    path = shared_fixture(TEXT.format(rank)) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(path.read_text(encoding="utf-8"))
    hw = {e["pid"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"
          and e["args"]["name"] == "Ascend Hardware"}
    return [e for e in events if e.get("ph") == "X" and e["pid"] in hw]


@pytest.mark.parametrize("rank", [0, 1])
def test_text_export_tasks_reproduce_step_trace_time(rank: int) -> None:
    """Independent: compute = kernel_details rows off the HCCL core, communication = the HCCL rows;
    their unions and overlap give the figures torch_npu wrote in step_trace_time.csv."""
    rows = _kernel_details(rank)
    compute = [_interval(r) for r in rows if r["Accelerator Core"] not in ("HCCL", "COMMUNICATION")]
    comm = [_interval(r) for r in rows if r["Accelerator Core"] in ("HCCL", "COMMUNICATION")]
    assert (len(compute), len(comm)) == (187, 4)
    computing, communication = _union_us(compute), _union_us(comm)
    overlapped = _intersection_us(compute, comm)
    everything = compute + comm
    stage = max(e for _, e in everything) - min(s for s, _ in everything)
    want = TEXT_STEP_TRACE[rank]
    assert float(computing) == pytest.approx(want[0], abs=0.05)
    assert float(communication - overlapped) == pytest.approx(want[1], abs=0.05)
    assert float(overlapped) == pytest.approx(want[2], abs=0.05)
    assert float(stage) == pytest.approx(want[5], abs=0.2)  # Stage is written rounded (136581.0, 131912.5)
    assert float(stage - computing - (communication - overlapped)) == pytest.approx(want[4], abs=0.05)


FIELDS = ("computing_ns", "comm_not_overlapped_ns", "overlapped_ns", "communication_ns", "free_ns", "stage_ns",
          "preparing_ns")  # the order of TEXT_STEP_TRACE / DB_STEP_TRACE


def _figures_us(s) -> list[float]:  # noqa: ANN001 - a StepTimes
    return [_us(getattr(s, f)) for f in FIELDS]


@pytest.mark.parametrize(("export", "kind", "written", "rel"), [
    (TEXT, BreakdownSource.STEP_TRACE_TIME, TEXT_STEP_TRACE, 0.01),
    (DB, BreakdownSource.ANALYSIS_DB, DB_STEP_TRACE, 1e-7),
])
@pytest.mark.parametrize("rank", [0, 1])
def test_breakdown_equals_the_producers(rank: int, export: str, kind: BreakdownSource, written: dict,
                                        rel: float) -> None:
    """The product reports the producer's figures, and computes the same ones from its own
    classified tasks (the text export within 1 %; the DB export to the ns)."""
    p = _load(export.format(rank))
    b = profile_breakdown(p)
    assert b.source is kind
    (s,) = b.steps
    assert _figures_us(s) == pytest.approx(list(written[rank]), rel=rel)
    (c,) = compute_breakdown(p.kernels, p.steps)
    assert _figures_us(c) == pytest.approx(list(written[rank]), rel=rel)
    assert c.host_wall_ns == p.steps[0].dur_ns


@pytest.mark.parametrize("rank", [0, 1])
def test_text_export_task_classes_and_device_time(rank: int) -> None:
    """Independent: the Ascend Hardware tasks of trace_view.json by their Task Type."""
    tasks = _hardware_tasks(rank)
    by_type = Counter(e["args"]["Task Type"] for e in tasks)
    assert len(tasks) == 535
    compute_types = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE")
    n_compute = sum(by_type[t] for t in compute_types)
    n_copy = by_type["PCIE_DMA_SQE"] + by_type["SDMA_SQE"]  # MEMCPY_ASYNC on the compute stream
    n_sdma = by_type["SDMA"]  # HCCL's transfer tasks on the communication stream
    n_wait = sum(by_type[t] for t in ("EVENT_WAIT_SQE", "EVENT_RECORD_SQE", "Notify Wait", "Write Value"))
    placeholders = [e["name"] for e in tasks if e["args"]["Task Type"] == "PLACE_HOLDER_SQE"]
    assert (n_compute, n_copy, n_sdma, n_wait) == (187, 24, 72, 248)
    assert sorted(placeholders) == ["EVENT_RECORD", "EVENT_RECORD", "PROFILING_DISABLE", "PROFILING_ENABLE"]
    copy_us = sum(Decimal(str(e["dur"])) for e in tasks if e["args"]["Task Type"] in ("PCIE_DMA_SQE", "SDMA_SQE"))
    compute_us = sum(Decimal(r["Duration(us)"]) for r in _kernel_details(rank)
                     if r["Accelerator Core"] not in ("HCCL", "COMMUNICATION"))

    p = _load(TEXT.format(rank))
    classes = Counter(TaskClass(c) for c in task_classes(p.kernels))
    assert classes[TaskClass.COMPUTE] == n_compute
    assert classes[TaskClass.MEMCPY] == n_copy
    assert classes[TaskClass.COMMUNICATION] == n_sdma + 4  # + the four hcom_allReduce rows of kernel_details
    assert classes[TaskClass.WAIT] == n_wait + 2  # + the two placeholders named EVENT_RECORD
    assert classes[TaskClass.OTHER] == 2
    # device time = compute kernels + copies of the one step, never the 200 ms of waits
    assert _us(device_time_per_step_ns(p)) == pytest.approx(float(compute_us + copy_us), abs=0.1)
    assert _us(device_time_per_step_ns(p)) < TEXT_STEP_TRACE[rank][5]


def _db(rank: int, name: str) -> sqlite3.Connection:
    path = shared_fixture(DB.format(rank)) / "ASCEND_PROFILER_OUTPUT" / name
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


@pytest.mark.parametrize("rank", [0, 1])
def test_db_export_tables_reproduce_analysis_db(rank: int) -> None:
    """Independent: TASK rows with COMPUTE_TASK_INFO are compute, COMMUNICATION_OP rows are
    communication; their unions give analysis.db StepTraceTime to the ns."""
    with _db(rank, f"ascend_pytorch_profiler_{rank}.db") as db:
        compute = db.execute("SELECT t.startNs, t.endNs FROM TASK t JOIN COMPUTE_TASK_INFO c "
                             "ON c.globalTaskId = t.globalTaskId").fetchall()
        comm = db.execute("SELECT startNs, endNs FROM COMMUNICATION_OP").fetchall()
        (step_start, step_end), = db.execute("SELECT startNs, endNs FROM STEP_TIME").fetchall()
    with _db(rank, "analysis.db") as a:
        (row,) = a.execute("SELECT computing, communication_not_overlapped, overlapped, communication, free, "
                           "stage, preparing FROM StepTraceTime").fetchall()
    assert tuple(row) == DB_STEP_TRACE[rank]
    c = [(Decimal(s), Decimal(e)) for s, e in compute]
    m = [(Decimal(s), Decimal(e)) for s, e in comm]
    assert (len(c), len(m)) == (187, 4)
    computing, communication, overlapped = _union_us(c), _union_us(m), _intersection_us(c, m)
    first = min(s for s, _ in c + m)
    stage = max(e for _, e in c + m) - first
    got_us = [float(v) / 1000 for v in (computing, communication - overlapped, overlapped, communication,
                                       stage - computing - (communication - overlapped), stage,
                                       first - Decimal(step_start))]
    assert got_us == pytest.approx(list(DB_STEP_TRACE[rank]), abs=0.001)
    assert step_end > step_start


def test_text_and_db_exports_of_one_job_agree() -> None:
    """Separate captures of the same job: their step figures differ a little, not 3x."""
    for rank in (0, 1):
        text = profile_breakdown(_load(TEXT.format(rank))).steps[0]
        db = profile_breakdown(_load(DB.format(rank))).steps[0]
        assert db.computing_ns == pytest.approx(text.computing_ns, rel=0.01)
        assert db.stage_ns == pytest.approx(text.stage_ns, rel=0.05)
        dt_text = device_time_per_step_ns(_load(TEXT.format(rank)))
        dt_db = device_time_per_step_ns(_load(DB.format(rank)))
        assert dt_db == pytest.approx(dt_text, rel=0.05)


def test_advisor_trace_overlap_lanes() -> None:
    """msprof-analyze's advisor trace (Overlap Analysis lanes, no step_trace_time.csv): Computing
    1,788.3 µs and Free 9,481.7 µs of ProfilerStep#1 (14,092 µs)."""
    path = shared_fixture(ADVISOR_TRACE)
    events = json.loads(Path(path).read_text(encoding="utf-8"))
    ov = {e["pid"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"
          and e["args"]["name"] == "Overlap Analysis"}
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M"
             and e["name"] == "thread_name" and e["pid"] in ov}
    sums: Counter = Counter()
    for e in events:
        if e.get("ph") == "X" and e["pid"] in ov:
            sums[lanes[(e["pid"], e["tid"])]] += Decimal(str(e["dur"]))
    (step,) = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    assert float(sums["Computing"]) == pytest.approx(1788.3, abs=0.05)
    assert float(sums["Free"]) == pytest.approx(9481.7, abs=0.05)

    p = _load(ADVISOR_TRACE)
    b = profile_breakdown(p)
    assert b.source is BreakdownSource.OVERLAP_ANALYSIS
    (s,) = b.steps
    assert _us(s.computing_ns) == pytest.approx(float(sums["Computing"]), rel=1e-4)  # ns rounding per slice
    assert _us(s.free_ns) == pytest.approx(float(sums["Free"]), rel=1e-4)
    assert _us(s.host_wall_ns) == pytest.approx(float(step["dur"]), abs=0.01)
    assert s.stage_ns == s.computing_ns + s.comm_not_overlapped_ns + s.free_ns
    (c,) = compute_breakdown(p.kernels, p.steps)  # computed from the tasks: the same Computing
    assert _us(c.computing_ns) == pytest.approx(float(sums["Computing"]), rel=0.001)
