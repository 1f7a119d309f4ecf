"""Issue 25 defect 8 on the real torch_npu DB export (Ascend-msinsight db/level1 rank 0): its
OVERLAP_ANALYSIS table is read as the producer's breakdown. With analysis.db beside the DB the
breakdown is StepTraceTime's; without it (a copy in tmp without analysis.db) it is the table's,
whose four types' sums are computed here with sqlite3."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import shared_fixture
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.profile.timemodel import BreakdownSource, profile_breakdown

RANK0 = "Ascend-msinsight/db/level1/rank0_ascend_pt"


def _sums(db: Path) -> dict[int, int]:
    with sqlite3.connect(db) as con:
        return dict(con.execute("SELECT type, SUM(endNs - startNs) FROM OVERLAP_ANALYSIS GROUP BY type").fetchall())


def test_real_db_without_analysis_db_takes_overlap_analysis(tmp_path: Path) -> None:
    src = shared_fixture(RANK0)
    copy = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, copy)
    (copy / "ASCEND_PROFILER_OUTPUT" / "analysis.db").unlink()
    sums = _sums(copy / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")
    with_analysis = profile_breakdown(load_profile([src], use_cache=False).profile)
    p = load_profile([copy], use_cache=False).profile
    b = profile_breakdown(p)
    assert b.source is BreakdownSource.OVERLAP_ANALYSIS and len(b.steps) == 1
    (s,) = b.steps
    assert (s.computing_ns, s.communication_ns, s.comm_not_overlapped_ns, s.free_ns) == (sums[0], sums[1], sums[2], sums[3])
    (w,) = with_analysis.steps  # and the same figures as analysis.db's StepTraceTime, Preparing included
    assert with_analysis.source is BreakdownSource.ANALYSIS_DB
    assert s.free_ns == pytest.approx(w.free_ns, abs=1) and s.preparing_ns == pytest.approx(w.preparing_ns, abs=1)
