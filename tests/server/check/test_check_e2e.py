"""End to end: a sample model, a profile whose stacks point at it, and `--check`'s hotspot table.

(1) A spec-exact torch_npu profile written from a run description whose stacks name the CNN
    sample's real lines under a remote prefix (/home/ma-user/work/cnn_classifier/...): the
    per-line device time of the report equals the description's ground truth.
(2) A real Kineto CPU trace recorded from the sample with torch: the top spans are lines of the
    sample model, checked against the file's contents.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.synth import truth
from tests.synth.sample_runs import cnn_runs

from cli_support import isolated_cache  # noqa: F401 - autouse fixture
from cli_support import copy_sample_sources, run_cli, single_rank, write_cnn_profiles


def test_npu_hotspots_match_the_run_description(tmp_path, monkeypatch, capsys):
    proj = tmp_path / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    knobs = single_rank()
    write_cnn_profiles(src, proj / "cnn_classifier" / "prof", knobs)
    (run,) = cnn_runs(src, knobs)
    t = truth(run)
    monkeypatch.chdir(proj)
    r = run_cli(["--check", ".", "--format", "json", "--fail-on", "never", "--no-cache"], capsys)
    assert r.code == 0, r.err
    doc = json.loads(r.out)

    # Ground truth per local line: recorded remote file -> the local copy (same name).
    steps = len(t.steps)
    step_us = t.mean_step_time_ns / 1000
    expected: dict[tuple[str, int], float] = defaultdict(float)
    for (remote, line), ns in t.kernel_ns_by_line.items():
        assert remote.startswith("/home/ma-user/work/cnn_classifier/"), remote
        expected[(f"cnn_classifier/{Path(remote).name}", line)] += ns / 1000 / steps
    assert doc["profile"]["step_time_us"] == pytest.approx(step_us, abs=0.01)

    got: dict[tuple[str, int], float] = defaultdict(float)
    for h in doc["hotspots"]:
        got[(h["path"], h["line"])] += h["device_time_us"]
    # Every reported line is a line the description launched kernels from, with its exact time
    # (hotspots are cut to the top 20, so compare the reported ones, and the top one by size).
    assert got
    memcpy_only = {(h["path"], h["line"]) for h in doc["hotspots"] if all(o["type"] in ("", "MEMCPY_ASYNC") and o["name"] == "MEMCPY_ASYNC" for o in h["ops"])}
    for key, us in got.items():
        if key in memcpy_only:  # host-to-device copies: the description counts them apart from lines
            assert us == pytest.approx(t.memcpy_ns / 1000 / steps, rel=0.5), key
            continue
        assert key in expected, f"{key} is not a line the profile's stacks point at"
        assert us == pytest.approx(expected[key], rel=1e-6, abs=0.01), key
    top_expected = max(expected.items(), key=lambda kv: kv[1])[0]
    top_got = max(got.items(), key=lambda kv: kv[1])[0]
    assert top_got == top_expected
    for h in doc["hotspots"]:
        assert h["share"] == pytest.approx(h["device_time_us"] / step_us, rel=1e-3)
    # The lines named hold the calls the description put there.
    lines = (src / "model.py").read_text().splitlines()
    for h in doc["hotspots"]:
        if h["path"] == "cnn_classifier/model.py" and h["code"] and not h["code"].startswith("in "):
            assert h["code"].split("(")[0].strip() in lines[h["line"] - 1]


@pytest.mark.torch
def test_real_kineto_trace_top_spans_are_sample_lines(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    proj = tmp_path / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    prof_dir = proj / "cnn_classifier" / "kineto"
    proc = subprocess.run(
        [sys.executable, str(src / "train.py"), "--steps", "4", "--batch-size", "8", "--device", "cpu",
         "--profile-dir", str(prof_dir)],
        capture_output=True, text=True, cwd=src, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(prof_dir.glob("*.pt.trace.json*")), "the sample wrote no trace"
    monkeypatch.chdir(proj)
    r = run_cli(["--check", ".", "--format", "json", "--fail-on", "never"], capsys)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["profile"]["kind"] == "kineto" and doc["profile"]["steps"] == 2
    top = doc["hotspots"][:5]
    assert top
    sources = {p.name: p.read_text().splitlines() for p in src.glob("*.py")}
    for h in top:
        path = Path(h["path"])
        assert path.parts[0] == "cnn_classifier" and path.name in sources, h["path"]
        text = sources[path.name][h["line"] - 1]
        if h["code"].startswith("in "):
            # Function-level time (a def-line frame whose call could not be pinned): the line is
            # that function's def.
            func = h["function"].rsplit(".", 1)[-1]
            assert text.strip().startswith(f"def {func}("), (h["path"], h["line"], text)
        else:
            # A call: the reported code is what that line of the file holds.
            first = h["code"].splitlines()[0].strip()
            assert first in text, (h["path"], h["line"], text, h["code"])
    # The hottest CPU work of this CNN is its convolution block.
    model_lines = [h for h in doc["hotspots"] if h["path"] == "cnn_classifier/model.py"]
    assert model_lines and "self.conv(" in sources["model.py"][model_lines[0]["line"] - 1] or any(
        "conv" in sources["model.py"][h["line"] - 1] for h in model_lines[:3]
    )
