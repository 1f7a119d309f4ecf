"""mapping.cache / mapping.load: hits skip the reader, any input change or a corrupt entry rebuilds
(the format itself and bad entries: tests/mapping/profile/test_cache_format.py)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile import cache
from msprof_lsp.mapping.errors import NoProfileFound, ProfileError
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import LinkKind, ProfileKind

T0 = 1_736_413_971_558_000  # µs


def write_result(root: Path) -> Path:
    """A minimal finished torch_npu result: one op with a stack launching one kernel."""
    out = root / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    events = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 800, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "X", "name": "aten::relu", "pid": 10, "tid": 10, "ts": f"{T0}.100", "dur": 30.0, "cat": "cpu_op",
         "args": {"Sequence number": 1, "Fwd thread id": 0, "Call stack": "/w/m.py(3): forward;\r\n/w/t.py(9): <module>"}},
        {"ph": "X", "name": "aclnnRelu", "pid": 10, "tid": 10, "ts": f"{T0 + 5}.100", "dur": 20.0, "cat": "cpu_op",
         "args": {"Sequence number": -1, "Fwd thread id": 0}},
        {"ph": "X", "name": "aclnnRelu_Relu_Relu", "pid": 800, "tid": 3, "ts": f"{T0 + 50}.250", "dur": 4.5,
         "args": {"Task Type": "Other", "Stream Id": 3, "Task Id": 1}},
        {"ph": "s", "bp": "e", "name": "torch_to_npu", "id": (T0 + 50) * 1000 + 250, "pid": 10, "tid": 10,
         "ts": f"{T0 + 5}.100", "cat": "async_npu"},
        {"ph": "f", "bp": "e", "name": "torch_to_npu", "id": (T0 + 50) * 1000 + 250, "pid": 800, "tid": 3,
         "ts": f"{T0 + 50}.250", "cat": "async_npu"},
    ]
    (out / "trace_view.json").write_text(json.dumps(events), encoding="utf-8")
    (out / "analyse.done").write_bytes(b"")
    return root


@pytest.fixture
def result(tmp_path: Path) -> tuple[ProfileLocation, Path]:
    root = write_result(tmp_path / "w_20260101_ascend_pt")
    return locate(root), tmp_path / "cache"


def patch_reader(monkeypatch: pytest.MonkeyPatch, kind: ProfileKind, read) -> None:
    """Make the loader call ``read`` for ``kind`` (the registry's entry, as the loader finds it)."""
    from msprof_lsp.mapping.profile.readers import registry

    monkeypatch.setitem(registry._BY_KIND, kind, replace(registry.reader_for(kind), read=read))


def counting_reader(monkeypatch: pytest.MonkeyPatch) -> list[ProfileLocation]:
    """Wrap the real torch_npu reader so the test sees every time it runs."""
    from msprof_lsp.mapping.profile.readers import torch_npu

    calls: list[ProfileLocation] = []

    def wrapped(location, progress):
        calls.append(location)
        return torch_npu.read(location, progress)

    patch_reader(monkeypatch, ProfileKind.TORCH_NPU, wrapped)
    return calls


def test_second_load_is_a_cache_hit(result, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = result
    calls = counting_reader(monkeypatch)
    first = load_location(loc, cache_dir=cache_dir)
    assert len(calls) == 1
    assert cache.entry_path(loc, cache_dir).is_file()
    second = load_location(loc, cache_dir=cache_dir)
    assert len(calls) == 1  # not read again
    assert second.kernels["link"].astype(str).tolist() == [LinkKind.STACK.value]
    assert second.kernels.equals(first.kernels) and second.host_ops.equals(first.host_ops)
    assert second.stacks == first.stacks and second.meta.files == first.meta.files


def test_touching_an_input_invalidates(result, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = result
    calls = counting_reader(monkeypatch)
    load_location(loc, cache_dir=cache_dir)
    trace = Path(loc.path) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # same size, new mtime
    load_location(loc, cache_dir=cache_dir)
    assert len(calls) == 2
    load_location(loc, cache_dir=cache_dir)
    assert len(calls) == 2  # rebuilt entry is a hit again


def test_a_new_file_invalidates(result, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = result
    calls = counting_reader(monkeypatch)
    load_location(loc, cache_dir=cache_dir)
    (Path(loc.path) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text(
        "Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim\r\n"
        f'aclnnRelu_Relu_Relu,Relu,AI_VECTOR_CORE,"{T0 + 50}.250\t",4.5,0,8\r\n',
        encoding="utf-8",
    )
    profile = load_location(loc, cache_dir=cache_dir)
    assert len(calls) == 2 and profile.kernels["core"].astype(str).tolist() == ["AI_VECTOR_CORE"]


def test_corrupt_entry_is_ignored_and_rebuilt(result, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = result
    calls = counting_reader(monkeypatch)
    load_location(loc, cache_dir=cache_dir)
    entry = cache.entry_path(loc, cache_dir)
    for garbage in (b"", b"not a cache entry at all", entry.read_bytes()[:-40]):
        entry.write_bytes(garbage)
        profile = load_location(loc, cache_dir=cache_dir)
        assert len(profile.kernels) == 1
    assert len(calls) == 4
    lookup = cache.load(loc, cache_dir)  # rewritten whole: a clean hit
    assert lookup.discarded is None and len(lookup.profile.kernels) == 1
    assert entry.read_bytes().startswith(cache.MAGIC)


def test_entry_of_another_format_or_version_is_a_miss(result, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = result
    calls = counting_reader(monkeypatch)
    load_location(loc, cache_dir=cache_dir)
    monkeypatch.setattr(cache, "CACHE_FORMAT", cache.CACHE_FORMAT + 1)
    load_location(loc, cache_dir=cache_dir)
    monkeypatch.setattr(cache, "package_version", lambda: "999.0")
    load_location(loc, cache_dir=cache_dir)
    assert len(calls) == 3


def test_no_cache_flag_always_reads(result, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = result
    calls = counting_reader(monkeypatch)
    load_location(loc, use_cache=False, cache_dir=cache_dir)
    load_location(loc, use_cache=False, cache_dir=cache_dir)
    assert len(calls) == 2 and not cache_dir.exists()


def test_unwritable_cache_dir_still_loads(result, tmp_path: Path) -> None:
    loc, _ = result
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    profile = load_location(loc, cache_dir=blocker / "cache")  # cannot mkdir under a file
    assert len(profile.kernels) == 1


def test_input_changing_during_the_read_is_not_cached(result, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = result
    from msprof_lsp.mapping.profile.readers import torch_npu

    def read_while_written(location, progress):
        profile = torch_npu.read(location, progress)
        (Path(location.path) / "ASCEND_PROFILER_OUTPUT" / "late.csv").write_text("x")
        return profile

    patch_reader(monkeypatch, ProfileKind.TORCH_NPU, read_while_written)
    load_location(loc, cache_dir=cache_dir)
    assert not cache.entry_path(loc, cache_dir).exists()


def test_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == tmp_path / "xdg" / "msprof-lsp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.default_cache_dir() == tmp_path / "home" / ".cache" / "msprof-lsp"


def test_fingerprint_skips_raw_data_dirs(result) -> None:
    loc, _ = result
    root = Path(loc.path)
    for raw in ("FRAMEWORK", "logs", "PROF_000001_20260101000000000_ABCDEFG/device_0/data"):
        (root / raw).mkdir(parents=True)
        (root / raw / "blob.bin").write_bytes(b"\0" * 10)
    names = sorted(Path(s.path).name for s in cache.fingerprint(loc))
    assert names == ["analyse.done", "trace_view.json"]


def test_locate_forms(tmp_path: Path) -> None:
    root = write_result(tmp_path / "w_ascend_pt")
    (root / "profiler_info_3.json").write_text("{}")
    loc = locate(root)
    assert loc.kind is ProfileKind.TORCH_NPU and loc.rank == 3 and loc.complete
    assert locate(root / "ASCEND_PROFILER_OUTPUT").kind is ProfileKind.TORCH_NPU
    assert locate(root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").kind is ProfileKind.TORCH_NPU
    kineto = tmp_path / "x.pt.trace.json"
    kineto.write_text(' {"traceEvents": []}')
    assert locate(kineto).kind is ProfileKind.KINETO
    with pytest.raises(NoProfileFound):
        locate(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoProfileFound):
        locate(tmp_path / "empty")


def test_missing_reader_module_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from msprof_lsp.mapping.profile.readers import registry

    monkeypatch.delitem(registry._BY_KIND, ProfileKind.MSPROF)
    loc = ProfileLocation(ProfileKind.MSPROF, tmp_path)
    with pytest.raises(ProfileError, match="no reader for msprof profiles"):
        load_location(loc, cache_dir=tmp_path / "c")
