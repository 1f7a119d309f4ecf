"""The payloads of the server's own notifications, as typed structs.

``msprof-lsp/profileStatus`` feeds the VS Code status bar; ``msprof-lsp/analysed`` says which open
documents the analysis in place saw as they are now. Both are attrs classes turned into JSON by
lsprotocol's converter (the one pygls uses for every LSP type), so field names go camelCase the
way the protocol's own do. The TypeScript client reads them through the interfaces
``python -m msprof_lsp.server.lsp.payload_schema`` generates from these classes.

Fields have no defaults on purpose: the converter leaves out a field at its default, and the
client should see every key in every notification.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs
from lsprotocol.converters import get_converter

from .session.snapshot import ProfileInfo

CONVERTER = get_converter()


class ProfileState(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"
    ERROR = "error"
    NONE = "none"  # no profile found (or none selected)


@attrs.define(frozen=True)
class ProfileStatus:
    """Where loading stands, and what the loaded profile is (``msprof-lsp/profileStatus``; also
    the result of the reload and selectProfile commands)."""

    state: ProfileState
    kind: str  # "torch_npu", "kineto", ... ("" unless loaded)
    path: str  # the profile (or the one being loaded)
    rank: int | None
    ranks: list[int]  # every rank the profile holds
    steps: int | None
    step_time_us: float | None  # device time per step
    mapped_share: float | None  # of device time, mapped to source lines (0..1)
    message: str  # why it failed, or what started the load

    @classmethod
    def of(cls, state: ProfileState, info: ProfileInfo | None, path: str = "", message: str = "") -> ProfileStatus:
        """The status for ``state``; ``info`` (the loaded profile) only counts when loaded."""
        if state is not ProfileState.LOADED or info is None:
            return cls(state, "", path, None, [], None, None, None, message)
        return cls(state, info.kind, info.path, info.rank, list(info.ranks), info.steps,
                   round(info.step_time_us, 3), round(info.mapped_share, 6), message)


@attrs.define(frozen=True)
class AnalysedDocument:
    uri: str
    version: int


@attrs.define(frozen=True)
class Analysed:
    """``msprof-lsp/analysed``: the documents the analysis ``generation`` saw at these versions
    (their diagnostics are published, or ready to pull, by then)."""

    generation: int
    documents: list[AnalysedDocument]


def to_json(payload: Any) -> Any:
    """A payload as the client receives it."""
    return CONVERTER.unstructure(payload)
