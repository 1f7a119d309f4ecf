"""Hostile or broken input, one test per class: a clean ProfileError naming the file (exit 2 with
one line), or a load with an Issue and partial results; never another exception, a hang or a
crash of the process. The inputs are written here, from the description of each attack."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from msprof_lsp.hints.fixes import cst_tools
from msprof_lsp.hints.fixes.edits import apply_edits, minimal_edits
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.profile.readers import kineto
from msprof_lsp.mapping.profile.readers.ascend_json import load_json
from msprof_lsp.mapping.profile.readers.csv_text import open_csv
from msprof_lsp.mapping.profile.readers.trace_json import read_trace_events
from msprof_lsp.mapping.source.source_index import SourceIndex, SourceTooComplex
from msprof_lsp.mapping.units import us_text_to_ns
from msprof_lsp.mapping.source.workspace import SourceWorkspace
from msprof_lsp.server.__main__ import main

from tests.conftest import REPO, shared_fixture

DEEP = b"[" * 100_000 + b"]" * 100_000
STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 10.0,
        "dur": 100.0, "args": {"External id": 1}}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 20.5, "dur": 5.25,
      "args": {"External id": 2}}
TV_OP = {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 7, "tid": 7, "ts": "1704161511422904.204", "dur": 2.0}


def kineto_file(tmp_path: Path, body: bytes | dict, name: str = "t.pt.trace.json") -> Path:
    path = tmp_path / name
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


def read_kineto(path: Path):
    return kineto.read(ProfileLocation(ProfileKind.KINETO, path))


def refused(fn, path: Path, limit: safe_io.Limit | None = None) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        fn(path)
    err = info.value
    assert str(path) in str(err)
    if limit is not None:
        assert isinstance(err, safe_io.LimitExceeded) and err.limit is limit
        assert limit.value in str(err)
    return err


def finishes(fn, seconds: float = 20.0):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it does not return."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    return out


# -- deep JSON -------------------------------------------------------------------------------


def test_deep_json_in_a_kineto_trace_is_refused_even_off_the_main_thread(tmp_path):
    path = kineto_file(tmp_path, b'{"traceEvents": [{"ph": "X", "args": ' + DEEP + b"}]}")
    refused(read_kineto, path, safe_io.Limit.JSON_DEPTH)
    out = finishes(lambda: read_kineto(path))  # the server reads in a worker thread
    assert isinstance(out.get("error"), safe_io.LimitExceeded)


def test_deep_json_in_trace_view_is_refused(tmp_path):
    path = tmp_path / "trace_view.json"
    path.write_bytes(b"[" + json.dumps(TV_OP).encode() + b',{"ph": "X", "args": {"a": ' + DEEP + b"}}]")
    with pytest.raises(ProfileError) as info:
        read_trace_events(path)
    assert str(path) in str(info.value) and "nesting depth" in str(info.value)


def test_deep_json_in_a_small_json_file_is_refused(tmp_path):
    path = tmp_path / "profiler_info_0.json"
    path.write_bytes(b'{"config": ' + DEEP + b"}")
    refused(load_json, path, safe_io.Limit.JSON_DEPTH)


# -- numbers out of range ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1e308", "1" * 400, "-" + "9" * 30, "1e400"])
def test_time_text_out_of_range_is_a_value_error(text):
    with pytest.raises(ValueError):
        us_text_to_ns(text)


def test_trace_view_numbers_out_of_range_keep_the_event_without_the_value(tmp_path):
    events = [TV_OP, dict(TV_OP, ts="1e308"), dict(TV_OP, ts=int("1" * 400)), dict(TV_OP, dur=int("9" * 400)),
              dict(TV_OP, pid=int("9" * 400)), dict(TV_OP, dur=1e300)]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))
    ev = read_trace_events(path)
    assert len(ev) == len(events)
    assert (ev.ts_ns[1:3] == -(2**63)).all() and ev.ts_ns[0] == 1704161511422904204
    assert any("unreadable 'ts'" in i.message for i in ev.issues)
    assert ev.dur_ns[3] == -1 and ev.dur_ns[5] == -1 and ev.dur_ns[0] == 2000


def test_kineto_numbers_out_of_range_skip_the_event_with_an_issue(tmp_path):
    text = json.dumps({"traceEvents": [STEP, OP, dict(OP, name="aten::add")]})
    text = text.replace('"ts": 20.5, "dur": 5.25, "args": {"External id": 2}}, {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1',
                        '"ts": 20.5, "dur": 5.25, "args": {"External id": 2}}, {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": ' + "1" * 400)
    for bad in (text, text.replace('"ts": 20.5', '"ts": ' + "1" * 400, 1), text.replace('"dur": 5.25', '"dur": 1e308', 1)):
        profile = read_kineto(kineto_file(tmp_path, bad.encode()))
        assert any("skipped" in i.message for i in profile.issues)
        assert len(profile.steps) == 1


# -- duplicated ids and steps -----------------------------------------------------------------


def test_cpu_only_kineto_with_a_duplicated_external_id_loads(tmp_path):
    profile = read_kineto(kineto_file(tmp_path, {"traceEvents": [STEP, OP, dict(OP)]}))
    assert len(profile.steps) == 1 and len(profile.host_ops) >= 2


def test_trace_view_with_a_duplicated_profiler_step_loads(tmp_path):
    from msprof_lsp.mapping.profile.readers.torch_npu import read

    src = next((REPO / "samples/tiny_transformer/npu_profile").glob("*_ascend_pt"))
    root = shutil.copytree(src, tmp_path / src.name)
    tv = root / "ASCEND_PROFILER_OUTPUT/trace_view.json"
    events = json.loads(tv.read_text())
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    tv.write_text(json.dumps(events + [dict(steps[0])]))
    profile = read(ProfileLocation(ProfileKind.TORCH_NPU, root))
    assert len(profile.steps) >= 1


# -- damaged sqlite ---------------------------------------------------------------------------


def test_damaged_torch_npu_db_is_one_clean_error(tmp_path, capsys):
    src = shared_fixture("Ascend-msinsight/db/level1/rank1_ascend_pt")
    root = shutil.copytree(src, tmp_path / "rank1_ascend_pt")
    db = root / "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db"
    data = bytearray(db.read_bytes())
    for page in range(3, len(data) // 4096, 2):  # invalid UTF-8 over the schema and text pages
        data[page * 4096 + 100 : page * 4096 + 400] = b"\xda" * 300
    db.write_bytes(bytes(data))
    code = main(["--check", str(tmp_path), "--profile", str(root), "--no-cache", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (0, 1, 2)
    if code == 2:
        assert len(err) == 1 and str(root) in err[0] and "internal error" not in err[0]


# -- special files ----------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "profiler_info_0.json"
    os.mkfifo(fifo)
    out = finishes(lambda: load_json(fifo), 10)
    assert isinstance(out.get("error"), ProfileError) and "FIFO" in str(out["error"])
    assert safe_io.read_source_text(fifo) is None


def test_a_device_is_refused(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    link = tmp_path / "model.py"
    link.symlink_to("/dev/zero")
    assert finishes(lambda: safe_io.read_source_text(link), 10)["value"] is None
    with pytest.raises(ProfileError, match="character device"):
        safe_io.read_bytes(link)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_check_with_special_files_in_the_workspace_and_profile_finishes(tmp_path):
    ws = shutil.copytree(REPO / "samples/tiny_transformer", tmp_path / "ws", ignore=shutil.ignore_patterns("kineto"))
    (ws / "model.py").unlink()
    os.mkfifo(ws / "model.py")
    (ws / "zero.py").symlink_to("/dev/zero")
    root = next((ws / "npu_profile").glob("*_ascend_pt"))
    (root / "profiler_metadata.json").unlink()
    os.mkfifo(root / "profiler_metadata.json")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "msprof_lsp.server", "--check", str(ws), "--no-cache", "-q"],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr


# -- resource bombs ---------------------------------------------------------------------------


def test_gzip_bomb_stops_at_the_ratio_limit(tmp_path):
    path = tmp_path / "bomb.pt.trace.json.gz"
    with gzip.open(path, "wb", 9) as g:
        g.write(b'{"traceEvents": [')
        for _ in range(5):
            g.write(b" " * (16 << 20))  # 80 MB of whitespace in about 80 kB
        g.write(b"]}")
    assert path.stat().st_size < 1 << 20
    refused(read_kineto, path, safe_io.Limit.INFLATE_RATIO)


def test_gzip_stops_at_the_inflated_size_limit(tmp_path):
    path = kineto_file(tmp_path, {"traceEvents": [OP] * 20_000}, "t.pt.trace.json.gz")
    small = replace(safe_io.LIMITS, whole_file_bytes=100_000)
    refused(lambda p: safe_io.read_maybe_gzip(p, small), path, safe_io.Limit.INFLATED_SIZE)
    assert len(safe_io.read_maybe_gzip(path)) > 100_000  # the default limit takes it


def test_a_huge_json_string_is_refused_by_the_string_limit(tmp_path):
    name = "a" * (safe_io.LIMITS.string_bytes + 10)
    path = kineto_file(tmp_path, {"traceEvents": [STEP, dict(OP, name=name)]})
    refused(read_kineto, path, safe_io.Limit.STRING_SIZE)
    tv = tmp_path / "trace_view.json"
    tv.write_text(json.dumps([TV_OP, dict(TV_OP, name=name)]))
    refused(read_trace_events, tv, safe_io.Limit.STRING_SIZE)


def test_long_strings_with_escapes_are_measured_exactly():
    for text, longest in [(b'["a\\\\"]', 3), (b'["a\\"b"]', 4), (b'["\\\\\\\\", "abcdef"]', 6), (b'[1, 2, 3]', 0)]:
        assert safe_io.longest_json_string(text) == longest
    small = replace(safe_io.LIMITS, string_bytes=8)
    safe_io.check_json("x.json", b'["' + b'a\\"' * 2 + b'", ' + b"1, " * 20 + b"2]", small)  # numbers are not strings
    with pytest.raises(safe_io.LimitExceeded):
        safe_io.check_json("x.json", b'["' + b'a\\"' * 5 + b'"' + b" " * 20 + b"]", small)


def test_a_huge_csv_cell_is_refused_with_its_line(tmp_path):
    path = tmp_path / "kernel_details.csv"
    with open(path, "w") as f:
        f.write("Name,Type,Duration(us)\nMatMul,MatMulV2,1.0\n")
        f.write('"' + "x," * (safe_io.LIMITS.csv_cell_bytes // 2 + 10) + '",Cast,2.0\n')
    err = refused(open_csv, path, safe_io.Limit.CSV_CELL)
    assert err.line == 3


def test_trace_view_event_count_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_io, "LIMITS", replace(safe_io.LIMITS, events=10))
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps([TV_OP] * 11))
    refused(read_trace_events, path, safe_io.Limit.EVENT_COUNT)


# -- source files the parser cannot take --------------------------------------------------------

CHAIN = "x = a" + ".b" * 20_000 + "\n"
PLUS = "x = " + " + ".join(["a"] * 50_000) + "\n"


@pytest.mark.parametrize("text,limit", [(CHAIN, safe_io.Limit.SOURCE_CHAIN), (PLUS, safe_io.Limit.SOURCE_CHAIN),
                                        ("x = " + "(" * 150 + "1" + ")" * 150 + "\n", safe_io.Limit.SOURCE_DEPTH),
                                        ("y = 1\n" * 3 + "x = '" + "a" * ((1 << 20) + 10) + "'\n", safe_io.Limit.SOURCE_LINE),
                                        # the fuzz bomb (one line repeated): libcst took 2.7 GB and aborted
                                        ("x = model(inputs).relu().mean() + torch.zeros(3, 4)\n" * 41_000,
                                         safe_io.Limit.SOURCE_SIZE)])
def test_source_over_a_limit_is_not_parsed(tmp_path, text, limit):
    rejected = safe_io.check_source(text)
    assert rejected is not None and rejected.limit is limit
    path = str(tmp_path / "model.py")
    with pytest.raises(SourceTooComplex) as info:
        SourceIndex.build(path, "import torch\n" + text)
    # the size limit names line 1; the others the line, shifted by the import line put before it
    assert info.value.line == (1 if limit is safe_io.Limit.SOURCE_SIZE else rejected.line + 1) and path in str(info.value)
    assert cst_tools.parse(text) is None
    (tmp_path / "model.py").write_text(text)
    ws = SourceWorkspace([tmp_path])
    assert ws.index(path) is None and "not parsed" in ws.error(path).reason


def test_crashing_source_does_not_kill_the_check(tmp_path):
    """libcst segfaulted (exit 139) on these; now the file is refused with a notice naming it."""
    ws = shutil.copytree(REPO / "samples/tiny_transformer", tmp_path / "ws", ignore=shutil.ignore_patterns("kineto"))
    (ws / "model.py").write_text(CHAIN + PLUS + (REPO / "samples/tiny_transformer/model.py").read_text())
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "msprof_lsp.server", "--check", str(ws), "--no-cache", "-q",
                           "--format", "json"], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    notice = next(f for f in json.loads(proc.stdout)["findings"] if f["code"] == "NPU903")
    assert notice["evidence"]["refused_files"] == [
        f"{ws / 'model.py'}: not parsed: over the operator chain limit (more than 500 operators chained in one "
        "expression) at line 1"]
    assert notice["evidence"]["refused_files"][0] in notice["message"]


def test_real_code_passes_the_source_limits():
    files = [p for d in ("mapping", "hints", "server", "samples", "tests", "benchmarks") for p in (REPO / d).rglob("*.py")]
    assert len(files) > 100
    for p in files:
        assert safe_io.check_source(p.read_text(encoding="utf-8")) is None, p


# -- unexpected errors name the file -----------------------------------------------------------


def test_an_internal_error_names_the_file_being_read(tmp_path, capsys, monkeypatch):
    path = kineto_file(tmp_path, {"traceEvents": [STEP, OP]})

    def broken(trace, location):
        raise KeyError("boom")

    monkeypatch.setattr(kineto, "build_profile", broken)
    monkeypatch.delenv("MSPROF_LSP_DEBUG", raising=False)
    code = main(["--check", str(tmp_path), "--profile", str(path), "--no-cache", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"internal error while reading {path}: KeyError" in err[0]


# -- quadratic edits ----------------------------------------------------------------------------


def test_minimal_edits_on_20000_identical_lines_are_exact():
    body = "x = 1\n" * 20_000
    old = "import torch\n" + body + "y = f(x)\n"
    new = "import torch\nimport torch_npu\n" + body[:60_000] + "z = 2\n" + body[60_000:] + "y = g(x)\n"
    edits = minimal_edits(old, new)
    assert apply_edits(old, edits) == new
    assert [(e.line, e.new_text) for e in edits] == [(2, "import torch_npu\n"), (10_002, "z = 2\n"), (20_002, "g")]


def test_csv_durations_out_of_range_or_negative_are_bad_cells(tmp_path):
    import csv
    import io

    from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table

    src = shared_fixture("Ascend-msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv")
    rows = list(csv.reader(io.StringIO(src.read_text())))
    col = next(i for i, c in enumerate(rows[0]) if c.startswith("Duration"))
    rows[1][col], rows[2][col] = "9" * 400, "-5.0"
    path = tmp_path / "kernel_details.csv"
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    path.write_text(out.getvalue())
    table = read_kernel_table(path)
    assert table.length == len(rows) - 3 and (table.columns["dur_ns"] >= 0).all()
    assert sorted(i.line for i in table.issues if "Duration" in i.message) == [2, 3]
