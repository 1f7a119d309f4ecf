"""`--check --baseline`: each baseline finding resolved / improved / persisting / regressed, new
ones marked new, in the text report, the JSON document and SARIF's baselineState."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cli_support import isolated_cache  # noqa: F401 - autouse fixture
from cli_support import CnnKnobs, copy_sample_sources, fits_80_columns, run_cli, single_rank, write_cnn_profiles


@pytest.fixture()
def fixed_run(tmp_path, monkeypatch):
    """Baseline: a slow single-process DataLoader (NPU104), a long all-reduce (NPU102) and no
    TransData. New run: the DataLoader wait gone, the all-reduce halved, TransData around the convs."""
    proj = tmp_path / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    before = single_rank(CnnKnobs(transdata_us=0.5, linear_transdata=0))
    after = replace(before, dataloader_ms=(0.05,), allreduce_us=700.0, transdata_us=45.0, linear_transdata=2)
    write_cnn_profiles(src, proj / "old", before)
    write_cnn_profiles(src, proj / "cnn_classifier" / "prof", after)
    monkeypatch.chdir(proj)
    old = str(next((proj / "old").glob("*_ascend_pt")))
    return src, ["--check", "cnn_classifier", "--baseline", old, "--fail-on", "never"]


def _line(src, text: str) -> int:
    return next(i for i, l in enumerate((src / "train.py").read_text().splitlines(), 1) if text in l)


def test_each_finding_has_its_state(fixed_run, capsys):
    src, argv = fixed_run
    doc = json.loads(run_cli(argv + ["--format", "json"], capsys).out)
    by = {(f["code"], f["path"], f["line"]): f for f in doc["baseline"]["findings"]}
    loader = by[("NPU104", "cnn_classifier/train.py", _line(src, "for step, (x, y) in enumerate(loader):"))]
    assert loader["state"] == "resolved" and loader["after"] is None and loader["before"]["device_time_us"] > 10_000
    comm = by[("NPU102", "cnn_classifier/train.py", _line(src, "loss.backward()"))]
    assert comm["state"] == "improved"
    assert comm["after"]["device_time_us"] < comm["before"]["device_time_us"] * 0.95
    new = [f for f in by.values() if f["code"] == "NPU103"]
    assert new and all(f["state"] == "new" and f["before"] is None for f in new)
    # unchanged code measures the same: the optimizer's kernels did not move
    sgd = by[("NPU220", "cnn_classifier/train.py", _line(src, "optimizer = "))]
    assert sgd["state"] == "persisting"
    assert sgd["after"]["device_time_us"] == pytest.approx(sgd["before"]["device_time_us"], rel=0.05)
    # every current finding appears once, as matched or new; every state is one of the five
    current = {(f["code"], f["path"], f["line"]) for f in doc["findings"]}
    assert current == {k for k, f in by.items() if f["state"] != "resolved"}
    assert {f["state"] for f in by.values()} <= {"resolved", "improved", "persisting", "regressed", "new"}
    text = run_cli(argv, capsys).out
    assert f"resolved   NPU104 cnn_classifier/train.py:{loader['line']}:" in text
    assert f"improved   NPU102 cnn_classifier/train.py:{comm['line']}:" in text
    counts = {s: sum(f["state"] == s for f in by.values()) for s in ("resolved", "improved", "new")}
    assert f"{counts['resolved']} resolved, {counts['improved']} improved" in text and f"{counts['new']} new" in text
    assert fits_80_columns(text)


def test_sarif_baseline_state(fixed_run, capsys):
    src, argv = fixed_run
    sarif = json.loads(run_cli(argv + ["--format", "sarif"], capsys).out)
    doc = json.loads(run_cli(argv + ["--format", "json"], capsys).out)
    expected = {"resolved": "absent", "improved": "updated", "regressed": "updated", "persisting": "unchanged", "new": "new"}
    want = sorted((f["code"], f["line"], expected[f["state"]]) for f in doc["baseline"]["findings"])
    got = sorted((r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"], r["baselineState"])
                 for r in sarif["runs"][0]["results"])
    assert got == want
    assert ("NPU104", _line(src, "for step, (x, y) in enumerate(loader):"), "absent") in got
    assert ("NPU102", _line(src, "loss.backward()"), "updated") in got


def test_no_baseline_no_state(fixed_run, capsys):
    _src, argv = fixed_run
    sarif = json.loads(run_cli(argv[:2] + ["--fail-on", "never", "--format", "sarif"], capsys).out)
    assert all("baselineState" not in r for r in sarif["runs"][0]["results"])
