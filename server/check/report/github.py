"""GitHub Actions workflow-command annotations (``::warning file=…,line=…::message``)."""

from __future__ import annotations

from msprof_lsp.hints.finding import Finding, Severity

from . import document
from .run import CheckRun

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice", Severity.HINT: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(f: Finding, run: CheckRun) -> str:
    props = []
    if f.span:
        s = f.span
        props += [
            f"file={_escape_property(document.rel_path(s.path, run.cwd))}",
            f"line={s.line}",
            f"col={s.col + 1}",
            f"endLine={s.end_line}",
            f"endColumn={s.end_col + 1}",
        ]
    props.append(f"title={_escape_property(f'{f.code} {f.name}')}")
    message = f.message
    if f.fixes:
        message += "\nFix: " + "; ".join(document.fix_label(x) for x in f.fixes)
    return f"::{_COMMAND[f.severity]} {','.join(props)}::{_escape_data(message)}"


def render(run: CheckRun) -> str:
    lines = [annotation(f, run) for f in sorted(run.findings, key=Finding.sort_key)]
    return "\n".join(lines) + ("\n" if lines else "")
