"""Handlers never take the server down: an exception becomes a logged error and an empty result.

Deliberate protocol errors (``JsonRpcException``, e.g. "content modified" for a stale code action)
pass through to the client; everything else is one line in ``window/logMessage`` and on stderr,
and the request is answered with its empty value. Tracebacks (ours and pygls') reach stderr only
with ``MSPROF_LSP_DEBUG`` set: bad input is one line, and so is an internal error unless asked.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from msprof_lsp.server.escape import visible

from ..cli import debug_enabled

log = logging.getLogger("msprof_lsp.server")

F = TypeVar("F", bound=Callable[..., Any])


def report(ls: Any, where: str, exc: BaseException) -> None:
    """Log an internal error to stderr and to the client's log (never raises)."""
    log.error("%s failed: %s: %s", where, type(exc).__name__, exc, exc_info=exc)
    try:
        ls.window_log_message(
            types.LogMessageParams(
                type=types.MessageType.Error,
                message=visible(f"msprof-lsp: {where} failed: {type(exc).__name__}: {exc} (the server keeps running)"),
            )
        )
    except Exception:  # noqa: BLE001 - the transport may be gone; stderr has it
        pass


class OneLineFormatter(logging.Formatter):
    """Every record is one line: an exception is its type and message, its traceback only with
    ``MSPROF_LSP_DEBUG`` (pygls logs tracebacks for malformed requests, which are the client's fault)."""

    def format(self, record: logging.LogRecord) -> str:
        if debug_enabled():
            return super().format(record)
        record = logging.makeLogRecord(record.__dict__)
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and type(exc).__name__ not in record.getMessage():
            record.msg, record.args = f"{record.getMessage()} ({type(exc).__name__}: {exc})", None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return " | ".join(super().format(record).splitlines())


def guarded(default: Callable[[], Any] | None = None, *, name: str | None = None) -> Callable[[F], F]:
    """Wrap a handler ``(ls, ...)``: on an exception log it and return ``default()`` (or None)."""

    def wrap(fn: F) -> F:
        where = name or fn.__name__

        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(ls: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(ls, *args, **kwargs)
                except (JsonRpcException, asyncio.CancelledError):
                    raise
                except Exception as exc:  # noqa: BLE001 - the contract of this decorator
                    report(ls, where, exc)
                    return default() if default is not None else None

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(ls: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(ls, *args, **kwargs)
            except JsonRpcException:
                raise
            except Exception as exc:  # noqa: BLE001
                report(ls, where, exc)
                return default() if default is not None else None

        return wrapper  # type: ignore[return-value]

    return wrap


def spawn(ls: Any, coro: Any, where: str) -> asyncio.Task[Any]:
    """Run a background coroutine whose failure is reported, never lost or fatal."""
    task = asyncio.ensure_future(coro)

    def done(t: asyncio.Task[Any]) -> None:
        if t.cancelled():
            return
        exc = t.exception()
        if exc is not None:
            report(ls, where, exc)

    task.add_done_callback(done)
    return task
