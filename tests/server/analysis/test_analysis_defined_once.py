"""Each concept the application core (server/analysis/) holds is defined once, and the front-ends
(``--check`` in server/check, the editor in server/lsp) reach it only through the core: the
per-job run, "no profile found", the settings model and its resolver, the baseline flow."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.server.analysis.settings import Settings

REPO = Path(__file__).resolve().parents[3]
PRODUCT = ("mapping", "hints", "server")


def _sources() -> dict[str, ast.Module]:
    return {p.relative_to(REPO).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
            for d in PRODUCT for p in sorted((REPO / d).rglob("*.py"))}


SOURCES = _sources()


def importers(module: str, name: str) -> set[str]:
    """The product files that import ``name`` from ``module`` (absolute imports; the product
    imports across packages absolutely, and relative imports inside server are resolved)."""
    out = set()
    for rel, tree in SOURCES.items():
        package = "msprof_lsp." + rel.rsplit("/", 1)[0].replace("/", ".")
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base == module and any(a.name == name for a in node.names):
                out.add(rel)
    return out


def strings_containing(text: str) -> list[str]:
    return [f"{rel}:{node.lineno}" for rel, tree in SOURCES.items() for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and text in node.value]


def test_no_profile_found_is_said_in_one_place():
    (said,) = strings_containing("no profile found (looked for")
    assert said.startswith("mapping/profile/discover.py:")
    assert importers("msprof_lsp.mapping.profile.discover", "WHAT_WE_LOOK_FOR") == set()
    # raised there alone too ("no such file or directory" included): locate and load_profile ask it
    raised = {rel for rel, tree in SOURCES.items() for node in ast.walk(tree)
              if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
              and getattr(node.exc.func, "id", "") == "NoProfileFound"}
    assert raised == {"mapping/profile/discover.py"}


def test_the_per_job_run_is_the_cores():
    assert not (REPO / "server" / "pipeline.py").exists() and not (REPO / "server" / "settings.py").exists()
    core = {"server/analysis/run.py"}
    assert importers("msprof_lsp.hints.engine", "run_rules") & {r for r in SOURCES if r.startswith("server/")} == core
    assert importers("msprof_lsp.mapping.profile.cluster", "load_profile") == core
    assert importers("msprof_lsp.mapping.profile.jobs", "discover_jobs") - {"mapping/profile/cluster.py"} == core


def test_one_baseline_flow():
    core = {"server/analysis/baseline.py"}
    assert importers("msprof_lsp.hints.verify", "classify") == core
    assert importers("msprof_lsp.mapping.source.compare", "compare") == core
    users = importers("msprof_lsp.server.analysis.baseline", "against_baseline")
    assert users == {"server/analysis/check_run.py", "server/lsp/state/engine.py"}


def test_one_settings_model_and_one_resolver():
    # the rule settings are declared on RuleConfig alone; Settings extends it
    assert issubclass(Settings, RuleConfig)
    own = set(Settings.__dict__.get("__annotations__", {}))
    assert own and not own & {f.name for f in fields(RuleConfig)}
    # the one place that builds the path of a pyproject.toml (folder / "pyproject.toml") walks up
    built = [rel for rel, tree in SOURCES.items() for node in ast.walk(tree)
             if isinstance(node, ast.BinOp) and isinstance(node.right, ast.Constant)
             and node.right.value == "pyproject.toml"]
    assert built == ["server/analysis/settings.py"]
    settings = "msprof_lsp.server.analysis.settings"
    # each front-end adds its layer to the one resolver: --check, the editor, the MCP server and Python API
    assert importers(settings, "resolve") == {"server/check/command.py", "server/lsp/configuration.py",
                                              "server/api/workspace_run.py"}
    assert importers(settings, "apply") == importers(settings, "from_pyproject") == set()
    # what a change re-triggers is read from the model, not listed by hand
    assert importers(settings, "retriggers") == {"server/lsp/lifecycle.py"}


def test_the_report_view_models_are_the_cores():
    """The report's structure lives in server/analysis/views: the JSON document's rows are
    written there, no front-end builds its own, and the --check renderers, the Python API and the
    MCP tools that read rows get them from ``views.report``."""
    assert not (REPO / "server" / "check" / "report" / "model.py").exists()
    assert not (REPO / "server" / "check" / "report" / "document.py").exists()
    dict_keys = {rel for rel, tree in SOURCES.items() for node in ast.walk(tree) if isinstance(node, ast.Dict)
                 for k in node.keys if isinstance(k, ast.Constant) and k.value in ("end_column", "device_time_us")}
    assert "server/analysis/views/rows.py" in dict_keys
    assert {rel for rel in dict_keys if not rel.startswith("server/analysis/views/")} == set()
    assert importers("msprof_lsp.server.analysis.views.rows", "report") == {
        "server/check/command.py", "server/check/report/text.py", "server/check/report/github.py",
        "server/analysis/views/__init__.py", "server/analysis/views/model.py", "server/api/result.py",
        "server/mcp/tools.py"}


def test_the_report_model_reads_the_report_rows():
    """The HTML page's and "Show profile"'s model takes its findings, "Start here", hotspots and
    profile header from ``views.report``'s rows: it computes no saving text, advice, fix label or
    order of its own, and builds no profile view or hotspot row."""
    model = "server/analysis/views/model.py"
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(SOURCES[model]) if isinstance(n, ast.Call)}
    assert "report" in calls
    assert not calls & {"saving_text", "advice", "fix_label", "saving_order", "start_here", "hotspot_rows", "of"}
    assert model not in importers("msprof_lsp.hints.consolidate", "saving_order") | \
        importers("msprof_lsp.hints.consolidate", "start_here")


def test_the_check_run_is_the_cores():
    """``--check``, the Python API and the MCP server (through the API's run) read one check run,
    built in the core; the editor's "Show profile" builds its job with the same ``job_report``.
    server/check keeps argument handling and rendering: it runs no analysis step itself."""
    core = "msprof_lsp.server.analysis.check_run"
    assert importers(core, "check_run") == {"server/check/command.py", "server/api/workspace_run.py"}
    assert importers(core, "job_report") == {"server/lsp/state/engine.py"}
    steps = [("msprof_lsp.server.analysis.run", "analyse_paths"), ("msprof_lsp.server.analysis.baseline", "load_baseline"),
             ("msprof_lsp.server.analysis.baseline", "against_baseline"),
             ("msprof_lsp.mapping.source.critical_path", "critical_path"),
             ("msprof_lsp.server.analysis.views.result", "merge_repeated")]
    front = {r for r in SOURCES if r.startswith(("server/check/", "server/api/", "server/mcp/"))}
    assert {r for module, name in steps for r in importers(module, name)} & front == set()


def _names_read(rel: str) -> set[str]:
    return {n.id for n in ast.walk(SOURCES[rel]) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(SOURCES[rel]) if isinstance(n, ast.Attribute)}


def test_sarif_and_html_render_view_models():
    """SARIF reads the ``Report`` rows (never a ``Finding`` or the run's jobs); the HTML page
    renders the report model that ``views.model.report_model`` builds."""
    sarif = _names_read("server/check/report/sarif.py")
    assert not sarif & {"Finding", "CheckRun", "jobs", "finding", "span", "finding_changes"}
    assert "Report" in sarif
    html = _names_read("server/check/report/html.py")
    assert "report_model" in html and not html & {"job_model", "start_views", "findings"}
