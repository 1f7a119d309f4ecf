"""What a fix transform returns, and how it is told where to look.

Every transform in ``hints.fixes`` is a pure function
``(source: str, anchor: Anchor, *, path=..., why=None, **options) -> FixResult | None``:
it never reads files, never imports or runs the user's code, and returns None (appending the
reason to ``why`` when the caller passes a list) whenever the construct is not matched exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from msprof_lsp.hints.finding import Fix, TextEdit
from msprof_lsp.mapping.spans import Span

from .edits import minimal_edits

if TYPE_CHECKING:
    from .cst_tools import Source

Text = Union[str, "Source"]
"""What a transform reads: the document's text, or its parse shared by every fix of the file."""

Anchor = Span | tuple[int, int] | int
"""Where the finding points: a Span, a (line, col) pair, or a line (1-based lines, 0-based cols)."""


@dataclass(frozen=True, slots=True)
class Where:
    """An anchor normalised to a line range plus an optional column."""

    line: int
    end_line: int
    col: int | None = None

    def covers(self, start_line: int, end_line: int) -> bool:
        """True when a node spanning start_line..end_line contains the anchor's first line."""
        return start_line <= self.line <= end_line


def where(anchor: Anchor) -> Where:
    if isinstance(anchor, Span):
        return Where(anchor.line, anchor.end_line, anchor.col)
    if isinstance(anchor, tuple):
        return Where(anchor[0], anchor[0], anchor[1])
    return Where(int(anchor), int(anchor))


def anchor_path(anchor: Anchor, path: str | None) -> str:
    if path is not None:
        return path
    return anchor.path if isinstance(anchor, Span) else ""


@dataclass(frozen=True, slots=True)
class FixResult:
    title: str  # says "(review)" when not safe
    safe: bool
    edits: tuple[TextEdit, ...]
    new_source: str  # the whole document after the edits (tests, --check --fix, previews)
    notes: tuple[str, ...] = ()  # caveats a rule can put in the hover or the message
    group: str = ""  # see Fix.group; set by hints.fixes.offer from the catalog

    @property
    def fix(self) -> Fix:
        return Fix(self.title, self.safe, self.edits, self.group)


def review_title(text: str, safe: bool) -> str:
    return text if safe else f"{text} (review)"


def text_of(source: Text) -> str:
    return source if isinstance(source, str) else source.text


def result(old: Text, new: str, title: str, *, safe: bool, path: str, notes: tuple[str, ...] = ()) -> FixResult | None:
    """Build a FixResult, or None when the rewrite changed nothing (idempotence)."""
    old = text_of(old)
    if old.startswith("\ufeff") and not new.startswith("\ufeff"):
        new = "\ufeff" + new  # libcst drops a byte-order mark; the document keeps it
    if new == old:
        return None
    return FixResult(review_title(title, safe), safe, minimal_edits(old, new, path), new, notes)


def decline(why: list[str] | None, reason: str) -> None:
    """Record why no fix is offered (for logs and the hover) and return None."""
    if why is not None:
        why.append(reason)
    return None
