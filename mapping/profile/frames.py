"""Python call-stack frames as the profilers record them.

A frame string is ``"<co_filename>(<line>): <function>"``; stacks are innermost first. Entries that
are not of that form (``nn.Module: Linear_0``, ``<built-in method relu of ...>``) are kept as
opaque frames: they carry module names the no-stack anchoring can use.
"""

from __future__ import annotations

import re

from msprof_lsp.mapping.interning import Interner
from msprof_lsp.mapping.numbers import int64_of
from dataclasses import dataclass

_FRAME_RE = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\):\s?(?P<func>.*)$")
_MODULE_RE = re.compile(r"^nn\.Module:\s*(?P<cls>[A-Za-z_][\w.]*?)_(?P<k>\d+)$")
_SPLIT_LINES_RE = re.compile(r";?\r?\n")


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack entry. ``line`` is 0 and ``file`` empty for opaque entries."""

    file: str
    line: int
    func: str
    raw: str

    @property
    def opaque(self) -> bool:
        return not self.file

    @property
    def module(self) -> tuple[str, int] | None:
        """``("Linear", 0)`` for an ``nn.Module: Linear_0`` entry, else None."""
        m = _MODULE_RE.match(self.raw)
        k = int64_of(m.group("k")) if m else None  # "Linear_" + 30 digits names no instance
        return (m.group("cls"), k) if m and k is not None else None


Stack = tuple[Frame, ...]
"""Frames innermost first, as recorded."""


def parse_frame(text: str) -> Frame:
    raw = text.strip()
    m = _FRAME_RE.match(raw)
    line = int64_of(m.group("line")) if m else None  # 5,000 digits or "٣": no line, no frame to map
    if not m or line is None:
        return Frame("", 0, raw, raw)
    # Windows paths come with backslashes; keep one separator so suffix matching works.
    return Frame(m.group("file").replace("\\", "/"), line, m.group("func"), raw)


def split_stack(text: str) -> list[str]:
    """Split a recorded stack string into frame strings, innermost first.

    torch_npu joins frames with ``;\\r\\n`` (files converted to LF have ``;\\n``); Kineto's verbose
    mode joins with ``;`` and leaves a trailing ``;``.
    """
    if "\n" in text:
        parts = _SPLIT_LINES_RE.split(text)
    else:
        parts = text.split(";")
    return [p.strip() for p in parts if p.strip()]


def parse_stack(text: str) -> Stack:
    return tuple(parse_frame(p) for p in split_stack(text))


class StackTable:
    """Interns stacks: identical stack strings share one id (profiles repeat them per call).

    Ids index ``Profile.stacks``; -1 means "no stack".
    """

    def __init__(self) -> None:
        self._by_text: dict[str, int] = {}  # the raw text: parsed once per distinct string
        self._by_frames: Interner[Stack] = Interner()
        self.stacks: list[Stack] = self._by_frames.values

    def intern_text(self, text: str | None) -> int:
        if not text:
            return -1
        sid = self._by_text.get(text)
        if sid is None:
            sid = self.intern(parse_stack(text))
            self._by_text[text] = sid
        return sid

    def intern(self, stack: Stack) -> int:
        if not stack:
            return -1
        return self._by_frames.code(stack)
