"""The VS Code manifest (vscode-client/package.json) must follow the server's own lists.

The annotated ``Settings`` model (server/analysis/settings.py, read as ``SETTINGS``) is the single source of
truth for server settings, rendered by ``python -m msprof_lsp.server.settings_schema``; PALETTE_COMMANDS
and the notification name (server/protocol.py) are what the client must offer and listen to. A
drift here means a setting the editor cannot set, or a palette entry that does nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES

from msprof_lsp.mapping.profile.discover import find_all
from msprof_lsp.server import protocol, settings_schema
from msprof_lsp.server.analysis.settings import SETTINGS

CLIENT = Path(__file__).resolve().parents[1] / "vscode-client"
PREFIX = "msprof-lsp."
CLIENT_ONLY_SETTINGS = {"interpreter", "trace.server", "gutterHeat", "showNotifications", "recordCommand"}
CLIENT_ONLY_COMMANDS = {"msprof-lsp.restart", "msprof-lsp.showLogs", "msprof-lsp.refreshHotspots", "msprof-lsp.showProfile",
                        "msprof-lsp.recordProfile"}
# Referenced by the walkthrough, declared by the branch that implements it. Once declared in
# package.json the entry is no longer needed here (the loop branch declared msprof-lsp.recordProfile).
PENDING_COMMANDS: set[str] = set()
# Built-in VS Code commands the walkthrough and the views' welcome text link to.
BUILTIN_COMMANDS = {"editor.action.quickFix", "workbench.actions.view.problems", "workbench.action.openWalkthrough"}


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def properties(manifest: dict) -> dict:
    return manifest["contributes"]["configuration"]["properties"]


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: s.key)
def test_every_server_setting_is_contributed_unchanged(spec, properties: dict) -> None:
    entry = properties.get(PREFIX + spec.key)
    assert entry is not None, f"{PREFIX}{spec.key} missing from package.json"
    assert entry["type"] == spec.json_type
    default = list(spec.default) if isinstance(spec.default, tuple) else spec.default
    assert entry["default"] == default and type(entry["default"]) is type(default)
    assert entry["description"].startswith(spec.description)
    assert entry.get("scope", "window") == spec.scope.value
    assert entry.get("minimum") == spec.minimum and entry.get("maximum") == spec.maximum


def test_no_extra_settings(properties: dict) -> None:
    contributed = {name[len(PREFIX):] for name in properties if name.startswith(PREFIX)}
    assert not [name for name in properties if not name.startswith(PREFIX)]
    extra = contributed - {s.key for s in SETTINGS} - CLIENT_ONLY_SETTINGS
    assert not extra, f"package.json has settings the server does not know: {sorted(extra)}"
    assert CLIENT_ONLY_SETTINGS <= contributed


def test_client_only_settings(properties: dict) -> None:
    assert properties[PREFIX + "interpreter"]["scope"] == "machine-overridable"
    assert properties[PREFIX + "trace.server"]["enum"] == ["off", "messages", "verbose"]
    assert properties[PREFIX + "gutterHeat"] == {**properties[PREFIX + "gutterHeat"], "type": "boolean", "default": True}


def test_manifest_is_what_the_generator_writes(manifest: dict) -> None:
    """Item types, ranges and choices also come from the model (server/settings_schema.py)."""
    expected = settings_schema.synced(json.loads(json.dumps(manifest)))
    assert expected == manifest, "run python -m msprof_lsp.server.settings_schema to update package.json"


def test_docs_settings_table_is_current() -> None:
    docs = (CLIENT.parent / "docs" / "editors.md").read_text(encoding="utf-8")
    assert settings_schema.synced_docs(docs) == docs, "run python -m msprof_lsp.server.settings_schema to update docs/editors.md"
    for spec in SETTINGS:
        assert f"| `{spec.key}` | `{spec.toml_key}` |" in docs


def test_generator_check_on_this_checkout_and_on_a_drifted_copy(tmp_path: Path, capsys) -> None:
    assert settings_schema.main(["--check"]) == 0
    for rel in (settings_schema.MANIFEST, settings_schema.DOCS):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((CLIENT.parent / rel).read_text(encoding="utf-8"), encoding="utf-8")
    manifest = tmp_path / settings_schema.MANIFEST
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["contributes"]["configuration"]["properties"][PREFIX + "cubeAlign"]["minimum"] = 0
    manifest.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    docs = tmp_path / settings_schema.DOCS
    docs.write_text(docs.read_text(encoding="utf-8").replace("| `smallKernelUs` |", "| `smallKernelMs` |"), encoding="utf-8")
    assert settings_schema.main(["--check", "--root", str(tmp_path)]) == 1
    assert str(manifest) in capsys.readouterr().err
    assert settings_schema.main(["--root", str(tmp_path)]) == 0  # rewrites both files
    assert settings_schema.main(["--check", "--root", str(tmp_path)]) == 0
    assert json.loads(manifest.read_text(encoding="utf-8")) == json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    assert docs.read_text(encoding="utf-8") == (CLIENT.parent / settings_schema.DOCS).read_text(encoding="utf-8")


def test_palette_commands_match_both_ways(manifest: dict) -> None:
    contributed = [c["command"] for c in manifest["contributes"]["commands"]]
    assert len(contributed) == len(set(contributed))
    assert set(contributed) - CLIENT_ONLY_COMMANDS == set(protocol.PALETTE_COMMANDS)
    assert CLIENT_ONLY_COMMANDS <= set(contributed)
    for command in manifest["contributes"]["commands"]:
        assert command["title"] and command["category"] == "msprof-lsp"


def test_typescript_constants_match_protocol() -> None:
    source = (CLIENT / "src" / "constants.ts").read_text(encoding="utf-8")
    constants = dict(re.findall(r'export const (\w+) = "([^"]*)";', source))
    for name in ("CMD_RELOAD", "CMD_SELECT_PROFILE", "CMD_SHOW_HOTSPOTS", "CMD_SET_BASELINE", "CMD_LINE_HEAT", "CMD_SHOW_OPERATORS", "CMD_REPORT_MODEL", "NOTIFY_PROFILE_STATUS"):
        assert constants.get(name) == getattr(protocol, name), name
    assert constants["SECTION"] == protocol.SETTINGS_SECTION
    assert constants["CLIENT_ID"] == protocol.SERVER_NAME


def test_activation(manifest: dict) -> None:
    # A profile in the workspace or a command activates it; a Python file alone does not (the
    # first start may install the server's environment: issue 28).
    assert not [e for e in manifest["activationEvents"] if e.startswith("onLanguage:")]
    assert any(e.startswith("workspaceContains:") for e in manifest["activationEvents"])
    assert manifest["main"] == "./dist/extension.js"


def _glob_regex(glob: str) -> re.Pattern[str]:
    """A VS Code glob as a regex over "/"-separated relative paths: ``**/`` any folders, ``*`` and
    ``?`` within one name."""
    out, i = "", 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out, i = out + "(?:[^/]+/)*", i + 3
        elif glob[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif glob[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(glob[i]), i + 1
    return re.compile(out + r"\Z")


def _activation_globs(manifest: dict) -> list[re.Pattern[str]]:
    prefix = "workspaceContains:"
    return [_glob_regex(e[len(prefix):]) for e in manifest["activationEvents"] if e.startswith(prefix)]


# Found by content, not by name (a Kineto trace is any *.json[.gz] whose head has traceEvents): a
# name glob for them would activate the extension on every workspace with a JSON file.
CONTENT_ONLY_KINETO = re.compile(r"\.json(\.gz)?\Z")


@pytest.mark.parametrize("root", ["samples", "fixtures"])
def test_workspace_contains_every_profile_discovery_finds_by_name(manifest: dict, root: str) -> None:
    """Each profile found under the samples and the real fixtures has a file a
    ``workspaceContains`` glob matches, so opening a folder with only a profile activates the
    extension (discovery's rules: mapping/profile/discover.py and the readers' probes)."""
    base = CLIENT.parent / "samples" if root == "samples" else FIXTURES
    if not base.is_dir():
        pytest.skip(f"real profiler fixtures not found at {base} (../shared is absent in this checkout)")
    globs = _activation_globs(manifest)
    locations = find_all([base])
    assert len(locations) >= (5 if root == "samples" else 10)
    unmatched = []
    for loc in locations:
        files = [loc.path] if loc.path.is_file() else [p for p in loc.path.rglob("*") if p.is_file()]
        rel = [p.relative_to(base.parent).as_posix() for p in files]
        if any(g.match(r) for g in globs for r in rel):
            continue
        if loc.kind.value == "kineto" and CONTENT_ONLY_KINETO.search(loc.path.name) and ".pt.trace." not in loc.path.name:
            continue
        unmatched.append(str(loc.path))
    assert not unmatched, f"no workspaceContains glob matches these profiles: {unmatched}"


def test_activation_globs_stay_specific(manifest: dict) -> None:
    """Ordinary project files never activate the extension."""
    globs = _activation_globs(manifest)
    for rel in ("proj/train.py", "proj/data/labels.json", "proj/out/metrics.csv", "proj/results.db", "proj/PROF_notes.txt",
                "proj/trace.json.gz", "proj/ascend_pt/readme.md"):
        assert not any(g.match(rel) for g in globs), rel
    for rel in ("runs/x/PROF_000001_20250101_ABC/mindstudio_profiler_output/op_summary_1.csv",
                "runs/PROF_000001_20250101_ABC/msprof_20250101.db",
                "runs/PROF_000001_20250101_ABC/device_0/summary/op_summary_0_1.csv",
                "out/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "node_12_ascend_ms/profiler_info_3.json",
                "a/b/run.pt.trace.json", "trace_view.json"):
        assert any(g.match(rel) for g in globs), rel


def _command_links(text: str) -> set[str]:
    return set(re.findall(r"command:([\w.\-]+)", text))


def test_views_and_their_menus(manifest: dict) -> None:
    c = manifest["contributes"]
    (view,) = c["views"]["explorer"]
    assert view["id"] == "msprof-lsp.hotspots" and view["name"]
    declared = {x["command"] for x in c["commands"]}
    for menu in c["menus"].values():
        for entry in menu:
            assert entry["command"] in declared, entry
    assert any(m["command"] == "msprof-lsp.refreshHotspots" and "msprof-lsp.hotspots" in m["when"] for m in c["menus"]["view/title"])
    (welcome,) = c["viewsWelcome"]
    assert welcome["view"] == view["id"]
    assert _command_links(welcome["contents"]) <= declared | BUILTIN_COMMANDS


def test_walkthrough_steps_link_commands_that_exist(manifest: dict) -> None:
    (walk,) = manifest["contributes"]["walkthroughs"]
    steps = walk["steps"]
    assert [s["id"] for s in steps] == ["profile", "hint", "fix", "compare"]
    declared = {x["command"] for x in manifest["contributes"]["commands"]}
    for step in steps:
        links = _command_links(step["description"])
        assert links, f"step {step['id']} has no button"
        unknown = links - declared - BUILTIN_COMMANDS - PENDING_COMMANDS
        assert not unknown, f"step {step['id']} links undeclared commands {unknown}"
        events = {e.split(":", 1)[1] for e in step["completionEvents"] if e.startswith("onCommand:")}
        assert events <= links, f"step {step['id']} completes on a command it does not offer"
        media = CLIENT / step["media"]["markdown"]
        assert media.is_file() and media.stat().st_size > 100, media
        for link in _command_links(media.read_text(encoding="utf-8")):
            assert link in declared | BUILTIN_COMMANDS | PENDING_COMMANDS, link
    steps_by_id = {s["id"]: _command_links(s["description"]) for s in steps}
    assert {"msprof-lsp.selectProfile", "msprof-lsp.recordProfile"} <= steps_by_id["profile"]
    assert "msprof-lsp.setBaseline" in steps_by_id["compare"]


def test_task_definition_and_problem_matcher(manifest: dict) -> None:
    c = manifest["contributes"]
    (task,) = c["taskDefinitions"]
    assert task["type"] == "msprof-lsp"
    from msprof_lsp.server.cli import FAIL_ON, FORMATS

    assert task["properties"]["failOn"]["enum"] == list(FAIL_ON)
    assert "concise" in FORMATS
    (matcher,) = c["problemMatchers"]
    assert matcher["name"] == "msprof-lsp" and matcher["owner"] == "msprof-lsp"
    pattern = re.compile(matcher["pattern"]["regexp"])
    # The concise writer's own line (server/check/report/text.py concise_line) reads back.
    m = pattern.match("samples/m.py:25:41: warning NPU103 TransData: 4 kernels, 225 µs/step (6.7% of step).")
    assert m is not None
    groups = {k: m.group(matcher["pattern"][k]) for k in ("file", "line", "column", "severity", "code", "message")}
    assert groups == {"file": "samples/m.py", "line": "25", "column": "41", "severity": "warning", "code": "NPU103",
                      "message": "TransData: 4 kernels, 225 µs/step (6.7% of step)."}
