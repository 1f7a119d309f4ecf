"""``--format html``: one self-contained page (no network when opened: the renderer, its styles and
the report model are inside it) that draws the report model with the TypeScript renderer bundled
into assets/ (vscode-client/src/report/, ``npm run build:report``; docs/report.md)."""

from __future__ import annotations

import html
import secrets
from importlib import resources

from msprof_lsp.server.escape import json_text, visible

from ...analysis.views import model
from ...analysis.views.result import CheckRun
from ...analysis.views.rows import Report

MODEL_ELEMENT_ID = "msprof-report-model"  # the renderer's standalone start looks for these two ids
ROOT_ELEMENT_ID = "msprof-report"


def asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def model_json(m: model.ReportModel) -> str:
    """The model as JSON safe inside a <script type="application/json"> element: "<" is written
    as its JSON escape, so no "</script>" or "<!--" can end or alter the element; so are the
    controls, bidi and separator characters JSON leaves raw (DEL, C1, U+2028 …): the page's bytes
    hold none, and the renderer (textContent only) still gets the names exactly as recorded."""
    return json_text(model.encode(m).decode("utf-8").replace("<", "\\u003c"))


def page(m: model.ReportModel) -> str:
    script, css = asset("report.js"), asset("report.css")
    if "</script" in script.lower() or "</style" in css.lower():
        raise ValueError("report assets must not contain a closing script/style tag")
    nonce = secrets.token_urlsafe(18)
    first = m.jobs[0].profile.path if m.jobs else "no profile"
    csp = f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src data:"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>msprof-lsp report: {html.escape(visible(first))}</title>\n"
        f"<style nonce=\"{nonce}\">\n{css}</style>\n</head>\n<body>\n"
        f"<div id=\"{ROOT_ELEMENT_ID}\"></div>\n"
        f"<script type=\"application/json\" id=\"{MODEL_ELEMENT_ID}\">{model_json(m)}</script>\n"
        f"<script nonce=\"{nonce}\">\n{script}</script>\n</body>\n</html>\n"
    )


def render(run: CheckRun, view: Report | None = None) -> str:
    """The page of a check run; ``view``: its ``Report`` view model where the caller built it."""
    return page(model.report_model(run, view=view))
