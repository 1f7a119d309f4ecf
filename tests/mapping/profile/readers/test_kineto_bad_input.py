"""Kineto reader on broken input: a clear ProfileError or Issue naming the file, never a traceback;
and the exact µs -> ns conversion of the timestamps."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.profile.readers.kineto import _us_to_ns, read

BASE = 1_790_857_026_000_000_000


def small_trace() -> dict:
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": BASE,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
             "ts": 10.0, "dur": 100.0, "args": {"External id": 1}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1,
             "ts": 20.5, "dur": 5.25, "args": {"External id": 2, "Sequence number": 3, "Fwd thread id": 0}},
        ],
    }


def load(path: Path):
    return read(ProfileLocation(ProfileKind.KINETO, path))


def error_of(path: Path) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        load(path)
    err = info.value
    assert err.path == str(path)
    assert str(path) in str(err)
    return err


def test_truncated_gzip(tmp_path):
    data = gzip.compress(json.dumps(small_trace()).encode())
    path = tmp_path / "cut.pt.trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    err = error_of(path)
    assert "gzip" in err.message and "truncated" in err.message


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(json.dumps(small_trace()).encode() * 50))
    data[20:40] = b"\x00" * 20  # damage the deflate stream
    path = tmp_path / "bad.pt.trace.json.gz"
    path.write_bytes(bytes(data))
    assert "gzip" in error_of(path).message


def test_not_json_names_line_and_column(tmp_path):
    path = tmp_path / "trace.json"
    bad_line = '  "traceEvents": [ oops ]'
    path.write_text('{\n  "schemaVersion": 1,\n' + bad_line + '\n}\n')
    err = error_of(path)
    assert "not valid JSON" in err.message
    assert err.line == 3
    assert f"column {bad_line.index('oops') + 1}" in err.message


def test_truncated_json(tmp_path):
    text = json.dumps(small_trace(), indent=1)
    path = tmp_path / "half.json"
    path.write_text(text[: len(text) // 2])
    err = error_of(path)
    assert "ends early" in err.message
    assert err.line == text[: len(text) // 2].count("\n") + 1


def test_array_is_torch_npu_not_kineto(tmp_path):
    path = tmp_path / "trace_view.json"
    path.write_text('[{"ph": "X", "name": "aten::relu", "pid": 1, "tid": 1, "ts": "1704161511422904.204", "dur": 2.0}]')
    err = error_of(path)
    assert "array" in err.message and "torch_npu" in err.message


def test_missing_trace_events(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text('{"schemaVersion": 1, "displayTimeUnit": "ms"}')
    assert "traceEvents" in error_of(path).message


def test_trace_events_not_a_list(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text('{"traceEvents": {"ph": "X"}}')
    assert "traceEvents" in error_of(path).message


def test_scalar_document(tmp_path):
    path = tmp_path / "num.json"
    path.write_text("42")
    assert "object" in error_of(path).message


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert "empty" in error_of(empty).message
    gz_empty = tmp_path / "empty.json.gz"
    gz_empty.write_bytes(gzip.compress(b""))
    assert "empty" in error_of(gz_empty).message
    missing = tmp_path / "nope.json"
    assert "cannot read" in error_of(missing).message


def test_odd_typed_events_load_leniently(tmp_path):
    doc = small_trace()
    doc["traceEvents"][1]["args"]["External id"] = "2"  # a string id: converted
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1,
                               "ts": 40.0, "dur": 1.0, "args": "not an object"})  # dropped
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    profile = load(path)
    assert list(profile.host_ops["name"]) == ["ProfilerStep#0", "aten::relu"]
    assert len(profile.issues) == 1
    issue = profile.issues[0]
    assert issue.path == str(path) and "skipped 1 event" in issue.message and "#2" in issue.message


def test_events_without_ts_are_counted(tmp_path):
    doc = small_trace()
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1})
    path = tmp_path / "nots.json"
    path.write_text(json.dumps(doc))
    profile = load(path)
    assert len(profile.host_ops) == 2
    assert [i.message for i in profile.issues] == ["skipped 1 event(s) without a 'ts'"]


def test_utf8_bom_and_non_ascii_names(tmp_path):
    doc = small_trace()
    doc["traceEvents"][1]["name"] = "mein_modell.py(3): vorwärts"
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc, ensure_ascii=False).encode())
    assert "mein_modell.py(3): vorwärts" in set(load(path).host_ops["name"])


def test_timestamps_beyond_exact_range_are_flagged(tmp_path):
    doc = small_trace()
    doc["traceEvents"][1]["ts"] = 9_000_000_000_000.5  # > 2**43 µs after the base
    path = tmp_path / "far.json"
    path.write_text(json.dumps(doc))
    issues = load(path).issues
    assert [i.message for i in issues] == [
        "timestamps with fractions reach 9000000000000 µs after baseTimeNanoseconds; a float64 "
        "holds such values only to ±1 ns"
    ]


def test_whole_microsecond_timestamps_at_epoch_magnitude_are_exact(tmp_path):
    # Real CUDA traces write epoch µs as JSON integers (no baseTimeNanoseconds): exact, no notice.
    doc = small_trace()
    doc.pop("baseTimeNanoseconds", None)
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = 1_695_835_542_514_261 + int(e["ts"])
    path = tmp_path / "epoch.json"
    path.write_text(json.dumps(doc))
    profile = load(path)
    assert not [i for i in profile.issues if "float64" in i.message]
    assert int(profile.host_ops["start_ns"].min()) == (1_695_835_542_514_261 + 10) * 1000


@given(st.integers(min_value=0, max_value=2**43 * 1000 - 1))
def test_us_to_ns_is_exact_below_2_pow_43(n):
    # What Kineto writes ("{us}.{ns:03}"), as a JSON reader parses it.
    text = f"{n // 1000}.{n % 1000:03d}"
    assert int(_us_to_ns(np.array([float(text)]))[0]) == n


def test_times_of_a_small_trace(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(small_trace()))
    ops = load(path).host_ops
    assert list(ops["start_ns"]) == [BASE + 10_000, BASE + 20_500]
    assert list(ops["dur_ns"]) == [100_000, 5_250]
