"""Open editor buffers as the server tracks them: version, the line map from the text the
current analysis saw to the buffer, and the maps from recent versions (stale code actions).

The text itself lives in pygls' workspace, which applies every change; a document reads it from
there (``OpenDocument.text``) and keeps only one fingerprint per line, which is what the line-map
diff of an edit compares, so a buffer is never held twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pygls import uris

from msprof_lsp.mapping.source.positions import split_lines

from .linemap import LineMap


def path_of(uri: str) -> str | None:
    """The resolved local path of a ``file:`` URI (the key the source workspace uses), else None."""
    fs = uris.to_fs_path(uri)
    if not fs:
        return None
    try:
        return str(Path(fs).expanduser().resolve())
    except (OSError, RuntimeError, ValueError):
        return None


def uri_of(path: str) -> str:
    return uris.from_fs_path(path) or Path(path).as_uri()


HISTORY = 32  # versions a stale diagnostic can still be traced from
MAX_PINNED = 4  # versions kept beyond HISTORY because an analysis of them is under way


def line_keys(lines: Sequence[str]) -> tuple[int, ...]:
    """One fingerprint per line: what a line-map diff compares, without keeping the text."""
    return tuple(hash(line) for line in lines)


@dataclass(slots=True)
class OpenDocument:
    uri: str
    path: str | None  # None: not a file (untitled buffer, notebook cell)
    version: int
    source: Callable[[], str] = field(repr=False)  # the buffer's text now (pygls' workspace)
    keys: tuple[int, ...] = field(default=(), repr=False)  # line_keys of the text at ``version``
    linemap: LineMap | None = None  # analysed text of ``path`` -> the buffer; None: nothing analysed
    base_generation: int = -1  # the snapshot the line map starts from
    opened_seq: int = 0  # order of opening (the newest open file picks the job)
    # recent versions -> map from that version's lines to the current ones (stale code actions)
    history: dict[int, LineMap] = field(default_factory=dict, repr=False)
    pinned: set[int] = field(default_factory=set, repr=False)  # versions an analysis is running on

    @property
    def text(self) -> str:
        return self.source()

    @property
    def lines(self) -> list[str]:
        return split_lines(self.source())

    def update(self, version: int, step: LineMap | None = None) -> None:
        """The buffer changed (the workspace holds the new text): extend the line maps by this
        edit (``step``: its map when the caller knows it change by change; else one diff of the
        old and new line fingerprints)."""
        keys = line_keys(self.lines)
        if step is None:
            step = LineMap.diff(self.keys, keys)
        if self.linemap is not None:
            self.linemap = self.linemap.then(step)
        self.history = {v: m.then(step) for v, m in self.history.items()}
        self.history[self.version] = step
        if len(self.history) > HISTORY + len(self.pinned):
            old = [v for v in sorted(self.history) if v not in self.pinned]
            for v in old[: len(self.history) - HISTORY - len(self.pinned)]:
                del self.history[v]
        self.version = version
        self.keys = keys

    def line_now(self, version: int | None, line: int) -> int | None:
        """Where 1-based ``line`` of an earlier ``version`` of this buffer is now (None: edited
        away, or too old to tell)."""
        if version == self.version:
            return line
        m = self.history.get(version) if version is not None else None
        return m.line(line) if m is not None else None

    def pin(self, version: int) -> None:
        """Keep the map from ``version`` until an analysis of it lands (rebase)."""
        self.pinned.add(version)
        if len(self.pinned) > MAX_PINNED:  # analyses that never landed (a file that does not parse)
            self.pinned.discard(min(self.pinned))

    def rebase(self, generation: int, analysed_text: str | None, analysed_version: int | None = None) -> None:
        """A new analysis arrived: map from the text it saw to the buffer. When it saw a known
        version, the edits since are followed one by one (``history``); else one diff of the two
        texts (common prefix and suffix kept), which loses what lies between two edited places."""
        self.base_generation = generation
        if analysed_version is not None:
            self.pinned = {v for v in self.pinned if v > analysed_version}
        if analysed_text is None:
            self.linemap = None
            return
        text = self.text
        if analysed_text == text:
            self.linemap = LineMap.identity()
        elif analysed_version is not None and analysed_version in self.history:
            self.linemap = self.history[analysed_version]
        else:
            self.linemap = LineMap.diff(split_lines(analysed_text), split_lines(text))


class DocumentStore:
    """The open documents by URI, and by path (a dictionary each: a look-up never scans)."""

    def __init__(self, text_of: Callable[[str], str]) -> None:
        self._text_of = text_of  # uri -> the buffer's text in the workspace
        self._docs: dict[str, OpenDocument] = {}
        self._by_path: dict[str, list[str]] = {}  # path -> open URIs naming it, oldest first
        self._seq = 0

    def open(self, uri: str, version: int) -> OpenDocument:
        self.close(uri)
        self._seq += 1
        doc = OpenDocument(uri, path_of(uri), version, lambda: self._text_of(uri), opened_seq=self._seq)
        doc.keys = line_keys(doc.lines)
        self._docs[uri] = doc
        if doc.path is not None:
            self._by_path.setdefault(doc.path, []).append(uri)
        return doc

    def close(self, uri: str) -> OpenDocument | None:
        doc = self._docs.pop(uri, None)
        if doc is not None and doc.path is not None:
            uris = self._by_path.get(doc.path, [])
            if uri in uris:
                uris.remove(uri)
            if not uris:
                self._by_path.pop(doc.path, None)
        return doc

    def get(self, uri: str) -> OpenDocument | None:
        return self._docs.get(uri)

    def by_path(self, path: str) -> OpenDocument | None:
        uris = self._by_path.get(path)
        return self._docs[uris[0]] if uris else None

    def all(self) -> list[OpenDocument]:
        return list(self._docs.values())

    def paths_newest_last(self) -> list[str]:
        docs = sorted(self._docs.values(), key=lambda d: d.opened_seq)
        return [d.path for d in docs if d.path]
