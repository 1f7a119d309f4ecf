"""load_profile: discovery + per-rank loads in a process pool + the cluster summary."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile import cluster
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.profile.timemodel import exclusive_ns as exclusive_time
from msprof_lsp.mapping.errors import NoProfileFound, ProfileError

sys.path.insert(0, str(Path(__file__).parent / "readers"))
from npu_db_builder import DbBuilder  # noqa: E402

US = 1_000
MS = 1_000_000
T0 = 1_736_000_000_000_000_000
PID, TID = 900, 901
# Per rank: step duration, and where the all-reduce and the overlapping compute kernel sit.
STEP_MS = {0: 10, 1: 12, 2: 15, 3: 11}
COMM = (5 * MS, 7 * MS)  # offsets in the step
COMPUTE = [(1 * MS, 2 * MS), (6 * MS, 6 * MS + 500 * US)]  # the second hides 0.5 ms of the comm


def write_rank(root: Path, rank: int, steps: int = 2) -> Path:
    """One rank's DB export: STEP_TIME steps, compute kernels, one all-reduce per step."""
    b = DbBuilder()
    conn = 100
    for s in range(steps):
        s0 = T0 + s * STEP_MS[rank] * MS
        b.rows["STEP_TIME"].append((s + 1, s0, s0 + STEP_MS[rank] * MS))
        b.api(f"ProfilerStep#{s + 1}", s0, s0 + STEP_MS[rank] * MS, pid=PID, tid=TID)
        for a, e in COMPUTE:
            conn += 1
            b.api("aclnnMm", s0 + a - 50 * US, s0 + a - 10 * US, pid=PID, tid=TID, connections=[conn])
            g = b.task(s0 + a, s0 + e, connection=conn, task_type="KERNEL_AICORE")
            b.compute_info(g, name="aclnnMm_MatMulCommon_MatMulV2", op_type="MatMulV2", core="AI_CORE")
        conn += 1
        b.rows["COMMUNICATION_OP"].append((b.s("hcom_allReduce__1_0_1", cann=True), s0 + COMM[0], s0 + COMM[1],
                                           conn, b.s("g", cann=True), s, 0, 0, 0, 0, 1, b.s("hcom_allReduce_", cann=True)))
    out = root / f"host_{rank}_2025010100000000{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    return b.write(out / f"ascend_pytorch_profiler_{rank}.db")


@pytest.fixture
def four_ranks(tmp_path: Path) -> Path:
    for r in STEP_MS:
        write_rank(tmp_path / "prof", r)
    return tmp_path / "prof"


def test_slowest_rank_is_analysed_and_summary_figures(four_ranks: Path, tmp_path: Path) -> None:
    messages: list[str] = []
    res = load_profile([four_ranks], use_cache=False, progress=lambda m, f: messages.append(m))
    s = res.cluster
    assert s is not None
    slowest = max(STEP_MS, key=STEP_MS.get)
    assert s.slowest_rank == slowest and s.analysed_rank == slowest
    assert res.location.rank == slowest and res.profile.meta.rank == slowest
    assert [r.rank for r in s.ranks] == sorted(STEP_MS)
    assert [r.step_time_ns for r in s.ranks] == [float(STEP_MS[r] * MS) for r in sorted(STEP_MS)]
    # Not overlapped = comm span minus the part the compute kernel covers, per step.
    hidden = max(0, min(COMM[1], COMPUTE[1][1]) - max(COMM[0], COMPUTE[1][0]))
    per_step = (COMM[1] - COMM[0]) - hidden
    assert [r.comm_not_overlapped_ns for r in s.ranks] == [float(per_step)] * 4
    assert [r.comm_share for r in s.ranks] == [per_step / (STEP_MS[r] * MS) for r in sorted(STEP_MS)]
    times = list(STEP_MS.values())
    assert s.slowest_over_fastest == max(times) / min(times)
    assert s.slowest_over_median == max(times) / statistics.median(times)
    assert len(res.locations) == 4
    assert any("4 ranks" in m for m in messages)
    assert sum("Rank" in m and "loaded" in m for m in messages) == 4


def test_requested_rank_is_honoured(four_ranks: Path) -> None:
    want = 1  # not the slowest
    assert max(STEP_MS, key=STEP_MS.get) != want
    res = load_profile([four_ranks], rank=want, use_cache=False)
    assert res.profile.meta.rank == want and res.cluster is not None
    assert res.cluster.analysed_rank == want and res.cluster.slowest_rank == max(STEP_MS, key=STEP_MS.get)


def test_unknown_rank_lists_the_available_ones(four_ranks: Path) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile([four_ranks], rank=7, use_cache=False)
    assert "rank 7 not found" in str(err.value)
    assert "available ranks: 0, 1, 2, 3" in str(err.value)


def test_loads_run_in_worker_processes(four_ranks: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The parent's load_location is broken: only worker processes (fresh interpreters from the
    # forkserver) can have produced the profiles.
    def boom(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("loaded in the parent process")

    monkeypatch.setattr(cluster, "load_location", boom)
    res = load_profile([four_ranks], use_cache=False)
    assert res.cluster is not None and len(res.cluster.ranks) == 4


def test_a_broken_rank_is_left_out_with_an_issue(four_ranks: Path) -> None:
    broken = next(four_ranks.glob("host_3_*/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_3.db"))
    broken.write_bytes(b"not a database")
    res = load_profile([four_ranks], use_cache=False)
    assert res.cluster is not None and [r.rank for r in res.cluster.ranks] == [0, 1, 2]
    assert any("rank 3" in i.message and "not a SQLite database" in i.message for i in res.profile.issues)
    with pytest.raises(ProfileError) as err:
        load_profile([four_ranks], rank=3, use_cache=False)
    assert str(broken) in str(err.value)


def test_single_rank_has_no_cluster(tmp_path: Path) -> None:
    db = write_rank(tmp_path, 1)
    res = load_profile([tmp_path], use_cache=False)
    assert res.cluster is None and res.location.path == db
    assert res.profile.step_time() == (float(STEP_MS[1] * MS), "ProfilerStep")
    assert load_profile([db], rank=1, use_cache=False).location.path == db


def test_nothing_found_names_the_path_and_what_was_looked_for(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("x = 1\n")
    with pytest.raises(NoProfileFound) as err:
        load_profile([tmp_path])
    assert str(tmp_path) in str(err.value) and "_ascend_pt" in str(err.value)
    with pytest.raises(NoProfileFound) as err:
        load_profile([tmp_path / "nope"])
    assert "no such file" in str(err.value)


def test_exclusive_time_sweep() -> None:
    import numpy as np

    a = (np.array([0, 5, 20]), np.array([10, 8, 30]))  # union [0,10] + [20,30] = 20
    b = (np.array([2, 9, 25]), np.array([3, 22, 26]))  # covers 1 + (1 in [9,10]) + 2 + 1
    assert exclusive_time(*a, *b) == 20 - (1 + 1 + 2 + 1)
    assert exclusive_time(*a, np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 20
