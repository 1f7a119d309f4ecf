"""Issue 25 defect 8: a folder of four jobs, one of them unreadable, reports the three good ones and
one line naming the bad file; the exit status is 2 (an unreadable profile, docs/cli.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprof_lsp.server.__main__ import main
from tests.synth import write_kineto
from tests.synth.examples import small_run


def _four_jobs(root: Path, *, bad: bool = True) -> Path:
    for i in range(3):
        (root / f"job{i}").mkdir(parents=True)
        write_kineto(small_run(steps=2), root / f"job{i}" / "trace.pt.trace.json")
    (root / "job3").mkdir()
    truncated = '{"traceEvents": [ {"ph": "X", "name": '
    if bad:
        (root / "job3" / "trace.pt.trace.json").write_text(truncated, encoding="utf-8")
    else:
        write_kineto(small_run(steps=2), root / "job3" / "trace.pt.trace.json")
    return root


def test_three_good_jobs_reported_one_line_for_the_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _four_jobs(tmp_path / "runs")
    out = tmp_path / "report.json"
    code = main(["--check", str(root), "--no-cache", "--format", "json", "--fail-on", "never", "--output", str(out)])
    assert code == 2
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert len(doc["profiles"]) == 3 and all("job3" not in p["path"] for p in doc["profiles"])
    [bad] = doc["unreadable"]
    assert bad["error"].startswith(str(root / "job3" / "trace.pt.trace.json") + ":1: the JSON ends early")
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert errors == [f"msprof-lsp: error: {bad['error']}"]


def test_all_readable_jobs_exit_by_the_findings(tmp_path: Path) -> None:
    root = _four_jobs(tmp_path / "runs", bad=False)
    out = tmp_path / "report.json"
    assert main(["--check", str(root), "--no-cache", "--format", "json", "--fail-on", "never", "--output", str(out)]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert len(doc["profiles"]) == 4 and doc["unreadable"] == []


def test_a_single_unreadable_job_still_fails_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "one"
    (root / "job").mkdir(parents=True)
    (root / "job" / "trace.pt.trace.json").write_text('{"traceEvents": [', encoding="utf-8")
    assert main(["--check", str(root), "--no-cache", "--fail-on", "never"]) == 2
    err = capsys.readouterr().err
    assert "trace.pt.trace.json:1: the JSON ends early" in err and "Traceback" not in err
