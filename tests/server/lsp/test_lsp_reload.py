"""The profile changes under the editor: a new run appears (client file events for VS Code, mtime
polling for Neovim 0.7), the user selects another profile or rank, and a workspace holds two jobs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

FAST_POLL = {**os.environ, "MSPROF_LSP_POLL_INTERVAL": "0.3"}
SLOW_FC = {"fc_mm_us": 150.0}  # the new run: the fc layers got slow


def _rank0_workspace(root: Path) -> Path:
    S.cnn_workspace(root, profile=False)
    src = next((S.SAMPLES / "cnn_classifier" / "npu_profile").glob("*3185260*_ascend_pt"))
    shutil.copytree(src, root / "npu_profile" / src.name)
    return root


def _write_new_run(folder: Path) -> Path:
    """A later run of rank 0 with slow fc layers, written the way torch_npu writes it."""
    from tests.synth.sample_runs import CnnKnobs, cnn_runs
    from tests.synth.write_text import write_torch_npu_text

    run = cnn_runs(S.SAMPLES / "cnn_classifier", CnnKnobs(**SLOW_FC))[0]
    later = dataclasses.replace(run, pid=run.pid + 1, start_ns=run.start_ns + 3_600 * 10**9)
    return write_torch_npu_text(later, folder)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=S.SERVER_COMMAND, server_env=FAST_POLL))
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """Parametrised indirectly with (client profile, workspace builder name)."""
    profile, name = request.param
    tmp = request.getfixturevalue("tmp_path")
    root = WORKSPACES[name](tmp / "ws")
    lsp_client.tmp = tmp
    await S.open_session(lsp_client, profile, root, S.init_options(tmp))
    yield
    await lsp_client.shutdown_session()


def _expected(text: str, shares: dict) -> set:  # noqa: ANN001
    return S.expected_cnn(text, S.hot_model_lines(text, shares))


def scenario(*cases: tuple[str, str]):  # noqa: ANN201
    return pytest.mark.parametrize("client", cases, indirect=True, ids=lambda c: c[0])


@scenario(("visual-studio-code", "rank0"), ("neovim@v0.7", "rank0"))
async def test_new_run_reloads_and_changes_the_diagnostics(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "model.py")
    before = _expected(doc.text, S.cnn_truth_shares(0))
    await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: S.keyed(d) == before)
    if client.profile == "visual-studio-code":
        (reg,) = [r for p in client.seen["register"] for r in p.registrations
                  if r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES]
        globs = {w["globPattern"] for w in reg.register_options["watchers"]}
        assert {"**/*_ascend_pt/**", "**/PROF_*/**", "**/*.pt.trace.json*", "**/ascend_pytorch_profiler*.db"} <= globs
    new_root = _write_new_run(client.root / "npu_profile")
    if client.profile == "visual-studio-code":  # the client watches; tell the server what it saw
        done = new_root / "ASCEND_PROFILER_OUTPUT" / "analyse.done"
        assert done.is_file()
        client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=done.as_uri(), type=types.FileChangeType.Created)]))
    # (Neovim 0.7 cannot watch for the server: it polls the profile folder)
    status = await S.wait_loaded(client.seen, count=2)  # poll + load: a limit, not a timing
    assert S.status_value(status, "path") == str(new_root)
    after = _expected(doc.text, S.truth_shares(S.cnn_truth(0, **SLOW_FC)))
    assert after != before
    await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: S.keyed(d) == after, what="the new run's")
    if S.is_pull(client.profile):
        assert client.diagnostic_refresh_count >= 1  # pull clients are told to pull again


def _two_ranks_and_another(root: Path) -> Path:
    S.cnn_workspace(root)  # npu_profile: ranks 0 and 1
    _write_new_run(root / "elsewhere")
    return root


@scenario(("visual-studio-code", "two_ranks_and_another"))
async def test_select_profile_and_rank(client: LanguageClient) -> None:
    # two jobs under the folder: the newest run (elsewhere/) was chosen
    assert S.status_value(client.status, "path").startswith(str(client.root / "elsewhere"))
    other = next((client.root / "elsewhere").glob("*_ascend_pt"))
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="msprof-lsp.selectProfile", arguments=[str(client.root / "npu_profile"), 1]))
    assert status["state"] == "loaded" and status["rank"] == 1 and status["ranks"] == [0, 1]
    with pytest.raises(JsonRpcException, match="no such file or directory"):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="msprof-lsp.selectProfile", arguments=[str(client.root / "missing")]))
    status = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="msprof-lsp.selectProfile", arguments=[str(other)]))
    assert status["state"] == "loaded" and status["path"] == str(other) and status["ranks"] == [0]
    with pytest.raises(JsonRpcException, match="argument 2 must be a rank"):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="msprof-lsp.selectProfile", arguments=[str(other), "one"]))


def _two_samples(root: Path) -> Path:
    for sample in ("cnn_classifier", "tiny_transformer"):
        dst = root / sample
        dst.mkdir(parents=True)
        for f in (S.SAMPLES / sample).glob("*.py"):
            shutil.copy2(f, dst / f.name)
        shutil.copytree(S.SAMPLES / sample / "npu_profile", dst / "npu_profile")
    os.utime(next((root / "cnn_classifier" / "npu_profile").glob("*_ascend_pt")), (1, 1))
    return root


@scenario(("neovim@v0.7", "two_samples"))
async def test_the_job_of_the_opened_file(client: LanguageClient) -> None:
    first = S.status_value(client.status, "path")
    target = "cnn_classifier" if "tiny_transformer" in first else "tiny_transformer"
    doc = S.Doc(client, client.root / target / "model.py")
    status = await S.wait_loaded(client.seen, count=2)  # poll + load: a limit, not a timing
    assert S.status_value(status, "path").startswith(str(client.root / target / "npu_profile"))
    await S.wait_until(lambda: client.diagnostics.get(doc.uri), 20, "diagnostics on the opened sample")
    await asyncio.sleep(0.5)
    assert len([s for s in client.seen["status"] if S.status_value(s, "state") == "loaded"]) == 2  # no flapping



WORKSPACES = {"rank0": _rank0_workspace, "two_ranks_and_another": _two_ranks_and_another, "two_samples": _two_samples}
