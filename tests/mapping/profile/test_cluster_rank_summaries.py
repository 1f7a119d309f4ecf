"""A job's cluster view from each rank's summary files (mapping/profile/cluster.read_summaries):
the same figures as whole loads on real jobs, cached per rank, and a 1,024-rank job whose planted
slow rank and slow link are named.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile import cache
from msprof_lsp.mapping.profile.cluster import load_profile, rank_summary_of, read_summaries
from msprof_lsp.mapping.profile.jobs import discover_jobs
from msprof_lsp.mapping.profile.load import load_location

from tests.synth.rank_job import JobPlan, build_job

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared" / "fixtures"
SAMPLE = REPO / "samples" / "cnn_classifier" / "npu_profile"
JOBS = [
    pytest.param(SAMPLE, id="sample-2-ranks"),
    pytest.param(SHARED / "Ascend-msinsight" / "text" / "level1", id="msinsight-text-2-ranks"),
    pytest.param(SHARED / "Ascend-msinsight-st-level2" / "level2", id="msinsight-level2-4-ranks"),
    pytest.param(SHARED / "Ascend-msinsight" / "db" / "level1", id="msinsight-db-2-ranks"),
]
FIELDS = ("step_time_ns", "comm_not_overlapped_ns", "comm_share", "computing_ns", "free_ns", "link_totals",
          "links", "comm_wait_ns")


def _locations(folder: Path):  # noqa: ANN202
    if not folder.exists():
        pytest.skip(f"{folder} is absent (../shared is not here)")
    jobs = discover_jobs([folder])
    assert len(jobs) == 1
    return jobs[0].locations


@pytest.mark.parametrize("folder", JOBS)
def test_summary_figures_equal_whole_loads(folder: Path) -> None:
    """Every rank's cluster figures read from its summary files equal the figures of the same rank
    loaded whole; a rank that kept only its summary files says it has no device data."""
    locations = _locations(folder)
    summaries = read_summaries(locations, use_cache=False, cache_dir=None, workers=1)
    assert sorted(summaries) == sorted(loc.rank for loc in locations)
    for loc in locations:
        whole = rank_summary_of(loc.rank, load_location(loc, use_cache=False), str(loc.path))
        got = summaries[loc.rank]
        for name in FIELDS:
            assert getattr(got, name) == getattr(whole, name), (loc.rank, name)
        assert got.device_data == whole.device_data, loc.rank


def test_level2_analyses_a_rank_with_kernels() -> None:
    """Ranks 1 and 3 of the level2 job kept only step_trace_time.csv, communication*.json and
    analysis.db: the analysed rank is the slowest of ranks 0 and 2, and only it is loaded whole."""
    locations = _locations(SHARED / "Ascend-msinsight-st-level2" / "level2")
    res = load_profile([SHARED / "Ascend-msinsight-st-level2" / "level2"], use_cache=False)
    assert res.cluster is not None
    by_rank = {s.rank: s for s in res.cluster.ranks}
    assert [r for r, s in sorted(by_rank.items()) if not s.device_data] == [1, 3]
    assert res.cluster.analysed_rank == max((0, 2), key=lambda r: (by_rank[r].step_time_ns, -r))
    assert len(res.profile.kernels) > 0
    assert len(locations) == 4


def _job(tmp_path: Path, plan: JobPlan) -> Path:
    src = next(SAMPLE.glob("*3185260*"))
    return build_job(tmp_path / f"job{plan.ranks}", src, plan)


def _age(folder: Path) -> None:
    """Set every file and folder back an hour: entries are not stored for files written within
    cache.RACY_NS of the read (they may still be changing)."""
    old = time.time() - 3600
    for dirpath, _, files in os.walk(folder):
        for name in [*files, "."]:
            os.utime(Path(dirpath) / name, (old, old))


def test_summaries_are_cached_per_rank(tmp_path: Path) -> None:
    job = _job(tmp_path, JobPlan(4, slow_rank=2, slow_link=(1, 2)))
    _age(job)
    locations = _locations(job)
    first = read_summaries(locations, use_cache=True, cache_dir=tmp_path / "cache", workers=1)
    entries = sorted((tmp_path / "cache").glob(f"*{cache.SUMMARY_SUFFIX}"))
    assert len(entries) == 4
    assert {r: cache.load_summary(loc, tmp_path / "cache") for r, loc in ((l.rank, l) for l in locations)} == first
    # a summary file rewritten: that rank's entry is stale, the others still hit
    stale = next(loc for loc in locations if loc.rank == 2)
    csv = Path(stale.path) / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    csv.write_text(csv.read_text().replace("1800.000", "1900.000"))
    assert cache.load_summary(stale, tmp_path / "cache") is None
    assert all(cache.load_summary(loc, tmp_path / "cache") is not None for loc in locations if loc.rank != 2)
    # a damaged entry (rank 0's) is a miss and is removed
    rank0 = next(loc for loc in locations if loc.rank == 0)
    damaged = cache.entry_path(rank0, tmp_path / "cache").with_suffix(cache.SUMMARY_SUFFIX)
    assert damaged in entries
    damaged.write_bytes(b"MSPLRANK" + b"\0" * 40)
    hits = {loc.rank: cache.load_summary(loc, tmp_path / "cache") for loc in locations}
    assert [r for r, hit in sorted(hits.items()) if hit is None] == [0, 2] and not damaged.exists()


def test_fresh_files_are_not_cached(tmp_path: Path) -> None:
    """Files written just now may still be changing: their summaries are read, not stored."""
    job = _job(tmp_path, JobPlan(2, slow_rank=1, slow_link=(0, 1)))
    read_summaries(_locations(job), use_cache=True, cache_dir=tmp_path / "cache", workers=1)
    assert not list((tmp_path / "cache").glob(f"*{cache.SUMMARY_SUFFIX}"))


def test_a_thousand_ranks_name_the_slow_rank_and_link(tmp_path: Path) -> None:
    """1,024 ranks built from the sample's rank 0: the cluster view lists every rank with its
    step time, and NPU207/NPU208 name the planted rank 713 and link 300 -> 301, reading only
    the analysed rank whole (the summaries are read in the rank pool, in chunks)."""
    from msprof_lsp.server.__main__ import main

    plan = JobPlan(1024, slow_rank=713, slow_link=(300, 301))
    job = _job(tmp_path, plan)
    out = tmp_path / "report.json"
    code = main(["--check", "--no-cache", "--profile", str(job), "--format", "json", "--output", str(out),
                 str(REPO / "samples" / "cnn_classifier")])
    assert code == 1  # warnings at the default --fail-on
    doc = json.loads(out.read_text())
    (prof,) = doc["profiles"]
    cluster = prof["cluster"]
    assert cluster["slowest_rank"] == 713 and cluster["analysed_rank"] == 713
    steps = {r["rank"]: r["step_time_us"] for r in cluster["ranks"]}
    assert sorted(steps) == list(range(1024))
    assert all(steps[r] == pytest.approx(plan.step_us(r)) for r in steps)
    by_code = {f["code"]: f for f in doc["findings"]}
    assert "rank 713" in by_code["NPU207"]["message"]
    assert "rank 300" in by_code["NPU208"]["message"]
