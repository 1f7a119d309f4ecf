"""The one unified diff of a file's change: what ``--diff`` prints and the HTML report shows per fix.

Lines keep their own endings (a CRLF file's diff carries its CRLFs) and a last line without one
is marked ``\\ No newline at end of file``, so the output applies with ``git apply`` / ``patch -p1``.
"""

from __future__ import annotations

import difflib

from msprof_lsp.mapping.source.positions import split_lines

NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(old: str, new: str, rel: str, context: int = 3) -> str:
    """``old`` -> ``new`` of the file at ``rel`` (relative, "/"-separated) as ``a/rel`` -> ``b/rel``."""
    if old == new:
        return ""
    parts = difflib.unified_diff(_lines(old), _lines(new), f"a/{rel}", f"b/{rel}", n=context)
    return "".join(p if p.endswith("\n") else p + "\n" + (NO_NEWLINE if p[:1] in " +-" else "") for p in parts)


def _lines(text: str) -> list[str]:
    """Lines with their endings, without the empty "line" after a final newline."""
    lines = split_lines(text, keepends=True)
    return lines[:-1] if lines and not lines[-1] else lines
