"""Every kind of JSON-RPC message, well-formed or not, against the real server over stdio: each is
answered as JSON-RPC 2.0 and the LSP say (or ignored where they say so), is at most one log line,
and the request after it is still served; the process ends cleanly with no traceback. Plus the
protocol in-process, where a test can hold a request in progress, and the envelope functions."""

from __future__ import annotations

import concurrent.futures
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

import lsp_support as S
from msprof_lsp.server.lsp import envelope
from msprof_lsp.server.lsp.app import create_server
from tests.conftest import server_command

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, NOT_INITIALIZED = -32700, -32600, -32601, -32602, -32002
DEEP = 100_000


@dataclass(frozen=True)
class Error:
    """The message is answered with this error code and id."""

    code: int
    rid: Any


@dataclass(frozen=True)
class Result:
    """The request is served (a result, no error)."""

    rid: Any


@dataclass(frozen=True)
class Batch:
    """A JSON array of errors, one (code, id) per request of the batch."""

    errors: tuple[tuple[int, Any], ...]


NOTHING = None  # no answer of any kind (a notification, a reply)


def _framed(body: bytes) -> bytes:
    return f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def _msg(**members: Any) -> bytes:
    return _framed(json.dumps({"jsonrpc": "2.0", **members}).encode())


def _raw(**members: Any) -> bytes:
    """A message without the ``jsonrpc`` member unless given."""
    return _framed(json.dumps(members).encode())


def _cases(uri: str) -> dict[str, tuple[bytes, Any]]:
    hover = {"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11}}
    deep = b"[" * DEEP + b"]" * DEEP
    nested = {"x": 0}
    for _ in range(200):  # decodable by json, over envelope.MAX_DEPTH
        nested = {"x": nested}
    return {
        # -- requests: ids of every JSON type ------------------------------------------------------
        "id-string": (_msg(id="s-1", method="textDocument/hover", params=hover), Result("s-1")),
        "id-int": (_msg(id=501, method="textDocument/hover", params=hover), Result(501)),
        "id-negative": (_msg(id=-7, method="textDocument/hover", params=hover), Result(-7)),
        "id-huge": (_msg(id=10**30, method="textDocument/hover", params=hover), Result(10**30)),
        "id-zero-string": (_msg(id="", method="textDocument/hover", params=hover), Result("")),
        "id-float": (_msg(id=1.5, method="textDocument/hover", params=hover), Error(INVALID_REQUEST, 1.5)),
        "id-bool": (_msg(id=True, method="textDocument/hover", params=hover), Error(INVALID_REQUEST, None)),
        "id-null": (_msg(id=None, method="textDocument/hover", params=hover), Error(INVALID_REQUEST, None)),
        "id-array": (_msg(id=[502], method="textDocument/hover", params=hover), Error(INVALID_REQUEST, None)),
        "id-object": (_msg(id={"a": 1}, method="textDocument/hover", params=hover), Error(INVALID_REQUEST, None)),
        # -- envelope members ----------------------------------------------------------------------
        "wrong-version": (_raw(jsonrpc="1.0", id=503, method="textDocument/hover", params=hover),
                          Error(INVALID_REQUEST, 503)),
        "no-jsonrpc": (_raw(id=504, method="textDocument/hover", params=hover), Error(INVALID_REQUEST, 504)),
        "jsonrpc-number": (_raw(jsonrpc=2.0, id=505, method="shutdown"), Error(INVALID_REQUEST, 505)),
        "method-number": (_msg(id=506, method=5), Error(INVALID_REQUEST, 506)),
        "method-missing": (_msg(id=507), Error(INVALID_REQUEST, 507)),
        "nothing-but-jsonrpc": (_msg(), Error(INVALID_REQUEST, None)),
        "extra-member": (_msg(id=508, method="textDocument/hover", params=hover, extra=[1, 2]), Result(508)),
        # -- methods -------------------------------------------------------------------------------
        "unknown-request": (_msg(id=510, method="foo/bar"), Error(METHOD_NOT_FOUND, 510)),
        "dollar-request": (_msg(id=511, method="$/unknown", params={}), Error(METHOD_NOT_FOUND, 511)),
        "empty-method": (_msg(id=512, method=""), Error(METHOD_NOT_FOUND, 512)),
        "notification-sent-as-request": (_msg(id=513, method="initialized", params={}), Error(METHOD_NOT_FOUND, 513)),
        "cancel-sent-as-request": (_msg(id=514, method="$/cancelRequest", params={"id": 1}),
                                   Error(METHOD_NOT_FOUND, 514)),
        "exit-sent-as-request": (_msg(id=515, method="exit"), Error(METHOD_NOT_FOUND, 515)),
        "request-sent-as-notification": (_msg(method="textDocument/hover", params=hover), NOTHING),
        "server-method-from-client": (_msg(id=516, method="workspace/configuration", params={"items": []}),
                                      Error(METHOD_NOT_FOUND, 516)),
        "long-method": (_msg(id=517, method="x" * 100_000), Error(METHOD_NOT_FOUND, 517)),
        "unknown-notification": (_msg(method="foo/bar", params={}), NOTHING),
        # -- params --------------------------------------------------------------------------------
        "params-string": (_msg(id=520, method="textDocument/hover", params="x"), Error(INVALID_REQUEST, 520)),
        "params-number": (_msg(id=521, method="textDocument/hover", params=5), Error(INVALID_REQUEST, 521)),
        "params-bool-notification": (_msg(method="textDocument/didClose", params=True), Error(INVALID_REQUEST, None)),
        "params-null": (_msg(id=522, method="textDocument/hover", params=None), Error(INVALID_PARAMS, 522)),
        "params-missing": (_msg(id=523, method="textDocument/hover"), Error(INVALID_PARAMS, 523)),
        "params-array-for-object": (_msg(id=524, method="textDocument/hover", params=[hover]),
                                    Error(INVALID_PARAMS, 524)),
        "params-token-array": (_msg(id=525, method="textDocument/hover", params={**hover, "workDoneToken": []}),
                               Error(INVALID_PARAMS, 525)),
        "params-deep": (_framed(b'{"jsonrpc":"2.0","id":526,"method":"textDocument/hover","params":{"x":'
                                + deep + b"}}"), Error(INVALID_REQUEST, 526)),
        "params-deep-id-last": (_framed(b'{"jsonrpc":"2.0","method":"textDocument/hover","params":{"x":' + deep
                                        + b'},"id":"s-527"}'), Error(INVALID_REQUEST, "s-527")),
        "params-over-the-depth-limit": (_msg(id=528, method="textDocument/hover", params=nested),
                                        Error(INVALID_REQUEST, 528)),
        "deep-notification": (_framed(b'{"jsonrpc":"2.0","method":"textDocument/didClose","params":' + deep + b"}"),
                              Error(PARSE_ERROR, None)),
        "deep-array": (_framed(deep), Error(PARSE_ERROR, None)),
        # -- $/cancelRequest, $/setTrace, $/progress -------------------------------------------------
        "cancel-id-array": (_msg(method="$/cancelRequest", params={"id": []}), NOTHING),
        "cancel-id-object": (_msg(method="$/cancelRequest", params={"id": {}}), NOTHING),
        "cancel-id-null": (_msg(method="$/cancelRequest", params={"id": None}), NOTHING),
        "cancel-id-float": (_msg(method="$/cancelRequest", params={"id": 2.5}), NOTHING),
        "cancel-no-params": (_msg(method="$/cancelRequest"), NOTHING),
        "cancel-params-array": (_msg(method="$/cancelRequest", params=[1]), NOTHING),
        "cancel-unknown-id": (_msg(method="$/cancelRequest", params={"id": 123456}), NOTHING),
        "set-trace": (_msg(method="$/setTrace", params={"value": "verbose"}), NOTHING),
        "set-trace-bad-value": (_msg(method="$/setTrace", params={"value": 5}), NOTHING),
        "progress": (_msg(method="$/progress", params={"token": [], "value": {}}), NOTHING),
        "progress-cancel-token-array": (_msg(method="window/workDoneProgress/cancel", params={"token": []}), NOTHING),
        # -- replies (never answered) ----------------------------------------------------------------
        "reply-id-object": (_msg(id={}, result=None), NOTHING),
        "reply-id-array-error": (_msg(id=[], error={"code": 1, "message": "x"}), NOTHING),
        "reply-id-null": (_msg(id=None, result=1), NOTHING),
        "reply-unknown-id": (_msg(id="no-such-request", result=1), NOTHING),
        "reply-no-id": (_msg(result=1), NOTHING),
        "reply-result-and-error": (_msg(id="x", result=1, error={"code": 1, "message": "x"}), NOTHING),
        "reply-error-not-an-object": (_msg(id="y", error=5), NOTHING),
        "reply-wrong-version": (_raw(jsonrpc="1.0", id="z", result=1), NOTHING),
        # -- batches ---------------------------------------------------------------------------------
        "batch": (_framed(json.dumps([{"jsonrpc": "2.0", "id": 530, "method": "shutdown"},
                                      {"jsonrpc": "2.0", "method": "exit"}, 5]).encode()),
                  Batch(((INVALID_REQUEST, 530), (INVALID_REQUEST, None)))),
        "empty-batch": (_framed(b"[]"), Error(INVALID_REQUEST, None)),
        "batch-of-notifications": (_framed(json.dumps([{"jsonrpc": "2.0", "method": "exit"}]).encode()), NOTHING),
        # -- bytes that are not JSON, JSON that is no message ------------------------------------------
        "not-json": (_framed(b"{not json!}"), Error(PARSE_ERROR, None)),
        "nan-id": (_framed(b'{"jsonrpc":"2.0","id":NaN,"method":"shutdown"}'), Error(PARSE_ERROR, None)),
        "infinity-params": (_framed(b'{"jsonrpc":"2.0","id":531,"method":"x","params":[Infinity]}'),
                            Error(PARSE_ERROR, None)),
        "non-utf8": (_framed(b'{"jsonrpc":"2.0","id":532,"method":"x\xff\xfe"}'), Error(PARSE_ERROR, None)),
        "utf16": (_framed(json.dumps({"jsonrpc": "2.0", "id": 533, "method": "shutdown"}).encode("utf-16")),
                  Error(PARSE_ERROR, None)),
        "empty-body": (b"Content-Length: 0\r\n\r\n", Error(PARSE_ERROR, None)),
        "huge-int": (_framed(b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"shutdown"}'),
                     Error(PARSE_ERROR, None)),
        "scalar": (_framed(b"5"), Error(INVALID_REQUEST, None)),
        "string": (_framed(b'"textDocument/hover"'), Error(INVALID_REQUEST, None)),
        "null": (_framed(b"null"), Error(INVALID_REQUEST, None)),
        # -- framing -----------------------------------------------------------------------------------
        "huge-header": (b"X-Padding: " + b"a" * 100_000 + b"\r\n"
                        + _msg(id=534, method="textDocument/hover", params=hover), Result(534)),
        "negative-content-length": (b"Content-Length: -5\r\n\r\n" + json.dumps({"jsonrpc": "2.0", "id": 535}).encode(),
                                    NOTHING),
        "lone-surrogate-text": (_msg(method="textDocument/didOpen", params={"textDocument": {
            "uri": uri.replace("model.py", "other.py"), "languageId": "python", "version": 1,
            "text": "x = '\ud800'\n"}}), NOTHING),
    }


def _empty_root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "model.py").write_text("import torch\n\n\ndef f(x):\n    return torch.relu(x)\n", encoding="utf-8")
    return root


def _hover(uri: str, rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "textDocument/hover",
            "params": {"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11}}}


def _answers(bodies: list[Any], skip_id: Any) -> list[Any]:
    """Responses (and batch answers) among ``bodies``, but the one to ``skip_id``."""
    return [b for b in bodies if isinstance(b, list)
            or ("method" not in b and "id" in b and not (b["id"] == skip_id and type(b["id"]) is type(skip_id)))]


def test_every_message_kind_is_answered_or_ignored_and_the_next_request_is_served(tmp_path: Path) -> None:
    root = _empty_root(tmp_path)
    uri = (root / "model.py").as_uri()
    server = S.RawServer(server_command())
    try:
        server.initialize(root, {"cacheDir": str(tmp_path / "cache")})
        server.wait(lambda f: f.get("method") == "msprof-lsp/profileStatus" and f["params"]["state"] == "none", 30,
                    "the final profile status")
        server.wait(lambda f: f.get("method") == "window/logMessage" and "no profile found" in f["params"]["message"])
        for n, (kind, (data, expected)) in enumerate(_cases(uri).items()):
            next_id = 10_000 + n
            before, logged = len(server.bodies()), len(server.logs())
            server.send_bytes(data)
            server.send(_hover(uri, next_id))
            reply = server.response(next_id, 15)  # the request after it is served...
            assert "error" not in reply, (kind, reply)
            answers = _answers(server.bodies()[before:], next_id)
            if expected is NOTHING:
                assert answers == [], kind
            elif isinstance(expected, Batch):
                (batch,) = answers
                assert [(a["error"]["code"], a["id"]) for a in batch] == list(expected.errors), (kind, batch)
            elif isinstance(expected, Result):
                (answer,) = answers
                assert answer["id"] == expected.rid and "error" not in answer, (kind, answer)
            else:
                (answer,) = answers
                assert (answer["error"]["code"], answer["id"]) == (expected.code, expected.rid), (kind, answer)
                assert type(answer["id"]) is type(expected.rid), kind  # 1.5 stays 1.5, never 1 or true
                assert len(answer["error"]["message"]) < 600, kind  # a 100 kB method name is not echoed
            assert len(server.logs()) - logged <= 1, (kind, server.logs()[logged:])  # one line at most
        assert server.proc.poll() is None  # ...and the process is alive after all of them
        S.end_session(server)
    finally:
        server.kill()


def test_before_initialize_requests_are_refused_and_notifications_dropped(tmp_path: Path) -> None:
    root = _empty_root(tmp_path)
    uri = (root / "model.py").as_uri()
    server = S.RawServer(server_command())
    try:
        server.send(_hover(uri, 1))
        reply = server.response(1, 10)
        assert reply["error"]["code"] == NOT_INITIALIZED, reply
        server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "x = 1\n"}}})
        server.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        assert server.response(2, 10)["error"]["code"] == NOT_INITIALIZED
        # the reporters' killers, before initialize: the session still starts
        for data, _ in (_cases(uri)[k] for k in ("cancel-id-array", "cancel-id-object", "reply-id-object",
                                                  "params-deep", "batch", "nan-id")):
            server.send_bytes(data)
        init = server.initialize(root, {"cacheDir": str(tmp_path / "cache")}, rid=3)
        assert init is not None and "capabilities" in init["result"]
        server.send({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"capabilities": {}}})
        assert server.response(4, 10)["error"]["code"] == INVALID_REQUEST  # only once
        server.send(_hover(uri, 5))
        assert "error" not in server.response(5, 10)
        # the didOpen sent before initialize was dropped: the server answers from the file on disk
        assert not [f for f in server.frames() if f.get("method") == "textDocument/publishDiagnostics"
                    and f["params"].get("version") == 1]
        S.end_session(server)
    finally:
        server.kill()


def test_after_shutdown_notifications_are_dropped_and_exit_still_works(tmp_path: Path) -> None:
    root = _empty_root(tmp_path)
    server = S.RawServer(server_command())
    try:
        server.initialize(root, {"cacheDir": str(tmp_path / "cache")})
        server.send({"jsonrpc": "2.0", "id": 1, "method": "shutdown"})
        assert server.response(1, 10)["result"] is None
        server.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": []}})
        server.send({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"textDocument": 7}})
        server.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        assert server.response(2, 10)["error"]["code"] == INVALID_REQUEST
        assert [f["id"] for f in server.frames() if "id" in f and "method" not in f] == ["init", 1, 2]
        server.send({"jsonrpc": "2.0", "method": "exit"})
        assert server.finish(20) == 0
        assert b"Traceback" not in server.stderr
    finally:
        server.kill()


# -- the protocol in-process: requests in progress and requests of the server's own --------------


@pytest.fixture
def protocol():
    ls = create_server()
    capture = S.FrameCapture()
    ls.protocol.set_writer(capture)
    ls.protocol.receive(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                    "params": {"capabilities": {}}}).encode())
    capture.out.clear()
    ls.protocol.capture = capture  # type: ignore[attr-defined]
    yield ls.protocol
    ls.worker.shutdown(wait=False)


def _receive(protocol: Any, **members: Any) -> None:
    protocol.receive(json.dumps({"jsonrpc": "2.0", **members}).encode())


def test_a_forged_reply_never_settles_a_client_request_in_progress(protocol: Any) -> None:
    in_progress: concurrent.futures.Future[Any] = concurrent.futures.Future()
    protocol._request_futures[7] = in_progress
    _receive(protocol, id=7, result={"forged": True})
    _receive(protocol, id=7, error={"code": 1, "message": "forged"})
    assert not in_progress.done()
    # and a request reusing the id of one in progress is refused, not run over it
    _receive(protocol, id=7, method="shutdown")
    (answer,) = [m for m in protocol.capture.messages() if m.get("id") == 7]
    assert answer["error"]["code"] == INVALID_REQUEST and "in progress" in answer["error"]["message"]
    assert protocol._request_futures[7] is in_progress


def test_a_cancel_never_touches_a_request_of_the_server(protocol: Any) -> None:
    future = protocol.send_request(types.WORKSPACE_CONFIGURATION, types.ConfigurationParams(items=[]))
    (sent,) = [m for m in protocol.capture.messages() if m.get("method") == types.WORKSPACE_CONFIGURATION]
    _receive(protocol, method="$/cancelRequest", params={"id": sent["id"]})
    assert not future.cancelled()
    _receive(protocol, id=sent["id"], result=[])
    assert list(future.result(0)) == []


def test_a_broken_reply_fails_the_request_of_the_server(protocol: Any) -> None:
    for reply in ({}, {"result": 1, "error": {"code": 1, "message": "x"}}, {"error": 5}):
        future = protocol.send_request(types.WORKSPACE_CONFIGURATION, types.ConfigurationParams(items=[]))
        sent = [m for m in protocol.capture.messages() if m.get("method") == types.WORKSPACE_CONFIGURATION][-1]
        _receive(protocol, id=sent["id"], **reply)
        with pytest.raises(Exception, match="invalid reply"):
            future.result(0)
        assert sent["id"] not in protocol._outgoing
    assert not [m for m in protocol.capture.messages() if "error" in m]  # a reply is never answered


def test_an_internal_error_while_handling_a_message_is_one_answer_not_the_end(protocol: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(protocol, "handle_message", broken)
    _receive(protocol, id=8, method="shutdown")
    (answer,) = [m for m in protocol.capture.messages() if m.get("id") == 8]
    assert answer["error"]["code"] == -32603
    logged = [m["params"]["message"] for m in protocol.capture.messages() if m.get("method") == "window/logMessage"]
    assert len(logged) == 1 and "RuntimeError: a bug" in logged[0]
    monkeypatch.undo()
    _receive(protocol, id=9, method="shutdown")  # the next message is handled as usual
    assert [m for m in protocol.capture.messages() if m.get("id") == 9] == [{"jsonrpc": "2.0", "id": 9, "result": None}]


# -- the envelope functions ---------------------------------------------------------------------


@pytest.mark.parametrize(("body", "rid"), [
    (b'{"id": 5, "params": {"a": [[[]]]}}', 5),
    (b'{"params": {"id": 9, "a": [1, {"id": 3}]}, "id": "last"}', "last"),
    (b'{"a": "a string with } and \\" and { in it", "id": -2}', -2),
    (b'{"id": [1]}', None),
    (b'{"id": true}', None),
    (b'{"id": 1.5}', 1.5),
    (b'{"id": 5', None),  # unbalanced
    (b'[{"id": 5}]', None),  # no object
    (b'{"id": 5}}', None),
    (b'{"id": 5} {"id": 6}', None),
    (b'{"p": [[{"id": 1}], []], "id": 7, "q": [{}]}', 7),
    (b'{"id": "\\"}"}', '"}'),
    (b'{"\\u0069d": 4, "a": [[]]}', 4),  # an escaped key
    (b'{"id": 4, "id": "b"}', "b"),  # the last one, as the decoder keeps
])
def test_the_id_of_a_message_too_deep_to_decode_is_read_by_a_scan(body: bytes, rid: Any) -> None:
    assert envelope.scan_top_level_id(body) == rid


def test_the_id_scan_is_linear_on_hostile_bytes() -> None:
    size = envelope.ID_SCAN_LIMIT - 16
    for unit in (b'"\\"', b"\\", b"[]", b"[1]", b'"a":1,', b"}{"):
        body = b'{"a":' + unit * (size // len(unit))
        start = time.perf_counter()
        envelope.scan_top_level_id(body)
        assert time.perf_counter() - start < 1.0, unit
    assert envelope.scan_top_level_id(b'{"id": 1, "a": "' + b"x" * envelope.ID_SCAN_LIMIT + b'"}') is None  # too big


def test_decode_bounds_depth_and_rejects_what_is_not_json() -> None:
    with pytest.raises(envelope.Undecodable) as deep:
        envelope.decode(b'{"id": 4, "params": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert deep.value.too_deep and deep.value.rid == 4
    assert envelope.decode(b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}") is not None
    for body in (b"NaN", b'{"a": -Infinity}', "{}".encode("utf-16"), b"\xef\xbb\xbf{}", b"{\xff}"):
        with pytest.raises(envelope.Undecodable) as bad:
            envelope.decode(body)
        assert not bad.value.too_deep and bad.value.rid is None
