"""JSON-RPC on stdio that survives a broken or hostile client.

pygls' own stdio loop loses the stream for good after one malformed frame (a body without
``Content-Length`` is glued to the next header, a short body swallows the next frame), and it drops a
request whose params do not structure into the method's type without answering it. Here:

* :class:`FrameReader` splits the byte stream into frames and, after damage, resynchronises at the
  next ``Content-Length`` header. A header cannot occur inside a valid JSON body (JSON strings
  cannot hold a raw CR LF, and ``Content-Length: 12`` is no JSON token), so finding one inside a
  body proves the frame was short; the stream continues from there without waiting for bytes the
  client will never send.
* :class:`Protocol` answers or ignores any well-formed frame, whatever its ids and params, as
  JSON-RPC 2.0 and the LSP say (envelope.py sorts each frame first): not JSON gets Parse error
  (-32700, id null); a frame nesting deeper than ``envelope.MAX_DEPTH`` gets Invalid Request
  (-32600) with its id when a scan can read it; a message that is no request, notification or
  reply gets -32600 (with its id when it is a JSON-RPC id, else null; a broken reply is never
  answered); a batch gets an array of -32600 errors; a request before ``initialize`` gets
  ServerNotInitialized (-32002), after ``shutdown`` or with an id already in progress -32600, for
  a method without a request handler Method not found (-32601), with ill-typed params Invalid
  params (-32602) naming the field. A notification or reply that cannot be used is one log line;
  ``$/cancelRequest`` touches only a client request in progress, a reply only a future of a
  request this server sent.

Each problem is ONE line in the client's log (``window/logMessage``); nothing here prints a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import uuid
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Optional, Union

import attrs
import cattrs
from lsprotocol import types
from lsprotocol.types import CANCEL_REQUEST
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.io_ import StdoutWriter
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage

from . import guard
from .envelope import Envelope, Invalid, Kind, Undecodable, classify, decode, lsp_id

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger("msprof_lsp.server")

MAX_HEADER_BYTES = 16 * 1024  # a header block is two short lines; more is garbage
MAX_BODY_BYTES = 512 * 1024 * 1024  # a didOpen of a 100 MB file fits; a frame above is skipped unread
CHUNK = 1 << 16
# A header line that can start a frame; case-insensitive like every header name.
_CONTENT_LENGTH = re.compile(rb"content-length[ \t]*:[ \t]*(\d{1,20})[ \t]*\r\n", re.IGNORECASE)
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]*:[ \t]*([^\r\n]*)")
_TAIL = 64  # bytes kept while scanning garbage, so a header split across two reads is still found


@dataclass(frozen=True, slots=True)
class Frame:
    body: bytes


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes that were not a well-formed frame; ``prefix`` is the start of a short frame's body."""

    reason: str
    skipped: int
    prefix: bytes = b""


class FrameReader:
    """Byte stream in, frames and damage reports out (no I/O: fed by whoever reads the stream)."""

    def __init__(self, max_body: int = MAX_BODY_BYTES) -> None:
        self.max_body = max_body
        self._buf = bytearray()
        self._need: int | None = None  # body length of the frame being read
        self._scanned = 0  # body bytes already searched for an embedded header
        self._resyncing = False  # looking for the next header after damage
        # the stretch of damage not reported yet (one report per stretch)
        self._skipped = 0
        self._why = ""
        self._prefix = b""

    def feed(self, data: bytes) -> list[Frame | Damage]:
        self._buf += data
        out: list[Frame | Damage] = []
        while self._step(out):
            pass
        return out

    def close(self) -> list[Damage]:
        """End of stream: whatever is left is an unfinished frame."""
        out: list[Frame | Damage] = []
        pending = len(self._buf)
        if self._need is not None:
            self._skip(pending, f"the stream ended {self._need - pending:,} bytes short of a frame's Content-Length")
        elif self._buf.strip():
            self._skip(pending, "the stream ended inside a header")
        self._report(out)
        return [d for d in out if isinstance(d, Damage)]

    def _step(self, out: list[Frame | Damage]) -> bool:
        if self._resyncing:
            return self._resync(out)
        if self._need is not None:
            return self._body(out)
        return self._header()

    def _header(self) -> bool:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return len(buf) > MAX_HEADER_BYTES and self._bad(1, "a header block without an end")
        length: int | None = None
        for line in bytes(buf[:end]).split(b"\r\n"):
            m = _HEADER_LINE.fullmatch(line)
            if m is None:
                return self._bad(1, "bytes that are not a header")
            if m.group(1).lower() == b"content-length":
                value = m.group(2).strip()
                if not value.isdigit() or len(value) > 20:
                    return self._bad(end + 4, f"Content-Length {value[:40]!r} is not a number")
                length = int(value)
        if length is None:
            return self._bad(end + 4, "a header without Content-Length")
        if length > self.max_body:
            return self._bad(end + 4, f"a Content-Length of {length:,}, over the limit of {self.max_body:,}")
        del buf[: end + 4]
        self._need, self._scanned = length, 0
        return True

    def _body(self, out: list[Frame | Damage]) -> bool:
        buf, need = self._buf, self._need
        assert need is not None
        # a header inside the body: the frame was shorter than it said
        m = _CONTENT_LENGTH.search(buf, max(0, self._scanned - _TAIL), need + _TAIL)
        if m is not None and m.start() < need:
            self._prefix = bytes(buf[: m.start()])
            self._skip(m.start(), f"a body shorter than its Content-Length of {need:,}")
            self._need = None
            self._report(out)
            return True
        self._scanned = min(len(buf), need)
        if len(buf) < need:
            return False
        self._report(out)
        out.append(Frame(bytes(buf[:need])))
        del buf[:need]
        self._need = None
        return True

    def _bad(self, skip: int, why: str) -> bool:
        """Damage at the start of the buffer: drop ``skip`` bytes, then look for the next header."""
        self._skip(skip, why)
        self._resyncing = True
        return True

    def _resync(self, out: list[Frame | Damage]) -> bool:
        m = _CONTENT_LENGTH.search(self._buf)
        if m is None:
            self._skip(max(0, len(self._buf) - _TAIL), self._why)
            return False
        self._skip(m.start(), self._why)
        self._resyncing = False
        self._report(out)
        return True

    def _skip(self, n: int, why: str) -> None:
        del self._buf[:n]
        self._skipped += n
        self._why = self._why or why

    def _report(self, out: list[Frame | Damage]) -> None:
        if self._skipped:
            out.append(Damage(self._why, self._skipped, self._prefix))
        self._skipped, self._why, self._prefix = 0, "", b""


def describe(exc: BaseException) -> str:
    """What did not fit, field by field (cattrs knows the path)."""
    if isinstance(exc, cattrs.BaseValidationError):
        try:
            return "; ".join(cattrs.transform_error(exc, path="$"))[:500]
        except Exception:  # noqa: BLE001 - the description is best effort
            pass
    return f"{type(exc).__name__}: {exc}"[:500]


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _strict_int_or_str(value: Any, _: Any) -> int | str:
    if lsp_id(value) is None:
        raise ValueError(f"expected an integer or a string, got {_short(value, 40)}")
    return value  # type: ignore[no-any-return]


def _optional_int_or_str(value: Any, typ: Any) -> int | str | None:
    return None if value is None else _strict_int_or_str(value, typ)


class Protocol(LanguageServerProtocol):
    """pygls' language server protocol with one entry point per frame that answers every request.

    Every frame is sorted by :func:`envelope.classify` before pygls sees it, so pygls only ever
    handles a message whose id is an LSP id, whose method has a handler of the right kind (request
    or notification) and whose params structure into the method's type.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # ids of the requests this server sent: only a reply with one of them may settle a future
        # (``_request_futures`` also holds the client's requests in progress, whose futures a
        # forged reply or a cancel of the wrong kind must never touch)
        self._outgoing: set[int | str] = set()
        self._initialize_seen = False
        # lsprotocol structures ``int | str`` (request ids in $/cancelRequest, progress tokens,
        # diagnostic codes) by passing any JSON value through: an array there reached a dict
        # lookup and ended the process. Held to what the LSP says, it is an invalid-params error.
        self._converter.register_structure_hook(Union[int, str], _strict_int_or_str)
        self._converter.register_structure_hook(Optional[Union[int, str]], _optional_int_or_str)

    # -- one frame ---------------------------------------------------------------------------------

    def receive(self, body: bytes) -> None:
        """Answer or ignore one frame; nothing the client sends ends the loop (the last-resort
        guard reports an internal error in one line and answers the request with -32603)."""
        try:
            self._receive(body)
        except (BrokenPipeError, SystemExit):
            raise  # the client is gone / ``exit``
        except Exception as exc:  # noqa: BLE001 - no message may end the session
            guard.report(self._server, "handling a client message", exc)
            rid = None
            try:
                data = json.loads(body)
                env = classify(data)
                rid = env.rid if isinstance(env, Envelope) and env.kind is Kind.REQUEST else None
            except (ValueError, RecursionError):
                pass
            if rid is not None:
                self._reply_error(rid, JsonRpcInternalError(f"internal error: {type(exc).__name__}"))

    def _receive(self, body: bytes) -> None:
        try:
            data = decode(body)
        except Undecodable as bad:
            if bad.too_deep and bad.rid is not None:
                self.note(f"a message with id {_short(bad.rid)} was refused: {bad.reason}")
                self._reply_error(bad.rid, JsonRpcInvalidRequest(bad.reason))
            else:
                self.note(f"a frame that is not JSON ({len(body):,} bytes: {bad.reason}) was ignored")
                self._reply_error(None, JsonRpcParseError(f"the message is not valid JSON: {bad.reason}"))
            return
        if isinstance(data, list):
            self._batch(data)
            return
        env = classify(data)
        if isinstance(env, Invalid):
            self._invalid(env)
        elif env.kind is Kind.REQUEST:
            self._request(data, env.method, env.rid)  # type: ignore[arg-type]
        elif env.kind is Kind.NOTIFICATION:
            self._notification(data, env.method)
        else:
            self._reply(data, env.rid)  # type: ignore[arg-type]

    def _invalid(self, env: Invalid) -> None:
        if env.rid is not None and env.rid in self._outgoing:  # a broken reply to one of ours
            self._fail_outgoing(env.rid, env.reason)
            return
        if env.answer:
            self.note(f"an invalid message was answered with an error: {env.reason}")
            self._reply_error(env.echo, JsonRpcInvalidRequest(env.reason))
        else:
            self.note(f"an invalid reply was ignored: {env.reason}")

    def _batch(self, items: list[Any]) -> None:
        """LSP has no batches. Per JSON-RPC 2.0 the answer to a batch is an array: each request in
        it gets an Invalid Request error with its id; notifications and replies in it are not run;
        an empty batch is one Invalid Request error."""
        if not items:
            self.note("an empty batch (a JSON array) was answered with an error")
            self._reply_error(None, JsonRpcInvalidRequest("an empty batch"))
            return
        why = "batches are not supported by the Language Server Protocol: send one message per frame"
        answers = []
        for item in items:
            env = classify(item)
            if isinstance(env, Envelope) and env.kind is Kind.REQUEST:
                answers.append(self._error_message(env.rid, JsonRpcInvalidRequest(why)))
            elif isinstance(env, Invalid) and env.answer:
                answers.append(self._error_message(env.echo, JsonRpcInvalidRequest(env.reason)))
        self.note(f"a batch (a JSON array of {len(items):,}) was refused: {len(answers):,} answered with an error, none run")
        if answers:
            self._send_data(answers)

    # -- requests ----------------------------------------------------------------------------------

    def _request(self, data: dict[str, Any], method: str, rid: int | str) -> None:
        if rid in self._request_futures:
            self.note(f"{_short(method)} request {_short(rid)}: its id is in use by a request in progress")
            self._reply_error(rid, JsonRpcInvalidRequest(f"the id {_short(rid)} is in use by a request in progress"))
            return
        if self._shutdown:
            self._reply_error(rid, JsonRpcInvalidRequest(f"{_short(method)}: the server is shutting down"))
            return
        if method == types.INITIALIZE and self._initialize_seen:
            self.note(f"a second initialize request ({_short(rid)}) was refused")
            self._reply_error(rid, JsonRpcInvalidRequest("initialize may only be sent once"))
            return
        if method != types.INITIALIZE and not self._initialize_seen:
            self.note(f"{_short(method)} request {_short(rid)} before initialize was refused")
            self._reply_error(rid, JsonRpcServerNotInitialized(f"{_short(method)}: the server is not initialized"))
            return
        if not self._handles(method, Kind.REQUEST):
            # routine for a client probing optional methods: stderr at INFO, not the client's log
            self.note(f"{_short(method)} request {_short(rid)}: no such method", level=logging.INFO)
            self._reply_error(rid, JsonRpcMethodNotFound(f"{_short(method)}: no such request"))
            return
        try:
            message = self.structure(data)
        except Exception as exc:  # noqa: BLE001 - every structure failure is the client's input
            self.note(f"{_short(method)} request {_short(rid)} with invalid params answered with an error: "
                      f"{describe(exc)}", level=logging.INFO)
            self._reply_error(rid, JsonRpcInvalidParams(f"{_short(method)}: invalid params: {describe(exc)}"))
            return
        if method == types.INITIALIZE:
            self._initialize_seen = True
        self.handle_message(message)

    def _handles(self, method: str, kind: Kind) -> bool:
        """A handler exists and the LSP defines ``method`` as that kind of message (a request
        named like a notification, ``initialized`` with an id, is no such method)."""
        if method not in self.fm.builtin_features and method not in self.fm.features:
            return False
        typ = self.get_message_type(method)
        if typ is None:
            return True
        is_request = any(f.name == "id" for f in attrs.fields(typ))
        return is_request == (kind is Kind.REQUEST)

    # -- notifications -----------------------------------------------------------------------------

    def _notification(self, data: dict[str, Any], method: str) -> None:
        if method == CANCEL_REQUEST:
            self._cancel(data.get("params"))
            return
        if self._shutdown and method != types.EXIT:
            log.info("%s after shutdown ignored", _short(method))
            return
        if not self._initialize_seen and method != types.EXIT:
            self.note(f"{_short(method)} notification before initialize was ignored")
            return
        if not self._handles(method, Kind.NOTIFICATION):
            if self.get_message_type(method) is not None and self._handles(method, Kind.REQUEST):
                self.note(f"{_short(method)} is a request: sent without an id, it was ignored")
            else:  # "$/" ones may be ignored by the LSP; others are optional features we lack
                log.info("a %s notification (no handler) was ignored", _short(method))
            return
        try:
            message = self.structure(data)
        except Exception as exc:  # noqa: BLE001
            self.note(f"{_short(method)} notification with invalid params ignored: {describe(exc)}")
            return
        self.handle_message(message)

    def _cancel(self, params: Any) -> None:
        """``$/cancelRequest``: only a client request in progress can be cancelled (a cancel of a
        finished one is routine; one of our own requests' ids is no business of the client's)."""
        rid = lsp_id(params.get("id")) if isinstance(params, dict) else None
        if rid is None:
            shown = _short(params.get("id")) if isinstance(params, dict) else _short(params)
            self.note(f"$/cancelRequest with an id that is no integer or string ({shown}) was ignored")
            return
        future = self._request_futures.get(rid)
        if future is None or rid in self._outgoing:
            log.debug("a cancel of %r, no request in progress", rid)
            return
        if future.cancel():  # the done callback answers it with RequestCancelled
            log.info("request %r cancelled", rid)

    # -- replies -----------------------------------------------------------------------------------

    def send_request(self, method: str, params: Any | None = None, callback: Any = None,
                     msg_id: Any = None) -> Any:
        msg_id = str(uuid.uuid4()) if msg_id is None else msg_id
        self._outgoing.add(msg_id)
        return super().send_request(method, params, callback, msg_id)

    def _reply(self, data: dict[str, Any], rid: int | str) -> None:
        if rid not in self._outgoing:
            self.note(f"a reply to {_short(rid)}, no request of this server, was ignored", level=logging.INFO)
            return
        try:
            message = self.structure(data)
        except Exception as exc:  # noqa: BLE001
            self._fail_outgoing(rid, describe(exc))
            return
        self._outgoing.discard(rid)
        self.handle_message(message)

    def _fail_outgoing(self, rid: int | str, detail: str) -> None:
        """A broken reply to one of our requests fails its future instead of leaving it hanging."""
        self._outgoing.discard(rid)
        self._result_types.pop(rid, None)
        future = self._request_futures.pop(rid, None)
        if future is not None and not future.done():
            future.set_exception(JsonRpcInvalidParams(f"invalid reply: {detail}"))
        self.note(f"an invalid reply to request {_short(rid)} was ignored: {detail}")

    def _handle_response(self, msg_id: Any, result: Any | None = None, error: Any | None = None) -> None:
        """A response the server stopped waiting for (``asyncio.wait_for`` gave up on a slow
        client and cancelled the future) is dropped; pygls would raise out of the read loop."""
        future = self._request_futures.get(msg_id)
        if future is not None and future.done():
            self._request_futures.pop(msg_id, None)
            log.info("a late response to request %s was dropped", msg_id)
            return
        super()._handle_response(msg_id, result, error)

    # -- typing and answering ----------------------------------------------------------------------

    def structure(self, data: dict[str, Any]) -> Any:
        """The typed message (the type by method, or by the request a response answers)."""
        converter = self._converter
        if "id" in data:
            if "error" in data:
                return converter.structure(data, types.ResponseErrorMessage)
            if "method" in data:
                return converter.structure(data, self.get_message_type(data["method"]) or JsonRPCRequestMessage)
            return converter.structure(data, self._result_types.pop(data["id"], None) or JsonRPCResponseMessage)
        return converter.structure(data, self.get_message_type(data.get("method", "")) or JsonRPCNotification)

    def structure_message(self, data: dict[str, Any]) -> Any:  # pygls' hook, kept consistent
        return self.structure(data) if "jsonrpc" in data else data

    def _error_message(self, rid: int | str | float | None, error: JsonRpcException) -> dict[str, Any]:
        # a plain dict: the typed message would leave out ``"id": null``, which JSON-RPC requires
        # when the id could not be read
        return {"jsonrpc": self.VERSION, "id": rid, "error": self._converter.unstructure(error.to_response_error())}

    def _reply_error(self, rid: int | str | float | None, error: JsonRpcException) -> None:
        self._send_data(self._error_message(rid, error))

    def damaged(self, damage: Damage) -> None:
        self.note(f"skipped {damage.skipped:,} bytes of stdin ({damage.reason}); resynchronised at the next header")
        rid = None
        if damage.prefix:
            try:
                data = json.loads(damage.prefix)
                rid = lsp_id(data.get("id")) if isinstance(data, dict) and "method" in data else None
            except (ValueError, RecursionError):
                rid = None
        if rid is not None:
            self._reply_error(rid, JsonRpcInvalidRequest(f"malformed frame: {damage.reason}"))

    def note(self, text: str, *, level: int = logging.WARNING) -> None:
        """One line about the client's input: to the client's log (and stderr at INFO)."""
        log.info("client input: %s", text)
        if level < logging.WARNING:
            return
        try:
            self.notify(types.WINDOW_LOG_MESSAGE, types.LogMessageParams(
                type=types.MessageType.Warning, message=f"msprof-lsp: {text}"))
        except BrokenPipeError:
            raise
        except Exception:  # noqa: BLE001 - the transport may be gone; stderr has it
            pass


def _pump(stream: IO[bytes], loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes]) -> None:
    # the raw descriptor: a daemon thread blocked inside a buffered reader's lock aborts the
    # interpreter at exit
    try:
        fd = stream.fileno()
        read = lambda: os.read(fd, CHUNK)  # noqa: E731
    except (OSError, ValueError, AttributeError):
        read = lambda: getattr(stream, "read1", stream.read)(CHUNK)  # noqa: E731
    while True:
        try:
            chunk = read()
        except (OSError, ValueError):
            chunk = b""
        try:
            loop.call_soon_threadsafe(queue.put_nowait, chunk)
        except RuntimeError:  # the loop is closed: the server is gone
            return
        if not chunk:
            return


async def serve_stdio(server: LanguageServer, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Read frames from ``stdin`` until ``exit`` (SystemExit from pygls) or the end of the stream.

    The reader is a daemon thread: after ``exit`` a client that keeps stdin open cannot keep the
    process alive.
    """
    protocol = server.protocol
    assert isinstance(protocol, Protocol)
    protocol.set_writer(StdoutWriter(stdout))
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    threading.Thread(target=_pump, args=(stdin, loop, queue), name="msprof-stdin", daemon=True).start()
    frames = FrameReader()
    while True:
        chunk = await queue.get()
        if not chunk:
            for damage in frames.close():
                protocol.damaged(damage)
            log.info("the client closed stdin")
            return
        for item in frames.feed(chunk):
            if isinstance(item, Damage):
                protocol.damaged(item)
            else:
                protocol.receive(item.body)
