"""Jobs before ranks: discovery groups runs into jobs, and ranks of different jobs never meet."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile import jobs as jobs_module
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.jobs import Job, discover_jobs
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.server.analysis import run as analysis_run
from msprof_lsp.server.analysis.settings import Settings
from tests.synth import write_kineto, write_torch_npu_db, write_torch_npu_text
from tests.synth.examples import small_run

from tests.server.check.cli_support import isolated_cache, run_cli  # noqa: F401 - isolated_cache is an autouse fixture
from conftest import shared_fixture

REPO = Path(__file__).resolve().parents[3]
DAY_NS = 86_400 * 10**9


def _ranks(job: Job) -> tuple[int, ...]:
    return tuple(loc.rank for loc in job.locations)  # type: ignore[misc]


def _run_of(world: int, rank: int, start_ns: int | None = None, **kw):
    run = small_run(steps=1, world_size=world, rank=rank, **kw)
    return replace(run, start_ns=start_ns) if start_ns is not None else run


def _write_ranks(folder: Path, world: int, *, start_ns: int | None = None, ranks=None) -> list[Path]:
    return [write_torch_npu_text(_run_of(world, r, start_ns), folder) for r in (ranks or range(world))]


# ---------------------------------------------------------------------------------------------
# Real traces: the HTA test-data tree holds three unrelated jobs


def test_hta_folder_is_three_jobs_not_one_three_rank_cluster() -> None:
    hta = shared_fixture("HolisticTraceAnalysis")
    found = discover_jobs([hta])
    assert [(j.folder.relative_to(hta).as_posix(), _ranks(j)) for j in found] == [
        ("critical_path/alexnet", (0,)),
        ("trace_diff/control", (3,)),
        ("trace_filter", (0, 1)),
    ]
    assert all(loc.kind is ProfileKind.KINETO for j in found for loc in j.locations)
    assert [loc.path.name for loc in found[2].locations] == ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"]
    assert found[2].describe(hta) == "trace_filter: kineto, 2 ranks (0, 1)"
    with pytest.raises(ProfileError) as err:
        load_profile([hta], use_cache=False)
    assert "holds 3 separate jobs" in str(err.value) and "trace_diff/control [control.json.gz]" in str(err.value)


def test_check_with_the_hta_folder_as_profile_analyses_each_job(tmp_path: Path, capsys) -> None:
    hta = shared_fixture("HolisticTraceAnalysis")
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_cli(["--check", str(empty), "--profile", str(hta), "--no-cache", "--format", "json",
                 "--fail-on", "never"], capsys)
    assert r.code == 0, r.err
    job_lines = [line for line in r.err.splitlines() if line.startswith("msprof-lsp: job ")]
    assert len(job_lines) == 3 and "job 3 of 3" in job_lines[2] and "trace_filter: kineto, 2 ranks" in job_lines[2]
    profiles = json.loads(r.out)["profiles"]
    assert [Path(p["path"]).name for p in profiles] == [
        "benchmark_result_2869224_1695835535_trace.json.gz", "control.json.gz", "sampled_rank-1.json.gz"
    ]
    assert [p["ranks"] for p in profiles] == [[0], [3], [0, 1]]


def test_real_db_export_ranks_are_one_job() -> None:
    level1 = shared_fixture("Ascend-msinsight/db/level1")
    [job] = discover_jobs([level1])
    assert job.folder == level1 and _ranks(job) == (0, 1)
    assert {loc.kind for loc in job.locations} == {ProfileKind.TORCH_NPU_DB}


# ---------------------------------------------------------------------------------------------
# Synthetic torch_npu runs


def test_ranks_of_one_run_are_one_job(tmp_path: Path) -> None:
    roots = _write_ranks(tmp_path / "prof", 2)
    [job] = discover_jobs([tmp_path])
    assert job.folder == tmp_path / "prof" and [loc.path for loc in job.locations] == roots
    assert _ranks(job) == (0, 1)
    loaded = analysis_run.load_found_job(job, Settings(), use_cache=False)
    assert loaded.cluster is not None and sorted(r.rank for r in loaded.cluster.ranks) == [0, 1]


def test_two_runs_side_by_side_in_one_folder_are_two_jobs(tmp_path: Path) -> None:
    first = _write_ranks(tmp_path / "prof", 2)
    second = _write_ranks(tmp_path / "prof", 2, start_ns=_run_of(2, 0).start_ns + DAY_NS)
    found = discover_jobs([tmp_path])
    assert [[loc.path for loc in j.locations] for j in found] == [first, second]
    with pytest.raises(ProfileError) as err:
        load_profile([tmp_path / "prof"], use_cache=False)
    assert "holds 2 separate jobs" in str(err.value)


def test_a_newer_partial_run_is_not_mixed_with_the_older_ranks(tmp_path: Path) -> None:
    old = _write_ranks(tmp_path / "prof", 4)
    new = _write_ranks(tmp_path / "prof", 4, start_ns=_run_of(4, 0).start_ns + DAY_NS, ranks=[0])
    found = discover_jobs([tmp_path])
    assert [[loc.path for loc in j.locations] for j in found] == [old, new]


def test_runs_in_sibling_folders_are_separate_jobs_and_per_rank_folders_one(tmp_path: Path) -> None:
    a = _write_ranks(tmp_path / "exp_a", 2)
    b = _write_ranks(tmp_path / "exp_b", 2)
    r0 = _write_ranks(tmp_path / "ranks" / "rank0", 2, ranks=[0])
    r1 = _write_ranks(tmp_path / "ranks" / "rank1", 2, ranks=[1])
    found = {j.folder.relative_to(tmp_path).as_posix(): [loc.path for loc in j.locations]
             for j in discover_jobs([tmp_path])}
    assert found == {"exp_a": a, "exp_b": b, "ranks": r0 + r1}


def test_per_rank_folders_holding_two_runs_each_give_one_job_per_run(tmp_path: Path) -> None:
    later = _run_of(2, 0).start_ns + DAY_NS
    old = [_write_ranks(tmp_path / "prof" / f"rank{r}", 2, ranks=[r])[0] for r in (0, 1)]
    new = [_write_ranks(tmp_path / "prof" / f"rank{r}", 2, ranks=[r], start_ns=later)[0] for r in (0, 1)]
    found = discover_jobs([tmp_path])
    assert [(j.folder, [loc.path for loc in j.locations]) for j in found] == [
        (tmp_path / "prof", old), (tmp_path / "prof", new)
    ]


def test_a_run_never_parsed_is_no_job_beside_a_parsed_one(tmp_path: Path) -> None:
    [parsed] = _write_ranks(tmp_path / "prof", 1)
    raw = tmp_path / "prof" / "node_1_20991231000000000_ascend_pt"  # newer, but raw data only
    (raw / "FRAMEWORK").mkdir(parents=True)
    (raw / "FRAMEWORK" / "torch.op_range").write_bytes(b"raw")
    (raw / "profiler_info_0.json").write_text('{"rank_id": 0}')
    [job] = discover_jobs([tmp_path])
    assert [loc.path for loc in job.locations] == [parsed]
    assert {loc.path for loc in job.runs_found} == {parsed}


def test_text_and_db_ranks_of_one_run_and_a_kineto_trace_beside_them(tmp_path: Path) -> None:
    text0 = write_torch_npu_text(_run_of(2, 0), tmp_path / "prof")
    db1 = write_torch_npu_db(_run_of(2, 1), tmp_path / "prof")
    (tmp_path / "prof").mkdir(exist_ok=True)
    trace = write_kineto(_run_of(1, 0), tmp_path / "prof" / "host_1.1736413971000.pt.trace.json")
    found = discover_jobs([tmp_path])
    assert [[(loc.kind, loc.rank) for loc in j.locations] for j in found] == [
        [(ProfileKind.KINETO, None)],  # a one-card trace carries no distributedInfo
        [(ProfileKind.TORCH_NPU, 0), (ProfileKind.TORCH_NPU_DB, 1)],
    ]
    assert found[0].locations[0].path == trace
    assert found[1].locations[0].path == text0 and found[1].locations[1].path.parent.parent == db1


def test_kineto_rank_files_share_a_name_pattern(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in (0, 1):
        write_kineto(_run_of(2, rank), folder / f"rank-{rank}.json")
    write_kineto(_run_of(1, 0), folder / "eval.1736413971000.pt.trace.json")
    found = discover_jobs([tmp_path])
    assert [sorted(loc.path.name for loc in j.locations) for j in found] == [
        ["eval.1736413971000.pt.trace.json"], ["rank-0.json", "rank-1.json"]
    ]


# ---------------------------------------------------------------------------------------------
# The samples and the one walk


def test_samples_keep_their_jobs_apart() -> None:
    found = analysis_run.find_jobs([REPO / "samples"])
    got = {(j.folder.relative_to(REPO / "samples").as_posix(), j.kinds, j.ranks) for j in found}
    assert got == {
        ("cnn_classifier/kineto", ("kineto",), (0,)),
        ("cnn_classifier/npu_profile", ("torch_npu",), (0, 1)),
        ("tiny_transformer/kineto", ("kineto",), ()),
        ("tiny_transformer/npu_profile", ("torch_npu",), (0,)),
    }


def test_check_walks_the_folder_once(tmp_path: Path, monkeypatch) -> None:
    sample = tmp_path / "cnn"
    shutil.copytree(REPO / "samples" / "cnn_classifier", sample)
    walks: list[list[Path]] = []
    real = jobs_module.find_candidates

    def counting(paths, **kw):
        walks.append(list(paths))
        return real(paths, **kw)

    monkeypatch.setattr(jobs_module, "find_candidates", counting)
    analyses = analysis_run.analyse_paths([sample], Settings(), use_cache=False)
    assert len(analyses) == 2 and len(walks) == 1
    assert sorted(a.loaded.location.kind.value for a in analyses) == ["kineto", "torch_npu"]


def test_the_editor_serves_the_newest_of_two_runs_in_one_folder(tmp_path: Path) -> None:
    from msprof_lsp.server.lsp.state.engine import Engine, LoadRequest
    from msprof_lsp.server.lsp.state.targets import find_jobs as editor_jobs

    _write_ranks(tmp_path / "prof", 2)
    second = _write_ranks(tmp_path / "prof", 2, start_ns=_run_of(2, 0).start_ns + DAY_NS)
    for root in second:  # the later run's files are the newest inputs
        for f in root.rglob("*"):
            if f.is_file():
                os.utime(f, (4_000_000_000, 4_000_000_000))
    [choice] = editor_jobs([tmp_path])
    assert [loc.path for loc in choice.job.locations] == second
    engine = Engine()
    engine.load(LoadRequest(settings=Settings(), folders=[tmp_path], use_cache=False))
    assert engine.loaded is not None and [loc.path for loc in engine.loaded.locations] == second


# ---------------------------------------------------------------------------------------------
# One discovery pass: each folder listed once, each profile recognised once, nothing classified again

_SOURCE_INDEX = os.path.join("mapping", "source", "workspace.py")


class _PassCounter:
    """What one --check does to the profile tree: the folder listings it makes (os.scandir and
    os.listdir, which Path.iterdir, Path.glob and os.walk use), by folder, and the probe calls and
    claims of every reader. Listings made by the source index (mapping/source/workspace.py walks the source
    folders for .py files, not profiles) are left out. Every rank loads in this process, so the
    readers' own listings are seen too."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from msprof_lsp.mapping.profile import cluster, discover
        from msprof_lsp.mapping.profile.readers.registry import READERS

        self.listed: Counter[Path] = Counter()
        self.probed: Counter[tuple[str, Path]] = Counter()
        self.claims: Counter[Path] = Counter()
        real_scandir, real_listdir = os.scandir, os.listdir

        def scandir(path=".", *args):
            self._note(path)
            return real_scandir(path, *args)

        def listdir(path=".", *args):
            self._note(path)
            return real_listdir(path, *args)

        monkeypatch.setattr(os, "scandir", scandir)
        monkeypatch.setattr(os, "listdir", listdir)
        monkeypatch.setattr(discover, "READERS", tuple(
            replace(r, probe_dir=self._counting(r.kind.value, r.probe_dir),
                    probe_file=self._counting(r.kind.value, r.probe_file)) for r in READERS
        ))

        def in_process(locations, *, use_cache, cache_dir, progress, workers=None):
            return cluster.load_ranks_sequential(locations, use_cache=use_cache, cache_dir=cache_dir), []

        monkeypatch.setattr(cluster, "_load_ranks", in_process)

    def _note(self, path: object) -> None:
        if isinstance(path, int):
            return
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename.endswith(_SOURCE_INDEX):
                return
            frame = frame.f_back
        self.listed[Path(os.fsdecode(path)).resolve()] += 1

    def _counting(self, kind: str, probe):
        def counted(seen):
            self.probed[(kind, seen.path.resolve())] += 1
            cand = probe(seen)
            if cand is not None:
                self.claims[Path(cand.location.path).resolve()] += 1
            return cand

        return counted


@pytest.mark.parametrize(
    ("fixture", "jobs", "profiles", "cache"),
    [("HolisticTraceAnalysis", 3, 4, False), ("Ascend-msinsight/db", 1, 2, False), ("Ascend-msinsight/db", 1, 2, True)],
)
def test_check_lists_each_folder_once_and_recognises_each_profile_once(
    fixture: str, jobs: int, profiles: int, cache: bool, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    folder = shared_fixture(fixture).resolve()
    tree = {d for d in (folder, *folder.rglob("*")) if d.is_dir()}
    seen = _PassCounter(monkeypatch)
    argv = ["--check", str(folder), "--format", "json", "--fail-on", "never"] + ([] if cache else ["--no-cache"])
    for run in ("cold", "warm") if cache else ("uncached",):  # with the cache: filling it, then reading it
        seen.listed.clear(), seen.probed.clear(), seen.claims.clear()
        r = run_cli(argv, capsys)
        assert r.code == 0, (run, r.err)
        doc = json.loads(r.out)
        assert len(doc["profiles"]) == jobs and sum(len(p["ranks"]) for p in doc["profiles"]) == profiles
        profile_dirs = {d for d in seen.listed if folder == d or folder in d.parents}
        # every folder of the tree was looked at (the walk really went through this counter) ...
        assert profile_dirs == tree, run
        # ... and none of them twice: not by the readers, the loader, the cache or the source-root search
        assert [d for d in profile_dirs if seen.listed[d] > 1] == [], run
        # each profile recognised by exactly one probe, once; no probe offered the same thing twice
        assert len(seen.claims) == profiles and set(seen.claims.values()) == {1}, run
        assert [k for k, n in seen.probed.items() if n > 1] == [], run
