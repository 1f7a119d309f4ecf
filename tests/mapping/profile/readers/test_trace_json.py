"""trace_json: the chunked bare-array decoder, checked against the json module on real and built data."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.readers.trace_json import NO_INT, NO_TIME, read_trace_events
from conftest import shared_fixture

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
VERL = (
    "verl-project-rl-insight/data/recipe/mstx_data/mstx_profile/agent_loop_rollout_replica_0/"
    "xxx_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
)


def exact_ns(value: object) -> int | None:
    """The test's own µs -> ns conversion: Decimal straight from the JSON text."""
    if value is None:
        return None
    return int(Decimal(str(value)) * 1000)


def decoded_ts(ev) -> list[int | None]:
    return [None if t == NO_TIME else int(t) for t in ev.ts_ns]


@pytest.mark.parametrize("chunk_bytes", [2048, 65536, 8 << 20])
def test_real_2024_trace_matches_json_module(chunk_bytes: int) -> None:
    path = shared_fixture(TRACE_2024)
    ref = json.loads(path.read_text(encoding="utf-8"))
    ev = read_trace_events(path, chunk_bytes=chunk_bytes)
    assert ev.complete and not ev.issues
    assert len(ev) == len(ref) == 3670
    assert list(ev.text(ev.name)) == [e.get("name", "") for e in ref]
    assert list(ev.text(ev.ph)) == [e["ph"] for e in ref]
    assert list(ev.text(ev.cat)) == [e.get("cat", "") for e in ref]
    assert decoded_ts(ev) == [exact_ns(e.get("ts")) for e in ref]
    assert [int(d) for d in ev.dur_ns] == [round(e["dur"] * 1000) if "dur" in e else -1 for e in ref]
    assert ev.pid.tolist() == [e["pid"] for e in ref]
    # flow ids: ints (torch_to_npu = kernel ts in ns) and numeric strings (HostToDevice)
    assert [None if i == NO_INT else int(i) for i in ev.id] == [
        int(e["id"]) if "id" in e else None for e in ref
    ]
    seq = ev.args["Sequence number"]
    assert [None if s == NO_INT else int(s) for s in seq] == [e.get("args", {}).get("Sequence number") for e in ref]


def test_real_2024_kernel_ts_equals_torch_to_npu_id() -> None:
    """The torch_to_npu id is the kernel start in ns -- our ns must be exact."""
    path = shared_fixture(TRACE_2024)
    ref = json.loads(path.read_text(encoding="utf-8"))
    ev = read_trace_events(path)
    f_rows = [i for i, e in enumerate(ref) if e.get("name") == "torch_to_npu" and e["ph"] == "f"]
    assert len(f_rows) == 274
    assert all(int(ev.ts_ns[i]) == ref[i]["id"] for i in f_rows)


def test_indented_verl_excerpt() -> None:
    path = shared_fixture(VERL)
    ref = json.loads(path.read_text(encoding="utf-8"))
    ev = read_trace_events(path, chunk_bytes=512)
    assert len(ev) == len(ref) and not ev.issues
    assert decoded_ts(ev) == [exact_ns(e.get("ts")) for e in ref]
    labels = [ev.strings[c] for c in ev.args["labels"] if c >= 0]
    assert labels == [e["args"]["labels"] for e in ref if e["name"] == "process_labels"]
    assert ev.pid.tolist() == [e["pid"] for e in ref]  # 3555714976: beyond int32


def write(tmp_path: Path, text: str | bytes, name: str = "trace_view.json") -> Path:
    path = tmp_path / name
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8", newline="")
    else:
        path.write_bytes(text)
    return path


def test_numeric_epoch_ts_stays_exact(tmp_path: Path) -> None:
    # A JSON number with 19 significant digits: float64 cannot hold it.
    text = '[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1704161511422904.204, "dur": 1.35}, ' \
           '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": "1704161511422905.2", "dur": 2}]'
    ev = read_trace_events(write(tmp_path, text))
    assert ev.ts_ns.tolist() == [1704161511422904204, 1704161511422905200]
    assert ev.dur_ns.tolist() == [1350, 2000]


def test_string_pids_tids_and_ids(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "a", "pid": "437675", "tid": "12", "ts": "1.5", "dur": 1.0},
        {"ph": "i", "name": "Iteration Start", "pid": "Traces", "tid": "", "ts": "2"},
        {"ph": "s", "name": "HostToDevice38654705663", "id": "38654705663", "pid": 1, "tid": 2, "ts": "3"},
        {"ph": "f", "name": "x", "id": "not-a-number", "pid": 1, "tid": 2, "ts": "4"},
    ]
    ev = read_trace_events(write(tmp_path, json.dumps(events)))
    assert ev.pid[0] == 437675 and ev.tid[0] == 12
    assert ev.pid[1] < -1 and ev.pid_names[int(ev.pid[1])] == "Traces"
    assert ev.id[2] == 38654705663
    assert ev.id[3] < -1 and ev.id[3] != ev.id[2]
    assert ev.ts_ns.tolist() == [1500, 2000, 3000, 4000]


def test_fields_of_unexpected_types_do_not_lose_the_chunk(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": "10.000", "dur": 1.0, "args": {"Sequence number": 4}},
        {"ph": "X", "name": "odd", "pid": True, "tid": 1.0, "ts": "11.000", "dur": "2.5", "args": {"Sequence number": [1]}},
        7,
        {"ph": "X", "name": "ts?", "pid": 1, "tid": 1, "ts": "soon", "dur": 1.0},
    ]
    ev = read_trace_events(write(tmp_path, json.dumps(events)))
    assert list(ev.text(ev.name)) == ["ok", "odd", "ts?"]
    assert ev.args["Sequence number"].tolist() == [4, NO_INT, NO_INT]
    assert ev.tid.tolist() == [1, 1, 1] and ev.dur_ns.tolist() == [1000, 2500, 1000]
    assert ev.ts_ns.tolist() == [10000, 11000, NO_TIME]
    messages = " ".join(i.message for i in ev.issues)
    assert "1 array entries are not JSON objects" in messages
    assert "1 events have an unreadable 'ts'" in messages


def spec_events(n: int) -> list[dict]:
    stack = ";\r\n".join(["/w/model.py(12): forward", "/w/train.py(40): <module>"])
    return [
        {"ph": "X", "name": f"aten::op{i}", "pid": 7, "tid": 7, "ts": f"{1704161511420000 + i}.{i % 1000:03d}",
         "dur": 1.25, "cat": "cpu_op", "args": {"Sequence number": i, "Call stack": stack + " }, {"}}
        for i in range(n)
    ]


def test_truncated_without_closing_bracket(tmp_path: Path) -> None:
    events = spec_events(50)
    text = json.dumps(events)
    cut = text[:-1]  # everything but "]"
    ev = read_trace_events(write(tmp_path, cut), chunk_bytes=1024)
    assert len(ev) == 50 and not ev.complete
    (issue,) = ev.issues
    assert issue.path.endswith("trace_view.json") and "no closing ']'" in issue.message
    assert f"byte {len(cut.encode())}" in issue.message and issue.line == 1


@pytest.mark.parametrize("chunk_bytes", [700, 1 << 20])
def test_truncated_mid_event_keeps_complete_events(tmp_path: Path, chunk_bytes: int) -> None:
    events = spec_events(40)
    text = json.dumps(events, indent=1)  # several lines: the Issue's line must be right
    cut_at = text.index('"aten::op31"') + 5  # inside event 31
    ev = read_trace_events(write(tmp_path, text[:cut_at]), chunk_bytes=chunk_bytes)
    assert len(ev) == 31 and not ev.complete
    assert list(ev.text(ev.name)) == [e["name"] for e in events[:31]]
    (issue,) = ev.issues
    end_of_31 = len(json.dumps(events[:31], indent=1)[:-2].encode())  # through event 30's "}"
    assert f"loaded 31 complete events; the last one ends at byte {end_of_31}" in issue.message
    assert issue.line == text[:end_of_31].count("\n") + 1


def test_malformed_in_the_middle_keeps_events_before_it(tmp_path: Path) -> None:
    events = spec_events(60)
    good = json.dumps(events[:25])[:-1]  # "[ ... }" : 25 whole events
    rest = json.dumps(events[25:])[1:]
    text = good + ",\n  garbage!\n, " + rest
    for chunk_bytes in (900, 1 << 20):
        ev = read_trace_events(write(tmp_path, text), chunk_bytes=chunk_bytes)
        assert len(ev) == 25
        (issue,) = ev.issues
        assert "malformed JSON" in issue.message and issue.line == 2
        assert f"byte {len(good.encode()) + 4}" in issue.message  # where "garbage" starts


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "is empty"),
        (b"  \n ", "is empty"),
        (b"hello world", "is not JSON"),
        (b'{"traceEvents": [], "schemaVersion": 1}', "Kineto"),
        ("[]".encode("utf-16"), "UTF-16"),
        (b"[{]", "not valid JSON"),
    ],
)
def test_not_an_event_array_is_a_profile_error(tmp_path: Path, content: bytes, expected: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(ProfileError) as err:
        read_trace_events(path)
    assert expected in str(err.value) and str(path) in str(err.value)


def test_missing_file_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        read_trace_events(tmp_path / "nope.json")


def test_bom_empty_array_and_invalid_utf8(tmp_path: Path) -> None:
    assert len(read_trace_events(write(tmp_path, b"\xef\xbb\xbf [ ] \n"))) == 0
    ev = read_trace_events(write(tmp_path, b'[{"ph": "X", "name": "caf\xe9", "ts": "1"}]'))
    assert list(ev.text(ev.name)) == ["caf\ufffd"] and "UTF-8" in ev.issues[0].message


def test_progress_reports_fractions_of_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps(spec_events(400)))
    seen: list[float | None] = []
    read_trace_events(path, chunk_bytes=4096, progress=lambda _msg, f: seen.append(f))
    fractions = [f for f in seen if f is not None]
    assert len(fractions) > 5 and fractions == sorted(fractions)
    assert fractions[0] == 0.0 and fractions[-1] == 1.0


event_strategy = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "s", "f", "M", "i"]),
        "name": st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12),
        "pid": st.one_of(st.integers(0, 2**40), st.from_regex(r"[0-9]{1,9}", fullmatch=True)),
        "tid": st.integers(0, 2**31),
        "ts": st.one_of(
            st.from_regex(r"1[0-9]{15}\.[0-9]{3}", fullmatch=True),
            st.from_regex(r"[0-9]{1,12}(\.[0-9]{0,3})?", fullmatch=True),
        ),
    },
    optional={
        "dur": st.floats(0, 1e6, allow_nan=False),
        "args": st.fixed_dictionaries(
            {}, optional={"Call stack": st.text(alphabet="ab}{, ;\r\n\"\\", max_size=20), "Sequence number": st.integers(-1, 10**6)}
        ),
    },
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event_strategy, max_size=30), chunk=st.integers(16, 400), indent=st.sampled_from([None, 2]))
def test_any_chunking_gives_the_json_module_result(tmp_path: Path, events: list[dict], chunk: int, indent) -> None:
    path = write(tmp_path, json.dumps(events, indent=indent, ensure_ascii=False))
    ev = read_trace_events(path, chunk_bytes=chunk)
    assert not ev.issues
    assert list(ev.text(ev.name)) == [e["name"] for e in events]
    assert decoded_ts(ev) == [exact_ns(e["ts"]) for e in events]
    assert ev.pid.tolist() == [int(e["pid"]) for e in events]
    stacks = [ev.strings[c] if c >= 0 else None for c in ev.args["Call stack"]]
    assert stacks == [e.get("args", {}).get("Call stack") for e in events]
    assert np.array_equal(ev.dur_ns, [round(e["dur"] * 1000) if "dur" in e else -1 for e in events])


def test_int_column_out_of_range_values_without_warnings() -> None:
    """HCCL writes notify_id 18446744073709551615 (2**64-1): beyond int64, so it cannot be cast
    from float64 -- it gets a synthetic id, the exact values around it stay exact, no warning."""
    import warnings

    from msprof_lsp.mapping.profile.readers.trace_json import _int_column, _pool

    values = [7, None, "18446744073709551615", 2**60 + 1, "12", float("inf"), -3]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _int_column(values, _pool())
    assert out[0] == 7 and out[1] == NO_INT and out[3] == 2**60 + 1 and out[4] == 12 and out[6] == -3
    assert out[2] < -1 and out[2] != NO_INT  # a string id beyond int64: a synthetic id
    assert out[5] == NO_INT  # inf: no value, never a garbage cast


def test_real_text_export_loads_with_warnings_as_errors() -> None:
    import warnings

    from msprof_lsp.mapping.profile.discover import discover
    from msprof_lsp.mapping.profile.load import load_location

    path = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (loc,) = discover([path])
        p = load_location(loc)
    assert len(p.kernels) == 539  # 535 Ascend Hardware tasks + the 4 HCCL rows of kernel_details
