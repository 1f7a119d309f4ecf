"""One baseline flow (server/analysis/baseline.py): the editor and ``--check --baseline --format
json`` give every finding the same state on the same inputs -- a two-rank job and a two-rank
baseline of the CNN sample, with the cluster rule NPU207 (slow rank) firing on both sides, and the
settings from a pyproject.toml one level above the checked folder.

Before the one flow, the editor ran the baseline's rules without its cluster: NPU207 came out
"new" in the editor where ``--check`` said "regressed" or "persisting".
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from msprof_lsp.server.__main__ import main
from tests.server.check.cli_support import CnnKnobs, copy_sample_sources, write_cnn_profiles
from tests.conftest import server_command
from tests.server.lsp import lsp_support as S

pytestmark = pytest.mark.asyncio(loop_scope="module")

# min-share 0: NPU207's share of the step is tiny on the generated ranks; a slow-rank gap of
# 0.001 % makes it fire on both runs (their ranks differ by a few µs per step).
PYPROJECT = """\
[tool.msprof-lsp]
min-share = 0
slow-rank-gap-percent = 0.001
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(proj, its cnn folder with the current two-rank run, the baseline's two-rank run)."""
    tmp = tmp_path_factory.mktemp("one_baseline_flow")
    proj = tmp / "proj"
    src = copy_sample_sources(proj / "cnn")
    before = CnnKnobs(allreduce_us=3000.0)
    after = replace(before, transdata_us=0.5, linear_transdata=0, dataloader_ms=(12.5, 20.0))
    write_cnn_profiles(src, tmp / "old", before)
    write_cnn_profiles(src, src / "prof", after)
    (proj / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    return proj, src, tmp / "old"


def check_states(project: tuple[Path, Path, Path]) -> list[dict]:
    """``--check cnn --baseline old --format json``: the baseline section's findings."""
    proj, src, old = project
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["--check", str(src), "--baseline", str(old), "--format", "json", "--fail-on", "never",
                     "--cache-dir", str(proj.parent / "cache")])
    assert code == 0
    return json.loads(out.getvalue())["baseline"]["findings"]


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=server_command()))
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    proj, _src, old = request.getfixturevalue("project")
    options = {"cacheDir": str(proj.parent / "cache"), "baseline": str(old)}
    await S.open_session(lsp_client, "visual-studio-code", proj, options)
    yield
    await lsp_client.shutdown_session()


async def editor_states(client: LanguageClient, src: Path, analysed: set[str]) -> set[tuple[str, str, int, str]]:
    """(code, file, line, state) of every diagnostic on the job's files, resolved ones included;
    ``analysed``: the files with findings (the server announces when it analysed those)."""
    out = set()
    docs = [S.Doc(client, path) for path in sorted(src.glob("*.py"))]
    for doc in docs:
        if str(doc.path.resolve()) in analysed:
            await S.wait_analysed(client, doc)
    for doc in docs:
        for d in await S.diagnostics_now(client, client.profile, doc.uri):
            assert d.data and d.data.get("state"), f"{doc.path.name}:{d.range.start.line + 1} {d.code}: no state"
            out.add((str(d.code), str(doc.path.resolve()), d.range.start.line + 1, d.data["state"]))
    return out


async def test_editor_and_check_give_each_finding_the_same_state(client: LanguageClient, project, monkeypatch) -> None:
    proj, src, old = project
    assert S.status_value(client.status, "state") == "loaded"
    monkeypatch.chdir(proj.parent)  # --check's paths are relative to the working directory
    checked = check_states(project)
    want = {(f["code"], str((proj.parent / f["path"]).resolve()), f["line"], f["state"])
            for f in checked if f["path"] is not None}
    got = await editor_states(client, src, {w[1] for w in want})
    assert got == want
    # the cluster rule is in both, matched to the baseline's (not "new")
    slow = [s for s in got if s[0] == "NPU207"]
    assert slow and all(s[3] != "new" for s in slow)
    # the other states are there too: this run has no TransData around the convs (resolved)
    assert {"resolved", "persisting"} <= {s[3] for s in got}
    # the counts over the whole job (findings without a line too) agree as well
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="msprof-lsp.setBaseline", arguments=[str(old)]))
    assert result["findings"] == dict(Counter(f["state"] for f in checked))
