"""The server under abuse, over raw stdio: ill-typed params, malformed frames, requests after
shutdown, exit; bad input is one log line, never a traceback. Plus the frame reader on its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import lsp_support as S
from msprof_lsp.server.lsp.rpc import Damage, Frame, FrameReader
from tests.conftest import server_command

PLAIN = server_command()
INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR = -32602, -32600, -32700


def _empty_root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "model.py").write_text("import torch\n\n\ndef f(x):\n    return torch.relu(x)\n", encoding="utf-8")
    return root


@pytest.fixture
def server(tmp_path: Path):
    srv = S.RawServer(PLAIN)
    root = _empty_root(tmp_path)
    srv.initialize(root, {"cacheDir": str(tmp_path / "cache")})
    # the load's own messages ("no profile found") are out before the test counts log lines
    srv.wait(lambda f: f.get("method") == "msprof-lsp/profileStatus" and f["params"]["state"] == "none", 30,
             "the final profile status")
    srv.wait(lambda f: f.get("method") == "window/logMessage" and "no profile found" in f["params"]["message"], 10)
    srv.root = root  # type: ignore[attr-defined]
    yield srv
    srv.kill()


def _uri(server: S.RawServer) -> str:
    return (server.root / "model.py").as_uri()  # type: ignore[attr-defined]


def _request(rid: int, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def _valid_hover(server: S.RawServer, rid: int) -> dict[str, Any]:
    return _request(rid, "textDocument/hover", {"textDocument": {"uri": _uri(server)},
                                                "position": {"line": 4, "character": 11}})


# -- ill-typed params ------------------------------------------------------------------------------


def test_ill_typed_params_get_invalid_params(server: S.RawServer) -> None:
    uri = _uri(server)
    doc = {"uri": uri}
    bad = {
        10: ("textDocument/hover", {"textDocument": doc, "position": "line 3"}, "position"),
        11: ("textDocument/codeAction", {"textDocument": doc, "context": {"diagnostics": []}}, "range"),
        12: ("textDocument/codeLens", {"textDocument": 42}, "text_document"),
        13: ("workspace/executeCommand", {"arguments": []}, "command"),
        14: ("codeAction/resolve", {"kind": "quickfix", "isPreferred": True}, "title"),
        15: ("textDocument/hover", [5], "params"),  # a number is -32600: test_rpc_messages.py
        16: ("textDocument/codeAction", {"textDocument": doc, "range": {"start": {"line": "a", "character": 0},
                                                                        "end": None}, "context": {}}, "range"),
    }
    server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": (server.root / "model.py").read_text()}}})  # type: ignore[attr-defined]
    for rid, (method, params, _) in bad.items():
        server.send(_request(rid, method, params))
    server.send(_valid_hover(server, 20))
    for rid, (method, _, field) in bad.items():
        reply = server.response(rid, 10)  # promptly: a request is never left without an answer
        assert reply["error"]["code"] == INVALID_PARAMS, reply
        assert reply["error"]["message"].startswith(f"{method}: invalid params") and field in reply["error"]["message"]
    assert "error" not in server.response(20, 10)  # and the server goes on serving
    S.end_session(server)


def test_ill_typed_notifications_are_one_log_line_each(server: S.RawServer) -> None:
    server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": "model.py"}})
    server.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": _uri(server), "version": "two"}, "contentChanges": [{"range": 5, "text": 3}]}})
    server.send(_valid_hover(server, 21))
    assert "error" not in server.response(21, 10)
    logs = [m for m in server.logs() if "invalid params" in m]
    assert len(logs) == 2 and "textDocument/didOpen" in logs[0] and "textDocument/didChange" in logs[1], logs
    S.end_session(server)


def test_requests_after_shutdown_are_refused_not_dropped(server: S.RawServer) -> None:
    server.send({"jsonrpc": "2.0", "id": 30, "method": "shutdown"})
    assert server.response(30, 10)["result"] is None
    server.send(_valid_hover(server, 31))
    reply = server.response(31, 10)
    assert reply["error"]["code"] == INVALID_REQUEST and "shutting down" in reply["error"]["message"]
    server.send({"jsonrpc": "2.0", "method": "exit"})
    assert server.finish(20) == 0


def test_exit_without_shutdown_ends_with_status_1(server: S.RawServer) -> None:
    server.send({"jsonrpc": "2.0", "method": "exit"})
    assert server.finish(20) == 1


def test_the_end_of_stdin_ends_the_server(server: S.RawServer) -> None:
    server.send_bytes(b"Content-Length: 40\r\n\r\n{\"jsonrpc\"")  # cut mid-frame, then EOF
    server.proc.stdin.close()  # type: ignore[union-attr]
    assert server.finish(20) == 0
    assert b"Traceback" not in server.stderr


# -- malformed frames ------------------------------------------------------------------------------


def _body(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def _framed(body: bytes) -> bytes:
    return f"Content-Length: {len(body)}\r\n\r\n".encode() + body


DAMAGE = {
    "no-content-length": lambda m: b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + _body(m),
    "short-body": lambda m: f"Content-Length: {len(_body(m)) + 400}\r\n\r\n".encode() + _body(m),
    "not-a-number": lambda m: b"Content-Length: twelve\r\n\r\n" + _body(m),
    "garbage": lambda m: b"\x00\xff garbage without any header \x89PNG\r\n",
    "huge-length": lambda m: b"Content-Length: 99999999999999999\r\n\r\n" + _body(m),
    "not-json": lambda m: b"Content-Length: 11\r\n\r\n{not json!}",
    "not-json-rpc": lambda m: S.frame({"id": 40, "method": "textDocument/hover", "params": {}}),
    "deep-json": lambda m: _framed(b"[" * 100_000 + b"]" * 100_000),
}


def test_the_server_recovers_after_each_malformed_frame(server: S.RawServer) -> None:
    """One session, every kind of damage in turn, each followed by a valid request."""
    for n, kind in enumerate(sorted(DAMAGE)):
        victim_id, next_id = 100 + 2 * n, 101 + 2 * n
        victim = _request(victim_id, "textDocument/hover", {"textDocument": {"uri": _uri(server)},
                                                            "position": {"line": 0, "character": 0}})
        logged = len(server.logs())
        server.send_bytes(DAMAGE[kind](victim))
        # the next valid frame is served (a short body swallows its start: recovery is at its header)
        server.send(_valid_hover(server, next_id))
        assert "error" not in server.response(next_id, 10), kind
        if kind in ("short-body", "not-json-rpc"):  # the damaged request itself gets an error
            assert server.response(40 if kind == "not-json-rpc" else victim_id, 10)["error"]["code"] == INVALID_REQUEST
        elif kind in ("not-json", "deep-json"):
            errors = [f for f in server.frames() if f.get("error", {}).get("code") == PARSE_ERROR]
            assert errors and errors[-1]["id"] is None, kind
        else:
            assert not [f for f in server.frames() if f.get("id") == victim_id], kind
        problems = server.logs()[logged:]
        assert len(problems) == 1, (kind, problems)  # one line per malformed frame
    S.end_session(server)


# -- the frame reader on its own -------------------------------------------------------------------


def _feed(reader: FrameReader, data: bytes, step: int) -> list[Frame | Damage]:
    out: list[Frame | Damage] = []
    for i in range(0, len(data), step):
        out.extend(reader.feed(data[i:i + step]))
    return out


@pytest.mark.parametrize("step", [1, 7, 1 << 16])
def test_frames_survive_any_chunking(step: int) -> None:
    messages = [{"jsonrpc": "2.0", "id": i, "method": "m", "params": {"text": "中文😋" * i}} for i in range(20)]
    data = b"".join(S.frame(m) for m in messages)
    got = _feed(FrameReader(), data, step)
    assert [json.loads(f.body) for f in got if isinstance(f, Frame)] == messages
    assert not [d for d in got if isinstance(d, Damage)]


@pytest.mark.parametrize("step", [1, 5, 1 << 16])
def test_damage_is_reported_once_and_the_next_frame_is_kept(step: int) -> None:
    good = [S.frame({"jsonrpc": "2.0", "id": i, "method": "m"}) for i in range(3)]
    short = b"Content-Length: 500\r\n\r\n{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"m\"}"
    headless = b"Content-Type: x\r\n\r\n{\"a\": 1}"
    data = good[0] + short + good[1] + headless + b"junk\r\n\r\nmore junk" + good[2]
    got = _feed(FrameReader(), data, step)
    kinds = [type(x).__name__ for x in got]
    assert kinds == ["Frame", "Damage", "Frame", "Damage", "Frame"], got
    assert [json.loads(f.body)["id"] for f in got if isinstance(f, Frame)] == [0, 1, 2]
    first, second = (d for d in got if isinstance(d, Damage))
    assert "shorter than its Content-Length of 500" in first.reason and json.loads(first.prefix)["id"] == 9
    assert first.skipped == len(short) - len(b"Content-Length: 500\r\n\r\n")
    assert "without Content-Length" in second.reason
    assert second.skipped == len(headless) + len(b"junk\r\n\r\nmore junk")


def test_an_oversized_frame_is_skipped_without_being_held() -> None:
    reader = FrameReader(max_body=1000)
    after = S.frame({"jsonrpc": "2.0", "id": 1, "method": "m"})
    got = reader.feed(b"Content-Length: 5000\r\n\r\n")
    for _ in range(5):
        got += reader.feed(b" " * 1000)
        assert len(reader._buf) <= 64  # garbage is not accumulated
    got += reader.feed(after)
    assert [type(x).__name__ for x in got] == ["Damage", "Frame"]
    assert "over the limit of 1,000" in got[0].reason  # type: ignore[union-attr]


def test_the_end_of_the_stream_inside_a_frame_is_damage() -> None:
    reader = FrameReader()
    assert reader.feed(b"Content-Length: 100\r\n\r\n{\"a\"") == []
    (damage,) = reader.close()
    assert "96 bytes short" in damage.reason and damage.skipped == 4


# -- a workspace with a broken job -----------------------------------------------------------------
def test_a_job_that_cannot_be_read_does_not_stop_the_others(tmp_path: Path) -> None:
    """The newest job's trace is not JSON: the first load fails (one error), yet opening a file of
    the other job serves it, and opening the broken job's file says so once and clears nothing."""
    root = tmp_path / "ws"
    S.cnn_workspace(root / "cnn")
    broken = root / "broken"
    (broken / "runs").mkdir(parents=True)
    (broken / "train.py").write_text("import torch\n\nprint(torch.ones(1))\n", encoding="utf-8")
    (broken / "runs" / "job.1.pt.trace.json").write_text("{ this is not JSON", encoding="utf-8")
    model = root / "cnn" / "model.py"
    server = S.RawServer(server_command())
    try:
        server.initialize(root, S.init_options(tmp_path, only_test_rules=False, select=["NPU101"]))
        server.wait(lambda f: f.get("method") == "msprof-lsp/profileStatus" and f["params"]["state"] == "error", 60,
                    "the failed first load")

        def opened(path: Path) -> None:
            server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": path.as_uri(), "languageId": "python", "version": 1, "text": path.read_text()}}})

        def published(f: dict) -> bool:
            return (f.get("method") == "textDocument/publishDiagnostics" and f["params"]["uri"] == model.as_uri()
                    and any(d["code"] == "NPU101" for d in f["params"]["diagnostics"]))

        opened(model)
        server.wait(published, 60, "NPU101 on the CNN's model.py")
        server.wait(lambda f: f.get("method") == "msprof-lsp/profileStatus" and f["params"]["state"] == "loaded", 30)
        opened(broken / "train.py")
        server.send({"jsonrpc": "2.0", "id": 7, "method": "textDocument/hover", "params": {
            "textDocument": {"uri": model.as_uri()}, "position": {"line": 0, "character": 0}}})
        server.response(7, 30)  # the open of the broken job's file has been handled by now
        errors = [f["params"]["message"] for f in server.frames()
                  if f.get("method") == "window/showMessage" and f["params"]["type"] == 1]
        assert len(errors) == 1 and "job.1.pt.trace.json" in errors[0], errors  # the first load's, said once
        last = [f for f in server.frames() if f.get("method") == "textDocument/publishDiagnostics"
                and f["params"]["uri"] == model.as_uri()][-1]
        assert any(d["code"] == "NPU101" for d in last["params"]["diagnostics"])  # still served
        server.send({"jsonrpc": "2.0", "id": 8, "method": "shutdown"})
        server.response(8, 10)
        server.send({"jsonrpc": "2.0", "method": "exit"})
        assert server.finish(20) == 0
    finally:
        server.kill()


# -- one line per problem, tracebacks only when asked ----------------------------------------------


def _fault_session(tmp_path: Path, env: dict[str, str]) -> S.RawServer:
    """The CNN sample with the hover table builder broken (an internal bug), a command with bad
    arguments and an ill-typed request (bad input)."""
    root = S.cnn_workspace(tmp_path / "ws")
    server = S.RawServer(S.SERVER_COMMAND, env={"MSPROF_LSP_TEST_FAULT": "hover", **env})
    server.initialize(root, S.init_options(tmp_path))
    server.wait(lambda f: f.get("method") == "msprof-lsp/profileStatus" and f["params"]["state"] == "loaded", 60,
                "the loaded status")
    model = root / "model.py"
    text = model.read_text(encoding="utf-8")
    line0 = S.line_of(text, "x = self.embed(x)") - 1
    server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": model.as_uri(), "languageId": "python", "version": 1, "text": text}}})
    server.send(_request(50, "textDocument/hover", {"textDocument": {"uri": model.as_uri()},
                                                    "position": {"line": line0, "character": 12}}))
    server.send(_request(51, "workspace/executeCommand", {"command": "msprof-lsp.lineHeat", "arguments": [3]}))
    server.send(_request(52, "textDocument/hover", {"textDocument": {"uri": model.as_uri()}, "position": []}))
    assert server.response(50, 10)["result"] is None  # answered empty
    assert server.response(51, 10)["error"]["code"] == INVALID_PARAMS
    assert server.response(52, 10)["error"]["code"] == INVALID_PARAMS
    server.send({"jsonrpc": "2.0", "id": 999, "method": "shutdown"})
    server.response(999, 10)
    server.send({"jsonrpc": "2.0", "method": "exit"})
    assert server.finish(20) == 0
    return server


def test_bad_input_and_internal_errors_are_one_line_on_stderr(tmp_path: Path) -> None:
    server = _fault_session(tmp_path, {})
    err = server.stderr.decode(errors="replace")
    assert "Traceback" not in err, err
    (fault,) = [line for line in err.splitlines() if "injected fault" in line]
    assert "textDocument/hover failed: RuntimeError: injected fault" in fault
    assert [m for m in server.logs() if "textDocument/hover failed: RuntimeError: injected fault" in m]
    # every line is one record (or the test rule's print): no traceback lines, no continuation lines
    assert all(line.startswith(("msprof-lsp ", "TST900")) for line in err.splitlines()), err


def test_tracebacks_with_the_debug_setting(tmp_path: Path) -> None:
    server = _fault_session(tmp_path, {"MSPROF_LSP_DEBUG": "1"})
    err = server.stderr.decode(errors="replace")
    assert "Traceback" in err and "RuntimeError: injected fault" in err
