"""The one place profile- and workspace-derived text is made safe for a human output.

Op and kernel names, file names from call stacks, module names and load notes come from files
someone else wrote. Printed raw, an ESC in them drives the terminal (``ESC ] 0;title BEL`` sets
the window title, ``ESC [2J`` clears the screen), a newline forges a GitHub workflow command, a
bidi override reorders what the reader sees, and Markdown or HTML in them is rendered by the
editor (``![x](https://host/x.png)`` in a hover loads a remote image). Every writer — ``--check``
text, concise and GitHub output, stderr messages, the language server's hovers, diagnostics, code
lenses, inlay hints and messages — passes such text through :func:`visible` (plain text) or
:func:`markdown` (Markdown) at the point where it is written. Structured outputs (JSON, SARIF,
the HTML report's JSON model) carry the text unchanged; their encoders quote it, and
:func:`json_text` writes the characters JSON leaves raw as ``\\u`` escapes (same data once parsed,
nothing a terminal or a browser acts on in the bytes).
"""

from __future__ import annotations

import re
import unicodedata

# Printable by str.isprintable() but drawn as blank space, so harmless: keep as they are.
_KEEP_CATEGORIES = frozenset({"Zs", "Co"})

# CommonMark lets any ASCII punctuation be backslash-escaped and then shows it literally, so
# escaping all of it disables emphasis, links, images, autolinks ("https\://…" is not a URL),
# tables' "|", headings, lists, code spans and raw HTML ("\<img …>") in one rule.
_MD_SPECIAL = re.compile(r"""([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])""")


def _shown(ch: str) -> str:
    """A control as Python spells it in a string literal: ``\\x1b``, ``\\u202e``, ``\\U000e0041``."""
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def visible(text: object) -> str:
    """``text`` with every character that is not printable shown as an escape, never emitted.

    C0 and C1 controls (ESC, BEL, CR, LF, TAB, NEL …), DEL, format characters (bidi overrides and
    isolates, zero-width joiners, BOM, tag characters), line/paragraph separators and lone
    surrogates (from undecodable file names) become ``\\x1b``-style text; so the result is one line
    whatever the input held. Plain text passes unchanged (fast path), and applying it twice gives
    the same result as once, so writers may apply it at each boundary they own.
    """
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return "".join(
        ch if ch.isprintable() or unicodedata.category(ch) in _KEEP_CATEGORIES else _shown(ch) for ch in s
    )


def markdown(text: object) -> str:
    """``text`` as literal Markdown: shown exactly as written (after :func:`visible`), never
    rendered as a link, image, HTML tag, emphasis or table cell boundary."""
    return _MD_SPECIAL.sub(r"\\\1", visible(text))


_NOT_ASCII = re.compile(r"[^\x20-\x7e\t\n\r]")  # JSON's own whitespace stays: raw, it is never in a string


def _json_char(m: re.Match[str]) -> str:
    ch = m.group()
    if visible(ch) == ch:  # printable text (CJK, µ, …) stays as it is
        return ch
    if ord(ch) < 0x10000:
        return f"\\u{ord(ch):04x}"
    hi, lo = divmod(ord(ch) - 0x10000, 0x400)  # JSON spells a character beyond the BMP as a surrogate pair
    return f"\\u{0xD800 + hi:04x}\\u{0xDC00 + lo:04x}"


def json_text(doc: str) -> str:
    """An encoded JSON document with every character :func:`visible` would escape written as a
    ``\\u`` escape. JSON escapes only U+0000-U+001F itself; DEL, C1 controls (``\\x9b`` is CSI to
    many terminals), bidi overrides and U+2028 would otherwise reach the terminal or the page raw.
    Only valid on JSON text whose strings are all quoted (a raw one may appear only inside them)."""
    return _NOT_ASCII.sub(_json_char, doc)
