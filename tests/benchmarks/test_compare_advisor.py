"""benchmarks/compare_advisor.py: its advisor-category -> rule-code table names only registered
rules and lists every exception in docs/rules/README.md (always run); its parser reads the advisor's
real ``--agent`` output (run here when msprof-analyze is installed, else skipped); and the verdicts
it prints follow from the two reports."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shared_fixture
from msprof_lsp.hints.registry import all_rules

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "compare_advisor.py"
ADVISOR = Path(os.environ.get("MSPROF_ANALYZE", "/tmp/advisor-venv/bin/msprof-analyze"))


def _load():
    spec = importlib.util.spec_from_file_location("compare_advisor", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["compare_advisor"] = mod
    spec.loader.exec_module(mod)
    return mod


ca = _load()


def test_mapping_table_names_registered_rules_only():
    registered = {r.code for r in all_rules()}
    for cat in ca.CATEGORIES:
        assert set(cat.codes) <= registered, cat
        if cat.advisor != ca.SUMMARY:
            assert bool(cat.codes) != bool(cat.exception), f"{cat.advisor}: rules or a reason, exactly one"
    assert len(ca.BY_NAME) == len(ca.CATEGORIES)  # one row per advisor category
    assert ca.BY_NAME["Environment Variable Issues"].codes == tuple(f"NPU24{i}" for i in range(1, 8))


def test_every_exception_is_listed_with_its_reason_in_the_rules_readme():
    text = (REPO / "docs" / "rules" / "README.md").read_text(encoding="utf-8")
    section = text.split("## Advisor parity", 1)[1].split("\n## ", 1)[0]
    for cat in ca.CATEGORIES:
        if cat.exception:
            assert f"| {cat.advisor} |" in section, cat.advisor


# One line of 26.2.0's ``--agent`` stdout, shortened (the real file has more columns and rows).
AGENT = ('banner\n{"status": "success", "code": 0, "message": {"problems": {"headers": ["category", "description", '
         '"suggestion", "problem count"], "data": [["Overall Summary", "The Model E2E Time is 136.581ms.\\n    -- Computing Time is 8.874ms\\n    '
         '-- Uncovered Communication Time is 101.963ms\\n    -- Free Time is 25.744ms\\n", "", ""], '
         '["Byte Alignment Analysis", "Found the data size of 2 communication operators is not aligned", "1.", ""], '
         '["Vector Operator Perf Analysis", "Provide some reference bottlenecks", "1.", ""], '
         '["Something New", "x", "", ""], ["Packet Analysis", "small", "", ""], '
         '["Slow Dataloader Issues", "slow", "", ""]]}}, "suggestion": "", "log_path": "/tmp/x.log"}\n')


def test_parser_and_verdicts():
    problems = ca.parse_agent_output(AGENT)
    assert [p.category for p in problems][:2] == ["Overall Summary", "Byte Alignment Analysis"]
    # text/level1 rank0's step_trace_time.csv: Computing 8,873.756 µs, not overlapped 101,963.203 µs
    steps = [{"computing_us": 8873.756, "communication_not_overlapped_us": 101963.203}]
    default = {"findings": [{"code": "NPU204"}], "profiles": [{"breakdown": {"steps": steps}}]}
    everything = {"findings": [{"code": "NPU204"}, {"code": "NPU203"}], "profiles": []}
    rows = ca.compare("job", problems, default, everything)
    got = {r.category: r.match for r in rows}
    assert got == {
        "Overall Summary": ca.Match.YES,  # 8.874 / 101.963 ms against 8,873.756 / 101,963.203 µs
        "Byte Alignment Analysis": ca.Match.UNDER_MIN_SHARE,  # only with minShare = 0
        "Vector Operator Perf Analysis": ca.Match.NO,  # mapped to NPU206, which these findings lack
        "Something New": ca.Match.UNMAPPED,
        "Packet Analysis": ca.Match.YES,
        "Slow Dataloader Issues": ca.Match.NO,
    }
    two = [{"computing_us": 4436.878, "communication_not_overlapped_us": 50981.6}] * 2  # summed over the steps
    assert ca.compare("job", problems[:1], {"profiles": [{"breakdown": {"steps": two}}]}, everything)[0].match is ca.Match.YES
    off = [{"computing_us": 9100.0, "communication_not_overlapped_us": 101963.203}]  # 2.5 % apart
    assert ca.compare("job", problems[:1], {"profiles": [{"breakdown": {"steps": off}}]}, everything)[0].match is ca.Match.NO
    assert ca.compare("job", problems[:1], {"profiles": [{}]}, everything)[0].match is ca.Match.NO  # no breakdown


def test_parser_rejects_failures():
    with pytest.raises(ca.AdvisorOutputError):
        ca.parse_agent_output("no json here\n")
    with pytest.raises(ca.AdvisorOutputError):
        ca.parse_agent_output('{"status": "failed", "code": 1, "message": "bad path"}\n')
    assert ca.parse_agent_output('{"status": "success", "code": 0, "message": {}}\n') == []


def test_parser_reads_the_real_advisor_on_the_real_text_export(tmp_path):
    if not ADVISOR.is_file():
        pytest.skip(f"msprof-analyze is not installed at {ADVISOR} (python benchmarks/compare_advisor.py installs it)")
    src = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    prof = tmp_path / src.name
    shutil.copytree(src, prof)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([str(ADVISOR), "advisor", "all", "-d", str(prof), "-o", str(out), "--force", "-l", "en",
                           "--agent"], capture_output=True, text=True, timeout=600, cwd=out)
    assert proc.returncode == 0, proc.stderr[-500:]
    problems = ca.parse_agent_output(proc.stdout)
    cats = [p.category for p in problems]
    assert {"Environment Variable Issues", "Byte Alignment Analysis", "Operator Dynamic Shape Issues"} <= set(cats)
    assert all(c in ca.BY_NAME for c in cats), cats
    summary = next(p for p in problems if p.category == ca.SUMMARY)
    # PROVENANCE.txt: step_trace_time.csv Stage 136,581 µs, Computing 8,874 µs; the advisor prints the same
    assert ca.E2E.search(summary.description).group(1) == "136.581"
    assert ca.SUMMARY_FIGURES[0][1].search(summary.description).group(1) == "8.874"
