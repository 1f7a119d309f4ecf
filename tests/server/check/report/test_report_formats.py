"""Renderers of --check on hand-built findings: SARIF 2.1.0 (validated against the OASIS schema),
GitHub annotations (parsed back), JSON positions, text grouping."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from msprof_lsp.hints.finding import Finding, Fix, Related, Severity, TextEdit
from msprof_lsp.mapping.source.heat import SourceHeat
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.server.check.report import github, sarif, text
from msprof_lsp.server.analysis.views.result import CheckRun, JobReport
from msprof_lsp.server.analysis.views.rows import report

from tests.server.check.cli_support import fits_80_columns

SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "node_modules" / "@microsoft" / "jest-sarif" / "lib" / "schemas" / "sarif-2.1.0-rtm.5.json"

SOURCE = """import torch.nn.functional as F

def head(x):
    # 中文注释 😋
    return F.dropout(F.relu(x), p=0.1, training=True)
"""


@pytest.fixture()
def run(tmp_path: Path) -> CheckRun:
    src = tmp_path / "pkg" / "model.py"
    src.parent.mkdir()
    src.write_text(SOURCE, encoding="utf-8")
    line = 5
    col = SOURCE.splitlines()[line - 1].index("F.dropout")
    end_col = len(SOURCE.splitlines()[line - 1])
    span = Span(str(src), line, col, line, end_col)
    relu_col = SOURCE.splitlines()[line - 1].index("F.relu")
    findings = [
        Finding(
            code="NPU101", name="relu-dropout-fusion", severity=Severity.WARNING,
            message="ReLU→Dropout: 3 kernels, 412 µs/step (4.8% of step), each < 50 µs: dispatch-bound. No fused NPU API; compile the pair.",
            span=span, share=0.048, time_per_step_us=412.0, confidence=Confidence.STACK,
            evidence={"kernels": ["Relu", "DropOutDoMask"]},
            fixes=[Fix("Compile ReLU+Dropout with torch.compile", False,
                       (TextEdit(str(src), line, col, line, end_col, "_relu_dropout(x, 0.1, True)"),))],
            related=[Related(Span(str(src), line, relu_col, line, relu_col + 9), "the ReLU of the pair")],
        ),
        Finding(code="NPU108", name="host-sync", severity=Severity.HINT, message="loss.item(): 1 sync, 80 µs/step (0.9% of step): host waits. Log every N steps.",
                span=Span(str(src), 3, 0, 3, 12), share=0.009, time_per_step_us=80.0, confidence=Confidence.INFERRED),
        Finding(code="NPU243", name="env-aclnn-cache-limit", severity=Severity.INFO, message="ACLNN_CACHE_LIMIT unset: op cache may thrash. export ACLNN_CACHE_LIMIT=100000.", span=None),
    ]
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path=str(tmp_path / "prof" / "x_ascend_pt"), rank=0)
    heat = SourceHeat(step_time_ns=8_583_000, num_steps=2, spans=[], lines=[], functions=[], total_device_ns=0, attributed_ns=0, unattributed_ns=0)
    return CheckRun(jobs=[JobReport(profile=Profile(meta=meta), heat=heat, findings=findings, ranks=[0])], cwd=tmp_path, tool_version="0.1.0")


def test_sarif_validates_against_the_2_1_0_schema(run):
    if not SCHEMA.is_file():
        pytest.skip(f"SARIF schema not installed at {SCHEMA} (run: npm ci --prefix tests/schemas)")
    jsonschema = pytest.importorskip("jsonschema")
    doc = sarif.render_document(report(run))
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(schema).validate(json.loads(json.dumps(doc)))


def test_sarif_content_for_code_scanning(run):
    doc = sarif.render_document(report(run))
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    r = doc["runs"][0]
    assert r["columnKind"] == "unicodeCodePoints"
    assert r["tool"]["driver"]["name"] == "msprof-lsp"
    by_rule = {res["ruleId"]: res for res in r["results"]}
    res = by_rule["NPU101"]
    assert res["level"] == "warning" and by_rule["NPU108"]["level"] == "note"
    loc = res["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "pkg/model.py", "uriBaseId": "%SRCROOT%"}
    line5 = SOURCE.splitlines()[4]
    assert loc["region"]["startLine"] == 5 and loc["region"]["startColumn"] == line5.index("F.dropout") + 1
    rep = res["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert rep["insertedContent"]["text"] == "_relu_dropout(x, 0.1, True)"
    assert res["relatedLocations"][0]["message"]["text"] == "the ReLU of the pair"
    assert "locations" not in by_rule["NPU243"]  # profile-level: no source location
    fp = res["partialFingerprints"]["msprofFinding/v1"]
    assert re.fullmatch(r"[0-9a-f]{32}", fp)


def test_sarif_fingerprints_survive_line_moves(run, tmp_path):
    before = sarif.render_document(report(run))["runs"][0]["results"]
    src = tmp_path / "pkg" / "model.py"
    src.write_text("# a new first line\n\n" + SOURCE, encoding="utf-8")
    for job in run.jobs:
        for f in job.findings:
            if f.span:
                f.span = f.span.shifted(2)
    after = sarif.render_document(report(run))["runs"][0]["results"]
    fp = lambda rs: sorted(r["partialFingerprints"]["msprofFinding/v1"] for r in rs)
    assert fp(before) == fp(after)


def test_github_annotations_parse_back(run):
    out = github.render(run)
    pattern = re.compile(r"^::(error|warning|notice) (?P<props>[^:]*)::(?P<msg>.*)$")
    parsed = []
    for line in out.splitlines():
        m = pattern.match(line)
        assert m, line
        props = dict(p.split("=", 1) for p in m.group("props").split(","))
        msg = m.group("msg").replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
        parsed.append((m.group(1), props, msg))
    by_title = {p["title"].replace("%3A", ":").replace("%2C", ","): (kind, p, msg) for kind, p, msg in parsed}
    kind, props, msg = by_title["NPU101 relu-dropout-fusion"]
    assert kind == "warning" and props["file"] == "pkg/model.py" and props["line"] == "5"
    assert int(props["col"]) == SOURCE.splitlines()[4].index("F.dropout") + 1
    assert msg.startswith("ReLU→Dropout: 3 kernels") and "\nFix: Compile ReLU+Dropout with torch.compile (review)" in msg
    assert by_title["NPU108 host-sync"][0] == "notice"
    assert "file" not in by_title["NPU243 env-aclnn-cache-limit"][1]


def test_json_positions_are_one_based_code_points(run):
    doc = report(run).as_dict()
    f = next(x for x in doc["findings"] if x["code"] == "NPU101")
    line = SOURCE.splitlines()[4]
    # The Chinese text and emoji are on another line, so code points = characters here.
    assert f["line"] == 5 and f["column"] == line.index("F.dropout") + 1 and f["end_column"] == len(line) + 1
    assert f["path"] == "pkg/model.py"
    edit = f["fixes"][0]["edits"][0]
    assert (edit["line"], edit["column"]) == (5, line.index("F.dropout") + 1)
    assert f["fixes"][0]["safe"] is False


def test_text_groups_by_file_and_fits_80_columns(run):
    out = text.render(run, color=False)
    # The report opens with "Start here"; then one group per file (profile-level findings under
    # "(profile)"), the groups and the findings in them by saving, then share: NPU101's 4.8 %
    # before the profile-level notice with none.
    assert out.startswith("Start here\n  1. pkg/model.py:5  NPU101 relu-dropout-fusion\n")
    assert out.index("\npkg/model.py\n") < out.index("\n(profile)\n")
    assert "warning NPU101" in out and "fix: Compile ReLU+Dropout with torch.compile (review)" in out
    assert fits_80_columns(out)
    assert "Found 3 findings (1 warning, 1 info, 1 hint) in 1 file." in out
    coloured = text.render(run, color=True)
    assert "\x1b[33;1mwarning" in coloured


def test_concise_is_one_line_per_finding_with_the_json_position(run):
    out = text.render_concise(run)
    lines = out.splitlines()
    assert len(lines) == len(run.findings) == 3
    doc = {(f["code"]): f for f in report(run).as_dict()["findings"]}
    pattern = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<sev>\w+) (?P<code>\S+) (?P<msg>.*)$")
    located = [m for m in map(pattern.match, lines) if m]
    assert len(located) == 2
    for m in located:
        f = doc[m["code"]]
        assert (m["path"], int(m["line"]), int(m["col"]), m["sev"]) == (f["path"], f["line"], f["column"], f["severity"])
        assert m["msg"] == " ".join(f["message"].split())
    assert lines[0] == "(profile): info NPU243 ACLNN_CACHE_LIMIT unset: op cache may thrash. export ACLNN_CACHE_LIMIT=100000."
    assert text.render_concise(CheckRun(jobs=[], cwd=run.cwd, tool_version="0.1.0")) == ""


def test_text_hotspots_rank_inferred_anchors_with_the_others_and_mark_them(run):
    from msprof_lsp.mapping.source.heat import Site, SpanHeat

    job = run.jobs[0]
    src = job.findings[0].span.path
    stack = Site(Span(src, 5, 11, 5, 53), Confidence.STACK, "head", "F.dropout(F.relu(x), p=0.1, training=True)")
    inferred = Site(Span(src, 5, 21, 5, 30), Confidence.INFERRED, "head", "F.relu(x)")
    job.heat.spans = [SpanHeat(inferred, 900_000, 900_000, 0, 0, 2, 450_000.0, 0.052),
                      SpanHeat(stack, 400_000, 400_000, 0, 0, 2, 200_000.0, 0.023)]
    view = report(run)
    lines = text.hotspots(view.profiles[0], view.hotspots_of(0))
    rows = [ln for ln in lines if "pkg/model.py:5" in ln]
    assert len(rows) == 2
    assert rows[0].endswith("pkg/model.py:5  (inferred: no call stack)") and "5.2%" in rows[0]
    assert rows[1].endswith("pkg/model.py:5") and "2.3%" in rows[1]
    assert fits_80_columns("\n".join(lines))


def test_text_hotspot_code_is_the_view_models(run):
    """A span without a call text shows its function, as the JSON document's ``code`` does (the
    text report printed no code line there before it read the view model)."""
    from msprof_lsp.mapping.source.heat import Site, SpanHeat

    job = run.jobs[0]
    src = job.findings[0].span.path
    job.heat.spans = [SpanHeat(Site(Span(src, 3, 0, 3, 12), Confidence.STACK, "head", ""), 400_000, 400_000, 0, 0, 2,
                               200_000.0, 0.023)]
    view = report(run)
    (row,) = view.as_dict()["hotspots"]
    assert row["code"] == "in head()"
    assert f"{'':23}in head()" in text.render(run).splitlines()


RENDERERS = Path(__file__).resolve().parents[4] / "server" / "check" / "report"


def test_report_renderers_read_the_view_models_only():
    """Issue 24: each ``--check`` format renders the view models (server/analysis/views); a
    renderer hands the check run to ``report`` or ``report_model`` and reads nothing else of it,
    and imports no profile or source model, so a figure it prints is one the view model holds."""
    import ast

    builders = {"report", "report_model"}
    for path in sorted(RENDERERS.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "run" and isinstance(node.ctx, ast.Load):
                call = parent[node]
                func = getattr(call, "func", None)
                name = getattr(func, "id", None) or getattr(func, "attr", None)
                assert isinstance(call, ast.Call) and name in builders and call.args == [node], \
                    f"{path.name}:{node.lineno} reads the check run itself"
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                assert not module.startswith(("msprof_lsp.mapping.profile", "msprof_lsp.mapping.source")), \
                    f"{path.name}:{node.lineno} imports {module}"
                assert "JobReport" not in {a.name for a in node.names}, f"{path.name}:{node.lineno} imports JobReport"

