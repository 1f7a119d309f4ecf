"""End to end: ``msprof-lsp --check samples --format json`` reports the seed-named rules on the
samples' real lines (found here from the sample sources), each with numbers, a rule page and a
fix, and exits 1 (warnings at the default --fail-on)."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import REPO, server_command

SAMPLES = REPO / "samples"
pytestmark = pytest.mark.skipif(not (SAMPLES / "cnn_classifier").is_dir(), reason="samples/ not in this checkout")


def _line(path, needle: str) -> int:
    hits = [i for i, ln in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in ln]
    assert len(hits) == 1, (path, needle, hits)
    return hits[0]


@pytest.fixture(scope="module")
def report():
    proc = subprocess.run(
        server_command("--check", "samples", "--format", "json", "--no-cache"),
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_exit_status_and_seed_findings_on_the_sample_lines(report):
    rc, doc, stderr = report
    assert rc == 1, stderr
    cnn_model, cnn_train = SAMPLES / "cnn_classifier" / "model.py", SAMPLES / "cnn_classifier" / "train.py"
    tiny_train = SAMPLES / "tiny_transformer" / "train.py"
    expected = {
        ("NPU101", "samples/cnn_classifier/model.py", _line(cnn_model, "x = self.drop(self.act(self.fc1(x)))")),
        ("NPU101", "samples/cnn_classifier/model.py", _line(cnn_model, "x = F.dropout(F.relu(self.fc2(x))")),
        ("NPU101", "samples/cnn_classifier/model.py", _line(cnn_model, "nn.ReLU(),")),
        ("NPU102", "samples/cnn_classifier/train.py", _line(cnn_train, "loss.backward()")),
        ("NPU103", "samples/cnn_classifier/model.py", _line(cnn_model, "return self.pool(F.relu(self.bn(self.conv(x))))")),
        ("NPU104", "samples/cnn_classifier/train.py", _line(cnn_train, "for step, (x, y) in enumerate(loader):")),
        ("NPU104", "samples/tiny_transformer/train.py", _line(tiny_train, "for step, (tokens, targets) in enumerate(loader):")),
    }
    found = {(f["code"], f["path"], f["line"]): f for f in doc["findings"]}
    assert expected <= set(found), sorted(expected - set(found))
    # the synchronize() holds the host while the device runs dry, and the idle that follows runs
    # into the DataLoader's wait; but the two fixes change different work (the sync calls, the
    # fetch's host ops): two causes, two findings, two savings (hints.consolidate.charged_alike),
    # while device idle (NPU105) is the DataLoader's symptom and folded into it
    sync_line = _line(cnn_train, "torch.npu.synchronize()")
    (sync,) = [f for f in doc["findings"] if f["code"] == "NPU108"]
    assert sync["line"] == sync_line and sync["saving"]["us_per_step"] > 0
    loader = found[("NPU104", "samples/cnn_classifier/train.py", _line(cnn_train, "for step, (x, y) in enumerate(loader):"))]
    assert "NPU105" in loader["evidence"]["same_cause"] and "NPU108" not in loader["evidence"]["same_cause"]
    assert loader["saving"]["us_per_step"] > 10 * sync["saving"]["us_per_step"]
    for key in expected:
        f = found[key]
        assert f["fixes"] and all(x["edits"] for x in f["fixes"]), key
        assert "/step (" in f["message"] and ("% of the device step)" in f["message"] or "% of the wall step)" in f["message"])
        assert 0 < f["share"] < 1 and f["device_time_us"] > 0
        assert (REPO / "docs" / "rules" / f"{f['code']}.md").is_file()
    warnings = {f["code"] for f in doc["findings"] if f["severity"] == "warning"}
    assert {"NPU102", "NPU103", "NPU104"} <= warnings


def test_columns_point_at_the_calls(report):
    _, doc, _ = report
    train = (SAMPLES / "cnn_classifier" / "train.py").read_text(encoding="utf-8").splitlines()
    for f in doc["findings"]:
        if f["path"] == "samples/cnn_classifier/train.py" and f["code"] in ("NPU102", "NPU108"):
            line = train[f["line"] - 1]
            text = line[f["column"] - 1: f["end_column"] - 1]
            assert text in ("loss.backward()", "torch.npu.synchronize()"), text
