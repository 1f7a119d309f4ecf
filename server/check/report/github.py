"""GitHub Actions workflow-command annotations (``::warning file=…,line=…::message``).

The runner reads a workflow command from the start of any line of the job's output, so profile
text must never start a line: each field goes through ``visible`` (a newline, CR or other control
in an op name or path is shown as ``\x0a``-style text) and then GitHub's own escapes (``%``, CR,
LF; ``:`` and ``,`` in properties). The only line breaks are the ones between annotations.
"""

from __future__ import annotations

from msprof_lsp.hints.finding import Severity
from msprof_lsp.server.escape import visible

from ...analysis.views.result import CheckRun
from ...analysis.views.rows import FindingRow, Report, report

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice", Severity.HINT: "notice"}


def _escape_data(text: str) -> str:
    # visible() first: after it no CR/LF is left; GitHub's own escapes keep working on our text.
    text = visible(text)
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(f: FindingRow) -> str:
    props = []
    if f.path is not None:
        props += [
            f"file={_escape_property(f.path)}",
            f"line={f.line}",
            f"col={f.column}",
            f"endLine={f.end_line}",
            f"endColumn={f.end_column}",
        ]
    props.append(f"title={_escape_property(f'{f.code} {f.name}')}")
    message = _escape_data(" ".join(f.message.split()))
    if f.fixes:  # the one line break we write inside a message, as GitHub's own %0A
        message += "%0AFix: " + _escape_data("; ".join(x.label for x in f.fixes))
    return f"::{_COMMAND[f.severity]} {','.join(props)}::{message}"


def render(run: CheckRun) -> str:
    return render_report(report(run))


def render_report(view: Report) -> str:
    lines = [annotation(f) for f in view.by_place()]
    return "\n".join(lines) + ("\n" if lines else "")
