"""``--ranks all`` (server/analysis/ranks.py): every rank's findings grouped across ranks, in the
local process pool and on a Dask LocalCluster with the same result, and in the text and JSON
reports."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from msprof_lsp.hints.finding import Severity
from msprof_lsp.mapping.profile.jobs import discover_jobs
from msprof_lsp.server.analysis import ranks
from msprof_lsp.server.analysis.ranks import RankFinding, RankResult, analyse_all, group_findings, subject
from msprof_lsp.server.analysis.settings import Settings, resolve
from msprof_lsp.server.check.command import run_check
from msprof_lsp.server.analysis.views.document import rank_ranges
from msprof_lsp.server.cli import UsageError, parse

from tests.synth.rank_job import JobPlan, build_job

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "samples" / "cnn_classifier"


def _finding(code: str, line: int | None, us: float, severity: str = "warning") -> RankFinding:
    return RankFinding(code, "rule", severity, f"{code} {us:g} µs", "/w/model.py" if line else None, line, us, 0.1)


def test_identical_findings_are_one_group_with_the_range_and_the_worst_rank() -> None:
    results = [RankResult(r, [_finding("NPU103", 42, 3100.0 + r), _finding("NPU201", None, 10.0)]) for r in range(4)]
    results[2].findings.append(_finding("NPU108", 7, 900.0, "error"))
    results[3].findings[0] = _finding("NPU103", 42, 3400.0, "error")
    groups = group_findings(results)
    assert [(g.code, len(g.ranks)) for g in groups] == [("NPU103", 4), ("NPU201", 4), ("NPU108", 1)]
    npu103 = groups[0]
    assert (npu103.low_us, npu103.high_us, npu103.worst_rank) == (3100.0, 3400.0, 3)
    assert npu103.severity is Severity.ERROR and npu103.message == "NPU103 3400 µs"
    assert groups[2].ranks == (2,)
    assert groups[1].worst_rank == 0  # a tie: the lowest rank


def test_two_subjects_of_one_rule_at_one_place_are_two_groups() -> None:
    """NPU108 reports aten::item and aten::to apart, with no source place in a profile alone."""
    item = RankFinding("NPU108", "sync", "warning", "aten::item: 27 syncs, 94.1 ms/step", None, None, 94100.0, 0.5)
    to = RankFinding("NPU108", "sync", "warning", "aten::to: 2 syncs, 7,169 µs/step", None, None, 7169.0, 0.04)
    groups = group_findings([RankResult(0, [item, to]), RankResult(1, [item, to])])
    assert [(g.message.split(":")[0], g.ranks, g.low_us, g.high_us) for g in groups] == [
        ("aten", (0, 1), 94100.0, 94100.0), ("aten", (0, 1), 7169.0, 7169.0)]
    assert subject("aten::to: 2 syncs") == subject("aten::to: 3 syncs") == "aten::to"
    assert subject("DataLoader: 1 fetch") == "DataLoader" and subject("no colon here") == ""


def test_a_repository_cannot_name_the_scheduler(tmp_path: Path) -> None:
    """``ranks`` may come from pyproject.toml; ``scheduler`` (where the job's paths are sent) may not."""
    (tmp_path / "pyproject.toml").write_text('[tool.msprof-lsp]\nranks = "all"\nscheduler = "tcp://10.0.0.1:8786"\n')
    settings, warnings = resolve(tmp_path, workspace_roots=None, layers=[], base_dir=tmp_path)
    assert settings.ranks == "all" and settings.scheduler == ""
    assert any("'scheduler' is a user setting" in w for w in warnings)


def test_rank_ranges() -> None:
    assert rank_ranges([7, 0, 1, 2, 5, 8, 10]) == "0-2, 5, 7-8, 10"
    assert rank_ranges([]) == ""


@pytest.fixture(scope="module")
def job8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ranks8")
    source = next((SAMPLE / "npu_profile").glob("*_ascend_pt"))
    build_job(root / "job", source, JobPlan(ranks=8, slow_rank=5, slow_link=(2, 3)))
    (root / "train.py").write_text((SAMPLE / "train.py").read_text())
    return root


def test_dask_local_cluster_gives_the_pool_s_groups(job8: Path) -> None:
    """The per-rank analysis on a LocalCluster of 2 worker processes returns the same grouped
    findings as the local process pool (only the engine named differs)."""
    distributed = pytest.importorskip("distributed")
    (job,) = discover_jobs([job8])
    assert len(job.locations) == 8
    pool = analyse_all(job.locations, [job8], Settings(), use_cache=False, cache_dir=None)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        on_dask = analyse_all(job.locations, [job8], Settings(scheduler=lc.scheduler_address), use_cache=False,
                              cache_dir=None)
    assert pool.engine.startswith("process pool") and on_dask.engine == f"dask {lc.scheduler_address}"
    assert pool.groups and on_dask.groups == pool.groups
    assert pool.analysed == on_dask.analysed == tuple(range(8)) and not pool.failed
    transdata = next(g for g in pool.groups if g.code == "NPU103")
    assert transdata.ranks == tuple(range(8)) and transdata.path == str(job8 / "train.py")


def test_unreachable_scheduler_is_one_line(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setattr(ranks, "DASK_TIMEOUT_S", 1)
    _, args = parse(["--check", str(job8), "--ranks", "all", "--scheduler", "tcp://127.0.0.1:9", "-q"])
    err = io.StringIO()
    assert run_check(args, stdout=io.StringIO(), stderr=err) == 2
    assert err.getvalue().startswith("msprof-lsp: error: tcp://127.0.0.1:9: cannot reach the Dask scheduler")
    assert err.getvalue().count("\n") == 1


def test_a_rank_that_cannot_be_read_is_named_and_the_others_count(tmp_path: Path) -> None:
    source = next((SAMPLE / "npu_profile").glob("*_ascend_pt"))
    job = build_job(tmp_path / "job", source, JobPlan(ranks=3, slow_rank=2, slow_link=(0, 1)))
    (broken,) = job.glob("*_100001_*/ASCEND_PROFILER_OUTPUT/trace_view.json")
    broken.unlink()  # a hard link: the other ranks keep theirs
    broken.write_text("\0" * 10)  # not JSON at all: the reader refuses the rank
    (found,) = discover_jobs([job])
    every = analyse_all(found.locations, [SAMPLE], Settings(select=("NPU108",)), use_cache=False, cache_dir=None)
    assert every.analysed == (0, 2)
    ((rank, error),) = every.failed
    assert rank == 1 and str(broken) in error and "\n" not in error
    assert every.total == 3 and all(g.ranks == (0, 2) for g in every.groups) and every.groups


def test_the_flags_need_check() -> None:
    for argv in (["--ranks", "all"], ["--scheduler", "tcp://127.0.0.1:8786"]):
        with pytest.raises(UsageError, match="needs the check command"):
            parse(argv)


def test_check_reports_every_rank_in_text_and_json() -> None:
    """The sample's 2 ranks: the JSON's ``profile.rank_findings`` lists each group with its ranks,
    and the text report says "on 2 of 2 ranks"; without --ranks all it is null (and always for
    the one-rank Kineto profile beside them)."""
    _, args = parse(["--check", str(SAMPLE), "--ranks", "all", "-q", "--format", "json", "--select", "NPU103,NPU108"])
    out = io.StringIO()
    run_check(args, stdout=out, stderr=io.StringIO())
    (every,) = [p["rank_findings"] for p in json.loads(out.getvalue())["profiles"] if p["rank_findings"]]
    assert every["ranks_analysed"] == [0, 1] and every["ranks_failed"] == []
    codes = {g["code"]: g for g in every["groups"]}
    assert set(codes) == {"NPU103", "NPU108"}
    assert codes["NPU108"]["ranks"] == [0, 1] and codes["NPU108"]["path"].endswith("train.py")
    assert codes["NPU108"]["low_us"] <= codes["NPU108"]["high_us"]

    _, args = parse(["--check", str(SAMPLE), "--ranks", "all", "-q", "--select", "NPU108"])
    out = io.StringIO()
    run_check(args, stdout=out, stderr=io.StringIO())
    assert "Every rank (2 ranks, process pool" in out.getvalue()
    assert "NPU108 on 2 of 2 ranks, " in out.getvalue()

    _, args = parse(["--check", str(SAMPLE), "-q", "--format", "json", "--select", "NPU108"])
    out = io.StringIO()
    run_check(args, stdout=out, stderr=io.StringIO())
    assert all(p["rank_findings"] is None for p in json.loads(out.getvalue())["profiles"])
