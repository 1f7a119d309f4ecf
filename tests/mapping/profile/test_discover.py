"""Discovery: producer roots, ranks, newest run per rank, and the walk's guards."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.discover import discover, find_all
from msprof_lsp.mapping.profile.model import ProfileKind

from conftest import shared_fixture


def _touch(path: Path, text: str = "", mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _torch_root(
    parent: Path,
    name: str,
    *,
    rank: int | str | None,
    info_suffix: bool,
    mtime: float,
    done: bool = True,
    with_raw_prof: bool = True,
) -> Path:
    """A torch_npu text-export root lays it out (contents minimal: discovery reads none)."""
    root = parent / name
    info = {"config": {"common_config": {"with_stack": True}}, "rank_id": rank if rank is not None else -1}
    info_name = f"profiler_info_{int(rank)}.json" if info_suffix and rank is not None else "profiler_info.json"
    _touch(root / info_name, json.dumps(info), mtime)
    _touch(root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", "[]", mtime)
    _touch(root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", "Name,Type\n", mtime)
    if done:
        _touch(root / "ASCEND_PROFILER_OUTPUT" / "analyse.done", "", mtime)
    _touch(root / "FRAMEWORK" / "torch.op_range", "raw", mtime)
    if with_raw_prof:
        # CANN raw data inside the root: must never be reported as an msprof profile of its own.
        prof = root / "PROF_000001_20240101120000123_ABCDEFGHIJKLMNOP"
        _touch(prof / "mindstudio_profiler_output" / "op_summary_20240101120000.csv", "x\n", mtime)
        _touch(prof / "host" / "info.json", "{}", mtime)
    return root


def test_two_runs_four_ranks_newest_run_per_rank(tmp_path: Path) -> None:
    old, new = 1_700_000_000.0, 1_700_000_500.0
    for rank in range(4):
        # rank_id as string for even ranks and int for odd ones, file-name suffix on some.
        rid: int | str = str(rank) if rank % 2 == 0 else rank
        _torch_root(tmp_path / "prof", f"node_{100 + rank}_20240101120000000_ascend_pt", rank=rid,
                    info_suffix=rank < 2, mtime=old)
        _torch_root(tmp_path / "prof", f"node_{200 + rank}_20240102120000000_ascend_pt", rank=rid,
                    info_suffix=rank < 2, mtime=new)

    everything = find_all([tmp_path])
    assert len(everything) == 8
    assert all(loc.kind is ProfileKind.TORCH_NPU for loc in everything)  # no PROF_* inside roots

    locs = discover([tmp_path])
    assert [loc.rank for loc in locs] == [0, 1, 2, 3]
    assert all("_20240102120000000_" in loc.path.name for loc in locs)
    assert all(loc.mtime == new and loc.complete for loc in locs)


def test_newest_is_the_newest_input_file_not_the_folder(tmp_path: Path) -> None:
    a = _torch_root(tmp_path, "a_1_20240101000000000_ascend_pt", rank=0, info_suffix=True, mtime=100.0)
    b = _torch_root(tmp_path, "b_2_20240101000000000_ascend_pt", rank=0, info_suffix=True, mtime=50.0)
    # One output of b was rewritten later (re-parsed): b is now the newer run.
    os.utime(b / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", (300.0, 300.0))
    [loc] = discover([tmp_path])
    assert loc.path == b and loc.mtime == 300.0
    assert a.exists()


def test_half_written_run_is_reported_incomplete(tmp_path: Path) -> None:
    _torch_root(tmp_path, "x_1_20240101000000000_ascend_pt", rank=None, info_suffix=False, mtime=10.0,
                done=False)
    [loc] = discover([tmp_path])
    assert loc.complete is False and loc.rank is None


def test_root_given_directly_output_dir_given_directly_and_raw_prof_inside(tmp_path: Path) -> None:
    root = _torch_root(tmp_path, "w_9_20240101000000000_ascend_pt", rank=3, info_suffix=True, mtime=10.0)
    for given in (root, root / "ASCEND_PROFILER_OUTPUT", root / "PROF_000001_20240101120000123_ABCDEFGHIJKLMNOP"):
        [loc] = discover([given])
        assert (loc.kind, loc.path, loc.rank) == (ProfileKind.TORCH_NPU, root, 3)


def test_bare_output_dir_without_a_root(tmp_path: Path) -> None:
    out = tmp_path / "copied" / "ASCEND_PROFILER_OUTPUT"
    _touch(out / "trace_view.json", "[]", 10.0)
    _touch(out.parent / "PROF_000001_20240101120000123_ABCDEFGHIJKLMNOP" / "host" / "info.json", "{}")
    for given in (out, out.parent, tmp_path):
        [loc] = discover([given])
        assert loc.kind is ProfileKind.TORCH_NPU and loc.path == out and loc.complete is False


def test_msprof_prof_dirs_and_their_db(tmp_path: Path) -> None:
    prof = tmp_path / "runs" / "PROF_000001_20230628101435646_FKFLNPEPPRRCHCDA"
    _touch(prof / "mindstudio_profiler_output" / "op_summary_20230628101500.csv", "x\n", 20.0)
    _touch(prof / "msprof_20230628101500.db", "", 30.0)
    _touch(prof / "host" / "info.json", json.dumps({"ai_core_num": 24}), 5.0)
    old7 = tmp_path / "runs" / "rank_1" / "PROF_000002_20230101000000000_AAAAAAAAAAAAAAAA"
    _touch(old7 / "device_0" / "summary" / "op_summary_0_1_20230101.csv", "x\n", 40.0)
    _touch(old7 / "device_0" / "timeline" / "msprof_0_1.json", "[]", 41.0)
    locs = discover([tmp_path])
    assert [(loc.kind, loc.path, loc.rank, loc.mtime) for loc in locs] == [
        (ProfileKind.MSPROF, old7, 1, 41.0)  # the unranked one is dropped beside a ranked one
    ]
    everything = {loc.path: loc for loc in find_all([tmp_path])}
    assert set(everything) == {prof, old7}  # msprof_*.db is not a profile of its own
    assert everything[prof].mtime == 30.0 and everything[prof].rank is None
    # Given the msprof DB directly, its PROF dir is the profile.
    [loc] = discover([prof / "msprof_20230628101500.db"])
    assert loc.path == prof and loc.kind is ProfileKind.MSPROF


def test_db_files_rank_from_suffix_or_profiler_info(tmp_path: Path) -> None:
    out = tmp_path / "dbrun" / "h_1_20240101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    _touch(out / "ascend_pytorch_profiler_5.db", "", 50.0)
    _touch(out / "analysis.db", "", 60.0)
    out2 = tmp_path / "dbrun" / "h_2_20240101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    _touch(out2 / "ascend_pytorch_profiler.db", "", 70.0)
    _touch(out2.parent / "profiler_info.json", json.dumps({"rank_id": "6"}), 1.0)
    locs = discover([tmp_path])
    assert [(loc.kind, loc.path.name, loc.rank) for loc in locs] == [
        (ProfileKind.TORCH_NPU_DB, "ascend_pytorch_profiler_5.db", 5),
        (ProfileKind.TORCH_NPU_DB, "ascend_pytorch_profiler.db", 6),
    ]
    assert locs[0].mtime == 60.0 and locs[1].mtime == 70.0
    # A lone DB file (copied out of its root) is found too; its name gives the rank.
    lone = _touch(tmp_path / "elsewhere" / "ascend_pytorch_profiler_2.db", "", 5.0)
    assert [(loc.path, loc.rank) for loc in discover([lone.parent])] == [(lone, 2)]


def test_kineto_traces_by_name_by_sniff_and_rank(tmp_path: Path) -> None:
    head = {"schemaVersion": 1, "deviceProperties": []}
    gz = tmp_path / "kin" / "host_1.1700000000000.pt.trace.json.gz"
    gz.parent.mkdir(parents=True)
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        json.dump({**head, "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},
                   "traceEvents": []}, f)
    # distributedInfo after traceEvents (end of the file), string rank value in the wild.
    tail_rank = _touch(tmp_path / "kin" / "custom_name.json",
                       json.dumps({**head, "traceEvents": [{"ph": "X"}] * 100,
                                   "distributedInfo": {"rank": 0, "world_size": 2}}))
    # Not traces: a package.json and an unrelated object.
    _touch(tmp_path / "kin" / "package.json", json.dumps({"name": "x"}))
    _touch(tmp_path / "kin" / "other.json", json.dumps({"events": []}))
    locs = discover([tmp_path])
    assert [(loc.kind, loc.path, loc.rank) for loc in locs] == [
        (ProfileKind.KINETO, tail_rank, 0),
        (ProfileKind.KINETO, gz, 1),
    ]


def test_kineto_rank_from_file_and_folder_names(tmp_path: Path) -> None:
    a = _touch(tmp_path / "rank3" / "w.pt.trace.json", json.dumps({"traceEvents": []}))
    b = _touch(tmp_path / "t" / "trace_rank-7.pt.trace.json", json.dumps({"traceEvents": []}))
    c = _touch(tmp_path / "t" / "frank10.pt.trace.json", json.dumps({"traceEvents": []}))
    assert {loc.path: loc.rank for loc in find_all([tmp_path])} == {a: 3, b: 7, c: None}


def test_kineto_rank_files_with_plain_json_gz_names(tmp_path: Path) -> None:
    # HTA and job scripts name rank files rank-N.json.gz / sampled_rank-N.json.gz, not *.pt.trace.
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        with gzip.open(job / f"sampled_rank-{r}.json.gz", "wt", encoding="utf-8") as f:
            json.dump({"schemaVersion": 1, "distributedInfo": {"rank": r, "world_size": 128},
                       "traceEvents": []}, f)
    plain = _touch(job / "rank-2.json", json.dumps({"traceEvents": []}))  # rank from the name
    with gzip.open(job / "rank-3.json.gz", "wt", encoding="utf-8") as f:
        json.dump({"results": [1, 2]}, f)  # a gzipped JSON that is no trace
    (job / "rank-4.json.gz").write_bytes(b"not gzip at all")
    locs = discover([tmp_path])
    assert [(loc.kind, loc.path.name, loc.rank) for loc in locs] == [
        (ProfileKind.KINETO, "sampled_rank-0.json.gz", 0),
        (ProfileKind.KINETO, "sampled_rank-1.json.gz", 1),
        (ProfileKind.KINETO, plain.name, 2),
    ]


def test_real_hta_rank_folder_is_two_ranks() -> None:
    folder = shared_fixture("HolisticTraceAnalysis/trace_filter")
    # Independent: the ranks the files say about themselves (gzip + json).
    ranks = {json.loads(gzip.decompress(p.read_bytes()))["distributedInfo"]["rank"]: p
             for p in sorted(folder.glob("*.json.gz"))}
    assert sorted(ranks) == [0, 1]
    locs = discover([folder])
    assert [(loc.kind, loc.rank, loc.path) for loc in locs] == [
        (ProfileKind.KINETO, r, ranks[r]) for r in (0, 1)]


def test_lone_trace_view_json(tmp_path: Path) -> None:
    tv = _touch(tmp_path / "export" / "trace_view.json", "[]")
    [loc] = discover([tmp_path])
    assert (loc.kind, loc.path) == (ProfileKind.TORCH_NPU, tv)
    # Given explicitly, an array JSON under another name is a lone torch_npu trace too.
    other = _touch(tmp_path / "x" / "chrome.json", ' [{"ph": "M"}]')
    assert [(loc.kind, loc.path) for loc in discover([other])] == [(ProfileKind.TORCH_NPU, other)]


def test_symlink_loop_vcs_and_venv_are_not_followed(tmp_path: Path) -> None:
    real = _touch(tmp_path / "work" / "a" / "rank_0" / "x.pt.trace.json", json.dumps({"traceEvents": []}))
    (tmp_path / "work" / "a" / "loop").symlink_to(tmp_path / "work", target_is_directory=True)
    _touch(tmp_path / "work" / ".git" / "rank_1" / "y.pt.trace.json", json.dumps({"traceEvents": []}))
    venv = tmp_path / "work" / "env"
    _touch(venv / "pyvenv.cfg", "home = /usr/bin")
    _touch(venv / "lib" / "rank_2" / "z.pt.trace.json", json.dumps({"traceEvents": []}))
    _touch(tmp_path / "work" / "node_modules" / "rank_4" / "z.pt.trace.json", json.dumps({"traceEvents": []}))
    assert [loc.path for loc in find_all([tmp_path / "work"])] == [real]


def test_depth_is_bounded(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(5)])
    trace = _touch(deep / "t.pt.trace.json", json.dumps({"traceEvents": []}))
    assert [loc.path for loc in discover([tmp_path], max_depth=5)] == [trace]
    assert discover([tmp_path], max_depth=4) == []


def test_nothing_and_missing_paths(tmp_path: Path) -> None:
    _touch(tmp_path / "src" / "model.py", "print(1)\n")
    assert discover([tmp_path]) == []
    assert discover([tmp_path / "does-not-exist"]) == []


def test_real_fixture_roots_and_rank_ids() -> None:
    mem = shared_fixture("verl-project-rl-insight/data/recipe/memory_data/20260526_085155_ascend_pt")
    mstx = shared_fixture(
        "verl-project-rl-insight/data/recipe/mstx_data/mstx_profile/agent_loop_rollout_replica_0/xxx_ascend_pt"
    )
    # Independent: read rank_id from the files with json (string "0" in one, int 0 in the other).
    ids = [json.loads((p / "profiler_info_0.json").read_text())["rank_id"] for p in (mem, mstx)]
    assert ids == ["0", 0]
    found = {loc.path: loc for loc in find_all([mem.parent.parent])}
    assert set(found) == {mem, mstx}
    assert {loc.rank for loc in found.values()} == {0}
    assert all(loc.kind is ProfileKind.TORCH_NPU for loc in found.values())
    # Neither fixture has analyse.done (they are excerpts).
    assert not (mem / "ASCEND_PROFILER_OUTPUT" / "analyse.done").exists()
    assert all(loc.complete is False for loc in found.values())


@pytest.mark.parametrize("rank_id,expected", [("2", 2), (2, 2), (-1, None), ("-1", None), ("x", None)])
def test_profiler_info_rank_id_forms(tmp_path: Path, rank_id: object, expected: int | None) -> None:
    root = tmp_path / "r_1_20240101000000000_ascend_pt"
    _touch(root / "profiler_info.json", json.dumps({"rank_id": rank_id}))
    _touch(root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", "[]")
    [loc] = discover([tmp_path])
    assert loc.rank == expected


def test_run_with_text_and_db_exports_is_read_from_text(tmp_path: Path) -> None:
    root = _torch_root(tmp_path, "b_1_20240101000000000_ascend_pt", rank=0, info_suffix=True, mtime=10.0)
    _touch(root / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db", "", 20.0)
    [loc] = discover([tmp_path])
    assert (loc.kind, loc.path) == (ProfileKind.TORCH_NPU, root)
    # DB only: the DB file is the location.
    (root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    (root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").unlink()
    [loc] = discover([tmp_path])
    assert (loc.kind, loc.path.name, loc.rank) == (ProfileKind.TORCH_NPU_DB, "ascend_pytorch_profiler_0.db", 0)


def test_one_reader_per_kind_and_discovery_hands_it_its_layout(tmp_path: Path) -> None:
    """The registry covers every ProfileKind once, and each location discovery finds carries the
    layout of the reader its kind names (so reading never classifies the folder again)."""
    from msprof_lsp.mapping.profile.locations import Layout
    from msprof_lsp.mapping.profile.readers.registry import READERS, reader_for

    assert sorted(r.kind.value for r in READERS) == sorted(k.value for k in ProfileKind)
    assert all(reader_for(r.kind) is r for r in READERS)
    text = _torch_root(tmp_path / "a", "w_20260101000000000_ascend_pt", rank=0, info_suffix=True, mtime=1e9)
    prof = tmp_path / "b" / "PROF_000001_20260101000000000_ABCDEFG"
    _touch(prof / "mindstudio_profiler_output" / "op_summary_20260101000000.csv", "Op Name\n")
    found = {loc.kind: loc for loc in find_all([tmp_path])}
    assert found[ProfileKind.TORCH_NPU].path == text and found[ProfileKind.MSPROF].path == prof
    npu, msprof = found[ProfileKind.TORCH_NPU].layout, found[ProfileKind.MSPROF].layout
    assert isinstance(npu, Layout) and isinstance(msprof, Layout)
    assert npu.output == text / "ASCEND_PROFILER_OUTPUT" and npu.trace == npu.output / "trace_view.json"
    assert npu.infos == (text / "profiler_info_0.json",)
    assert msprof.style == "current" and list(msprof.files) == ["op_summary"]


# What uses readers without being one: it asks the registry and names none (issue 24).
USES_READERS = ("mapping/profile/discover.py", "mapping/profile/jobs.py", "mapping/profile/cache.py",
                "mapping/profile/timemodel.py", "mapping/profile/load.py", "mapping/profile/cluster.py",
                "server/lsp/state/targets.py", "server/lsp/watch.py")


def _names_of_readers(rel: str, readers: set[str]) -> list[str]:
    """Where the file at ``rel`` names a reader module or a ProfileKind member."""
    import ast

    tree = ast.parse((Path(__file__).resolve().parents[3] / rel).read_text(encoding="utf-8"))
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            taken = {module.rsplit(".", 1)[-1]} if ".readers." in module else {a.name for a in node.names}
            named += [f"{rel}:{node.lineno} imports {r}" for r in taken & readers]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ProfileKind":
            named.append(f"{rel}:{node.lineno} ProfileKind.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ".readers." in node.value:
            named.append(f"{rel}:{node.lineno} {node.value!r}")
    return named


def test_discovery_jobs_cache_time_model_and_editor_name_no_reader() -> None:
    """Each reader owns its probes, layout and cache-key files (fields of its Reader); discovery,
    jobs, the cache, the time model, the loaders and the editor's targets and watcher iterate the
    registry, so adding a reader is its module plus a registry line."""
    from msprof_lsp.mapping.profile.discover import SKIP_DIRS, WHAT_WE_LOOK_FOR
    from msprof_lsp.mapping.profile.readers.registry import READERS
    from msprof_lsp.server.lsp.watch import PROFILE_GLOBS

    folder = Path(__file__).resolve().parents[3] / "mapping" / "profile" / "readers"
    readers = {p.stem for p in folder.glob("*.py")} - {"__init__", "protocol", "registry"}
    assert {"kineto", "torch_npu", "torch_npu_db", "msprof_cli"} <= readers
    assert [n for rel in USES_READERS for n in _names_of_readers(rel, readers)] == []
    # ... and what they say of the producers is the readers' own
    for reader in READERS:
        assert reader.looks_for and reader.looks_for in WHAT_WE_LOOK_FOR, reader.kind
        assert reader.watch and set(reader.watch) <= set(PROFILE_GLOBS), reader.kind
        assert reader.raw_dirs <= SKIP_DIRS


def test_a_readers_raw_data_is_neither_walked_nor_stamped(tmp_path: Path) -> None:
    """torch_npu's FRAMEWORK/ and raw CANN PROF_* data, msprof's device data: no profile of their
    own (discovery) and no part of the cache key (Reader.inputs), while the files read are."""
    from msprof_lsp.mapping.profile.cache import input_files

    root = _torch_root(tmp_path, "w_20240101000000000_ascend_pt", rank=0, info_suffix=True, mtime=10.0)
    prof = tmp_path / "PROF_000002_20240101120000123_ABCDEFGH"
    _touch(prof / "mindstudio_profiler_output" / "op_summary_20240101120000.csv", "x\n")
    _touch(prof / "device_0" / "data" / "raw.data.0.slice_0", "raw")
    found = {loc.path: loc for loc in find_all([tmp_path])}
    assert set(found) == {root, prof}
    npu = {p.relative_to(root).as_posix() for p in input_files(found[root])}
    assert "ASCEND_PROFILER_OUTPUT/kernel_details.csv" in npu and "profiler_info_0.json" in npu
    assert not any(p.startswith(("FRAMEWORK/", "PROF_")) for p in npu)
    assert [p.relative_to(prof).as_posix() for p in input_files(found[prof])] == [
        "mindstudio_profiler_output/op_summary_20240101120000.csv"
    ]

def test_a_path_too_long_to_stat_is_no_profile_not_an_os_error(tmp_path: Path) -> None:
    """Found by the campaign (seed 29): a repository's ``profile`` setting of 5,000 characters made
    the foreign-format check's stat raise ENAMETOOLONG, an internal error; it is "no profile found"
    naming the path."""
    from msprof_lsp.mapping.errors import NoProfileFound
    from msprof_lsp.mapping.profile.discover import foreign_format, require_found

    long = tmp_path / ("n" + "[" * 5000)
    assert foreign_format(long) is None
    with pytest.raises(NoProfileFound) as err:
        require_found([], long)
    assert str(long) in str(err.value)
