"""A workspace with two training jobs (a copy of samples/: the CNN classifier and the tiny
transformer, each with its NPU profile and Kineto trace): every open file gets its own job's
diagnostics at the same time, without a reload or a switch back and forth.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S
from tests.conftest import server_command

pytestmark = pytest.mark.asyncio(loop_scope="module")

# NPU101 fires only on the CNN's model.py, NPU107 only on the transformer's train.py (--check samples)
CODES = ["NPU101", "NPU107"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jobs") / "samples"
    for name in ("cnn_classifier", "tiny_transformer"):
        shutil.copytree(S.SAMPLES / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=server_command()),
                    params=S.PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    await S.open_session(lsp_client, request.param, root, S.init_options(root.parent, only_test_rules=False,
                                                                         select=CODES))
    yield
    await lsp_client.shutdown_session()


def _loads(client: LanguageClient, job: str) -> list[str]:
    """The server's "loaded <kind> profile <path>" log lines for one sample's profiles."""
    return [m.message for m in client.log_messages if "loaded torch_npu profile" in m.message and f"/{job}/" in m.message]


def _serving(client: LanguageClient, job: str) -> bool:
    """The last status names ``job``'s profile (the job of the file opened last)."""
    return f"/{job}/npu_profile/" in (S.status_value(client.seen["status"][-1], "path") or "")


async def _open(client: LanguageClient, path: Path, job: str) -> S.Doc:
    """Open a file and wait until its job serves it and is the primary one: files are opened one
    after the other, so each wait is for this open's own status."""
    doc = S.Doc(client, path)
    await S.wait_analysed(client, doc)
    await S.wait_until(lambda: _serving(client, job), 30, f"the status of {job}")
    return doc


async def test_each_file_gets_its_own_jobs_diagnostics_at_the_same_time(client: LanguageClient) -> None:
    root = client.root
    cnn = await _open(client, root / "cnn_classifier" / "model.py", "cnn_classifier")
    tiny = await _open(client, root / "tiny_transformer" / "train.py", "tiny_transformer")
    try:
        statuses = len(client.seen["status"])
        cnn_diags = await S.diagnostics_now(client, client.profile, cnn.uri)
        tiny_diags = await S.diagnostics_now(client, client.profile, tiny.uri)
        assert {str(d.code) for d in cnn_diags} == {"NPU101"} and len(cnn_diags) == 3  # the sample's three pairs
        assert {str(d.code) for d in tiny_diags} == {"NPU107"}
        (npu107,) = tiny_diags
        line = tiny.text.split("\n")[npu107.range.start.line]
        assert line[npu107.range.start.character:].startswith("import torch_npu")
        # each job loaded once, none reloaded to serve the other's file
        assert len(_loads(client, "cnn_classifier")) == 1 and len(_loads(client, "tiny_transformer")) == 1
        # one status: the job of the file opened last
        assert S.status_value(client.seen["status"][-1], "state") == "loaded"

        # back to a file of the first job: served from the held job, no load at all
        other = await _open(client, root / "cnn_classifier" / "train.py", "cnn_classifier")
        try:
            assert [S.status_value(s, "state") for s in client.seen["status"][statuses:]] == ["loaded"]
            assert len(_loads(client, "cnn_classifier")) == 1 and len(_loads(client, "tiny_transformer")) == 1
            assert {str(d.code) for d in await S.diagnostics_now(client, client.profile, tiny.uri)} == {"NPU107"}
            assert len(await S.diagnostics_now(client, client.profile, cnn.uri)) == 3
        finally:
            other.close()
    finally:
        cnn.close()
        tiny.close()


async def test_numbers_of_a_file_come_from_its_own_job(client: LanguageClient) -> None:
    """The lm_head line's operators as shares of the transformer's step, not the CNN's."""
    root = client.root
    cnn = await _open(client, root / "cnn_classifier" / "model.py", "cnn_classifier")
    cnn_step = S.status_value(client.seen["status"][-1], "stepTimeUs")
    model = None
    try:
        model = await _open(client, root / "tiny_transformer" / "model.py", "tiny_transformer")
        tiny_step = S.status_value(client.seen["status"][-1], "stepTimeUs")
        assert abs(tiny_step - cnn_step) > 1000  # different jobs, different steps
        line0 = S.line_of(model.text, "self.lm_head(self.norm(x))") - 1
        # the CNN file is still open (and is not the primary job's): its numbers stay its own too
        for doc, line in ((model, line0), (cnn, S.line_of(cnn.text, "return self.pool(F.relu(self.bn(self.conv(x))))") - 1)):
            result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
                command="msprof-lsp.showOperators", arguments=[doc.uri, line]))
            ops = result["ops"]
            assert ops, doc.path
            step = tiny_step if doc is model else cnn_step
            for op in ops:
                assert op["share"] == pytest.approx(op["time_us"] / step, rel=1e-3, abs=1e-6), (doc.path, op)
        assert any(op["type"] == "MatMulV3" for op in (await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="msprof-lsp.showOperators", arguments=[model.uri, line0])))["ops"])
    finally:
        cnn.close()
        if model is not None:
            model.close()

