"""Loading: progress and status, the cache, broken or missing profiles (one message, the server
keeps answering), handler failures, and a stdout that carries nothing but JSON-RPC.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import attrs
import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S
from tests.conftest import server_command


def _truncated_npu(root: Path) -> Path:
    """The CNN sample with rank 0 only, its trace_view.json cut mid-file (a writer still at work or
    a copy that stopped) and a kernel_details.csv that is binary junk."""
    S.cnn_workspace(root, profile=False)
    src = next((S.SAMPLES / "cnn_classifier" / "npu_profile").glob("*3185260*_ascend_pt"))
    dst = root / "npu_profile" / src.name
    shutil.copytree(src, dst)
    out = dst / "ASCEND_PROFILER_OUTPUT"
    data = (out / "trace_view.json").read_bytes()
    (out / "trace_view.json").write_bytes(data[: len(data) // 3])
    (out / "kernel_details.csv").write_bytes(b"\x00\xffnot a csv\x00\n")
    return root


def _unreadable_kineto(root: Path) -> Path:
    S.cnn_workspace(root, profile=False)
    (root / "runs").mkdir()
    (root / "runs" / "cnn.1.pt.trace.json").write_text("{ this is not JSON", encoding="utf-8")
    return root


WORKSPACES = {
    "cnn": lambda root: S.cnn_workspace(root),
    "truncated": _truncated_npu,
    "unreadable": _unreadable_kineto,
    "empty": lambda root: S.cnn_workspace(root, profile=False),
}


def _caps(profile: str) -> types.ClientCapabilities:
    if profile == "no-progress":  # a client that never declared window.workDoneProgress
        caps = S.capabilities("neovim@v0.7")
        caps.window = attrs.evolve(caps.window, work_done_progress=False)
        return caps
    return S.capabilities(profile)


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=S.SERVER_COMMAND, server_env={**os.environ, "MSPROF_LSP_TEST_FAULT": "hover"}),
)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """Parametrised indirectly: ``(client profile, workspace name[, capabilities variant])``."""
    profile, name, *variant = request.param
    tmp = request.getfixturevalue("tmp_path")
    root = WORKSPACES[name](tmp / "ws")
    lsp_client.seen = S.register_client_handlers(lsp_client)
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=_caps(variant[0] if variant else profile), root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        initialization_options=S.init_options(tmp)))
    lsp_client.root, lsp_client.tmp, lsp_client.profile = root, tmp, profile
    yield
    await lsp_client.shutdown_session()


def scenario(*cases: tuple[str, ...]):  # noqa: ANN201
    return pytest.mark.parametrize("client", cases, indirect=True, ids=lambda c: "-".join(c))


async def _still_answers(client: LanguageClient, doc: S.Doc) -> None:
    """Requests keep being answered after a load problem."""
    lens = await asyncio.wait_for(client.text_document_code_lens_async(
        types.CodeLensParams(types.TextDocumentIdentifier(doc.uri))), 10)
    assert lens == [] or lens is None or all(isinstance(x, types.CodeLens) for x in lens)
    hot = await asyncio.wait_for(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="msprof-lsp.showHotspots", arguments=[])), 10)
    assert isinstance(hot, dict) or hasattr(hot, "hotspots")


@scenario(("visual-studio-code", "cnn"), ("neovim@v0.7", "cnn"))
async def test_load_reports_progress_and_status(client: LanguageClient) -> None:
    status = await S.wait_loaded(client.seen)
    assert S.status_value(status, "state") == "loaded"
    states = [S.status_value(s, "state") for s in client.seen["status"]]
    assert states[:2] == ["loading", "loaded"]  # loading is announced before the work starts
    (token,) = client.progress_reports  # one load, one progress
    reports = client.progress_reports[token]
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and isinstance(reports[-1], types.WorkDoneProgressEnd)
    middle = [r for r in reports[1:-1] if isinstance(r, types.WorkDoneProgressReport)]
    messages = [r.message for r in middle]
    assert "Looking for profiles" in messages and "Mapping device time to source lines" in messages
    pcts = [r.percentage for r in middle if r.percentage is not None]
    assert pcts == sorted(pcts)  # never goes back
    assert S.status_value(status, "stepTimeUs") > 0 and 0 < S.status_value(status, "mappedShare") <= 1
    cache = client.tmp / "cache"
    assert cache.is_dir() and any(cache.rglob("*")), "the cacheDir setting holds the linked profile"


@scenario(("neovim@v0.7", "cnn", "no-progress"))
async def test_no_progress_without_the_capability(client: LanguageClient) -> None:
    # pytest-lsp fails the test if window/workDoneProgress/create is sent to this client
    status = await S.wait_loaded(client.seen)
    assert S.status_value(status, "state") == "loaded"
    assert client.progress_reports == {}


@scenario(("visual-studio-code", "truncated"))
async def test_damaged_profile_is_one_message(client: LanguageClient) -> None:
    status = await S.wait_loaded(client.seen)
    assert S.status_value(status, "state") == "loaded"  # what was readable is used
    problems = await S.wait_until(lambda: [m for m in client.messages if "loaded with problems" in m.message], 10,
                                  "the warning")
    assert len(problems) == 1 and problems[0].type == types.MessageType.Warning
    assert "trace_view.json" in problems[0].message and "truncated" in problems[0].message
    doc = S.Doc(client, client.root / "model.py")
    await _still_answers(client, doc)
    assert not [m for m in client.log_messages if m.type == types.MessageType.Error]


@scenario(("neovim@v0.7", "unreadable"))
async def test_unreadable_profile_is_one_error_message(client: LanguageClient) -> None:
    status = await S.wait_loaded(client.seen)
    assert S.status_value(status, "state") == "error"
    errors = await S.wait_until(lambda: [m for m in client.messages if m.type == types.MessageType.Error], 10,
                                "the error message")
    assert len(errors) == 1 and "cnn.1.pt.trace.json:1" in errors[0].message and "not valid JSON" in errors[0].message
    doc = S.Doc(client, client.root / "model.py")
    await _still_answers(client, doc)
    await asyncio.sleep(0.3)
    assert not client.diagnostics.get(doc.uri)
    # a reload of the same broken file says nothing new
    await client.workspace_execute_command_async(types.ExecuteCommandParams(command="msprof-lsp.reloadProfile"))
    assert len([m for m in client.messages if m.type == types.MessageType.Error]) == 1


@scenario(("visual-studio-code", "empty"))
async def test_no_profile_found_is_one_message(client: LanguageClient) -> None:
    status = await S.wait_loaded(client.seen)
    assert S.status_value(status, "state") == "none"
    await S.wait_until(lambda: client.messages, 10, "the message")
    (msg,) = client.messages
    assert msg.type == types.MessageType.Info and "no profile found" in msg.message
    doc = S.Doc(client, client.root / "model.py")
    await _still_answers(client, doc)


@scenario(("visual-studio-code", "cnn"))
async def test_a_failing_handler_is_logged_and_answered_empty(client: LanguageClient) -> None:
    await S.wait_loaded(client.seen)
    doc = S.Doc(client, client.root / "model.py")
    line0 = S.line_of(doc.text, "x = self.embed(x)") - 1
    # MSPROF_LSP_TEST_FAULT=hover makes the launcher break the hover table builder
    result = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(doc.uri), types.Position(line0, 12)))
    assert result is None
    errors = [m.message for m in client.log_messages if m.type == types.MessageType.Error]
    assert any("textDocument/hover failed: RuntimeError: injected fault" in e for e in errors)
    lens = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(doc.uri)))
    assert lens  # the server is alive and serving


def test_the_plain_entry_point_serves(tmp_path: Path) -> None:
    """``python -m msprof_lsp.server`` (no test rules): loads the sample and answers a hover."""
    root = S.cnn_workspace(tmp_path / "ws")
    model = root / "model.py"
    line0 = S.line_of(model.read_text(), "return self.pool(F.relu(self.bn(self.conv(x))))") - 1

    def then(send, received):  # noqa: ANN001, ANN202
        S.wait_bytes(received, b'"state": "loaded"')
        send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": model.as_uri(), "languageId": "python", "version": 1, "text": model.read_text()}}})
        send({"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", "params": {
            "textDocument": {"uri": model.as_uri()}, "position": {"line": line0, "character": 20}}})
        S.wait_bytes(received, b'"id": 2')

    frames, _ = S.raw_session(server_command(), root, tmp_path, then)
    init = next(f for f in frames if f.get("id") == 1)["result"]
    assert init["serverInfo"]["name"] == "msprof-lsp"
    assert set(init["capabilities"]["executeCommandProvider"]["commands"]) == {
        "msprof-lsp.reloadProfile", "msprof-lsp.selectProfile", "msprof-lsp.showHotspots",
        "msprof-lsp.setBaseline", "msprof-lsp.lineHeat", "msprof-lsp.showOperators", "msprof-lsp.reportModel",
        "msprof-lsp.adoptNewProfile"}
    hover = next(f for f in frames if f.get("id") == 2)["result"]
    assert "Conv2D" in hover["contents"]["value"]


def test_stdout_carries_only_jsonrpc(tmp_path: Path) -> None:
    """A rule prints to stdout during the analysis; the bytes on stdout must still be nothing but
    well-formed JSON-RPC frames, and the print must land on stderr."""
    root = S.cnn_workspace(tmp_path / "ws")
    uri = (root / "model.py").as_uri()

    def then(send, received):  # noqa: ANN001, ANN202
        send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": (root / "model.py").read_text()}}})
        S.wait_bytes(received, b"TST101")

    frames, errs = S.raw_session(S.SERVER_COMMAND, root, tmp_path, then)
    published = [f for f in frames if f.get("method") == "textDocument/publishDiagnostics" and f["params"]["uri"] == uri]
    assert published and any(d["code"] == "TST101" for d in published[-1]["params"]["diagnostics"])
    assert any(f.get("id") == 99 and "result" in f for f in frames)  # shutdown answered
    assert b"TST900: this line goes to stdout" in errs
