"""Random JSON-RPC frames against the protocol in-process: ids, methods, params, versions, replies,
batches and broken bytes in every mix. None may cause an internal error; every answer is a
well-formed JSON-RPC response with a code the spec defines; a request with an LSP id is answered
exactly once with that id; a reply is never answered; each frame is at most one log line."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from msprof_lsp.server.lsp import guard
from msprof_lsp.server.lsp.app import create_server
from tests.server.lsp.lsp_support import FrameCapture

CASES = 3000
CODES = {-32700, -32600, -32601, -32602, -32002}
URI = "file:///fuzz/model.py"
POS = {"line": 4, "character": 11}
RANGE = {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}}
# methods whose handlers answer synchronously and change no state a later frame depends on
TEMPLATES: dict[Any, Any] = {
    "textDocument/hover": {"textDocument": {"uri": URI}, "position": POS},
    "textDocument/codeLens": {"textDocument": {"uri": URI}},
    "textDocument/codeAction": {"textDocument": {"uri": URI}, "range": RANGE, "context": {"diagnostics": [
        {"range": RANGE, "message": "m", "code": "NPU101"}]}},
    "codeAction/resolve": {"title": "t", "kind": "quickfix", "data": {"x": 1}},
    "$/cancelRequest": {"id": 1},
    "$/setTrace": {"value": "off"},
    "$/progress": {"token": "t", "value": {"kind": "end"}},
    "window/workDoneProgress/cancel": {"token": "t"},
    "foo/bar": {},
    "$/unknown": {},
    "": {},
    5: {},
    None: {},
}


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(11 if depth < 3 else 9)
    if pick == 9:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if pick == 10:
        return {rng.choice(["id", "uri", "a", "line"]): _value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return [None, True, False, rng.randint(-2**70, 2**70), rng.random() * 1e6, "", "x\u00e9\U0001f600", [], {}][pick]


def _mutate(rng: random.Random, template: Any) -> Any:
    """The template with one member replaced by a random value (or dropped)."""
    if not isinstance(template, dict) or not template:
        return _value(rng)
    out = dict(template)
    key = rng.choice(list(out))
    roll = rng.random()
    if roll < 0.2:
        del out[key]
    elif roll < 0.6 and isinstance(out[key], dict):
        out[key] = _mutate(rng, out[key])
    else:
        out[key] = _value(rng)
    return out


def _message(rng: random.Random) -> dict[str, Any]:
    method = rng.choice(list(TEMPLATES))
    msg: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.85:
        msg["jsonrpc"] = "2.0"
    elif roll < 0.95:
        msg["jsonrpc"] = rng.choice(["1.0", 2.0, None, ""])
    if rng.random() < 0.12:  # a reply
        msg["id"] = _id(rng)
        if rng.random() < 0.7:
            msg["result"] = _value(rng)
        if rng.random() < 0.4:
            msg["error"] = rng.choice([{"code": 1, "message": "x"}, _value(rng)])
        return msg
    if rng.random() < 0.6:
        msg["id"] = _id(rng)
    msg["method"] = method
    roll = rng.random()
    if roll < 0.4:
        msg["params"] = TEMPLATES[method]
    elif roll < 0.8:
        msg["params"] = _mutate(rng, TEMPLATES[method])
    elif roll < 0.9:
        msg["params"] = _value(rng)
    if rng.random() < 0.05:
        msg["params"] = {"x": json.loads("[" * 300 + "]" * 300)}
    return msg


def _id(rng: random.Random) -> Any:
    return rng.choice([rng.randint(-5, 5), rng.randint(-2**80, 2**80), f"id-{rng.randrange(9)}", "", 1.5, True,
                       None, [], {}, [1], {"a": 1}])


def _frame(rng: random.Random) -> tuple[bytes, Any]:
    roll = rng.random()
    if roll < 0.08:
        data: Any = [_message(rng) for _ in range(rng.randrange(4))]
    else:
        data = _message(rng)
    body = json.dumps(data).encode()
    if rng.random() < 0.08:  # broken bytes
        i = rng.randrange(len(body))
        body = body[:i] + bytes([rng.randrange(256)]) + body[i + 1:]
        data = None
    return body, data


def _lsp_id(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_frames_are_answered_per_the_spec_and_never_an_internal_error(seed: int,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    internal: list[str] = []
    monkeypatch.setattr(guard, "report", lambda ls, where, exc: internal.append(f"{where}: {exc!r}"))
    ls = create_server()
    protocol = ls.protocol
    capture = FrameCapture()
    protocol.set_writer(capture)
    protocol.receive(json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                                 "params": {"capabilities": {}, "rootUri": "file:///fuzz"}}).encode())
    capture.take()
    rng = random.Random(seed)
    try:
        for n in range(CASES):
            body, data = _frame(rng)
            protocol.receive(body)
            out = capture.take()
            answers = [b for b in out if isinstance(b, list) or "method" not in b]
            logs = [b for b in out if isinstance(b, dict) and b.get("method") == "window/logMessage"]
            where = (n, body[:300])
            assert not internal, (where, internal)
            assert len(logs) <= 1, (where, logs)
            for answer in answers:
                for a in answer if isinstance(answer, list) else [answer]:
                    assert a["jsonrpc"] == "2.0" and "id" in a and ("result" in a) != ("error" in a), (where, a)
                    assert a["id"] is None or isinstance(a["id"], (int, str, float)), (where, a)
                    if "error" in a:
                        assert a["error"]["code"] in CODES, (where, a)
            if isinstance(data, dict) and "method" in data and _lsp_id(data.get("id")):
                assert [a["id"] for a in answers if isinstance(a, dict)] == [data["id"]], (where, answers)
            if isinstance(data, dict) and "method" not in data and ("result" in data or "error" in data):
                assert answers == [], (where, answers)
    finally:
        ls.worker.shutdown(wait=False)
