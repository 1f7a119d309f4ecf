"""One settings model and one resolver (server/analysis/settings.py): ``--check`` and the editor read
the same pyproject.toml into the same settings; the editor never looks above its workspace root;
what a change re-triggers comes from the model. (End to end, tests/server/analysis/test_baseline_one_flow.py
runs both front-ends on thresholds from a pyproject.toml one level above the checked folder.)"""

from __future__ import annotations

import io
from dataclasses import fields, replace
from pathlib import Path

import pytest

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.server.analysis.settings import Layer, Retrigger, Settings, on_change, resolve, retriggers
from msprof_lsp.server.check.command import settings_for
from msprof_lsp.server.cli import CheckArgs
from msprof_lsp.server.lsp.configuration import base_settings

PYPROJECT = """\
[tool.msprof-lsp]
select = ["NPU1", "NPU2"]
ignore = ["NPU104"]
severity = { NPU101 = "error" }
min-share = 0.02
compile-backend = "npu"
profile = "cnn/prof"
baseline = "old"
path-mappings = ["/remote/code=cnn"]
third-party-roots = ["vendored"]
code-lens = false
slow-rank-gap-percent = 1.5
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """proj/pyproject.toml, one level above the checked folder proj/cnn."""
    proj = tmp_path / "proj"
    for d in ("cnn/prof", "old"):
        (proj / d).mkdir(parents=True)
    (proj / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    return proj


def test_check_and_editor_read_the_same_settings(project: Path) -> None:
    warn = io.StringIO()
    cli = settings_for(project / "cnn", CheckArgs(paths=[str(project / "cnn")]), warn)
    assert warn.getvalue() == ""
    editor, warnings = base_settings(project, [project])
    assert warnings == []
    assert cli == editor
    # and they are the pyproject's values (paths resolved against its folder), not the defaults
    assert cli.select == ("NPU1", "NPU2") and cli.ignore == ("NPU104",) and cli.min_share == 0.02
    assert cli.compile_backend == "npu" and cli.thresholds.slow_rank_gap_percent == 1.5 and not cli.code_lens
    assert cli.profile == str(project.resolve() / "cnn" / "prof") and cli.baseline == str(project.resolve() / "old")
    assert cli.path_mappings == (("/remote/code", str(project.resolve() / "cnn")),)
    assert cli.base_dir == str(project.resolve())
    # the rules see the same configuration: the part of the settings RuleConfig declares
    assert cli.rule_config() == editor.rule_config() == RuleConfig(
        select=("NPU1", "NPU2"), ignore=("NPU104",), severity=cli.severity, min_share=0.02, compile_backend="npu",
        thresholds=Thresholds(slow_rank_gap_percent=1.5))


def test_the_editor_looks_up_to_its_outermost_workspace_root(project: Path) -> None:
    """A folder below the pyproject: read when the folder holding it is a workspace root too,
    never when it is outside every root (docs/security.md)."""
    inner = project / "cnn"
    within, _ = base_settings(inner, [inner, project])
    assert within.select == ("NPU1", "NPU2")
    outside, _ = base_settings(inner, [inner])
    assert outside == Settings(base_dir=str(inner))
    # --check has no workspace: the nearest pyproject at or above the checked path
    cli, _ = resolve(inner, workspace_roots=None)
    assert cli.select == ("NPU1", "NPU2")


def test_layers_come_after_the_pyproject_in_order(project: Path) -> None:
    settings, warnings = resolve(project, workspace_roots=[project], layers=[
        Layer("initializationOptions", {"minShare": 0.05, "select": ["NPU2"]}),
        Layer("workspace/configuration", {"minShare": 0.1}),
    ])
    assert warnings == []
    assert (settings.min_share, settings.select, settings.ignore) == (0.1, ("NPU2",), ("NPU104",))


def test_every_field_says_what_its_change_re_triggers() -> None:
    by_field = {f.name: on_change(f.name) for f in fields(Settings)}  # KeyError: a field without one
    assert {n for n, r in by_field.items() if r is Retrigger.RULES} == {f.name for f in fields(RuleConfig)}
    assert by_field["baseline"] is Retrigger.BASELINE
    assert {n for n, r in by_field.items() if r is Retrigger.VIEW} == {"code_lens", "inlay_hints"}
    assert {"profile", "rank", "path_mappings", "cache_dir", "third_party_roots", "base_dir"} <= {
        n for n, r in by_field.items() if r is Retrigger.RELOAD}


@pytest.mark.parametrize(("change", "expected"), [
    ({"min_share": 0.5}, {Retrigger.RULES}),
    ({"thresholds": Thresholds(gc_min_us=1)}, {Retrigger.RULES}),
    ({"inlay_hints": True}, {Retrigger.VIEW}),
    ({"rank": 1, "select": ("NPU1",)}, {Retrigger.RELOAD, Retrigger.RULES}),
    ({"baseline": "old"}, {Retrigger.BASELINE}),
    ({}, set()),
])
def test_retriggers(change: dict, expected: set) -> None:
    assert retriggers(Settings(), replace(Settings(), **change)) == expected
