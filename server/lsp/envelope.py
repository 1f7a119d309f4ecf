"""What one decoded JSON-RPC frame is, before any of it is trusted (JSON-RPC 2.0, section 4-6).

Pure functions over bytes and decoded JSON, no pygls: :func:`decode` turns a body into JSON (strict
UTF-8, no ``NaN``, nesting bounded), :func:`classify` says whether it is a request, a notification,
a reply, or an invalid message and which id (if any) an error answer may carry. The protocol
(rpc.py) acts on the answer; nothing here raises on hostile input except :func:`decode`, whose
exceptions are the documented :class:`Undecodable`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

# A real LSP message nests about 8 levels (initialize's capabilities); a user's settings a few
# more. Far below the interpreter's recursion limit (about 1,000), which repr, cattrs and logging
# would otherwise reach on a message the JSON decoder still accepted.
MAX_DEPTH = 128
# The id of a message too deep to decode is looked for by a scan of its tokens; above this size
# the scan is not worth its time and the answer is a parse error with id null.
ID_SCAN_LIMIT = 256 * 1024  # 100,000 levels of [] is 200 kB

JSONRPC = "2.0"


class Kind(Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    REPLY = "reply"


@dataclass(frozen=True, slots=True)
class Envelope:
    """A well-formed message: ``rid`` is an LSP id (integer or string) for requests and replies."""

    kind: Kind
    method: str  # "" for a reply
    rid: int | str | None


@dataclass(frozen=True, slots=True)
class Invalid:
    """Not a JSON-RPC 2.0 message. ``answer``: the spec wants an Invalid Request error (-32600)
    carrying ``echo`` (the id as sent when it is a JSON-RPC id, else null); a malformed *reply*
    is never answered (answering a reply could start an endless exchange of errors)."""

    reason: str
    echo: int | str | float | None
    answer: bool
    rid: int | str | None = None  # the id when it is one an LSP peer could have issued


class Undecodable(ValueError):
    """A body that is not JSON (``rid`` None: Parse error, id null) or that nests deeper than
    :data:`MAX_DEPTH` (``too_deep``; ``rid`` is its top-level id when a scan could read it)."""

    def __init__(self, reason: str, *, too_deep: bool = False, rid: int | str | float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.too_deep, self.rid = reason, too_deep, rid


def lsp_id(value: Any) -> int | str | None:
    """``value`` if it is an id LSP allows (integer or string; JSON true is no integer)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    return value


def echo_id(value: Any) -> int | str | float | None:
    """The id an error answer may carry: a JSON-RPC id (string, number, null) as sent, else null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return lsp_id(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # json accepts NaN/Infinity; a reply would echo them


def decode(body: bytes) -> Any:
    """The JSON value of a frame body, or :class:`Undecodable`."""
    try:
        text = body.decode("utf-8")  # LSP bodies are UTF-8; json.loads(bytes) would also take UTF-16/32
    except UnicodeDecodeError as exc:
        raise Undecodable(f"the body is not UTF-8 (byte {exc.start:,})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise Undecodable(f"the message nests deeper than {MAX_DEPTH} levels", too_deep=True,
                          rid=scan_top_level_id(body)) from None
    except ValueError as exc:
        raise Undecodable(f"the body is not JSON ({str(exc)[:120]})") from None
    # the brackets in the body bound its depth: most messages need no walk at all
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and deeper_than(value, MAX_DEPTH):
        rid = echo_id(value.get("id")) if isinstance(value, dict) else None
        raise Undecodable(f"the message nests deeper than {MAX_DEPTH} levels", too_deep=True, rid=rid)
    return value


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep (level by level: no recursion,
    one list comprehension per container)."""
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(limit):
        below: list[Any] = []
        for item in level:
            below += [c for c in (item.values() if isinstance(item, dict) else item) if isinstance(c, (dict, list))]
        if not below:
            return False
        level = below
    return bool(level)


# Strings (an unterminated one runs to the end, in one match: no rescan from every quote),
# runs of brackets (one token for "[[[" or "][]["), and the separators that matter at the top level.
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\Z)|[][{}]+|[:,]', re.DOTALL)


def scan_top_level_id(body: bytes) -> int | str | float | None:
    """The ``"id"`` member of a top-level object, read without decoding the (too deep) rest.

    Tracks only the bracket depth; the scalar value of ``"id"`` at depth 1 is decoded on its own
    (the last one, as a JSON decoder keeps). Returns None when the body is no balanced object or
    has no readable id. One pass of the token regex; the loop body is a few comparisons.
    """
    if len(body) > ID_SCAN_LIMIT or not body.lstrip().startswith(b"{"):
        return None
    depth, last_key, value_at, in_id = 0, (0, 0), -1, False
    raw_id: bytes | None = None
    end = len(body.rstrip())
    for m in _TOKEN.finditer(body):
        start, stop = m.span()
        c = body[start]
        if depth == 1:
            if c == _QUOTE:
                if value_at >= 0:  # a string value
                    if in_id:
                        raw_id = body[start:stop]
                    value_at = -1
                else:
                    last_key = (start, stop)
                continue
            if c == _COLON:
                key = body[last_key[0]:last_key[1]]
                in_id = key == b'"id"' or (b"\\" in key and _scalar(key) == "id")  # an escaped "id"
                value_at = stop
                continue
            if value_at >= 0 and c in _ENDS:  # the end of a scalar value
                if in_id:
                    raw_id = body[value_at:start]
            value_at = -1
        if c == _COMMA or c == _COLON or c == _QUOTE:
            continue
        depth += _net_depth(body[start:stop])
        if depth < 0 or (depth == 0 and stop < end):
            return None  # more closers than openers, or bytes after the object
    if depth != 0 or raw_id is None:
        return None
    return echo_id(_scalar(raw_id))


_QUOTE, _COLON, _COMMA = ord('"'), ord(":"), ord(",")
_ENDS = frozenset(b",]}")


def _net_depth(run: bytes) -> int:
    return run.count(b"[") + run.count(b"{") - run.count(b"]") - run.count(b"}")


def _scalar(raw: bytes) -> Any:
    try:
        return json.loads(raw.strip(), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None


def classify(data: Any) -> Envelope | Invalid:
    """Request, notification or reply, by the members JSON-RPC 2.0 gives each (section 4, 5)."""
    if not isinstance(data, dict):
        return Invalid(f"{_json_type(data)} is not a JSON-RPC message", None, True)
    reply_like = "method" not in data and ("result" in data or "error" in data)
    raw_id = data.get("id")
    echo = echo_id(raw_id)

    def invalid(reason: str) -> Invalid:
        return Invalid(reason, echo, not reply_like, lsp_id(raw_id))

    if data.get("jsonrpc") != JSONRPC:
        return invalid('"jsonrpc" is not "2.0"')
    if reply_like:
        if "id" not in data:
            return invalid("a reply without an id")
        if lsp_id(raw_id) is None:
            return invalid(f"a reply whose id is {_json_type(raw_id)}")
        if "result" in data and "error" in data:
            return invalid("a reply with both a result and an error")
        return Envelope(Kind.REPLY, "", lsp_id(raw_id))
    if "method" not in data:
        return invalid("a message with neither a method nor a result")
    method = data["method"]
    if not isinstance(method, str):
        return invalid(f"a method that is {_json_type(method)}, not a string")
    params = data.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        return invalid(f"{method[:80]}: params are {_json_type(params)}, not an object or an array")
    if "id" not in data:
        return Envelope(Kind.NOTIFICATION, method, None)
    rid = lsp_id(raw_id)
    if rid is None:
        return invalid(f"{method[:80]}: an id that is {_json_type(raw_id)}, not an integer or a string")
    return Envelope(Kind.REQUEST, method, rid)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
