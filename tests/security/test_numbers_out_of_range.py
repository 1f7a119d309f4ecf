"""Numbers out of range in any profile file are skipped with a notice naming the file; they never
end ``--check`` with "internal error" (issue 22, item 4; docs/limits.md, "Numbers").

Each reproducer is built from the repository's samples (the CNN torch_npu export and its Kineto
trace), mutated in one value, and run through the ``--check`` entry in-process.
"""

from __future__ import annotations

import gzip
import json
import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from msprof_lsp.mapping.numbers import fit_int64_in_place, float_of, int64_of
from msprof_lsp.mapping.profile import cluster, safe_io
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.server.__main__ import main

REPO = Path(__file__).resolve().parents[2]
NPU_SAMPLE = REPO / "samples" / "cnn_classifier" / "npu_profile"
KINETO_SAMPLE = next((REPO / "samples" / "cnn_classifier" / "kineto").glob("*.json.gz"))
SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says True, int() raises
TWENTY_NINES = "9" * 20
BEYOND_INT64 = "9999999999999999999"


@pytest.fixture(autouse=True)
def _quiet_env(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("MSPROF_LSP_DEBUG", raising=False)


def check(folder: Path, capsys, *extra: str) -> tuple[int, list[str], str]:
    """Exit status, the analysed profile's notices (JSON report) and stderr of ``--check``."""
    code = main(["--check", str(folder), "--no-cache", "--format", "json", *extra])
    captured = capsys.readouterr()
    issues = json.loads(captured.out)["profile"]["issues"] if captured.out.strip() else []
    return code, issues, captured.err


def assert_noticed(code: int, issues: list[str], err: str, file: Path, words: str) -> None:
    assert code != 2, err
    assert "internal error" not in err
    hits = [i for i in issues if i.startswith(str(file)) and words in i]
    assert hits, issues


# ---------------------------------------------------------------------------------------------
# Builders


def npu_copy(tmp_path: Path, ranks: int = 1) -> list[Path]:
    """The CNN sample's torch_npu export (one or both ranks) in ``tmp_path``; the run folders."""
    dest = tmp_path / "prof"
    shutil.copytree(NPU_SAMPLE, dest)
    runs = sorted(p for p in dest.iterdir() if p.is_dir())
    for extra in runs[ranks:]:
        shutil.rmtree(extra)
    return runs[:ranks]


def set_first_complete_event(events: list[dict], **values: object) -> None:
    ev = next(e for e in events if e.get("ph") == "X")
    ev.update(values)


def kineto_copy(tmp_path: Path, **values: object) -> Path:
    trace = json.loads(gzip.decompress(KINETO_SAMPLE.read_bytes()))
    set_first_complete_event(trace["traceEvents"], **values)
    out = tmp_path / "kineto" / KINETO_SAMPLE.name
    out.parent.mkdir()
    out.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return out


MEMORY_CSVS = {
    "operator_memory.csv": (
        ["Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)", "Active Release Time(us)", "Duration(us)",
         "Active Duration(us)", "Allocation Total Allocated(MB)", "Allocation Total Reserved(MB)",
         "Allocation Total Active(MB)", "Release Total Allocated(MB)", "Release Total Reserved(MB)",
         "Release Total Active(MB)", "Stream Ptr", "Device Type"],
        ["aten::empty", "4", "1753948800000000.000\t", "1753948800000010.000\t", "", "10", "", "1", "2", "1",
         "1", "2", "1", "6"],
    ),
    "memory_record.csv": (
        ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)", "Total Active(MB)",
         "Stream Ptr", "Device Type"],
        ["PTA", "1753948800000000.000\t", "1", "2", "1", "6"],
    ),
}


# ---------------------------------------------------------------------------------------------
# Reproducers through --check


@pytest.mark.parametrize("field", ["pid", "tid"])
@pytest.mark.parametrize("value", [BEYOND_INT64, SUPERSCRIPT_TWO])
def test_kineto_pid_tid_out_of_range_skips_the_event(tmp_path, capsys, field, value):
    trace = kineto_copy(tmp_path, **{field: value})
    code, issues, err = check(trace.parent, capsys)
    assert_noticed(code, issues, err, trace, "pid/tid is not an integer in int64 range")


@pytest.mark.parametrize("field", ["pid", "tid"])
@pytest.mark.parametrize("value", [BEYOND_INT64, SUPERSCRIPT_TWO])
def test_trace_view_pid_tid_out_of_range_is_no_internal_error(tmp_path, capsys, field, value):
    (run,) = npu_copy(tmp_path)
    path = run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace = json.loads(path.read_text())
    set_first_complete_event(trace if isinstance(trace, list) else trace["traceEvents"], **{field: value})
    path.write_text(json.dumps(trace))
    code, _, err = check(tmp_path, capsys)
    assert code != 2 and "internal error" not in err, err


@pytest.mark.parametrize("name", sorted(MEMORY_CSVS))
@pytest.mark.parametrize("device", ["NPU:" + TWENTY_NINES, "NPU:" + SUPERSCRIPT_TWO])
def test_memory_csv_device_type_out_of_range_keeps_the_rows(tmp_path, capsys, name, device):
    (run,) = npu_copy(tmp_path)
    header, row = MEMORY_CSVS[name]
    path = run / "ASCEND_PROFILER_OUTPUT" / name
    path.write_text(",".join(header) + "\n" + ",".join([*row, device]) + "\n")
    code, issues, err = check(tmp_path, capsys)
    assert_noticed(code, issues, err, path, "is not an NPU index in int64 range")


@pytest.mark.parametrize("rank_id", [SUPERSCRIPT_TWO, int("9" * 400), "9" * 400, TWENTY_NINES])
@pytest.mark.parametrize("ranks", [1, 2])
def test_profiler_info_rank_id_out_of_range_is_ignored(tmp_path, capsys, rank_id, ranks):
    run = npu_copy(tmp_path, ranks)[0]
    path = next(run.glob("profiler_info_*.json"))
    info = json.loads(path.read_text())
    info["rank_id"] = rank_id
    path.write_text(json.dumps(info))
    code, issues, err = check(tmp_path, capsys, "--rank", "0")
    assert_noticed(code, issues, err, path, "is not an integer in int64 range; ignored")


@pytest.mark.parametrize("value", [SUPERSCRIPT_TWO, int("9" * 400), 2**64])
def test_profiler_metadata_numbers_beyond_int64_do_not_stop_a_multi_rank_run(tmp_path, capsys, value):
    run = npu_copy(tmp_path, 2)[0]
    path = run / "profiler_metadata.json"
    meta = json.loads(path.read_text())
    meta["rank_id"] = value
    meta["start_info"] = {"nested": [value, {"deeper": value}]}
    path.write_text(json.dumps(meta))
    code, _, err = check(tmp_path, capsys, "--rank", "0")
    assert code != 2 and "internal error" not in err, err


@pytest.mark.parametrize("size", [2**64, int("9" * 400)])
def test_communication_matrix_size_beyond_int64_keeps_the_rank(tmp_path, capsys, size):
    runs = npu_copy(tmp_path, 2)
    path = runs[1] / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    text = path.read_text()
    assert '"Transit Size(MB)": 2.285928' in text
    path.write_text(text.replace('"Transit Size(MB)": 2.285928', f'"Transit Size(MB)": {size}', 1))
    code, issues, err = check(tmp_path, capsys, "--rank", "1")
    assert_noticed(code, issues, err, path, "beyond int64 read as floats")
    assert not any("left out of the cluster summary" in i for i in issues)


# ---------------------------------------------------------------------------------------------
# An exception that still escapes a rank worker names that rank's file


def test_unexpected_error_in_a_rank_worker_names_the_file(tmp_path, monkeypatch):
    broken = tmp_path / "rank1" / "trace_view.json"

    def explode(location, **_):
        safe_io.note_reading(broken)
        raise ValueError("invalid literal for int() with base 10: '²'")

    monkeypatch.setattr(cluster, "load_location", explode)
    loc = ProfileLocation(ProfileKind.TORCH_NPU, tmp_path / "rank1", 1, tmp_path / "rank1", True)
    with pytest.raises(cluster.RankCrashed) as info:
        cluster._load_one(loc, False, None)
    carried = pickle.loads(pickle.dumps(info.value))  # as the pool hands it to the parent
    line = safe_io.describe_unexpected(carried)
    assert line.startswith(f"internal error while reading {broken}: ")
    assert "ValueError" in line and "\n" not in line


# ---------------------------------------------------------------------------------------------
# The converter


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0), (-1, -1), ("42", 42), (" 7\t", 7), ("+5", 5), ("-0", 0), (3.0, 3), (np.int64(9), 9),
        (2**63 - 1, 2**63 - 1), (-(2**63), -(2**63)), (str(2**63 - 1), 2**63 - 1), (str(-(2**63)), -(2**63)),
        ("0" * 30 + "1", 1),
        (2**63, None), (-(2**63) - 1, None), (str(2**63), None), (BEYOND_INT64, None), (TWENTY_NINES, None),
        ("9" * 400, None), (int("9" * 400), None), ("9" * 5000, None), (np.uint64(2**64 - 1), None),
        (SUPERSCRIPT_TWO, None), ("\u0663", None), ("\uff11", None),  # Arabic-Indic 3, fullwidth 1
        (float("nan"), None), (float("inf"), None), (-float("inf"), None), (1e308, None), (1.5, None),
        ("1.0", None), ("1e3", None), ("1_000", None), ("0x10", None), ("", None), ("-", None),
        (True, None), (None, None), ([1], None),
    ],
)
def test_int64_of(value, expected):
    assert int64_of(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.5, 1.5), (2, 2.0), ("1.5", 1.5), (" 2.5e3\t", 2500.0), ("-.5", -0.5), ("1e308", 1e308), (1e308, 1e308),
        (2**64, float(2**64)), (np.float32(0.5), 0.5), (str(2**63), float(2**63)),
        (float("nan"), None), (float("inf"), None), ("nan", None), ("inf", None), ("Infinity", None),
        ("1e309", None), ("1e999", None), (int("9" * 400), None), ("9" * 400, None),
        (SUPERSCRIPT_TWO, None), ("\u0663", None), ("1_0", None), ("", None), (True, None), (None, None),
    ],
)
def test_float_of(value, expected):
    got = float_of(value)
    assert got == expected and (got is None or math.isfinite(got))


def test_fit_int64_in_place_reaches_any_depth():
    deep: dict = {"v": 2**64}
    node = deep
    for _ in range(5000):  # deeper than the interpreter's recursion limit
        node["next"] = {"v": 1, "big": [-(2**70), 5]}
        node = node["next"]
    assert fit_int64_in_place(deep) == 5001
    assert deep["v"] == str(2**64) and deep["next"]["big"] == [str(-(2**70)), 5] and deep["next"]["v"] == 1


def test_a_bug_in_an_optional_reader_names_that_file(tmp_path):
    from msprof_lsp.mapping.profile.readers.assemble import optional

    wanted, other = tmp_path / "operator_memory.csv", tmp_path / "trace_view.json"

    def reader(path):
        safe_io.note_reading(other)  # the reader opened another file last
        raise OverflowError("Python int too large to convert to C long")

    with pytest.raises(OverflowError) as info:
        optional(wanted, [], reader)
    assert safe_io.file_of(info.value) == str(wanted)


# ---------------------------------------------------------------------------------------------
# The DB export (written by tests/synth, then one value changed with SQL)


def db_copy(tmp_path: Path) -> Path:
    from dataclasses import replace as dc_replace

    from tests.synth.sample_runs import CnnKnobs, cnn_runs
    from tests.synth.write_db import write_torch_npu_db

    (run,) = cnn_runs(REPO / "samples" / "cnn_classifier", dc_replace(CnnKnobs(), ranks=1))
    return write_torch_npu_db(run, tmp_path / "prof")


def db_update(root: Path, name: str, sql: str) -> Path:
    import sqlite3

    path = next(root.rglob(name))
    con = sqlite3.connect(path)
    try:
        table = sql.split('"')[1] if '"' in sql else None
        if table == "StepTraceTime":  # the column's exact spelling varies: fill it in
            col = next(r[1] for r in con.execute('PRAGMA table_info("StepTraceTime")') if r[1].lower().startswith("computing"))
            sql = sql.replace("{computing}", col)
        con.executescript(sql)
        con.commit()
    finally:
        con.close()
    return path


@pytest.mark.parametrize(
    ("name", "sql", "words"),
    [
        ("ascend_pytorch_profiler_0.db", "UPDATE RANK_DEVICE_MAP SET rankId = '\u00b2'", "RANK_DEVICE_MAP rankId"),
        ("ascend_pytorch_profiler_0.db", "UPDATE RANK_DEVICE_MAP SET deviceId = '" + TWENTY_NINES + "'",
         "RANK_DEVICE_MAP deviceId"),
        ("ascend_pytorch_profiler_0.db", "UPDATE STEP_TIME SET id = 'step' || '" + "9" * 30 + "'", "STEP_TIME"),
        ("ascend_pytorch_profiler_0.db", "CREATE TABLE AICORE_FREQ (timestampNs INTEGER, freq INTEGER); "
         "INSERT INTO AICORE_FREQ VALUES (1753948800000000000, 1800), (1753948800000000001, '1e999')", "AICORE_FREQ"),
        ("ascend_pytorch_profiler_0.db", "ALTER TABLE STRING_IDS RENAME TO S0; "
         "CREATE TABLE STRING_IDS (id TEXT, value TEXT); INSERT INTO STRING_IDS SELECT id, value FROM S0; "
         "DROP TABLE S0; INSERT INTO STRING_IDS VALUES ('\u00b2', 'x'), ('" + TWENTY_NINES + "', 'y')", "STRING_IDS"),
        ("analysis.db", 'UPDATE "StepTraceTime" SET "{computing}" = 1e300', "StepTraceTime"),
        ("analysis.db", "UPDATE \"StepTraceTime\" SET \"{computing}\" = '1e999'", "StepTraceTime"),
    ],
)
def test_db_values_out_of_range_are_skipped_with_a_notice(tmp_path, capsys, name, sql, words):
    root = db_copy(tmp_path)
    path = db_update(root, name, sql)
    code, issues, err = check(tmp_path / "prof", capsys)
    assert_noticed(code, issues, err, path, words)


def test_trace_view_module_and_device_numbers_beyond_int64(tmp_path, capsys):
    (run,) = npu_copy(tmp_path)
    path = run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace = json.loads(path.read_text())
    events = trace if isinstance(trace, list) else trace["traceEvents"]
    first = next(e for e in events if e.get("ph") == "X")
    events.append({**first, "name": "nn.Module: Linear_" + "9" * 30, "cat": "python_function"})
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_labels":
            e["args"] = {"labels": "NPU " + TWENTY_NINES}
    path.write_text(json.dumps(trace))
    code, _, err = check(tmp_path, capsys)
    assert code != 2 and "internal error" not in err, err


def test_profiler_info_file_name_rank_beyond_int64(tmp_path, capsys):
    (run,) = npu_copy(tmp_path)
    info = next(run.glob("profiler_info_*.json"))
    info.rename(info.with_name(f"profiler_info_{'9' * 30}.json"))
    code, _, err = check(tmp_path, capsys)
    assert code != 2 and "internal error" not in err, err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("81920,4096;8192,512", [(81920, 4096), (8192, 512)]),
        (" 3 , 4 ", [(3, 4)]),
        (f"2,{2**63 - 1}", [(2, 2**63 - 1)]),
        (f"2,{2**63}", [None]),
        ("2," + "9" * 400, [None]),
        ("9" * 5000, [None]),
        ("2," + SUPERSCRIPT_TWO, [None]),
        ("\u0663,4", [None]),
        ("1_0,2", [None]),
    ],
)
def test_shapes_with_dims_beyond_int64_are_no_shape(text, expected):
    from msprof_lsp.mapping.profile.shapes import parse_shapes

    assert parse_shapes(text) == expected


def test_a_bug_in_the_cluster_summary_names_the_rank(tmp_path, monkeypatch):
    from msprof_lsp.mapping.profile.model import Profile, ProfileMeta

    def explode(profile, rank=None):
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(cluster, "comm_links", explode)
    where = tmp_path / "rank1"
    loc = ProfileLocation(ProfileKind.TORCH_NPU, where, 1, where, True)
    profile = Profile(meta=ProfileMeta(kind=ProfileKind.TORCH_NPU, path=str(where)))
    safe_io.note_reading(tmp_path / "some" / "other.json")  # what this thread read last
    with pytest.raises(OverflowError) as info:
        cluster.summarize({1: profile}, {1: loc})
    assert safe_io.describe_unexpected(info.value).startswith(f"internal error while reading {where}: ")


def test_a_rank_the_codec_cannot_carry_is_left_out_naming_it(tmp_path, monkeypatch):
    from msprof_lsp.mapping.profile.model import Profile, ProfileMeta

    where = tmp_path / "rank1"
    loaded = Profile(meta=ProfileMeta(kind=ProfileKind.TORCH_NPU, path=str(where)))
    loaded.meta.extra["start_info"] = {"x": 2**70}  # as if a reader had kept it without fitting it
    monkeypatch.setattr(cluster, "load_location", lambda location, **_: loaded)
    loc = ProfileLocation(ProfileKind.TORCH_NPU, where, 1, where, True)
    payload, error = cluster._load_one(loc, False, None)  # raised OverflowError (no file) before
    assert payload is None and error is not None
    assert error[0] == str(where) and "cannot hand the loaded rank back" in error[1]


def test_trace_json_ids_in_unicode_digits_are_names():
    from msprof_lsp.mapping.profile.readers import trace_json

    pool = trace_json._pool()
    names: dict[int, str] = {}
    assert trace_json._one_int("42", pool, names) == 42
    for text in (SUPERSCRIPT_TWO, "\u0663", "1_0", str(2**63)):
        n = trace_json._one_int(text, pool, names)
        assert n < -1 and names[n] == text


@pytest.mark.parametrize("number", ["9" * 30, "\u0663"])
def test_kineto_profiler_step_number_beyond_int64_makes_no_step(tmp_path, capsys, number):
    trace = json.loads(gzip.decompress(KINETO_SAMPLE.read_bytes()))
    step = next(e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    step["name"] = "ProfilerStep#" + number
    out = tmp_path / "kineto" / KINETO_SAMPLE.name
    out.parent.mkdir()
    out.write_bytes(gzip.compress(json.dumps(trace).encode()))
    code, issues, err = check(out.parent, capsys)
    assert_noticed(code, issues, err, out, "ProfilerStep op(s) whose number is no ASCII integer in int64 range")


@pytest.mark.parametrize("line", ["7" * 5_000, "9" * 20, "\u0663"])
def test_a_stack_frame_whose_line_is_no_int64_is_left_unmapped(line: str) -> None:
    """A 5,000-digit line number in a call stack raised int()'s digit limit (fuzz campaign)."""
    from msprof_lsp.mapping.profile.frames import parse_frame

    frame = parse_frame(f"/ws/model.py({line}): forward")
    assert frame.file == "" and frame.line == 0
    assert parse_frame("/ws/model.py(12): forward").line == 12



def test_integer_literals_in_source_past_the_digit_limit_are_no_values(tmp_path: Path, capsys) -> None:
    """Workspace source is hostile too: a 5,000-digit literal made NPU106's related-literal search
    raise (a rule traceback on stderr, found by the campaign), and ``int()``/``evaluated_value``
    of one in the fix helpers and the size evaluator would too; ``0x1`` as a subscript raised."""
    import libcst as cst

    from msprof_lsp.hints.fixes import cst_tools
    from msprof_lsp.mapping.numbers import int_literal

    assert int_literal("0x10") == 16 and int_literal("1_024") == 1024 and int_literal("7" * 5_000) is None
    assert cst_tools.literal(cst.parse_expression("7" * 5_000)) is cst_tools.NOT_LITERAL
    ws = shutil.copytree(REPO / "samples" / "tiny_transformer", tmp_path / "ws")
    with open(ws / "model.py", "a", encoding="utf-8") as f:  # 32003 is a dim NPU106 looks for
        f.write(f"\nBIG = {'32003' * 1_000}\nFIRST = [1][0x0]\n")
    code = main(["--check", str(ws), "--no-cache", "--format", "json", "--select", "NPU106"])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err and "failed" not in captured.err, captured.err
    (finding,) = [f for f in json.loads(captured.out)["findings"] if f["code"] == "NPU106"]
    assert any("32003 here" in r["message"] for r in finding["related"])
