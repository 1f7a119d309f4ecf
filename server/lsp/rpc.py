"""JSON-RPC on stdio that survives a broken or hostile client.

pygls' own stdio loop loses the stream for good after one malformed frame (a body without
``Content-Length`` is glued to the next header, a short body swallows the next frame), and it drops a
request whose params do not structure into the method's type without answering it. Here:

* :class:`FrameReader` splits the byte stream into frames and, after damage, resynchronises at the
  next ``Content-Length`` header. A header cannot occur inside a valid JSON body (JSON strings
  cannot hold a raw CR LF, and ``Content-Length: 12`` is no JSON token), so finding one inside a
  body proves the frame was short; the stream continues from there without waiting for bytes the
  client will never send.
* :class:`Protocol` answers every request: ill-typed params get ``InvalidParams`` (-32602) naming the
  field, a malformed message with an id gets ``InvalidRequest`` (-32600), requests after
  ``shutdown`` get ``InvalidRequest``; a bad notification or reply is one log line.

Each problem is ONE line in the client's log (``window/logMessage``); nothing here prints a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest, JsonRpcParseError
from pygls.io_ import StdoutWriter
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage

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


def _message_id(data: Any) -> int | str | None:
    """The id of a request we can answer (JSON-RPC ids are strings or integers)."""
    if not isinstance(data, dict):
        return None
    rid = data.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        return None
    return rid


def describe(exc: BaseException) -> str:
    """What did not fit, field by field (cattrs knows the path)."""
    if isinstance(exc, cattrs.BaseValidationError):
        try:
            return "; ".join(cattrs.transform_error(exc, path="$"))[:500]
        except Exception:  # noqa: BLE001 - the description is best effort
            pass
    return f"{type(exc).__name__}: {exc}"[:500]


class Protocol(LanguageServerProtocol):
    """pygls' language server protocol with one entry point per frame that answers every request."""

    def receive(self, body: bytes) -> None:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            self.note(f"a frame that is not JSON ({len(body):,} bytes: {type(exc).__name__}) was ignored")
            self._reply_error(None, JsonRpcParseError("the message is not valid JSON"))
            return
        rid = _message_id(data)
        if not isinstance(data, dict) or data.get("jsonrpc") != self.VERSION or not _valid_envelope(data):
            what = data.get("method") if isinstance(data, dict) else type(data).__name__
            self.note(f"a message that is not JSON-RPC 2.0 ({str(what)[:80]}) was ignored")
            if rid is not None and isinstance(data.get("method"), str):  # type: ignore[union-attr]
                self._reply_error(rid, JsonRpcInvalidRequest("not a JSON-RPC 2.0 request"))
            return
        method = data.get("method")
        if method is not None and "id" in data and self._shutdown and method != types.EXIT:
            self._reply_error(rid, JsonRpcInvalidRequest(f"{method}: the server is shutting down"))
            return
        try:
            message = self.structure(data)
        except Exception as exc:  # noqa: BLE001 - every structure failure is the client's input
            self._unstructurable(data, rid, exc)
            return
        self.handle_message(message)

    def _handle_response(self, msg_id: Any, result: Any | None = None, error: Any | None = None) -> None:
        """A response the server stopped waiting for (``asyncio.wait_for`` gave up on a slow
        client and cancelled the future) is dropped; pygls would raise out of the read loop."""
        future = self._request_futures.get(msg_id)
        if future is not None and future.done():
            self._request_futures.pop(msg_id, None)
            log.info("a late response to request %s was dropped", msg_id)
            return
        super()._handle_response(msg_id, result, error)

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

    def _unstructurable(self, data: dict[str, Any], rid: int | str | None, exc: BaseException) -> None:
        method = data.get("method")
        detail = describe(exc)
        if method is not None and rid is not None:
            self._reply_error(rid, JsonRpcInvalidParams(f"{method}: invalid params: {detail}"))
            self.note(f"{method} request {rid!r} with invalid params answered with an error: {detail}", level=logging.INFO)
        elif method is not None:
            self.note(f"{method} notification with invalid params ignored: {detail}")
        else:  # a reply to one of our requests: fail the waiting future instead of leaving it hanging
            future = self._request_futures.pop(rid, None) if rid is not None else None
            if future is not None and not future.done():
                future.set_exception(JsonRpcInvalidParams(f"invalid reply: {detail}"))
            self.note(f"an invalid reply to request {rid!r} was ignored: {detail}")

    def _reply_error(self, rid: int | str | None, error: JsonRpcException) -> None:
        # a plain dict: the typed message would leave out ``"id": null``, which JSON-RPC requires
        # when the id could not be read
        self._send_data({"jsonrpc": self.VERSION, "id": rid,
                         "error": self._converter.unstructure(error.to_response_error())})

    def damaged(self, damage: Damage) -> None:
        self.note(f"skipped {damage.skipped:,} bytes of stdin ({damage.reason}); resynchronised at the next header")
        rid = None
        if damage.prefix:
            try:
                rid = _message_id(json.loads(damage.prefix))
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
        except Exception:  # noqa: BLE001 - the transport may be gone; stderr has it
            pass


def _valid_envelope(data: dict[str, Any]) -> bool:
    method = data.get("method")
    if method is not None and not isinstance(method, str):
        return False
    if "id" in data and method is not None and _message_id(data) is None:
        return False
    return method is not None or "id" in data


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
