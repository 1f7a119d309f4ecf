"""``msprof_lsp.analyse``: the Python API's findings and DataFrames hold the ``--check --format json``
report's figures, on the samples and on real profiles (docs/python-api.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import msprof_lsp
from tests.server.check.cli_support import isolated_cache  # noqa: F401 - autouse fixture
from tests.server.check.cli_support import run_cli
from conftest import REPO, shared_fixture

SAMPLE = REPO / "samples" / "cnn_classifier"
RECORDED_SITE = "/home/z30057886/.local/lib/python3.9/site-packages"  # the msinsight job's stacks point here


def _check_json(capsys, monkeypatch, workspace: Path, profile: Path, path_map: dict[str, str] | None = None) -> dict:
    monkeypatch.chdir(workspace)  # the report's paths are relative to the cwd, the API's to the workspace
    argv = ["--check", str(workspace), "--profile", str(profile), "--format", "json", "--fail-on", "never"]
    for remote, local in (path_map or {}).items():
        argv += ["--path-map", f"{remote}={local}"]
    return json.loads(run_cli(argv, capsys).out)


def _same_figures(a: msprof_lsp.Analysis, doc: dict) -> None:
    """Every DataFrame total is the report's figure (µs per step, rounded as the report rounds)."""
    assert [(f.code, f.path, f.line, f.share, f.saving_us_per_step) for f in a.findings] == [
        (f["code"], f["path"], f["line"], f["share"], f["saving"]["us_per_step"]) for f in doc["findings"]]
    assert [f.id for f in a.start_here] == [a.findings[i].id for i in doc["start_here"]]
    for p in doc["profiles"]:
        steps = a.steps[a.steps["profile"] == p["path"]]
        assert len(steps) == len(p["breakdown"]["steps"])
        for key, mean in p["breakdown"]["mean"].items():
            known = steps[key].dropna()
            if mean is None:
                assert known.empty
            else:
                assert known.mean() == pytest.approx(mean, abs=1e-3)
        k = a.kernels[(a.kernels["profile"] == p["path"]) & a.kernels["in_step"] & a.kernels["work"]]
        assert k["duration_us"].sum() / p["steps"] == pytest.approx(p["device_time_us"], abs=1e-3)
        hot = a.hotspots[a.hotspots["profile"] == p["path"]]
        top = [h for h in doc["hotspots"] if h["profile_path"] == p["path"]]
        assert hot.head(len(top))[["path", "line", "time_us_per_step", "share"]].values.tolist() == [
            [h["path"], h["line"], h["device_time_us"], h["share"]] for h in top]
        if p["backend"] != "cpu" and len(k):  # device time: each line is the sum of its kernels
            per_line = hot.groupby(["path", "line"])["time_us_per_step"].sum()
            for (path, line), us in per_line.items():
                mine = k[(k["path"] == path) & (k["line"] == line)]["duration_us"].sum() / p["steps"]
                assert mine == pytest.approx(us, abs=1e-3 * (1 + (hot["path"] == path).sum()))


def test_samples_figures_equal_the_report(tmp_path, capsys, monkeypatch):
    ws = tmp_path / "cnn_classifier"
    shutil.copytree(SAMPLE, ws)
    for profile in ("npu_profile", "kineto"):
        a = msprof_lsp.analyse(ws, profile=ws / profile)
        _same_figures(a, _check_json(capsys, monkeypatch, ws, ws / profile))
    a = msprof_lsp.analyse(str(ws), profile="npu_profile")
    assert isinstance(a.hotspots, pd.DataFrame) and not a.kernels.empty
    transdata = next(f for f in a.findings if f.code == "NPU103")  # planted: TransData around the convs
    assert (transdata.path, transdata.line) == ("model.py", 25) and transdata.id == "NPU103:model.py:25"
    assert a.report["version"] == 1 and a.findings == msprof_lsp.analyse(ws, profile=ws / "npu_profile").findings


def test_html_repr_is_the_report_in_a_frame(tmp_path):
    a = msprof_lsp.analyse(SAMPLE, profile=SAMPLE / "npu_profile")
    page = a._repr_html_()
    assert page.startswith("<iframe srcdoc=") and "msprof-report-model" in page and "<script" not in page


def test_bad_arguments_raise_one_line(tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        msprof_lsp.analyse(tmp_path / "missing")
    with pytest.raises(ValueError, match="no such file"):
        msprof_lsp.analyse(SAMPLE, profile="nowhere")
    with pytest.raises(ValueError):
        msprof_lsp.analyse(SAMPLE, path_map=["no equals sign"])


@pytest.mark.shared
def test_real_kineto_trace_figures_equal_the_report(capsys, monkeypatch):
    workspace = shared_fixture("pytorch-kineto-tb_plugin/workspace")
    trace = shared_fixture("pytorch-kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    a = msprof_lsp.analyse(workspace, profile=trace)
    _same_figures(a, _check_json(capsys, monkeypatch, workspace, trace))
    assert len(a.kernels) > 8000 and a.steps["step"].nunique() == 6
    assert a.hotspots["path"].str.endswith("resnet50_profiler_api.py").all()


@pytest.mark.shared
def test_real_ascend_export_figures_equal_the_report(capsys, monkeypatch):
    workspace = shared_fixture("Ascend-msinsight/workspace")
    root = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    a = msprof_lsp.analyse(workspace, profile=root, path_map={RECORDED_SITE: str(workspace)})
    _same_figures(a, _check_json(capsys, monkeypatch, workspace, root, {RECORDED_SITE: str(workspace)}))
    assert not a.hotspots.empty and a.kernels["line"].notna().any()
