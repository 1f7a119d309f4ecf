"""``--check`` opens with "Start here" (text) and lists ``start_here`` (JSON): the top findings by
saving, ties by share (hints.consolidate.start_here), docs/report.md "Start here"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from msprof_lsp.hints.consolidate import saving_key

from conftest import server_command

REPO = Path(__file__).resolve().parents[3]


def _check(*args: str) -> str:
    proc = subprocess.run(server_command("--check", "samples/tiny_transformer", "--no-cache", *args),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def doc() -> dict:
    return json.loads(_check("--format", "json"))


def _key(f: dict) -> tuple:
    s = f["saving"]["us_per_step"]
    return (s is None, -(s or 0.0), -f["share"])


def test_json_start_here_indexes_the_top_findings_by_saving_then_share(doc):
    top = doc["start_here"]
    findings = doc["findings"]
    assert 1 <= len(top) <= 3 and len(set(top)) == len(top)
    assert all(0 <= i < len(findings) for i in top)
    chosen = [findings[i] for i in top]
    assert chosen == sorted(chosen, key=_key)
    rest = [f for i, f in enumerate(findings) if i not in top and not f["code"].startswith("NPU9")
            and (f["share"] > 0 or (f["saving"]["us_per_step"] or 0) > 0)]
    assert all(_key(f) >= _key(chosen[-1]) for f in rest)
    known = [f["saving"]["us_per_step"] for f in findings if f["saving"]["us_per_step"] is not None]
    if known:  # the biggest known saving opens the list
        assert findings[top[0]]["saving"]["us_per_step"] == max(known)
    for f in findings:
        assert set(f["saving"]) == {"us_per_step", "low_us", "high_us", "basis"}
        assert f["share_of"] in ("wall-step", "device-step") and 0 <= f["share"] <= 1


def test_text_opens_with_start_here_how_much_what_where(doc):
    text = _check()
    lines = text.splitlines()
    assert lines[0] == "Start here"
    first = doc["findings"][doc["start_here"][0]]
    assert lines[1].strip().startswith("1. ") and f":{first['line']}  {first['code']} {first['name']}" in lines[1]
    assert "/step" in lines[2] and lines[3].strip().startswith("change: ")
    assert text.index("Start here") < text.index(" profile") < text.index("Found ")


def test_saving_key_puts_unknown_savings_last():
    from msprof_lsp.hints.finding import Finding, Saving, Severity

    known = Finding("NPU1", "x", Severity.HINT, "m", None, share=0.01, saving=Saving(5.0, 4.0, 6.0, "b"))
    unknown = Finding("NPU2", "x", Severity.HINT, "m", None, share=0.9, saving=Saving.unknown("u"))
    assert sorted([unknown, known], key=saving_key) == [known, unknown]
