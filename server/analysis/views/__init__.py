"""The view models of a check run (``rows.report(run) -> Report``, ``Report.as_dict()``: the JSON
document) and of the profile report (``model``); every front-end renders from these."""

from .rows import Report, report

__all__ = ["Report", "report"]
