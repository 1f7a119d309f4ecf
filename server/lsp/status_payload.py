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
from pathlib import Path
from typing import Any

import attrs
from lsprotocol.converters import get_converter

from msprof_lsp.hints.finding import Finding

from ..analysis.views.document import saving_text
from ..escape import visible
from .state.snapshot import ProfileInfo

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
    # the first "Start here" finding (hints.consolidate.start_here): the biggest saving
    top_code: str  # its rule code ("" when there is none)
    top_saving_us: float | None  # its saving per step (None: unknown or none)
    headline: str  # one line: how much, which rule, where ("" when there is none)

    @classmethod
    def of(cls, state: ProfileState, info: ProfileInfo | None, path: str = "", message: str = "",
           top: Finding | None = None) -> ProfileStatus:
        """The status for ``state``; ``info`` (the loaded profile) and ``top`` (the first
        start-here finding) only count when loaded."""
        if state is not ProfileState.LOADED or info is None:
            return cls(state, "", path, None, [], None, None, None, message, "", None, "")
        saving = top.saving if top is not None and top.saving is not None and top.saving.known else None
        return cls(state, info.kind, info.path, info.rank, list(info.ranks), info.steps,
                   round(info.step_time_us, 3), round(info.mapped_share, 6), message,
                   top.code if top is not None else "", round(saving.us_per_step, 3) if saving else None,
                   headline(top) if top is not None else "")


def headline(f: Finding) -> str:
    """``Start here: saves 2.1 ms/step · NPU104 dataloader-input · train.py:102`` (the saving as
    --check prints it, unknown ones with their charged time and share's denominator)."""
    where = f"{Path(f.span.path).name}:{f.span.line}" if f.span is not None else "the profile"
    return visible(f"Start here: {saving_text(f)} · {f.code} {f.name} · {where}")  # a file name may hold controls


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
