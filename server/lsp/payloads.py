"""The data msprof-lsp puts in ``Diagnostic.data`` and ``CodeAction.data``: typed structures,
converted to and from JSON with lsprotocol's converter (field names go camelCase on the wire), and
built and read only here.

The client echoes both back unchanged (``codeAction`` gets the diagnostics, ``codeAction/resolve``
the action); anything that does not read back as these structures is not ours, or was mangled,
and is treated as absent. The fields are plain (str, int, lists of these structures) so a schema
for the client can be generated from them.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs
from lsprotocol.converters import get_converter

_converter = get_converter()
T = TypeVar("T")


@attrs.define(frozen=True)
class DiagnosticData:
    """Which finding a diagnostic shows, and for which text.

    ``finding`` indexes the snapshot's findings of the file (generation ``generation``): its fix
    offers, expanded only when code actions are asked for. ``line`` is the diagnostic's first
    line (1-based) in the buffer version ``version`` (None: a file not open in the editor).
    ``fixes`` counts the offers (the edits are not known before they are computed). ``state``:
    with a baseline loaded, the finding's state against it (hints.verify.FindingState: new,
    persisting, improved, regressed; resolved for a baseline finding gone now, whose ``finding``
    is -1), else empty.
    """

    code: str
    uri: str
    version: int | None
    generation: int
    line: int
    finding: int
    fixes: int = 0
    state: str = ""


@attrs.define(frozen=True)
class EditData:
    """One text edit in client units: 0-based lines, characters in the negotiated encoding."""

    line: int
    character: int
    end_line: int
    end_character: int
    new_text: str


@attrs.define(frozen=True)
class ChangeData:
    """The edits of one file, for the buffer version they were computed on; a file not open in the
    editor (``version`` None) names the text they were computed on by ``stamp``
    (diagnostics.text_stamp), so a resolve after the file changed on disk is refused."""

    uri: str
    version: int | None
    edits: list[EditData] = attrs.field(factory=list)
    stamp: str = ""


@attrs.define(frozen=True)
class FixData:
    """A computed fix in client units (what a code action applies)."""

    title: str
    safe: bool
    changes: list[ChangeData] = attrs.field(factory=list)
    group: str = ""  # alternatives of one construct: one of them, never two


@attrs.define(frozen=True)
class CodeActionData:
    """What ``codeAction/resolve`` needs: the edits when they were deferred, and the fix's group."""

    changes: list[ChangeData] | None = None
    group: str = ""


def dump(value: Any) -> Any:
    """A payload structure as JSON-ready data."""
    return _converter.unstructure(value)


def load(data: Any, kind: type[T]) -> T | None:
    """``data`` read back as ``kind``; None when it is not one (another server's, or mangled)."""
    if isinstance(data, kind):
        return data
    if not isinstance(data, dict):
        return None
    try:
        return _converter.structure(data, kind)
    except Exception:  # noqa: BLE001 - cattrs raises its own validation errors for foreign data
        return None
