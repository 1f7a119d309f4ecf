"""What a read-only LSP feature (diagnostics, hover, code lens, inlay hints, code actions) sees of
the server: one request's context, taken when the request arrives.

A feature is a function ``(ctx, params) -> result``; it never holds the server object, so it can
be called (and tested) with any snapshot and client, and a load finishing on the analysis thread
mid-request cannot hand it two different snapshots.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ...analysis.settings import Settings
from ..capabilities import ClientCaps
from .documents import DocumentStore, OpenDocument
from .snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class RequestContext:
    snapshot: Snapshot  # the analysis the answer is computed from
    documents: DocumentStore  # the open buffers (their versions and line maps)
    caps: ClientCaps  # what the client supports: position encoding, markdown, resolve
    settings: Settings  # the settings in force (the snapshot's may predate a change)
    memo: dict[tuple, Any]  # outlives snapshots: record_action's training loops and edits per buffer text

    def document(self, uri: str) -> OpenDocument | None:
        """The request's document, when it is open."""
        return self.documents.get(uri)


class Contextual(Protocol):
    """The server as a feature adapter sees it (``MsprofLanguageServer`` in app.py)."""

    def context(self) -> RequestContext: ...

    def next_change(self) -> asyncio.Future[None]: ...


R = TypeVar("R")


def with_context(feature: Callable[[RequestContext, Any], R]) -> Callable[[Contextual, Any], R]:
    """The handler pygls calls for a feature ``(ctx, params)``. pygls passes the server only to a
    handler whose first parameter is named ``ls`` (it reads the signature, following
    ``__wrapped__``), so the name is copied but not the signature."""

    def handler(ls: Contextual, params: Any) -> R:
        return feature(ls.context(), params)

    handler.__name__ = handler.__qualname__ = feature.__name__
    handler.__doc__ = feature.__doc__
    return handler
