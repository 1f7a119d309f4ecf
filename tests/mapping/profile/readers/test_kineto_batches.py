"""Kineto traceEvents decoded in blocks (kineto_json._batches): wherever the blocks are cut, the
profile is the one a single block gives; a block with an event of unexpected form is read leniently
and the notice counts events across the whole file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.profile.readers import kineto_json
from msprof_lsp.mapping.profile.readers.kineto import read

BASE = 1_790_857_026_000_000_000


def _events(n: int) -> list[dict]:
    events: list[dict] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
                           "ts": 0.0, "dur": 10.0 * n + 100, "args": {"External id": 1}}]
    for i in range(n):
        ts = 10.0 * i + 1.5
        events += [
            # "},{" inside strings and in nested values: cuts there leave a block that is not JSON
            {"ph": "X", "cat": "cpu_op", "name": "aten::add},{\"x\"" if i % 3 else "aten::mm", "pid": 1, "tid": 1,
             "ts": ts, "dur": 4.0, "args": {"External id": 10 + i, "Sequence number": i,
                                             "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "c},{"],
                                             "Concrete Inputs": ["", "},{"], "extra": [{"a": 1}, {"b": [{"c": 2}]}]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": ts + 1, "dur": 1.0, "args": {"correlation": 1000 + i}},
            {"ph": "X", "cat": "kernel", "name": "k}, {", "pid": 0, "tid": 7, "ts": ts + 2, "dur": 1.0,
             "args": {"correlation": 1000 + i, "device": 0, "stream": 7}},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1000 + i, "pid": 1, "tid": 1, "ts": ts + 1},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1000 + i, "pid": 0, "tid": 7, "ts": ts + 2, "bp": "e"},
            {"ph": "X", "cat": "python_function", "name": "model.py(12): forward", "pid": 1, "tid": 1,
             "ts": ts - 0.5, "dur": 6.0, "args": {"Python id": i + 2, "Python parent id": 1}},
        ]
    return events


def _write(path: Path, events: list[dict], indent: int | None = None) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE, "traceEvents": events,
                                "distributedInfo": {"rank": 0}}, indent=indent))
    return path


def _read(path: Path, chunk: int, monkeypatch):
    monkeypatch.setattr(kineto_json, "CHUNK_BYTES", chunk)
    return read(ProfileLocation(ProfileKind.KINETO, path))


def _same(a, b) -> None:
    for table in ("host_ops", "kernels", "host_events", "modules"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    assert a.stacks == b.stacks and a.steps == b.steps
    assert [i.message for i in a.issues] == [i.message for i in b.issues]


@pytest.mark.parametrize("indent", [None, 2])
def test_blocks_cut_anywhere_read_the_same(tmp_path, monkeypatch, indent):
    path = _write(tmp_path / "t.pt.trace.json", _events(40), indent)
    whole = _read(path, 1 << 30, monkeypatch)
    assert len(whole.host_ops) == 41 and len(whole.kernels) == 40
    assert (whole.kernels["host_op"] >= 0).all()  # linked through correlation across blocks
    for chunk in (1, 37, 500, 4096):
        monkeypatch.setattr(kineto_json, "CHUNK_BYTES", chunk)
        blocks = list(kineto_json.decode(path, path.read_bytes()).batches)
        assert len(blocks) > 1 and sum(map(len, blocks)) == 1 + 6 * 40
        _same(whole, _read(path, chunk, monkeypatch))


def test_event_of_unexpected_form_in_a_later_block(tmp_path, monkeypatch):
    """The notice names the event by its index in the whole file, as the one-block read does, and
    the block's other events are read."""
    events = _events(30)
    events[150]["pid"] = [1]  # neither an integer nor text
    events[170]["ts"] = "soon"
    path = _write(tmp_path / "t.pt.trace.json", events)
    whole = _read(path, 1 << 30, monkeypatch)
    notes = [i.message for i in whole.issues if "unexpected form" in i.message]
    assert len(notes) == 1 and "skipped 2 event(s)" in notes[0] and "event #150:" in notes[0]
    for chunk in (1, 300, 2000):
        _same(whole, _read(path, chunk, monkeypatch))
